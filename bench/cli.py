"""``suanli bench [--quick] [--json FILE] [--md FILE] [--quiet]``: a progress bar over the steps on a
terminal, none with ``--json``/``--quiet`` or off a terminal."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _bench(args: argparse.Namespace) -> int:
    from suanli.bench.suite import check_complete, markdown, run_suite, write
    from suanli.replay.progress import wanted

    result = run_suite(args.quick, log=lambda m: print(m, file=sys.stderr, flush=True),
                       progress=wanted(quiet=args.quiet, json=args.json))
    write(result, Path(args.json) if args.json else None, Path(args.md) if args.md else None)
    print(markdown(result))
    missing = check_complete(result)
    if missing:
        print(f"suanli bench: figures not produced: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    from suanli.cli_services import STACK

    p = sub.add_parser("bench", help="run the benchmarks (needs the stack: `suanli stack up`)")
    p.add_argument("--quick", action="store_true", help="small sizes (CI); checks only that figures exist")
    p.add_argument("--json", metavar="FILE", help="write every figure as JSON")
    p.add_argument("--md", metavar="FILE", help="write the Markdown table")
    p.add_argument("--quiet", action="store_true", help="no progress bar (there is none with --json or off a terminal)")
    p.set_defaults(func=_bench, needs=STACK)
