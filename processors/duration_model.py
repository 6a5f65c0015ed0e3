"""Online task-duration prediction from completed history (issue 20, task profiles, C9).

Pure and deterministic: no clock, no randomness, no I/O, standard library only. The task
profiler calls :meth:`DurationPredictor.predict` when a task arrives and
:meth:`DurationPredictor.observe` when one completes; the predictor's whole state is
:meth:`DurationPredictor.to_json` (it lives in the scheduler's snapshot, and
``from_json(p.to_json()).to_json() == p.to_json()`` exactly).

**Keys.** Every observation updates one key at each of four nested levels, finest first:

* ``signature`` — :func:`signature`: tenant, program (argv[0] or image, '' if none), the
  full shape (CPU, memory, GPU count and milli, accepted GPU models) and the QoS tier;
* ``shape`` — the resource shape alone (any tenant, program, tier or GPU model);
* ``gpu-class`` — CPU-only, shared GPU by quarter of milli, or the number of whole GPUs;
* ``global`` — everything.

**Estimate.** Durations are heavy tailed, so everything is done on ``log(ms)``. A key's own
estimate is the median of its durations (from a fixed log-spaced histogram, 8 bins per
octave, clamped to the key's min..max, so one observation gives back itself exactly);
it is shrunk toward its parent's estimate with strength ``prior`` (``(n·own + k·parent) /
(n + k)``), from ``global`` down to ``signature``: a key seen once leans on its parent, a
key seen often stands on its own. The point returned is that conditional **median**
(exp of the median of the logs): it is what minimises the expected absolute error, so the
predictor optimises **MAE**. Relative error is not what it minimises (that would call for
a point below the median, the ``1/actual``-weighted median); it is reported, not tuned.

**Declared estimate.** When a task carries the user's estimate (``declared_ms``), each key
also learns the log-ratio ``log(actual / declared)`` (its mean and variance), shrunk down
the same hierarchy. ``declared × exp(ratio)`` is a second estimate; the two are combined in
log space with inverse-variance weights, so a user whose estimates track the truth (small
ratio variance) dominates and one who always asks for the queue limit is ignored.

**Time of day** (optional, ``time_of_day=True``): the mean residual ``log(actual) -
log(predicted)`` per ``tod_buckets`` slice of the cell-clock day is added, shrunk.

**Memory.** At most ``max_keys`` keys per level; a new key past that evicts the least
recently observed one (dicts kept in observation order, plus a monotone observation
counter ``seen`` — never the wall clock). A key's state is a few numbers and a sparse
histogram (at most ~300 bins, typically a dozen).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Optional
from urllib.parse import quote

from suanli.errors import ConfigError

LEVELS = ("signature", "shape", "gpu-class", "global")
BINS_PER_OCTAVE = 8
Z80 = 1.2815515655446004  # the 90th percentile of the standard normal: lo..hi is ~p10..p90
DAY_MS = 86_400_000
_LOG2 = math.log(2.0)


def _q(s: str) -> str:
    # Percent-encode free text so a '/' or ',' in a tenant or image cannot collide keys.
    return quote(s, safe="")


def signature(tenant: str, program: str, cpu_milli: int, memory_mib: int, gpu_count: int,
              gpu_milli: int, gpu_models: tuple[str, ...], qos_tier: str) -> str:
    """The stable key of a task kind: ``tenant/program/shape/models/tier``.

    Free text is percent-encoded and the GPU models sorted (the set a task accepts, in any
    order), so equal kinds give equal keys across processes and versions.
    """
    models = "+".join(sorted(_q(m) for m in gpu_models))
    return (f"{_q(tenant)}/{_q(program)}/{_shape(cpu_milli, memory_mib, gpu_count, gpu_milli)}"
            f"/{models}/{_q(qos_tier)}")


def _shape(cpu_milli: int, memory_mib: int, gpu_count: int, gpu_milli: int) -> str:
    return f"{cpu_milli}m,{memory_mib}Mi,{gpu_count}x{gpu_milli if gpu_count > 0 else 0}"


def gpu_class(gpu_count: int, gpu_milli: int) -> str:
    """CPU-only, a shared GPU by quarter (``share<=250`` .. ``share<1000``), or ``gpuN``."""
    if gpu_count <= 0:
        return "cpu"
    if gpu_count == 1 and 0 < gpu_milli < 1000:
        q = min(1000, 250 * math.ceil(gpu_milli / 250))
        return f"share<={q}" if q < 1000 else "share<1000"
    return f"gpu{gpu_count}"


@dataclass(frozen=True)
class DurationFeatures:
    """What is known of a task when it arrives. ``submitted_at`` is ms on the cell clock;
    ``declared_ms`` the user's own estimate, None when there is none."""

    tenant: str
    program: str
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_milli: int
    gpu_models: tuple[str, ...]
    qos_tier: str
    declared_ms: Optional[int]
    submitted_at: int

    @property
    def signature(self) -> str:
        return signature(self.tenant, self.program, self.cpu_milli, self.memory_mib,
                         self.gpu_count, self.gpu_milli, self.gpu_models, self.qos_tier)


