"""Subcommands ``export``, ``replay`` and ``whatif`` (registered by ``suanli.cli.build_parser``).

Each shows a progress bar with rate and ETA on a terminal (``progress.py``): none with
``--json``, ``--quiet``, or when stderr is not a terminal.

Exit codes: 0 ok; 1 ``replay --verify`` found a divergence; 2 refused input (a
:class:`~suanli.errors.ReplayError`, printed on one line by ``suanli.cli.main``).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from suanli.errors import ReplayError

from .progress import wanted


def add_commands(sub: argparse._SubParsersAction) -> None:
    """Register this module's subcommands on the top-level parser."""
    from suanli.cli_services import NOTHING, STACK

    ex = sub.add_parser("export", help="export a cell's input log and decisions from Kafka to a log directory")
    ex.add_argument("--cell", required=True, help="the cell (key of its records on the cell log)")
    ex.add_argument("--out", required=True, help="the log directory to write")
    ex.add_argument("--from-offset", type=int, help="first cell-log offset (inclusive)")
    ex.add_argument("--to-offset", type=int, help="last cell-log offset (exclusive)")
    ex.add_argument("--since", help="first record time: ISO-8601 or epoch ms (inclusive)")
    ex.add_argument("--until", help="end time: ISO-8601 or epoch ms (exclusive)")
    ex.add_argument("--partition", type=int, help="cell-log partition (default: found from the cell key)")
    ex.add_argument("--namespace", help="topic namespace (default: the configured one)")
    ex.add_argument("--nodes-source", help="where the cell's node list came from (recorded in cell.json)")
    ex.add_argument("--quiet", action="store_true", help="no progress bar")
    ex.set_defaults(func=_export, needs=STACK)

    rp = sub.add_parser("replay", help="re-run a log directory through the scheduler core, without Kafka")
    rp.add_argument("log", metavar="LOG", help="log directory (from `suanli export`)")
    rp.add_argument("--verify", action="store_true",
                    help="compare regenerated decisions with the recorded ones byte for byte; exit 1 on divergence")
    rp.add_argument("--json", metavar="FILE", help="write the verdict and figures to FILE")
    rp.add_argument("--quiet", action="store_true", help="no progress bar (there is none with --json or off a terminal)")
    rp.set_defaults(func=_replay, needs=NOTHING)

    wi = sub.add_parser("whatif", help="run a log or a trace under several policies and compare them")
    wi.add_argument("log", nargs="?", metavar="LOG", help="log directory (or use --protocol with --nodes/--pods)")
    wi.add_argument("--nodes", help="node list CSV (openb format)")
    wi.add_argument("--pods", help="pod list CSV (openb format)")
    wi.add_argument("--protocol", choices=("fgd", "timed"), help="fgd: the FGD evaluation protocol; timed: arrivals and departures")
    wi.add_argument("--seeds", default="42-51", help="seeds, e.g. 42-51 or 42,45 (timed mode: one seed; default 42-51 / 42)")
    wi.add_argument("--policy", default=None,
                    help="comma-separated policies: NAME, NAME:key=value[:key=value], a strategy.json path, "
                         "or (log mode) 'recorded'; default bestfit,default (log mode: recorded,default)")
    wi.add_argument("--json", metavar="FILE", help="write every figure as JSON to FILE")
    wi.add_argument("--report", metavar="DIR",
                    help="write the PNGs and report.html here (timed/log default: beside --json as <stem>-report, "
                         "else ./whatif-report; fgd: only when given)")
    wi.add_argument("--workers", type=int, default=2, help="processes for the fgd protocol's seeds (default 2)")
    wi.add_argument("--node-names", choices=("shuffled", "csv"), default="shuffled",
                    help="fgd: name the nodes opaquely in a seeded order per seed (default; the simulator's "
                         "names are opaque and it breaks ties by the smallest name) or keep the CSV's sn")
    wi.add_argument("--shrink", type=float, help="timed: keep this fraction of the nodes (seeded sample)")
    wi.add_argument("--shrink-seed", type=int, default=None,
                    help="timed: seed of the node sample (default 0; --burst: 1)")
    wi.add_argument("--load", type=float, default=None,
                    help="timed: divide arrival times by this factor (lifetimes kept) to add contention (default 1; "
                         "--burst: 80)")
    wi.add_argument("--reservations", metavar="RULE",
                    help="timed: the advance-reservations experiment (replay/reservations_whatif.py): the arms "
                         "none, hard, flexible and auction, paired by seed (default 42-51), on each --policy "
                         "strategy (default default,fgd) at --load, the cluster shrunk per seed (default "
                         "--shrink 0.01); RULE e.g. share=0.25,lead=5m-6h,overrun=1-2,unclaimed=0.1,latest=15m,"
                         "price=1-4 (any key may be left out)")
    wi.add_argument("--burst", action="store_true",
                    help="the burst scenario (replay/burst_whatif.py): --policy (default default,fgd,bestfit,"
                         "rule-engine) x --seeds (evaluation seeds 1-100) on openb (or --nodes/--pods) with 3 "
                         "arrival spikes of 10 min at 5x; deadline success, allocation, cost, decision time "
                         "as mean ± 95 %% interval; --shrink default 0.07, --load default 80")
    wi.add_argument("--tasks", type=int, default=None,
                    help="--burst: the first N tasks of the trace (default 3000; 0: all)")
    wi.add_argument("--quiet", action="store_true", help="no progress bar (there is none with --json or off a terminal)")
    wi.set_defaults(func=_whatif, needs=NOTHING)


