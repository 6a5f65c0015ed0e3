"""Run an untrusted (third-party) strategy's scoring in a separate, resource-limited process.

:func:`sandboxed_module` wraps a discovered strategy: the cell's own filters run in
process (they are ours), and the strategy's *scoring* runs in a fresh Python subprocess
under ``RLIMIT_CPU`` (CPU seconds, counted from when the child has loaded the
scheduler's own modules: its start-up is ours, not the strategy's), ``RLIMIT_AS``
(address space) and a wall-clock timeout. The child receives the request and the feasible nodes (free CPU, memory, GPU
devices, what each node registered as) as JSON on stdin, rebuilds a small :class:`CellState`, runs
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
memory_mb: 1024, wall_seconds: 5}`` (:class:`SandboxLimits`), the common strategy keys,
and the strategy's own keys: checked by its ``Args`` when it declares one, else passed on
as they are (:class:`SandboxedArgs`).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from dataclasses import dataclass
from typing import Any

import numpy as np

from suanli.errors import StrategyError

from .args import DEFAULT, Number, arg, explicit, parse_args
from .framework import REGISTRY, CycleContext, Plugin, Profile
from .model import Task
from .plugins.basic import FILTERS
from .state import TaskRecord
from .strategies.args import ExternalArgs


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Resource limits of one sandboxed scoring call. The numbers are kept as given: the
    wall-clock one shows up, as written, in the decision that records a timeout."""
    cpu_seconds: Number = arg(2.0, "RLIMIT_CPU, CPU seconds (rounded, at least 1)", gt=0)
    memory_mb: int = arg(1024, "RLIMIT_AS, MiB", ge=1)
    wall_seconds: Number = arg(5.0, "wall-clock timeout, seconds", gt=0)


DEFAULT_LIMITS = explicit(SandboxLimits())


@dataclass(frozen=True, slots=True)
class SandboxScoreArgs:
    entry: str = arg(doc="the strategy's entry point, module:attr", nonempty=True)
    limits: SandboxLimits = arg(SandboxLimits(), "resource limits", null=DEFAULT)


@dataclass(frozen=True, slots=True)
class SandboxedArgs(ExternalArgs):
    """A sandboxed third-party strategy's config: the common keys, ``sandbox`` (limits)
    and its own keys (in ``extra``; they reach its ``build`` in the subprocess as they are).
    Equal scores always go by BestFit here (``tie_break`` is passed on, not used)."""
    sandbox: SandboxLimits = arg(SandboxLimits(), "resource limits of the scoring subprocess", null=DEFAULT)


class SandboxError(StrategyError, RuntimeError):
    """The sandboxed strategy failed; ``reason`` says how."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


_CHILD = r"""
import json, sys
import numpy as np
from importlib import import_module
from suanli.processors.state import CellState, TaskRecord
from suanli.processors.framework import CycleContext, _normalize
from suanli.processors.model import Node, Request
import math, resource
msg = json.loads(sys.stdin.read())
# The CPU budget is the strategy's: it starts here, after this child's own imports
# (~0.8 CPU s, more on a loaded machine), which the parent capped generously.
used = resource.getrusage(resource.RUSAGE_SELF)
cap = math.ceil(used.ru_utime + used.ru_stime) + msg["cpu_seconds"]
resource.setrlimit(resource.RLIMIT_CPU, (cap, cap + 1))
mod_name, _, attr = msg["entry"].partition(":")
mod = import_module(mod_name)
for part in filter(None, attr.split(".")):
    mod = getattr(mod, part)
s = CellState("sandbox", max_gpus=max(1, msg["max_gpus"]))
for n in msg["nodes"]:
    row = s.add_node(n["id"], n["cpu_cap"], n["mem_cap"], n["gpu_count"], n["model"], Node.from_json(n["node"]))
    s.cpu_free[row] = n["cpu_free"]; s.mem_free[row] = n["mem_free"]
    s.gpu_free[row, :n["gpu_count"]] = n["gpu_free"]; s._refresh_gpu_row(row)
if msg["task"] is not None:
    s.tasks[msg["task_id"]] = TaskRecord.from_json(msg["task"])
r = msg["req"]
req = Request(r["cpu"], r["mem"], r["gpu_count"], r["gpu_milli"], tuple(r["models"]))
ctx = CycleContext(s, req, msg["task_id"], msg["seed"], msg["config"])
cfg = msg["config"]
if hasattr(mod, "Args"):
    from suanli.processors.args import parse_args
    cfg = parse_args(mod.Args, cfg, "strategy " + repr(mod.NAME))
