"""The task profiler (C9): a profile of 60+ named dimensions for each task, made when the
core decides it, from its submission, the history of its signature and the cell's state.

Contract:

* **Pure and deterministic.** :class:`Profiler` is folded by the core (``processors/core.py``)
  from the cell log alone — submissions, placements, requeues and the terminal
  TaskStatusChanged with the connector's :class:`~suanli.processors.model.ResourceUsage` —
  and reads time only from the cell clock. It lives in the cell's state and its snapshot
  (``CellState.profiler``), so the history survives a scheduler restart through the
  worker's changelogged RocksDB table, and a replay rebuilds it byte for byte.
* **On with the policy.** It folds and profiles only while the cell's policy has
  ``profiles.enabled`` (:class:`ProfileArgs`; off by default, so the hot path and old logs
  are untouched). When it is on, every decision about a task (placed, pending,
  unschedulable, migrated, preempted) carries the task's profile in its provenance, and the
  strategies' plugins read it as ``CycleContext.profile``.
* **Dimensions** are the fields of ``TaskProfile`` (``schemas/avro/io.suanli.events.TaskProfile.avsc``
  documents each): declared (the submission), learnt (the signature's history: durations
  through :mod:`~suanli.processors.duration_model`, exit codes, retries, queueing,
  arrivals), live (the usage connectors measured while the signature's runs ran: CPU, peak
  memory, GPU utilisation and memory, disk and network), the cell's state, and derived
  classes. A learnt dimension the signature has no runs for comes from the whole cell's
  history (``history_level`` 'global'), or a documented prior ('prior') before anything
  finished; ``dims_filled`` counts the numeric dimensions that hold an observed value.
* **Bounded.** At most ``max_signatures`` signatures are kept; the one touched longest ago
  (by a counter of folds, not the clock) goes first.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Optional

from .args import arg
from .duration_model import DurationFeatures, DurationPredictor, signature
from .model import ResourceUsage, Task, TaskProfile

if TYPE_CHECKING:                      # state imports this module
    from .state import CellState

GLOBAL = "*"                           # the key of the whole cell's history
QOS_RANK = {"GOLD": 2.0, "SILVER": 1.0, "BRONZE": 0.0}
SCHEDULING_RANK = {"urgent": 2.0, "normal": 1.0, "batch": 0.0}
IO_SCALE_MIB_S = 100.0                 # io_intensity = (disk + network MiB/s) / this, capped at 1
OOM_EXITS = frozenset({137, -9})
# duration classes, by predicted run time (s): interactive < 1 min, short < 1 h, medium < 12 h
DURATION_CLASSES = ((60.0, "interactive"), (3600.0, "short"), (43200.0, "medium"))
_CLASS_RANK = {"interactive": 0, "short": 1, "medium": 2, "long": 3}


@dataclass(frozen=True, slots=True)
class ProfileArgs:
    """The ``profiles`` key of a cell's policy."""
    enabled: bool = arg(False, "fold the task profiler and attach each task's profile to its decisions (C9)")
    max_signatures: int = arg(4096, "signatures whose history is kept (the least recently touched go first)", ge=1)
    io_heavy: float = arg(0.3, "io_intensity from which a task is kept off CONGESTED nodes; a task measured "
                          "lighter may go there (processors/framework.py)", ge=0, le=1)


@dataclass(slots=True)
class Moments:
    """Running count, mean and sum of squared deviations (Welford), and the largest value."""
    n: int = 0
    mean: float = 0.0
    m2: float = 0.0
    max: float = 0.0

    def add(self, x: float) -> None:
        self.n += 1
        d = x - self.mean
        self.mean += d / self.n
        self.m2 += d * (x - self.mean)
        if self.n == 1 or x > self.max:
            self.max = x

    @property
    def cv(self) -> float:
        """Coefficient of variation (0 with fewer than two values or a zero mean)."""
        if self.n < 2 or self.mean <= 0:
            return 0.0
        return math.sqrt(self.m2 / (self.n - 1)) / self.mean

    def to_json(self) -> list[float]:
        return [self.n, self.mean, self.m2, self.max]

    @classmethod
    def from_json(cls, v: list[float]) -> "Moments":
        return cls(int(v[0]), float(v[1]), float(v[2]), float(v[3]))


