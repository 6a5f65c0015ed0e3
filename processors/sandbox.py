"""Run an untrusted (third-party) strategy's scoring in a separate, resource-limited process.

:func:`sandboxed_module` wraps a discovered strategy: the cell's own filters run in
process (they are ours), and the strategy's *scoring* runs in a fresh Python subprocess
under ``RLIMIT_CPU`` (CPU seconds), ``RLIMIT_AS`` (address space) and a wall-clock
timeout. The child receives the request and the feasible nodes (free CPU, memory, GPU
devices, model, node_meta) as JSON on stdin, rebuilds a small :class:`CellState`, runs
the strategy's ``build(config)`` profile scorers and prints the totals.

Anything but a well-formed answer (crash, non-zero exit, signal, timeout, memory error,
wrong length, NaN) raises :class:`SandboxError`; the core then decides with the cell's
fallback strategy and records the reason in the decision's provenance (path and
``matched_rule``), and scheduling goes on.

Determinism: a well-behaved strategy gives the same scores in the child as in process.
Whether a *limit* trips can depend on the machine, so the decision records the outcome:
replaying the decision log (``evolve``) reproduces it exactly; re-deciding from the inputs
reproduces it only for strategies that stay well inside their limits. Each call spawns an
interpreter (~0.1 s); a long-lived worker pool would amortise that (not needed so far).

Config of a sandboxed strategy (in its policy config): ``sandbox: {cpu_seconds: 2,
memory_mb: 1024, wall_seconds: 5}``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from typing import Any

import numpy as np

from suanli.errors import StrategyError

from .framework import REGISTRY, CycleContext, Plugin, Profile
from .plugins.basic import FILTERS


DEFAULT_LIMITS = {"cpu_seconds": 2.0, "memory_mb": 1024, "wall_seconds": 5.0}


class SandboxError(StrategyError, RuntimeError):
    """The sandboxed strategy failed; ``reason`` says how."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


_CHILD = r"""
import json, sys
import numpy as np
from importlib import import_module
from suanli.processors.state import CellState
from suanli.processors.framework import CycleContext, Request, _normalize
msg = json.loads(sys.stdin.read())
mod_name, _, attr = msg["entry"].partition(":")
mod = import_module(mod_name)
for part in filter(None, attr.split(".")):
    mod = getattr(mod, part)
s = CellState("sandbox", max_gpus=max(1, msg["max_gpus"]))
for n in msg["nodes"]:
    row = s.add_node(n["id"], n["cpu_cap"], n["mem_cap"], n["gpu_count"], n["model"], n["meta"])
    s.cpu_free[row] = n["cpu_free"]; s.mem_free[row] = n["mem_free"]
    s.gpu_free[row, :n["gpu_count"]] = n["gpu_free"]; s._refresh_gpu_row(row)
s.tasks[msg["task_id"]] = msg["task"]
r = msg["req"]
req = Request(r["cpu"], r["mem"], r["gpu_count"], r["gpu_milli"], tuple(r["models"]))
ctx = CycleContext(s, req, msg["task_id"], msg["seed"], msg["config"])
prof = mod.build(msg["config"])
rows = np.arange(s.n_nodes)
total = np.zeros(rows.size)
for p, w in prof.scorers:
    sc = np.asarray(p.score(ctx, rows), dtype=float)
    total += w * (_normalize(sc) if p.normalize else sc)
sys.stdout.write(json.dumps({"scores": [float(v) for v in total]}))
"""


def _limits(cpu_s: float, mem_mb: int):
    def apply() -> None:
        import resource

        c = max(1, int(round(cpu_s)))
        resource.setrlimit(resource.RLIMIT_CPU, (c, c + 1))
        b = int(mem_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (b, b))
        os.setsid()
    return apply


