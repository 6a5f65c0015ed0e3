"""The Flower runtime's own virtualenv (issue 22, federated training).

Flower 1.42 pins fastapi<0.139, starlette<1.4, uvicorn<0.50, rich<15 and packaging<26,
which clash with Suanli's own dependencies, so it never goes into the project's venv: it
lives in ``<home>/flower/venv`` (``<home>`` is ``Settings.home``, ``<repo>/.suanli`` by
default) and everything that runs there (``connectors/flower/``: the aggregator, the
SuperNode launcher, the Flower app, the centralised baseline) never imports ``suanli``.

:func:`ensure_venv` creates that venv with ``python -m venv`` and ``pip install``-s the
pinned :data:`REQUIREMENTS`, but only when the stamp file (a hash of the requirement list
and the interpreter version) differs, so the common case is a file read. ``python -m
suanli.deploy.flower setup`` does the same and prints the venv's python
(``.ci/setup.d/85-flower.sh`` runs it).
"""
from __future__ import annotations

import argparse
import fcntl
import hashlib
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from suanli.config import settings
from suanli.errors import StackError

# Exact versions, verified together on CPython 3.11 (flwr 1.42.0 with SecAgg+ as separate
# processes on loopback; scikit-learn only for load_digits and the train/test split).
REQUIREMENTS: tuple[str, ...] = (
    "flwr==1.42.0",
    "numpy==2.4.6",
    "scikit-learn==1.9.1",
    "scipy==1.17.1",
)
REPO = Path(__file__).resolve().parent.parent
CONNECTOR_DIR = REPO / "connectors" / "flower"      # aggregator.py, client.py, centralised.py, app/
STAMP = ".suanli-requirements.sha256"


def venv_dir() -> Path:
    """``<home>/flower/venv``."""
    return Path(settings().home) / "flower" / "venv"


def venv_python(venv: Path | None = None) -> Path:
    return (venv or venv_dir()) / "bin" / "python"


def _digest() -> str:
    text = "\n".join((platform.python_version(), *REQUIREMENTS))
    return hashlib.sha256(text.encode()).hexdigest()


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def ensure_venv(venv: Path | None = None) -> Path:
    """The Flower venv's python, after creating or updating the venv if its stamp does not
    match :data:`REQUIREMENTS`. Safe to call concurrently (a file lock serialises the
    installs). :class:`StackError` with the tail of the pip log if the install fails."""
    venv = venv or venv_dir()
    python = venv_python(venv)
    stamp = venv / STAMP
    digest = _digest()
    if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    log = venv.parent / "pip.log"
    with (venv.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)           # another process may be installing right now
        if python.exists() and stamp.exists() and stamp.read_text().strip() == digest:
            return python
        stamp.unlink(missing_ok=True)
        with log.open("w") as out:
            if not python.exists():
                shutil.rmtree(venv, ignore_errors=True)
                step = subprocess.run([sys.executable, "-m", "venv", str(venv)], stdout=out,
                                      stderr=subprocess.STDOUT)
                if step.returncode != 0:
                    raise StackError(f"python -m venv {venv} failed ({step.returncode}):\n{_tail(log)}")
            step = subprocess.run([str(python), "-m", "pip", "install", "--disable-pip-version-check",
                                   "--no-input", *REQUIREMENTS], stdout=out, stderr=subprocess.STDOUT)
        if step.returncode != 0:
            raise StackError(f"pip install into the Flower venv {venv} failed ({step.returncode}); "
                             f"log {log}:\n{_tail(log)}")
        stamp.write_text(digest + "\n")
    return python


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m suanli.deploy.flower", description="The Flower runtime's venv")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("setup", help="create/update the venv (only if the pinned requirements changed); print its python")
    sub.add_parser("path", help="print the venv's python path without installing anything")
    args = ap.parse_args(argv)
    if args.cmd == "path":
        print(venv_python())
        return 0
    try:
        print(ensure_venv())
    except StackError as exc:
        print(f"suanli.deploy.flower: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
