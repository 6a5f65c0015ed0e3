#!/usr/bin/env python3
"""The federated job's server side: a Suanli task's command, run with the Flower venv python.

    aggregator.py --fleet-port P --rounds R --min-clients M --secagg|--no-secagg
                  [--quantise none|int8] --report FILE --work-dir DIR
                  [--num-shares S] [--threshold T] [--stage-timeout SEC] [--local-epochs E]
                  [--batch-size B] [--control FILE] [--lr LR] [--poll SEC] [--timeout SEC]
                  [--control-port C] [--serverappio-port A]   (accepted, unused: see below)

Every round samples all the SuperNodes connected then (at least M: the round waits for
them), so clients may come and go between rounds. SecAgg+ ``--num-shares``/``--threshold``
are counts (integers: S shares, T to reconstruct, fixed for the run) or fractions (a number
with a point, in (0, 1]: Flower 1.42 sizes them in every round from the nodes sampled, e.g.
``--num-shares 1.0 --threshold 0.6`` = every sampled node, 3/5 of them rounded, at least 2;
both must be the same kind). ``--control FILE``: the ServerApp reads the JSON file
``{"batch_size": N}`` at the start of every round and sends N to the clients (no file: B).

1. starts ``flower-superlink --insecure --host 127.0.0.1 --port P
   --disable-runtime-dependency-installation`` (log: DIR/superlink.log). Flower 1.42 serves
   the Fleet, Control and Runtime (ServerAppIo) APIs on that ONE HTTP port, so
   ``--control-port``/``--serverappio-port`` are accepted for the caller's sake and ignored;
2. writes DIR/flwr-home/config.toml naming that SuperLink (insecure) and runs
   ``flwr run <connectors/flower/app> suanli --stream --run-config ...`` with
   ``FLWR_HOME=DIR/flwr-home`` (its output is this process's stdout);
3. stops the SuperLink (always: normal end, error, SIGTERM, SIGINT) and checks REPORT.

REPORT is truncated at the start; the ServerApp appends one JSON line per round (format in
``app/fldigits/server_app.py``). Exit status: 0 only if ``flwr run`` succeeded and REPORT has
rounds 1..R each with ``"ok": true``; 1 otherwise, with the reason on stderr; 2 for bad
arguments (e.g. ``--quantise int8`` with ``--secagg``: SecAgg+ re-quantises the float model
into its own field, so int8 only applies to plaintext); 143 after SIGTERM. The process group
is this process's (the caller can kill it); Flower's SuperExec and ServerApp processes run in
their own sessions but exit when their parent dies (Flower's parent-pid monitor).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

APP_DIR = Path(__file__).resolve().parent / "app"
FEDERATION = "suanli"


class Stop(Exception):
    """Raised by the signal handler so that the cleanup in ``finally`` runs."""


def _on_signal(signum: int, _frame: object) -> None:
    raise Stop(signum)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fleet-port", "--port", dest="port", type=int, required=True,
                    help="the SuperLink's HTTP port (Fleet, Control and Runtime APIs)")
    ap.add_argument("--control-port", type=int, help="ignored: Flower 1.42 has no separate Control port")
    ap.add_argument("--serverappio-port", type=int, help="ignored: Flower 1.42 has no separate ServerAppIo port")
    ap.add_argument("--rounds", type=int, required=True)
    ap.add_argument("--min-clients", type=int, required=True)
    ap.add_argument("--secagg", action=argparse.BooleanOptionalAction, required=True)
    ap.add_argument("--quantise", choices=["none", "int8"], default="none")
    ap.add_argument("--num-shares", type=_count_or_fraction,
                    help="SecAgg+ shares per client: a count, or a fraction of each round's sampled nodes "
                         "(default: --min-clients)")
    ap.add_argument("--threshold", type=_count_or_fraction,
                    help="SecAgg+ reconstruction threshold: a count, or a fraction of the shares (default: "
                         "shares//2+1 for a count, 0.6 for fractions)")
    ap.add_argument("--stage-timeout", type=float, default=0.0,
                    help="SecAgg+ per-stage reply timeout, s (0: until every reply or dead-node error)")
    ap.add_argument("--local-epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32, help="batch size per client (without --control's)")
    ap.add_argument("--control", type=Path, default=None,
                    help='JSON file {"batch_size": N} read every round (missing: --batch-size)')
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--poll", type=float, default=0.1, help="ServerApp's sleep between reply pulls, s")
    ap.add_argument("--report", type=Path, required=True)
    ap.add_argument("--work-dir", type=Path, required=True)
    ap.add_argument("--timeout", type=float, default=0.0, help="give up after this many s (0: never)")
    args = ap.parse_args(argv)
    if args.secagg and args.quantise != "none":
        ap.error("--quantise int8 applies to plaintext only (--no-secagg): SecAgg+ re-encodes the float "
                 "model into its own 32-bit modular field")
    if args.rounds < 1 or args.min_clients < 1:
        ap.error("--rounds and --min-clients must be >= 1")
    if args.batch_size < 1:
        ap.error("--batch-size must be >= 1")
    args.num_shares = args.num_shares or args.min_clients
    if isinstance(args.num_shares, float):
        args.threshold = args.threshold or 0.6
        if not isinstance(args.threshold, float):
            ap.error("--num-shares and --threshold must both be counts or both be fractions")
        if args.secagg and args.min_clients < 2:
            ap.error("SecAgg+ needs --min-clients >= 2 (Flower refuses a round of fewer nodes)")
    else:
        args.threshold = args.threshold or args.num_shares // 2 + 1
        if isinstance(args.threshold, float):
            ap.error("--num-shares and --threshold must both be counts or both be fractions")
        if args.secagg and not 2 <= args.threshold <= args.num_shares:
            ap.error("SecAgg+ needs 2 <= --threshold <= --num-shares")
    return args


def _count_or_fraction(text: str) -> int | float:
    """An integer count, or a fraction in (0, 1] when written with a point or exponent."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a count nor a fraction") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"a fraction must be in (0, 1], not {text}")
    return value