def run_scoring(entry: str, ctx: CycleContext, rows: np.ndarray, limits: dict[str, Any]) -> np.ndarray:
    """Scores of ``rows`` from the strategy at ``entry`` (``module:attr``), computed in a
    limited subprocess. Raises :class:`SandboxError`."""
    s, r = ctx.state, ctx.req
    nodes = []
    for row in rows.tolist():
        nid = s.node_ids[row]
        k = int(s.gpu_count[row])
        m = int(s.model_idx[row])
        nodes.append({"id": nid, "cpu_cap": int(s.cpu_cap[row]), "mem_cap": int(s.mem_cap[row]),
                      "cpu_free": int(s.cpu_free[row]), "mem_free": int(s.mem_free[row]), "gpu_count": k,
                      "gpu_free": [int(v) for v in s.gpu_free[row, :k]], "model": s.models[m] if m >= 0 else None,
                      "meta": s.node_meta.get(nid, {})})
    task = {k: v for k, v in ctx.task.items() if k in ("labels", "qos", "priority", "tenant", "status")}
    msg = {"entry": entry, "nodes": nodes, "max_gpus": s.max_gpus, "task_id": ctx.task_id, "task": task,
           "req": {"cpu": r.cpu, "mem": r.mem, "gpu_count": r.gpu_count, "gpu_milli": r.gpu_milli,
                   "models": list(r.models)},
           "seed": int(ctx.seed), "config": {k: v for k, v in ctx.config.items() if k != "sandbox"}}
    lim = {**DEFAULT_LIMITS, **(limits or {})}
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env,
                                preexec_fn=_limits(float(lim["cpu_seconds"]), int(lim["memory_mb"])))
    except OSError as exc:
        raise SandboxError(f"could not start the sandbox: {exc}") from None
    try:
        out, err = proc.communicate(json.dumps(msg).encode(), timeout=float(lim["wall_seconds"]))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, 9)       # the child's own session: only what this call started
        except (ProcessLookupError, PermissionError):
            proc.kill()
        proc.communicate()
        raise SandboxError(f"wall-clock limit {lim['wall_seconds']}s exceeded") from None
    if proc.returncode != 0:
        rc = proc.returncode
        how = (f"killed by signal {-rc}" + (" (CPU limit)" if -rc in (9, 24) else "")) if rc < 0 else f"exit {rc}"
        tail = err.decode(errors="replace").strip().splitlines()[-1:] if err else []
        if tail and "MemoryError" in tail[0]:
            how += " (memory limit)"
        raise SandboxError(f"strategy crashed: {how}" + (f": {tail[0][:200]}" if tail else ""))
    try:
        scores = np.array(json.loads(out.decode())["scores"], dtype=np.float64)
    except Exception as exc:  # noqa: BLE001
        raise SandboxError(f"malformed answer: {type(exc).__name__}") from None
    if scores.shape != (rows.size,) or not np.isfinite(scores).all():
        raise SandboxError("malformed answer: wrong length or non-finite scores")
    return scores


class SandboxScore(Plugin):
    """Score by a sandboxed third-party strategy (not registered: built per strategy)."""
    name = "Sandboxed"

    def score(self, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
        return run_scoring(self.args["entry"], ctx, rows, self.args.get("limits") or {})


def sandboxed_module(module: Any, entry: str) -> Any:
    """A strategy module whose scoring runs in the sandbox; filters and device choice are
    the built-in ones, ties by BestFit."""
    def build(config: dict) -> Profile:
        sc = SandboxScore(entry=entry, limits=config.get("sandbox") or {})
        return Profile([REGISTRY.create(n) for n in FILTERS], [(sc, 1.0)], [REGISTRY.create("Capacity")],
                       tie_break="BestFit", top_k=int(config.get("top_k", 5)),
                       secondary={"BestFit": REGISTRY.create("BestFit")})

    wrapper = types.SimpleNamespace(NAME=module.NAME, VERSION=module.VERSION, build=build, SANDBOXED=True,
                                    __doc__=getattr(module, "__doc__", "") or "", inner=module, entry=entry)
    return wrapper
