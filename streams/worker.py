"""``python -m suanli.streams.worker ROLE``: run one worker (intake, scheduler or telemetry):
intake and the scheduler are plain aiokafka loops (``streams/intake_worker.py``,
``streams/scheduler_worker.py``; ``SUANLI_SCHEDULER_LOOP=faust`` runs the scheduler's former
Faust agent instead), telemetry a Faust app.

``--metrics-port PORT`` serves the worker's Prometheus metrics at ``http://HOST:PORT/metrics``
(``streams/metrics.py``; ``--metrics-host``, default 127.0.0.1; port 0: any free port, printed in
the log). A port that cannot be bound is logged and the worker runs on without metrics: a
missing target shows as down in Prometheus, and scheduling never stops for a metric.
``--instance N`` runs the role's N-th worker: several share the role's partitions.
"""
from __future__ import annotations

import argparse
import logging
import signal
import sys

import faust

from suanli import gc_policy
from suanli.config import settings
from suanli.errors import ConfigError
from suanli.streams import diagnostics
from suanli.streams.app import BUILDERS as CORE_BUILDERS
from suanli.streams.intake_worker import run_intake
from suanli.streams.scheduler_worker import run_scheduler
from suanli.streams.telemetry_app import build_telemetry

BUILDERS = {**CORE_BUILDERS, "telemetry": build_telemetry}     # the Faust workers
PLAIN = {"intake": run_intake, "scheduler": run_scheduler}     # the plain aiokafka loops
ROLES = ("intake", *BUILDERS)


class _Worker(faust.Worker):
    """Faust's worker, whose SIGUSR1 also logs the consumer's and recovery's state
    (``streams/diagnostics.py``) after mode's dump of every task's stack, and without Faust's
    start-up spinner.

    The spinner is a terminal's progress display; to feed it, Faust sets the root logger to
    DEBUG for the worker's whole life (``faust/worker.py``, ``_setup_spinner_handler``), so every
    debug call of aiokafka, Faust and mode built a log record that the handler then dropped:
    several per fetch, a few % of a core in an idle worker. Without it the root logger keeps
    ``--loglevel``."""

    def _setup_spinner_handler(self, logger: logging.Logger, level: int) -> None:
        self.spinner = None

    def install_signal_handlers(self) -> None:
        super().install_signal_handlers()
        self.loop.add_signal_handler(signal.SIGUSR1, self._dump_state)

    def _dump_state(self) -> None:
        self._on_sigusr1()
        diagnostics.log_state(self.app)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="suanli-worker")
    parser.add_argument("role", choices=sorted(ROLES))
    parser.add_argument("--loglevel", default="warning")
    parser.add_argument("--metrics-port", type=int, default=None,
                        help="serve Prometheus metrics on this port (0: any free port; default: none)")
    parser.add_argument("--metrics-host", default="127.0.0.1", help="address of the metrics server (127.0.0.1)")
    parser.add_argument("--instance", type=int, default=1,
                        help="which worker of the role this is (1, 2, ...): every instance joins the role's "
                             "consumer group and keeps its local state in a directory of its own (default 1)")
    args = parser.parse_args(argv)
    try:
        gc_policy.apply()                # see suanli/gc_policy.py
    except ConfigError as exc:
        parser.error(str(exc))
    if args.instance < 1:
        parser.error("--instance must be 1 or more")
    if args.metrics_port is not None:
        from suanli.streams.metrics import serve

        try:
            port = serve(args.metrics_port, args.metrics_host)
            print(f"suanli-worker {args.role}: metrics at http://{args.metrics_host}:{port}/metrics", flush=True)
        except OSError as exc:
            print(f"suanli-worker {args.role}: cannot serve metrics on {args.metrics_host}:{args.metrics_port} "
                  f"({exc}); running without them", file=sys.stderr, flush=True)
    s = settings()
    plain = None if args.role == "scheduler" and s.scheduler_loop == "faust" else PLAIN.get(args.role)
    if plain is not None:              # not a Faust app (streams/intake_worker.py says why)
        logging.basicConfig(level=args.loglevel.upper(), stream=sys.stderr,
                            format="[%(asctime)s] [%(process)s] [%(levelname)s] %(name)s: %(message)s")
        plain(s, instance=args.instance)
        return 0
    app = BUILDERS[args.role](s, instance=args.instance)
    worker = _Worker(app, loglevel=args.loglevel, quiet=True, override_logging=True)
    worker.execute_from_commandline()
    return 0


if __name__ == "__main__":
    sys.exit(main())