def _toml(v: object) -> str:
    return json.dumps(v) if isinstance(v, (str, bool)) else repr(v)   # JSON strings/bools are TOML


def make_run_config(args: argparse.Namespace, report: Path) -> str:
    """The ``flwr run --run-config`` string (TOML values: a fraction stays a float, a count an int)."""
    config = {"num-rounds": args.rounds, "min-clients": args.min_clients, "secagg": args.secagg,
              "num-shares": args.num_shares, "threshold": args.threshold,
              "stage-timeout": float(args.stage_timeout), "quantise": args.quantise,
              "local-epochs": args.local_epochs, "batch-size": args.batch_size, "lr": float(args.lr),
              "poll": float(args.poll), "report": str(report),
              "control": str(args.control.resolve()) if args.control else ""}
    return " ".join(f"{k}={_toml(v)}" for k, v in config.items())


def _wait_port(port: int, proc: subprocess.Popen, timeout: float = 180.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"flower-superlink exited with {proc.returncode} before listening")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"flower-superlink did not listen on 127.0.0.1:{port} within {timeout:.0f}s")


def _stop(proc: subprocess.Popen | None, grace: float = 10.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def check_report(path: Path, rounds: int) -> str | None:
    """None if ``path`` holds rounds 1..``rounds`` all ok, else the reason."""
    if not path.exists():
        return f"no report at {path}"
    lines = [json.loads(l) for l in path.read_text().splitlines() if l.strip()]
    by_round = {l["round"]: l for l in lines}
    missing = [r for r in range(1, rounds + 1) if r not in by_round]
    failed = [r for r, l in sorted(by_round.items()) if not l.get("ok")]
    if failed:
        return f"aggregation failed in round(s) {failed}"
    if missing:
        return f"round(s) {missing} of {rounds} never completed"
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    bindir = Path(sys.executable).parent
    work = args.work_dir.resolve()
    home = work / "flwr-home"
    home.mkdir(parents=True, exist_ok=True)
    report = args.report.resolve()
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("")
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "{FEDERATION}"\n\n[superlink.{FEDERATION}]\n'
        f'address = "127.0.0.1:{args.port}"\ninsecure = true\n')
    env = dict(os.environ, FLWR_HOME=str(home), FLWR_TELEMETRY_ENABLED="0", FLWR_DISABLE_UPDATE_CHECK="1",
               FLWR_SUPEREXEC_TASK_POLL_INTERVAL="0.1",   # SuperExec's pickup of the ServerApp (default 1 s)
               PATH=f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}")
    run_config = make_run_config(args, report)
    superlink: subprocess.Popen | None = None
    run: subprocess.Popen | None = None
    try:
        with (work / "superlink.log").open("ab") as log:
            superlink = subprocess.Popen(
                [str(bindir / "flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port", str(args.port),
                 "--disable-runtime-dependency-installation"],
                cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        _wait_port(args.port, superlink)
        print(f"aggregator: SuperLink on 127.0.0.1:{args.port} (pid {superlink.pid})", flush=True)
        run = subprocess.Popen(
            [str(bindir / "flwr"), "run", str(APP_DIR), FEDERATION, "--stream", "--run-config", run_config],
            cwd=work, env=env, stdin=subprocess.DEVNULL)
        try:
            rc = run.wait(args.timeout or None)
        except subprocess.TimeoutExpired:
            print(f"aggregator: gave up after --timeout {args.timeout:.0f}s", file=sys.stderr)
            return 1
        problem = check_report(report, args.rounds)
        if problem is None and rc != 0:
            problem = f"`flwr run` exited with {rc}"
        if problem:
            print(f"aggregator: FAILED: {problem} (report {report}, SuperLink log {work / 'superlink.log'})",
                  file=sys.stderr)
            return 1
        print(f"aggregator: {args.rounds} round(s) completed; report {report}", flush=True)
        return 0
    except Stop as stop:
        print(f"aggregator: stopped by signal {stop.args[0]}", file=sys.stderr)
        return 128 + int(stop.args[0])
    except RuntimeError as exc:
        print(f"aggregator: FAILED: {exc}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)     # finish the cleanup even if signalled again
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        _stop(run, grace=5)
        _stop(superlink)


if __name__ == "__main__":
    sys.exit(main())