prof = mod.build(cfg)
rows = np.arange(s.n_nodes)
total = np.zeros(rows.size)
for p, w in prof.scorers:
    sc = np.asarray(p.score(ctx, rows), dtype=float)
    total += w * (_normalize(sc) if p.normalize else sc)
sys.stdout.write(json.dumps({"scores": [float(v) for v in total]}))
"""


# CPU seconds the child may spend on its own imports before the strategy's budget starts
# (it then lowers the limit to what it used plus the budget; the wall clock bounds both).
_STARTUP_CPU_SECONDS = 30


def _cpu_budget(cpu_s: float) -> int:
    return max(1, int(round(cpu_s)))


def _limits(mem_mb: int):
    def apply() -> None:
        import resource

        c = _STARTUP_CPU_SECONDS
        resource.setrlimit(resource.RLIMIT_CPU, (c, c + 1))
        b = int(mem_mb) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (b, b))
        os.setsid()
    return apply


def run_scoring(entry: str, ctx: CycleContext, rows: np.ndarray, limits: Any = None) -> np.ndarray:
    """Scores of ``rows`` from the strategy at ``entry`` (``module:attr``), computed in a
    limited subprocess (``limits``: :class:`SandboxLimits` or its JSON object; None =
    defaults). Raises :class:`SandboxError`."""
    s, r = ctx.state, ctx.req
    nodes = []
    for row in rows.tolist():
        nid = s.node_ids[row]
        k = int(s.gpu_count[row])
        m = int(s.model_idx[row])
        nodes.append({"id": nid, "cpu_cap": int(s.cpu_cap[row]), "mem_cap": int(s.mem_cap[row]),
                      "cpu_free": int(s.cpu_free[row]), "mem_free": int(s.mem_free[row]), "gpu_count": k,
                      "gpu_free": [int(v) for v in s.gpu_free[row, :k]], "model": s.models[m] if m >= 0 else None,
                      "node": s.nodes[nid].to_json()})
    msg_task = None
    rec = ctx.task
    if rec is not None:
        # what a strategy may read of the task: not its command or environment
        t = rec.task
        seen = Task(task_id=t.task_id, tenant=t.tenant, request=t.request, qos_tier=t.qos_tier,
                    priority=t.priority, labels=t.labels)
        msg_task = TaskRecord(seen, rec.seq, rec.status).to_json()
    msg = {"entry": entry, "nodes": nodes, "max_gpus": s.max_gpus, "task_id": ctx.task_id, "task": msg_task,
           "req": {"cpu": r.cpu, "mem": r.mem, "gpu_count": r.gpu_count, "gpu_milli": r.gpu_milli,
                   "models": list(r.models)},
           "seed": int(ctx.seed), "config": {k: v for k, v in ctx.config.items() if k != "sandbox"}}
    lim = explicit(parse_args(SandboxLimits, limits, "the sandbox limits"))
    msg["cpu_seconds"] = _cpu_budget(float(lim["cpu_seconds"]))
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env,
                                preexec_fn=_limits(int(lim["memory_mb"])))
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
    Args = SandboxScoreArgs
    args: SandboxScoreArgs

    def score(self, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
        return run_scoring(self.args.entry, ctx, rows, self.args.limits)


def sandboxed_module(module: Any, entry: str) -> Any:
    """A strategy module whose scoring runs in the sandbox; filters and device choice are
    the built-in ones, ties by BestFit. Its ``Args`` is :class:`SandboxedArgs` (the inner
    module's own keys are checked by the inner ``Args``, if any, when it scores)."""
    def build(args: SandboxedArgs) -> Profile:
        sc = SandboxScore(SandboxScoreArgs(entry=entry, limits=args.sandbox))
        return Profile([REGISTRY.create(n) for n in FILTERS], [(sc, 1.0)], [REGISTRY.create("Capacity")],
                       tie_break="BestFit", top_k=args.top_k,
                       secondary={"BestFit": REGISTRY.create("BestFit")})

    wrapper = types.SimpleNamespace(NAME=module.NAME, VERSION=module.VERSION, build=build, Args=SandboxedArgs,
                                    SANDBOXED=True, __doc__=getattr(module, "__doc__", "") or "", inner=module,
                                    entry=entry)
    return wrapper
