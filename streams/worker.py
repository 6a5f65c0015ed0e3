"""``python -m suanli.streams.worker ROLE``: run one Faust worker (intake, scheduler or telemetry)."""
from __future__ import annotations

import argparse
import sys

import faust

from suanli.config import settings
from suanli.streams.app import BUILDERS as CORE_BUILDERS
from suanli.streams.telemetry_app import build_telemetry

BUILDERS = {**CORE_BUILDERS, "telemetry": build_telemetry}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="suanli-worker")
    parser.add_argument("role", choices=sorted(BUILDERS))
    parser.add_argument("--loglevel", default="warning")
    args = parser.parse_args(argv)
    app = BUILDERS[args.role](settings())
    worker = faust.Worker(app, loglevel=args.loglevel, quiet=True, override_logging=True)
    worker.execute_from_commandline()
    return 0


if __name__ == "__main__":
    sys.exit(main())