@dataclass(frozen=True)
class DurationStats:
    """One signature's completed durations (all zero, n=0, when it has none)."""

    n: int
    mean_ms: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    cv: float
    last_ms: int


@dataclass(frozen=True)
class Prediction:
    """A predicted duration. ``source``: the finest level with history behind the estimate
    (``signature``, ``shape``, ``gpu-class``, ``global``), ``declared`` when the user's
    estimate (scaled by the learnt ratio, or alone when nothing is known) carries most of
    the weight, ``none`` when nothing is known at all (then every figure is 0). ``n``: the
    observations at that level. ``lo_ms``..``hi_ms``: an ~80 % interval (p10..p90 under a
    log-normal spread)."""

    duration_ms: int
    source: str
    n: int
    lo_ms: int
    hi_ms: int


@dataclass(frozen=True)
class DurationConfig:
    """Knobs; the defaults are the evaluated predictor (``replay/duration_prediction.py``).

    ``levels``: the levels in use, a suffix-closed subset of :data:`LEVELS` order (always
    ending in ``global``); ``prior``: shrinkage strength in observations (0 = none: the
    finest key with history answers alone); ``use_qos``: the tier is part of the signature
    key; ``use_declared``: learn and use actual/declared; ``time_of_day``: residual per
    slice of the day."""

    levels: tuple[str, ...] = LEVELS
    prior: float = 2.0
    use_qos: bool = True
    use_declared: bool = True
    time_of_day: bool = False
    tod_buckets: int = 6
    max_keys: int = 4096

    def __post_init__(self) -> None:
        if (not self.levels or self.levels[-1] != "global" or any(l not in LEVELS for l in self.levels)
                or list(self.levels) != sorted(set(self.levels), key=LEVELS.index)):
            raise ConfigError(f"levels must be drawn from {LEVELS} and end in 'global': {self.levels}")
        if self.max_keys < 1 or self.prior < 0 or self.tod_buckets < 1:
            raise ConfigError("max_keys >= 1, prior >= 0, tod_buckets >= 1")

    def to_json(self) -> dict[str, Any]:
        return {"levels": list(self.levels), "prior": self.prior, "use_qos": self.use_qos,
                "use_declared": self.use_declared, "time_of_day": self.time_of_day,
                "tod_buckets": self.tod_buckets, "max_keys": self.max_keys}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "DurationConfig":
        return cls(levels=tuple(d["levels"]), prior=d["prior"], use_qos=d["use_qos"],
                   use_declared=d["use_declared"], time_of_day=d["time_of_day"],
                   tod_buckets=d["tod_buckets"], max_keys=d["max_keys"])


@dataclass
class _Acc:
    """One key's running statistics (mutable, private to the predictor)."""

    n: int = 0
    sum_ms: float = 0.0
    sumsq_ms: float = 0.0
    slog: float = 0.0
    slog2: float = 0.0
    min_ms: int = 0
    max_ms: int = 0
    last_ms: int = 0
    seen: int = 0
    hist: dict[int, int] = field(default_factory=dict)
    r_n: int = 0           # declared ratio: count, sum and sum of squares of log(actual/declared)
    r_slog: float = 0.0
    r_slog2: float = 0.0
    _median: Optional[float] = None  # cache of log(median); not state, rebuilt on demand

    def add(self, ms: int, log_ratio: Optional[float], seen: int) -> None:
        x = math.log(ms)
        self.n += 1
        self.sum_ms += ms
        self.sumsq_ms += float(ms) * ms
        self.slog += x
        self.slog2 += x * x
        self.min_ms = ms if self.n == 1 else min(self.min_ms, ms)
        self.max_ms = max(self.max_ms, ms)
        self.last_ms = ms
        self.seen = seen
        b = _bin(ms)
        self.hist[b] = self.hist.get(b, 0) + 1
        self._median = None
        if log_ratio is not None:
            self.r_n += 1
            self.r_slog += log_ratio
            self.r_slog2 += log_ratio * log_ratio

    def quantile(self, q: float) -> float:
        """The q-quantile in ms from the histogram, geometric within a bin, clamped to min..max."""
        target = q * self.n
        acc = 0
        for b in sorted(self.hist):
            c = self.hist[b]
            if acc + c >= target:
                frac = (target - acc) / c
                v = 2.0 ** ((b + frac) / BINS_PER_OCTAVE)
                return min(max(v, float(self.min_ms)), float(self.max_ms))
            acc += c
        return float(self.max_ms)

    def log_median(self) -> float:
        if self._median is None:
            self._median = math.log(self.quantile(0.5))
        return self._median

    def log_var(self) -> Optional[float]:
        if self.n < 2:
            return None
        m = self.slog / self.n
        return max(0.0, self.slog2 / self.n - m * m) * self.n / (self.n - 1)

    def ratio_mean_var(self) -> tuple[Optional[float], Optional[float]]:
        if self.r_n == 0:
            return None, None
        m = self.r_slog / self.r_n
        v = max(0.0, self.r_slog2 / self.r_n - m * m) * self.r_n / (self.r_n - 1) if self.r_n >= 2 else None
        return m, v

    def to_json(self) -> dict[str, Any]:
        return {"n": self.n, "sum_ms": self.sum_ms, "sumsq_ms": self.sumsq_ms, "slog": self.slog,
                "slog2": self.slog2, "min_ms": self.min_ms, "max_ms": self.max_ms,
                "last_ms": self.last_ms, "seen": self.seen,
                "hist": [[b, c] for b, c in sorted(self.hist.items())],
                "r_n": self.r_n, "r_slog": self.r_slog, "r_slog2": self.r_slog2}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "_Acc":
        return cls(n=d["n"], sum_ms=d["sum_ms"], sumsq_ms=d["sumsq_ms"], slog=d["slog"],
                   slog2=d["slog2"], min_ms=d["min_ms"], max_ms=d["max_ms"], last_ms=d["last_ms"],
                   seen=d["seen"], hist={int(b): int(c) for b, c in d["hist"]},
                   r_n=d["r_n"], r_slog=d["r_slog"], r_slog2=d["r_slog2"])