# --------------------------------------------------------------------------- export
def _export(args: argparse.Namespace) -> int:
    import asyncio

    from suanli.config import load_settings, settings

    from .export import export_cell

    if (args.from_offset is not None or args.to_offset is not None) and (args.since or args.until):
        raise ReplayError("use either --from-offset/--to-offset or --since/--until, not both")
    s = load_settings(namespace=args.namespace) if args.namespace else settings()
    asyncio.run(export_cell(s, args.cell, Path(args.out), from_offset=args.from_offset, to_offset=args.to_offset,
                            since=args.since, until=args.until, partition=args.partition,
                            nodes_source=args.nodes_source, progress=wanted(quiet=args.quiet)))
    return 0


# --------------------------------------------------------------------------- replay
def _replay(args: argparse.Namespace) -> int:
    from .logdir import LogDir
    from .rerun import replay_logdir
    from suanli.processors.strategies import pinned_versions

    from .verify import describe, recorded_pins, summary, verify

    log = LogDir.open(args.log)
    pins = recorded_pins(log) if args.verify else {}
    with pinned_versions(pins):
        replayed = replay_logdir(log, progress=wanted(quiet=args.quiet, json=args.json))
    doc = {"log": str(args.log), "cell": log.cell, "inputs": replayed.inputs, "seconds": round(replayed.seconds, 3),
           "events_per_s": round(replayed.events_per_s), "regenerated": len(replayed.regenerated),
           "policy": replayed.policy}
    code = 0
    if args.verify:
        report = verify(log, replayed)
        print(describe(report, replayed))
        if pins:
            print("versions as recorded: " + ", ".join(f"{n}@{v}" for n, v in sorted(pins.items())))
        doc.update(identical=report.identical, recorded=report.recorded, duplicates_dropped=report.duplicates,
                   versions_as_recorded=pins, undecided=report.undecided,
                   divergence=None if report.identical else {"index": report.divergence.index, **report.details})
        code = 0 if report.identical else 1
    else:
        counts: dict[str, int] = {}
        for decoded in replayed.codec.decode_many(replayed.regenerated):
            if isinstance(decoded, Exception):
                raise decoded                     # our own encoding: cannot happen, never hide it
            kind = summary(*decoded)["kind"]
            counts[kind] = counts.get(kind, 0) + 1
        doc["decisions"] = counts
        print(f"replayed {replayed.inputs:,} inputs of cell {log.cell} in {replayed.seconds:.2f}s "
              f"({replayed.events_per_s:,.0f} events/s): {json.dumps(counts)}")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2, default=str) + "\n")
    return code


