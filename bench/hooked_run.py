"""Runs a command with a ``sitecustomize`` hook directory on ``PYTHONPATH`` and collects what
the hook wrote: the shared half of ``bench/gc_time.py`` and ``bench/kafka_requests.py``.

Every Python process the command starts inherits the environment (the plane's workers and
connectors do), so each loads the hook and writes ``<pid>.json`` into the directory that
``dir_variable`` names."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable


def run(command: list[str], hook: Path, dir_variable: str) -> tuple[int, list[dict[str, Any]]]:
    """``command``'s exit code and each process's record (its pid added), in pid order."""
    with tempfile.TemporaryDirectory(prefix="suanli-hook-") as tmp:
        env = dict(os.environ, **{dir_variable: tmp},
                   PYTHONPATH=os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p))
        code = subprocess.call(command, env=env)
        return code, read(Path(tmp))


def read(directory: Path) -> list[dict[str, Any]]:
    """The hook's records in ``directory``, each with its ``pid``, in pid order."""
    rows = []
    for path in sorted(directory.glob("*.json"), key=lambda p: int(p.stem)):
        row = json.loads(path.read_text())
        row["pid"] = int(path.stem)
        rows.append(row)
    return rows


def cli(argv: list[str] | None, prog: str, description: str, run_command: Callable[[list[str]], dict[str, Any]],
        report: Callable[[dict[str, Any]], None]) -> int:
    """``prog [--json F] -- COMMAND...``: runs ``run_command(COMMAND)``, writes its result to F
    when asked, prints it with ``report`` and returns COMMAND's exit code."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name the command to run after --")
    out = run_command(command)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    report(out)
    return out["exit_code"]
