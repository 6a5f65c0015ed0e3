"""The command line of a bench that measures one thing per cell size (``--nodes``), prints
a line per size and can write its rows as JSON with the command that made them."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable


def per_size_main(prog: str, doc: str, argv: list[str] | None, default_nodes: list[int],
                  option: tuple[str, int, str], measure: Callable[[int, int], dict[str, Any]],
                  line: Callable[[dict[str, Any]], str]) -> int:
    """Parse ``--nodes``, ``option`` (``(flag, default, help)``: one int passed to
    ``measure`` after the size) and ``--json``; print ``line(row)`` for each size's
    ``measure(nodes, value)`` row; write ``{"command", "rows"}`` when asked."""
    flag, default, help_text = option
    ap = argparse.ArgumentParser(prog=prog, description=doc.split("\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=default_nodes, help="cell sizes")
    ap.add_argument(flag, type=int, default=default, help=help_text)
    ap.add_argument("--json", help="also write the figures to this file")
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    value = getattr(args, flag.lstrip("-").replace("-", "_"))
    rows = []
    for n in args.nodes:
        row = measure(n, value)
        rows.append(row)
        print(line(row), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"command": f"{prog} " + " ".join(argv), "rows": rows}, f, indent=1)
    return 0