def _bin(ms: int) -> int:
    return math.floor(math.log2(ms) * BINS_PER_OCTAVE)


@dataclass
class _Resid:
    """Time-of-day residuals: count and sum of log(actual) - log(predicted)."""

    n: int = 0
    s: float = 0.0


class DurationPredictor:
    """The online predictor; see the module docstring for the model.

    Contract: ``observe`` is the only mutator; ``predict`` and ``stats`` read only; equal
    sequences of calls give equal states and answers; durations below 1 ms count as 1 ms.
    """

    def __init__(self, config: Optional[DurationConfig] = None, max_keys: Optional[int] = None) -> None:
        cfg = config or DurationConfig()
        if max_keys is not None:
            cfg = DurationConfig(**{**cfg.to_json(), "levels": cfg.levels, "max_keys": max_keys})
        self.config = cfg
        self.max_keys = cfg.max_keys
        self._levels: dict[str, dict[str, _Acc]] = {lvl: {} for lvl in cfg.levels}
        self._tod: list[_Resid] = [_Resid() for _ in range(cfg.tod_buckets)]
        self._seen = 0

    # -- keys -----------------------------------------------------------------------------
    def _keys(self, f: DurationFeatures) -> list[tuple[str, str]]:
        out = []
        for lvl in self.config.levels:
            if lvl == "signature":
                k = signature(f.tenant, f.program, f.cpu_milli, f.memory_mib, f.gpu_count, f.gpu_milli,
                              f.gpu_models, f.qos_tier if self.config.use_qos else "")
            elif lvl == "shape":
                k = _shape(f.cpu_milli, f.memory_mib, f.gpu_count, f.gpu_milli)
            elif lvl == "gpu-class":
                k = gpu_class(f.gpu_count, f.gpu_milli)
            else:
                k = "*"
            out.append((lvl, k))
        return out

    def _tod_bucket(self, f: DurationFeatures) -> int:
        return (f.submitted_at % DAY_MS) * self.config.tod_buckets // DAY_MS

    # -- learning -------------------------------------------------------------------------
    def observe(self, features: DurationFeatures, duration_ms: int) -> None:
        """Learn one completion: ``duration_ms`` (run time) of a task with ``features``."""
        ms = max(1, int(duration_ms))
        if self.config.time_of_day:
            base = self._estimate(features, with_tod=False)
            if base is not None:
                r = self._tod[self._tod_bucket(features)]
                r.n += 1
                r.s += math.log(ms) - base[0]
        d = features.declared_ms
        log_ratio = math.log(ms / d) if self.config.use_declared and d is not None and d > 0 else None
        self._seen += 1
        for lvl, k in self._keys(features):
            table = self._levels[lvl]
            acc = table.pop(k, None)  # re-inserted last: dict order is observation order
            if acc is None:
                acc = _Acc()
                if len(table) >= self.max_keys:
                    del table[next(iter(table))]  # the least recently observed key
            acc.add(ms, log_ratio, self._seen)
            table[k] = acc

    # -- answering ------------------------------------------------------------------------
    def _chain(self, features: DurationFeatures) -> list[tuple[str, Optional[_Acc]]]:
        return [(lvl, self._levels[lvl].get(k)) for lvl, k in self._keys(features)]

    def _estimate(self, f: DurationFeatures, with_tod: bool = True) -> Optional[tuple[float, float, str, int]]:
        """(log estimate, log variance, source, n) or None when nothing is known."""
        chain = self._chain(f)
        k = self.config.prior
        est = var = None
        r_est = r_var = None
        src, src_n, r_n = "none", 0, 0
        for lvl, acc in reversed(chain):  # global first, then finer levels shrink toward it
            if acc is None or acc.n == 0:
                continue
            own, own_var = acc.log_median(), acc.log_var()
            if est is None:
                est, var = own, (own_var if own_var is not None else 1.0)
            else:
                w = acc.n / (acc.n + k) if k > 0 else 1.0
                est = w * own + (1 - w) * est
                if own_var is not None:
                    var = w * own_var + (1 - w) * var
            src, src_n = lvl, acc.n
            rm, rv = acc.ratio_mean_var()
            if rm is not None:
                if r_est is None:
                    r_est, r_var = rm, (rv if rv is not None else 1.0)
                else:
                    w = acc.r_n / (acc.r_n + k) if k > 0 else 1.0
                    r_est = w * rm + (1 - w) * r_est
                    if rv is not None:
                        r_var = w * rv + (1 - w) * r_var
                r_n = acc.r_n
        d = f.declared_ms
        use_d = self.config.use_declared and d is not None and d > 0
        if est is None:
            if not use_d:
                return None
            return math.log(d), 1.0, "declared", 0
        if use_d and r_est is not None:
            a, b = 1.0 / max(var, 1e-6), 1.0 / max(r_var, 1e-6)
            est = (a * est + b * (math.log(d) + r_est)) / (a + b)
            var = 1.0 / (a + b)
            if b > a:
                src, src_n = "declared", r_n
        if with_tod and self.config.time_of_day:
            r = self._tod[self._tod_bucket(f)]
            if r.n:
                est += r.s / (r.n + k)
        return est, var, src, src_n

    def predict(self, features: DurationFeatures) -> Prediction:
        """The predicted run time of a task with ``features``, from what has been observed."""
        e = self._estimate(features)
        if e is None:
            return Prediction(0, "none", 0, 0, 0)
        est, var, src, n = e
        sd = math.sqrt(var)
        return Prediction(max(1, round(math.exp(est))), src, n,
                          max(1, round(math.exp(est - Z80 * sd))), max(1, round(math.exp(est + Z80 * sd))))

    def stats(self, features: DurationFeatures, back_off: bool = False) -> DurationStats:
        """The statistics of ``features``' signature (n=0 when unseen); with ``back_off``, of the
        finest level that has seen any (see :meth:`stats_level` for which)."""
        return self.stats_level(features, back_off)[1]

    def stats_level(self, features: DurationFeatures, back_off: bool = True) -> tuple[str, DurationStats]:
        """``(level, statistics)`` of the finest level with completed durations (only the
        signature's without ``back_off``); ``("none", zeros)`` when there are none."""
        for lvl, key in self._keys(features):
            table = self._levels.get(lvl)
            acc = table.get(key) if table is not None else None
            if acc is not None and acc.n > 0:
                mean = acc.sum_ms / acc.n
                var = max(0.0, acc.sumsq_ms / acc.n - mean * mean)
                return lvl, DurationStats(acc.n, mean, acc.quantile(0.5), acc.quantile(0.9), acc.quantile(0.99),
                                          math.sqrt(var) / mean if mean > 0 else 0.0, acc.last_ms)
            if not back_off:
                break
        return "none", DurationStats(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0)

    def size(self) -> dict[str, int]:
        """Keys held per level."""
        return {lvl: len(t) for lvl, t in self._levels.items()}

    # -- snapshot -------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        """The whole state, JSON-ready; keys per level in observation order (eviction order)."""
        return {"version": 1, "config": self.config.to_json(), "seen": self._seen,
                "levels": {lvl: [[k, a.to_json()] for k, a in t.items()] for lvl, t in self._levels.items()},
                "tod": [[r.n, r.s] for r in self._tod]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "DurationPredictor":
        """The inverse of :meth:`to_json`: ``from_json(p.to_json()).to_json() == p.to_json()``."""
        p = cls(DurationConfig.from_json(d["config"]))
        p._seen = d["seen"]
        for lvl, rows in d["levels"].items():
            p._levels[lvl] = {k: _Acc.from_json(a) for k, a in rows}
        p._tod = [_Resid(int(n), float(s)) for n, s in d["tod"]]
        return p