# --------------------------------------------------------------------------- whatif
def _whatif(args: argparse.Namespace) -> int:
    from . import report
    from .fgd_protocol import parse_seeds
    from .whatif import contract, run_fgd, run_log, run_timed, validate_sources

    if getattr(args, "burst", False):
        return _whatif_burst(args)
    if getattr(args, "tasks", None) is not None:
        raise ReplayError("--tasks is an option of --burst")
    mode = validate_sources(args.log, args.nodes, args.pods, args.protocol)
    if getattr(args, "reservations", None) is not None:
        if mode != "timed":
            raise ReplayError("--reservations needs --protocol timed (arrivals and departures)")
        return _whatif_reservations(args)
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError:
        raise ReplayError(f"--seeds {args.seeds!r}: expected e.g. 42-51 or 42,43") from None
    if not seeds:
        raise ReplayError("--seeds names no seed")
    default_policies = "recorded,default" if mode == "log" else "bestfit,default"
    policies = [p for p in (args.policy or default_policies).split(",") if p.strip()]
    progress = wanted(quiet=args.quiet, json=args.json)
    t0 = time.perf_counter()
    if mode == "fgd":
        result = run_fgd(args.nodes, args.pods, policies, seeds, workers=args.workers, curves=bool(args.report),
                         node_names=args.node_names, progress=progress)
        out = contract(result)
    elif mode == "timed":
        if args.policy and "recorded" in policies:
            raise ReplayError("'recorded' is a policy of log directories only")
        seed = seeds[0] if args.seeds != "42-51" else 42
        if args.seeds != "42-51" and len(seeds) != 1:
            raise ReplayError("timed mode runs one seed: pass --seeds N")
        result = run_timed(args.nodes, args.pods, policies, seed=seed, shrink=args.shrink,
                           shrink_seed=args.shrink_seed or 0, load=_load(args, 1.0), progress=progress)
        out = result
    else:
        result = run_log(args.log, policies, progress=progress)
        out = result
    detail = f", seeds {args.seeds}, node names {args.node_names}" if mode == "fgd" else ""
    print(f"\n{result['workload']} ({mode}{detail})")
    print(report.table(result))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        print(f"\nJSON: {args.json}")
    report_dir = _report_dir(args, mode)
    if report_dir is not None:
        images = report.plots(result, report_dir)
        page = report.html_report(result, images, report_dir / "report.html")
        print(f"report: {page} ({', '.join(p.name for p in images.values())})")
    print(f"whatif: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return 0


def _whatif_reservations(args: argparse.Namespace) -> int:
    """``whatif --protocol timed --reservations RULE``: the four arms at one load and share."""
    from . import reservations_whatif as rw
    from .fgd_protocol import parse_seeds

    try:
        seeds = parse_seeds(args.seeds)
    except ValueError:
        raise ReplayError(f"--seeds {args.seeds!r}: expected e.g. 42-51 or 42,43") from None
    if not seeds:
        raise ReplayError("--seeds names no seed")
    rule = rw.Rule.parse(args.reservations)
    strategies = [p.strip() for p in (args.policy or ",".join(rw.DEFAULT_STRATEGIES)).split(",") if p.strip()]
    for s in strategies:
        if ":" in s or s.endswith(".json") or s == "recorded":
            raise ReplayError(f"--reservations takes plain strategy names as --policy, not {s!r}")
    quiet = args.quiet or bool(args.json)
    say = (lambda _s: None) if quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    t0 = time.perf_counter()
    doc = rw.experiment(args.nodes, args.pods, rules=[rule], strategies=strategies, loads=[_load(args, 1.0)],
                        seeds=seeds,
                        shrink=args.shrink if args.shrink is not None else rw.DEFAULT_SHRINK,
                        workers=args.workers, say=say, command="suanli " + " ".join(sys.argv[1:]),
                        headline={"strategy": strategies[0], "load": _load(args, 1.0), "share": rule.share})
    rw.print_summary(doc)
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"\nJSON: {args.json}")
    out = _report_dir(args, "timed") or Path("whatif-report")
    page = rw.write_report(doc, out)
    print(f"report: {page}")
    print(f"whatif: {time.perf_counter() - t0:.1f}s", file=sys.stderr)
    return 0


def _load(args: argparse.Namespace, default: float) -> float:
    return default if args.load is None else float(args.load)


def _whatif_burst(args: argparse.Namespace) -> int:
    """``whatif --burst``: the burst scenario over policies x evaluation seeds (burst_whatif.py)."""
    from . import burst_whatif as bw
    from .fgd_protocol import parse_seeds

    if args.log or args.protocol:
        raise ReplayError("--burst runs on a trace (openb by default, or --nodes/--pods), without LOG or --protocol")
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError:
        raise ReplayError(f"--seeds {args.seeds!r}: expected e.g. 1-10 or 1,3") from None
    policies = [p.strip() for p in (args.policy or "default,fgd,bestfit,rule-engine").split(",") if p.strip()]
    sc = bw.BurstScenario(tasks=bw.DEFAULT_TASKS if args.tasks is None else (args.tasks or None),
                          shrink=bw.DEFAULT_SHRINK if args.shrink is None else args.shrink,
                          shrink_seed=bw.DEFAULT_SHRINK_SEED if args.shrink_seed is None else args.shrink_seed,
                          load=_load(args, bw.DEFAULT_LOAD))
    nodes, pods = bw.default_paths()
    return bw.run_cli(policies, seeds, sc, (args.nodes or nodes, args.pods or pods), workers=1,
                      json_path=args.json, quiet=args.quiet, command="suanli " + " ".join(sys.argv[1:]))


def _report_dir(args: argparse.Namespace, mode: str) -> Path | None:
    if args.report:
        return Path(args.report)
    if mode == "fgd":
        return None
    if args.json:
        j = Path(args.json)
        return j.with_name(f"{j.stem}-report")
    return Path("whatif-report")