_MOMENTS = ("gaps", "wait", "cpu_ratio", "mem_ratio", "gpu_util", "gpu_mem_ratio", "io_read", "io_write", "net")


@dataclass(slots=True)
class SignatureHistory:
    """What the cell has seen of one signature (or of all of them: :data:`GLOBAL`)."""
    arrivals: int = 0
    last_arrival: int = -1             # cell clock of the latest submission
    finished: int = 0
    completed: int = 0
    exit_zero: int = 0
    exit_oom: int = 0
    exit_other: int = 0
    retries: int = 0
    wait_last: float = 0.0
    touched: int = 0                   # the profiler's fold counter when last touched (eviction order)
    gaps: Moments = field(default_factory=Moments)          # s between submissions
    wait: Moments = field(default_factory=Moments)          # s from submission to placement
    cpu_ratio: Moments = field(default_factory=Moments)     # cpu_seconds / (wall s x cores requested)
    mem_ratio: Moments = field(default_factory=Moments)     # peak RSS / memory requested
    gpu_util: Moments = field(default_factory=Moments)
    gpu_mem_ratio: Moments = field(default_factory=Moments)
    io_read: Moments = field(default_factory=Moments)       # MiB/s
    io_write: Moments = field(default_factory=Moments)
    net: Moments = field(default_factory=Moments)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _MOMENTS}
        out.update({k: getattr(self, k).to_json() for k in _MOMENTS})
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "SignatureHistory":
        h = cls(**{k: v for k, v in d.items() if k not in _MOMENTS})
        for k in _MOMENTS:
            setattr(h, k, Moments.from_json(d[k]))
        return h


def features_of(task: Task) -> DurationFeatures:
    """The duration model's view of a task: who, what program, which shape, and its estimate."""
    r = task.request
    prof = task.profile
    program = (task.command[0].rsplit("/", 1)[-1] if task.command
               else (prof.model_arch if prof is not None and prof.model_arch else task.labels.get("image", "")))
    return DurationFeatures(tenant=task.tenant, program=program, cpu_milli=r.cpu, memory_mib=r.mem,
                            gpu_count=r.gpu_count, gpu_milli=r.gpu_milli, gpu_models=tuple(r.models),
                            qos_tier=task.qos_tier, declared_ms=task.duration_estimate_ms,
                            submitted_at=task.submitted_at)


def signature_of(task: Task) -> str:
    f = features_of(task)
    return signature(f.tenant, f.program, f.cpu_milli, f.memory_mib, f.gpu_count, f.gpu_milli, f.gpu_models,
                     f.qos_tier)


