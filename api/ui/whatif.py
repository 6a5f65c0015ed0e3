"""The dashboard's What-if page: pick a recorded log directory (what ``suanli export --out
DIR`` writes) under a root, name policies, run ``suanli whatif`` as a background process in
a per-run directory under the root, and show its PNG plots and headline figures.

Root: env ``SUANLI_WHATIF_ROOT`` (default ``<settings.home>/exports``). Runs go to
``ROOT/.whatif-runs/<id>/`` (``whatif.json``, ``report/*.png``, ``output.log``).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUNS = ".whatif-runs"
POLICY_RE = re.compile(r"^[A-Za-z0-9_.:=+-]+(,[A-Za-z0-9_.:=+-]+)*$")
RUN_ID_RE = re.compile(r"^[0-9a-f]{12}$")


def root() -> Path:
    env = os.environ.get("SUANLI_WHATIF_ROOT")
    if env:
        return Path(env).resolve()
    from suanli.config import settings
    return (Path(settings().home) / "exports").resolve()


def is_logdir(path: Path) -> bool:
    return (path / "cell.json").is_file() and (path / "inputs.avro").is_file()


def logdirs(base: Path, depth: int = 3) -> list[str]:
    """Log directories under ``base`` (relative paths, sorted), runs excluded."""
    found: list[str] = []

    def walk(d: Path, level: int) -> None:
        if is_logdir(d) and d != base:
            found.append(d.relative_to(base).as_posix())
            return
        if level >= depth:
            return
        try:
            children = sorted(p for p in d.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:
            return
        for c in children:
            walk(c, level + 1)

    if base.is_dir():
        walk(base, 0)
    return found


class WhatifError(ValueError):
    """A request the page refuses (4xx)."""


def resolve_logdir(base: Path, rel: str) -> Path:
    if not rel or "\x00" in rel:
        raise WhatifError("Pick a log directory.")
    target = (base / rel).resolve()
    if target != base and base not in target.parents:
        raise WhatifError("That directory is outside the what-if root.")
    if RUNS in target.relative_to(base).parts or not is_logdir(target):
        raise WhatifError("That is not a recorded log directory (cell.json and inputs.avro).")
    return target


def check_policies(text: str) -> str:
    text = text.strip().replace(" ", "")
    if not text or len(text) > 500 or not POLICY_RE.match(text):
        raise WhatifError("Policies: a comma-separated list such as recorded,bestfit,default.")
    return text


@dataclass
class Run:
    id: str
    logdir: str
    policies: str
    dir: Path
    started: float
    proc: subprocess.Popen | None = None
    ended: float | None = None
    code: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def poll(self) -> str:
        if self.proc is not None and self.code is None:
            rc = self.proc.poll()
            if rc is not None:
                self.code, self.ended = rc, time.time()
                _close(self.proc)
        if self.code is None:
            return "running"
        return "done" if self.code == 0 and (self.dir / "whatif.json").is_file() else "failed"

    def tail(self, n: int = 2000) -> str:
        try:
            return (self.dir / "output.log").read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def plots(self) -> list[str]:
        rep = self.dir / "report"
        return sorted(p.name for p in rep.glob("*.png")) if rep.is_dir() else []

    def figures(self) -> tuple[list[str], list[tuple[str, list[str]]]]:
        from suanli.replay import report
        doc = json.loads((self.dir / "whatif.json").read_text())
        return list(doc["policies"]), report.rows(doc)

    def status(self) -> dict[str, Any]:
        state = self.poll()
        out: dict[str, Any] = {"id": self.id, "state": state, "logdir": self.logdir, "policies": self.policies,
                               "elapsed_s": round((self.ended or time.time()) - self.started, 1)}
        if state == "failed":
            out["error"] = self.tail() or f"exit code {self.code}"
        if state == "done":
            out["plots"] = self.plots()
        return out


def _close(proc: subprocess.Popen) -> None:
    for f in (proc.stdout, proc.stderr):
        if f is not None:
            f.close()


class Runner:
    """The what-if runs of one API process."""

    def __init__(self) -> None:
        self.runs: dict[str, Run] = {}

    def start(self, base: Path, rel: str, policies: str) -> Run:
        logdir = resolve_logdir(base, rel)
        policies = check_policies(policies)
        run_id = uuid.uuid4().hex[:12]
        d = base / RUNS / run_id
        d.mkdir(parents=True)
        (d / "run.json").write_text(json.dumps({"logdir": rel, "policies": policies, "started": time.time()}))
        cmd = [sys.executable, "-m", "suanli", "whatif", str(logdir), "--policy", policies,
               "--json", str(d / "whatif.json"), "--report", str(d / "report"), "--quiet"]
        log = open(d / "output.log", "wb")   # noqa: SIM115 - the child holds it
        try:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    cwd=str(d), start_new_session=True)
        finally:
            log.close()
        run = Run(run_id, rel, policies, d, time.time(), proc)
        self.runs[run_id] = run
        return run

    def get(self, run_id: str) -> Run | None:
        if not RUN_ID_RE.match(run_id):
            return None
        return self.runs.get(run_id)

    def file(self, run_id: str, name: str) -> Path | None:
        """A PNG of the run's report, only inside its directory."""
        run = self.get(run_id)
        if run is None or "/" in name or "\\" in name or not name.endswith(".png"):
            return None
        rep = (run.dir / "report").resolve()
        path = (rep / name).resolve()
        return path if path.parent == rep and path.is_file() else None

    def close(self) -> None:
        for run in self.runs.values():
            if run.proc is not None and run.proc.poll() is None:
                run.proc.terminate()