class Profiler:
    """The history of a cell's signatures and the duration model (see the module docstring)."""

    def __init__(self, max_signatures: int = 4096):
        self.max_signatures = max_signatures
        self.histories: dict[str, SignatureHistory] = {}
        self.durations = DurationPredictor()
        self.folds = 0
        self.tenants: dict[str, list[int]] = {}        # tenant -> [active (submitted, not ended), arrivals]

    # ------------------------------------------------------------------ the fold
    def _history(self, key: str) -> SignatureHistory:
        self.folds += 1
        h = self.histories.get(key)
        if h is None:
            if len(self.histories) >= self.max_signatures + 1:      # + the global one
                oldest = min((k for k in self.histories if k != GLOBAL), key=lambda k: self.histories[k].touched)
                del self.histories[oldest]
            h = self.histories[key] = SignatureHistory()
        h.touched = self.folds
        return h

    def _both(self, task: Task) -> tuple[SignatureHistory, SignatureHistory]:
        return self._history(signature_of(task)), self._history(GLOBAL)

    def submitted(self, task: Task, now: int) -> None:
        """A submission: the signature's arrivals and the gaps between them, the tenant's counts."""
        tenant = self.tenants.setdefault(task.tenant, [0, 0])
        tenant[0] += 1
        tenant[1] += 1
        for h in self._both(task):
            if h.last_arrival >= 0:
                h.gaps.add(max(0, now - h.last_arrival) / 1000)
            h.arrivals += 1
            h.last_arrival = now

    def placed(self, task: Task, queued_at: int, now: int) -> None:
        """A placement: the time it waited in the queue."""
        wait = max(0, now - queued_at) / 1000
        for h in self._both(task):
            h.wait.add(wait)
            h.wait_last = wait

    def ended(self, task: Task) -> None:
        """A task's end, whatever it was (released: completed, failed, cancelled)."""
        tenant = self.tenants.get(task.tenant)
        if tenant is not None and tenant[0] > 0:
            tenant[0] -= 1

    def requeued(self, task: Task) -> None:
        """A run lost (its node DOWN) or preempted, queued again."""
        for h in self._both(task):
            h.retries += 1

    def finished(self, task: Task, status: str, exit_code: Optional[int], usage: Optional[ResourceUsage],
                 ran_ms: int, device_mib: int = 0) -> None:
        """A run's end (COMPLETED or FAILED) with the connector's usage report. ``ran_ms``:
        its run time, from the usage's wall time or else the cell clock since placement;
        ``device_mib``: the memory of one GPU of the node it ran on (0 = unknown)."""
        wall_ms = usage.wall_ms if usage is not None and usage.wall_ms > 0 else ran_ms
        if wall_ms > 0:
            self.durations.observe(features_of(task), int(wall_ms))
        r = task.request
        wall_s = wall_ms / 1000
        for h in self._both(task):
            h.finished += 1
            h.completed += status == "COMPLETED"
            if exit_code == 0 or (exit_code is None and status == "COMPLETED"):
                h.exit_zero += 1
            elif exit_code in OOM_EXITS:
                h.exit_oom += 1
            else:
                h.exit_other += 1
            if usage is None:
                continue
            if wall_s > 0 and r.cpu > 0:
                h.cpu_ratio.add(usage.cpu_seconds / (wall_s * r.cpu / 1000))
            if r.mem > 0 and usage.max_rss_mib > 0:
                h.mem_ratio.add(usage.max_rss_mib / r.mem)
            if usage.gpu_util is not None:
                h.gpu_util.add(usage.gpu_util)
            if usage.gpu_memory_peak_mib is not None and r.gpu_count > 0 and device_mib > 0:
                h.gpu_mem_ratio.add(usage.gpu_memory_peak_mib / (r.gpu_count * r.gpu_milli / 1000 * device_mib))
            if wall_s > 0:
                for name, v in (("io_read", usage.io_read_mib), ("io_write", usage.io_write_mib),
                                ("net", usage.net_mib)):
                    if v is not None:
                        getattr(h, name).add(v / wall_s)

    # ------------------------------------------------------------------ the profile
    def profile(self, task: Task, state: "CellState") -> TaskProfile:
        """The task's profile now (the cell clock is ``state.now``); reads, never folds."""
        sig = signature_of(task)
        own = self.histories.get(sig)
        hist, level = ((own, "signature") if own is not None and own.finished
                       else (self.histories[GLOBAL], "global") if GLOBAL in self.histories
                       and self.histories[GLOBAL].finished else (None, "prior"))
        arr = own or SignatureHistory()
        feats = features_of(task)
        pred = self.durations.predict(feats)
        dlevel, dstats = self.durations.stats_level(feats)
        r, labels = task.request, task.labels
        declared = (task.duration_estimate_ms or 0) / 1000
        prof = task.profile or TaskProfile()
        now = state.now
        d: dict[str, Any] = {
            "req_cpu_cores": r.cpu / 1000, "req_memory_gib": r.mem / 1024, "req_gpu_count": float(r.gpu_count),
            "req_gpu_share": r.gpu_milli / 1000, "req_gpu_total": r.gpu_count * r.gpu_milli / 1000,
            "req_gpu_models": float(len(r.models)), "req_accelerators": float(len({a[0] for a in r.accels})),
            "mem_per_core_gib": (r.mem / 1024) / (r.cpu / 1000) if r.cpu else 0.0,
            "declared_duration_s": declared,
            "deadline_slack_s": max(0.0, (task.deadline - task.submitted_at) / 1000) if task.deadline else 0.0,
            "qos_rank": QOS_RANK.get(task.qos_tier, 1.0), "priority_value": float(task.priority),
            "scheduling_rank": SCHEDULING_RANK.get(labels.get("scheduling", "normal"), 1.0),
            "model_size_gib": prof.model_size_mib / 1024, "command_args": float(len(task.command or ())),
            "env_vars": float(len(task.env)), "label_count": float(len(labels)),
            "gang_size": _int_label(labels.get("gang-size"), 1), "reserved": float("reservation" in labels),
            "submitted_hour": float((task.submitted_at // 3_600_000) % 24),
            "submitted_weekday": float(((task.submitted_at // 86_400_000) + 3) % 7),   # 1970-01-01 was a Thursday
        }
        observed = set(d)                             # the submission is always there
        h = hist or SignatureHistory()
        fin = max(1, h.finished)
        d.update({
            "history_runs": float(h.finished),
            "duration_mean_s": dstats.mean_ms / 1000, "duration_p50_s": dstats.p50_ms / 1000,
            "duration_p90_s": dstats.p90_ms / 1000, "duration_p99_s": dstats.p99_ms / 1000,
            "duration_cv": dstats.cv, "duration_last_s": dstats.last_ms / 1000,
            "predicted_duration_s": pred.duration_ms / 1000, "predicted_duration_lo_s": pred.lo_ms / 1000,
            "predicted_duration_hi_s": pred.hi_ms / 1000,
            "success_rate": h.completed / fin if h.finished else 1.0,
            "exit_zero_share": h.exit_zero / fin if h.finished else 1.0,
            "exit_oom_share": h.exit_oom / fin, "exit_other_share": h.exit_other / fin,
            "retries_per_run": h.retries / fin,
            "queue_wait_mean_s": h.wait.mean, "queue_wait_last_s": h.wait_last,
            "arrivals": float(arr.arrivals), "interarrival_mean_s": arr.gaps.mean, "interarrival_cv": arr.gaps.cv,
        })
        if hist is not None:
            observed |= {"history_runs", "success_rate", "exit_zero_share", "exit_oom_share", "exit_other_share",
                         "retries_per_run"}
        if dstats.n:
            observed |= {"duration_mean_s", "duration_p50_s", "duration_p90_s", "duration_p99_s", "duration_cv",
                         "duration_last_s"}
        if pred.duration_ms > 0:
            observed |= {"predicted_duration_s", "predicted_duration_lo_s", "predicted_duration_hi_s"}
        if h.wait.n:
            observed |= {"queue_wait_mean_s", "queue_wait_last_s"}
        observed.add("arrivals")
        if arr.gaps.n:
            observed |= {"interarrival_mean_s", "interarrival_cv", "burstiness"}
        live = {"cpu_used_ratio_mean": h.cpu_ratio, "mem_peak_ratio_mean": h.mem_ratio, "gpu_util_mean": h.gpu_util,
                "gpu_mem_peak_ratio": h.gpu_mem_ratio, "io_read_mib_s": h.io_read, "io_write_mib_s": h.io_write,
                "net_mib_s": h.net}
        for name, mom in live.items():
            d[name] = mom.mean
            if mom.n:
                observed.add(name)
        d["cpu_used_ratio_max"], d["mem_peak_ratio_max"] = h.cpu_ratio.max, h.mem_ratio.max
        cap = state.gpu_capacity_milli()
        tenant = self.tenants.get(task.tenant, [0, 0])
        d.update({"tenant_active": float(tenant[0]), "tenant_arrivals": float(tenant[1]),
                  "cell_queue_length": float(len(state.queue)),
                  "cell_gpu_alloc": state.gpu_allocated_milli() / cap if cap else 0.0})
        observed |= {"tenant_active", "tenant_arrivals", "cell_queue_length", "cell_gpu_alloc"}
        predicted_s = d["predicted_duration_s"] or declared
        io_rate = d["io_read_mib_s"] + d["io_write_mib_s"] + d["net_mib_s"]
        cls = _duration_class(predicted_s) if predicted_s > 0 else ""
        d.update({
            "duration_rank": float(_CLASS_RANK.get(cls, 0)),
            "compute_bound": min(1.0, max(d["cpu_used_ratio_mean"], d["gpu_util_mean"])),
            "memory_bound": min(1.0, d["mem_peak_ratio_mean"]),
            "burstiness": arr.gaps.cv / (1 + arr.gaps.cv),
            "over_request": max(0.0, 1 - d["cpu_used_ratio_mean"]) if h.cpu_ratio.n else 0.0,
            "oom_risk": max(d["exit_oom_share"], 0.5 if d["mem_peak_ratio_max"] > 1 else 0.0),
            "backfill_fit": 1 / (1 + predicted_s / 3600) if predicted_s > 0 else 0.0,
            "deadline_pressure": min(1.0, predicted_s / d["deadline_slack_s"]) if d["deadline_slack_s"] > 0 else 0.0,
        })
        if h.cpu_ratio.n:
            observed |= {"cpu_used_ratio_max", "over_request"}
        if h.mem_ratio.n:
            observed |= {"mem_peak_ratio_max", "memory_bound"}
        if h.cpu_ratio.n or h.gpu_util.n:
            observed.add("compute_bound")
        if h.io_read.n or h.io_write.n or h.net.n:
            observed.add("io_intensity")
        if hist is not None:
            observed.add("oom_risk")
        if predicted_s > 0:
            observed |= {"duration_rank", "backfill_fit", "deadline_pressure"}
        filled = len(observed)
        return TaskProfile(
            duration_class=cls, io_intensity=min(1.0, io_rate / IO_SCALE_MIB_S), parallelism=prof.parallelism,
            sla_level=task.qos_tier, model_arch=prof.model_arch, model_uri=prof.model_uri,
            model_size_mib=prof.model_size_mib, data_locations=prof.data_locations, extra=prof.extra,
            signature=sig, history_level=level,
            dims_filled=filled, **{k: float(v) for k, v in d.items()})

    # ------------------------------------------------------------------ snapshot
    def to_json(self) -> dict[str, Any]:
        return {"max_signatures": self.max_signatures, "folds": self.folds,
                "tenants": {k: list(v) for k, v in sorted(self.tenants.items())},
                "histories": {k: h.to_json() for k, h in sorted(self.histories.items())},
                "durations": self.durations.to_json()}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "Profiler":
        p = cls(int(d["max_signatures"]))
        p.folds = int(d["folds"])
        p.tenants = {k: [int(v[0]), int(v[1])] for k, v in d["tenants"].items()}
        p.histories = {k: SignatureHistory.from_json(v) for k, v in d["histories"].items()}
        p.durations = DurationPredictor.from_json(d["durations"])
        return p


def _duration_class(seconds: float) -> str:
    for bound, name in DURATION_CLASSES:
        if seconds < bound:
            return name
    return "long"


def _int_label(value: Optional[str], default: int) -> float:
    try:
        return float(max(1, int(value))) if value is not None else float(default)
    except ValueError:
        return float(default)


def numeric_dimensions() -> list[str]:
    """The names of the profile's numeric dimensions (what ``dims_filled`` counts from)."""
    skip = {"parallelism", "model_size_mib", "dims_filled"}
    return [f.name for f in fields(TaskProfile) if f.type in ("float", "int", float, int) and f.name not in skip]
