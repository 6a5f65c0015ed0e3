"""A Kubernetes-style scheduling framework, vectorised over the node rows of a CellState.

Extension points, in cycle order (a plugin implements any subset):

``pre_filter(ctx) -> Status``
    Once per task. UNRESOLVABLE = can never fit this cell (-> TaskUnschedulable);
    UNSCHEDULABLE = not now (-> pending); SKIP = plugin has nothing to do for this task.
``filter(ctx) -> (mask, reason)``
    A boolean array over all node rows: True = the node passes. ``reason`` labels the
    nodes this filter removes (each node is attributed to the *first* filter rejecting it).
``score(ctx, rows) -> float array``
    Scores for the feasible rows (higher is better). With ``normalize = True`` the
    framework min-max normalises them to 0..100 with integer division, as the
    Kubernetes scheduler does. The total is ``sum(weight * score)``.
``select_devices(ctx, row) -> list[int]``
    Which GPU devices on the chosen node. The first enabled plugin defining it wins;
    otherwise :func:`default_devices` (best fit).
``reserve(ctx, plan) -> Status`` / ``unreserve(ctx, plan)`` and ``permit(ctx, plan) -> Status``
    Veto or hold a plan (WAIT keeps the task pending). ``bind`` is done by the core, which
    turns the plan into a ``TaskPlaced`` event and folds it into the state.

Plugins return typed :class:`Status` values, never raise for scheduling outcomes. They
are registered by name in a :class:`PluginRegistry`, which rejects duplicates;
:class:`Profile` picks the enabled plugins and their weights from configuration.

Each plugin class declares its arguments as a frozen dataclass ``Args`` (defaults and
validation, see ``args.py``; default :class:`~.args.NoArgs`); a plugin reads
``self.args.<field>``. :meth:`PluginRegistry.create` builds ``Args`` from the JSON object
and refuses an unknown key or a bad value with
:class:`~suanli.errors.StrategyConfigError` naming the plugin and the key.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Optional

import numpy as np

from suanli.errors import StrategyError

from . import compiled, rng
from .args import NoArgs, parse_args
from .model import Request, TaskProfile  # noqa: F401  (Request re-exported: plugins take the request from here)
from .node_classes import node_classes
from .state import CellState, TaskRecord


class Code(enum.IntEnum):
    OK = 0
    UNSCHEDULABLE = 1
    UNRESOLVABLE = 2
    WAIT = 3
    SKIP = 4


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.OK
    reason: str = ""
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code in (Code.OK, Code.SKIP)


OK = Status()


class DuplicatePluginError(StrategyError, ValueError):
    """A plugin name was registered twice."""


class UnknownPluginError(StrategyError, KeyError):
    """Configuration names a plugin that is not registered."""


# --------------------------------------------------------------------------- request
@dataclass(slots=True)
class CycleContext:
    """Everything a plugin may read during one scheduling cycle."""
    state: CellState
    req: Request
    task_id: str
    seed: int                      # strategy seed mixed with the input position
    config: dict[str, Any]
    scratch: dict[str, Any] = field(default_factory=dict)
    # the rows the task's QoS tier may use (None = all) and the reason for the others,
    # applied after every strategy's filters (processors/qos.py: pools)
    allowed: Optional[np.ndarray] = None
    allowed_reason: str = ""

    @property
    def task(self) -> Optional[TaskRecord]:
        """The task's record in the state (``.task``: labels, qos_tier, priority, tenant ...;
        ``.status``, ``.node``); None for a task the state does not hold."""
        return self.state.tasks.get(self.task_id)

    @property
    def profile(self) -> Optional["TaskProfile"]:
        """The task's profile (``processors/profiler.py``: predicted duration, IO intensity,
        history of its signature ...) while the cell's policy has profiles on, else None.
        Made once per cycle."""
        if "profile" not in self.scratch:
            from .core import profiler_of          # core imports this module
            prof = profiler_of(self.state)
            rec = self.task
            self.scratch["profile"] = prof.profile(rec.task, self.state) if prof is not None and rec else None
        return self.scratch["profile"]

    @property
    def labels(self) -> Mapping[str, str]:
        rec = self.task
        return rec.task.labels if rec is not None else {}

    def model_mask(self) -> Optional[np.ndarray]:
        """Rows whose GPU model the task accepts (None = any model)."""
        if not self.req.models:
            return None
        s, models = self.state, self.req.models

        def mask() -> np.ndarray:
            ids = [i for i, name in enumerate(s.models) if name in models]
            return np.isin(s.model_idx, np.array(ids, dtype=np.int64))
        return s.derived(("model_mask", models, len(s.models), s.n_nodes), mask)


@dataclass(slots=True)
class Plan:
    row: int
    node_id: str
    devices: list[int]


@dataclass(slots=True)
class CycleResult:
    status: Status
    plan: Optional[Plan]
    filtered: list[tuple[str, int, list[int]]]   # (reason, count, first rows)
    candidates: list[tuple[int, float]]           # (row, score), best first
    n_feasible: int
    path: list[str]


# --------------------------------------------------------------------------- plugins
class Plugin:
    """Base class. Subclasses set ``name``, ``Args`` (their arguments' dataclass, if they
    take any) and override the extension points they use."""
    name: ClassVar[str] = ""
    normalize: ClassVar[bool] = False
    points: ClassVar[frozenset[str]] = frozenset()
    Args: ClassVar[type] = NoArgs

    def __init__(self, args: Any = None, /, **kwargs: Any):
        """``args``: an ``Args`` instance or its JSON object; or the arguments as keywords
        (``FGD(mode="raw")``). Bad ones raise StrategyConfigError naming the plugin."""
        if args is not None and kwargs:
            raise TypeError(f"{type(self).__name__}: pass the arguments as one object or as keywords, not both")
        self.args = parse_args(type(self).Args, kwargs if args is None else args, f"plugin {self.name!r}")

    def pre_filter(self, ctx: CycleContext) -> Status:
        return OK

    def filter(self, ctx: CycleContext) -> Optional[tuple[np.ndarray, str]]:
        return None

    def score(self, ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def per_class(self, ctx: CycleContext) -> bool:
        """Whether ``score(ctx, rows)`` is, row by row, a function of ``ctx`` and of the row's
        node class alone (``processors/node_classes.py``: its free CPU, free milli per
        device and GPU model), whatever other rows are scored with it. A cycle may then score
        one row of each class among the feasible ones and spread the values over the rest
        (``class_scores``): the same totals, for a few dozen rows instead of thousands.
        False unless a plugin says so; a plugin whose score reads anything else of a node
        (its memory, labels, caches, name) must not."""
        return False

    def select_devices(self, ctx: CycleContext, row: int) -> Optional[list[int]]:
        return None

    def reserve(self, ctx: CycleContext, plan: Plan) -> Status:
        return OK

    def unreserve(self, ctx: CycleContext, plan: Plan) -> None:
        return None

    def permit(self, ctx: CycleContext, plan: Plan) -> Status:
        return OK


def _implements(cls: type, point: str) -> bool:
    return getattr(cls, point) is not getattr(Plugin, point)


class PluginRegistry:
    """Plugins by name. Registering a name twice raises :class:`DuplicatePluginError`."""

    def __init__(self) -> None:
        self._plugins: dict[str, type[Plugin]] = {}

    def register(self, cls: type[Plugin]) -> type[Plugin]:
        if not cls.name:
            raise ValueError(f"{cls.__name__} has no name")
        if cls.name in self._plugins:
            raise DuplicatePluginError(f"plugin {cls.name!r} is already registered")
        self._plugins[cls.name] = cls
        return cls

    def create(self, name: str, args: Any = None) -> Plugin:
        """Plugin ``name`` with ``args`` (its ``Args`` instance, or the JSON object;
        None = defaults). Unknown names raise :class:`UnknownPluginError`; an unknown key
        or a bad value :class:`~suanli.errors.StrategyConfigError`."""
        try:
            cls = self._plugins[name]
        except KeyError:
            raise UnknownPluginError(name) from None
        return cls(parse_args(cls.Args, args, f"plugin {name!r}"))

    def names(self) -> list[str]:
        return sorted(self._plugins)

    def __contains__(self, name: str) -> bool:
        return name in self._plugins


REGISTRY = PluginRegistry()


def default_devices(state: CellState, row: int, req: Request) -> list[int]:
    """Best-fit devices: a shared task goes on the device with the least free milli that
    still fits it (lowest index on ties); a whole-GPU task takes the lowest-index devices
    with at least ``gpu_milli`` free."""
    if req.kind == "cpu":
        return []
    g = state.gpu_free[row].tolist()           # a handful of devices: a list beats numpy calls
    milli = req.gpu_milli
    fit = [d for d, free in enumerate(g) if free >= milli]
    if req.kind == "shared":
        return [min(fit, key=g.__getitem__)] if fit else []       # the first of the least free
    return fit[: req.gpu_count] if len(fit) >= req.gpu_count else []


# --------------------------------------------------------------------------- profile
TIE_BREAKS = ("random", "name", "first")

@dataclass
class Profile:
    """An enabled set of plugins with weights, and the tie-break rule.

    ``tie_break``: ``"random"`` (seeded draw among the top-scored nodes, as the
    Kubernetes scheduler does), ``"name"`` (the lexicographically smallest node id, as
    the FGD paper's simulator does: its patched kube-scheduler picks that "for
    reproducibility"), ``"first"`` (lowest row) or the name of an enabled plugin whose
    score orders the tied nodes (remaining ties: lowest row).
    """
    filters: list[Plugin]
    scorers: list[tuple[Plugin, float]]
    others: list[Plugin] = field(default_factory=list)
    tie_break: str = "random"
    top_k: int = 5
    secondary: dict[str, Plugin] = field(default_factory=dict)
    # How the top_k provenance candidates are chosen among equal scores. False (legacy):
    # numpy's argpartition, whose choice among ties depends on the CPU's SIMD (AVX-512
    # and AVX2 builds pick different rows), so a log's candidate lists may not verify on
    # another machine. True: the k best by (score desc, row asc), the same everywhere and
    # cheaper (usually read off the rows tied for the best score). Strategy versions set it;
    # changing it changes decisions' bytes.
    stable_candidates: bool = False

    @classmethod
    def build(cls, registry: PluginRegistry, filters: list[Any], scorers: list[Any],
              tie_break: str = "random", top_k: int = 5, others: list[Any] = (),
              secondary: list[Any] = ()) -> "Profile":
        """A profile from entries that are a plugin name or ``{"name", "args", "weight"}``
        (``args``: the plugin's ``Args`` or its JSON object, default none; ``weight``
        default 1, scorers only)."""
        def make(entry: Any) -> tuple[Plugin, float]:
            if isinstance(entry, str):
                return registry.create(entry), 1.0
            weight = float(entry["weight"]) if "weight" in entry else 1.0
            return registry.create(entry["name"], entry.get("args")), weight

        fs = [make(e)[0] for e in filters]
        ss = [make(e) for e in scorers]
        os_ = [make(e)[0] for e in others]
        sec = {p.name: p for p, _ in map(make, secondary)}
        return cls(fs, ss, os_, tie_break, top_k, sec)

    def __post_init__(self) -> None:
        if self.tie_break not in TIE_BREAKS and self.tie_break not in self.secondary:
            raise StrategyError(
                f"unknown tie_break {self.tie_break!r}: use one of {', '.join(TIE_BREAKS)} "
                f"or a secondary scorer ({', '.join(self.secondary) or 'none configured'})")
        self._index()

    def _index(self) -> None:
        """Per extension point, the enabled plugins that implement it (cycle order)."""
        allp = self.all_plugins()
        self.by_point = {pt: [p for p in allp if _implements(type(p), pt)]
                         for pt in ("pre_filter", "select_devices", "permit")}
        # reserve walks every plugin with reserve or unreserve, so that a rollback reaches both
        self.by_point["reserve"] = [p for p in allp if _implements(type(p), "reserve")
                                    or _implements(type(p), "unreserve")]
        self.scorer_names = "+".join(p.name for p, _ in self.scorers) or "none"

    def all_plugins(self) -> list[Plugin]:
        return [*self.filters, *(p for p, _ in self.scorers), *self.others]


def _normalize(s: np.ndarray) -> np.ndarray:
    """Kubernetes/simulator min-max: (s - lo) * 100 // (hi - lo), 0 when all equal."""
    si = s.astype(np.int64)
    lo, hi = si.min(), si.max()
    if hi == lo:
        return np.zeros_like(si, dtype=np.float64)
    return ((si - lo) * 100 // (hi - lo)).astype(np.float64)


def _avoid_bad_conditions(state: CellState, alive: np.ndarray,
                          filtered: list[tuple[str, int, list[int]]], ctx: Optional[CycleContext] = None) -> None:
    """Telemetry conditions (HOT, CONGESTED, DEGRADED, from NodeConditionChanged): after the
    filters, drop the feasible nodes in a bad condition while feasible NORMAL nodes remain,
    each condition as its own filter reason ("node HOT (telemetry)"). When only bad ones are
    left they stay: a hot node is better than no node. No effect when all are NORMAL.

    With profiles on (``processors/profiler.py``), a task whose signature's runs were
    measured light on IO (``io_intensity`` below ``profiles.io_heavy``) does not mind a
    CONGESTED node (congestion is of its network or disks): only IO-heavy tasks, and tasks
    not measured yet, are kept off it."""
    # every node NORMAL (the usual case): known without a pass while no condition changed
    if state.derived_recent("all-normal", (state.condition_gen, state.n_nodes),
                            lambda: bool(state.condition_ok.all()), keep=4):
        return
    bad = alive & ~state.condition_ok
    if not bad.any():
        return
    if ctx is not None and _tolerates_congestion(ctx):
        bad &= np.array([c != "CONGESTED" for c in state.condition[: bad.size]], dtype=bool)
        if not bad.any():
            return
    if not (alive & ~bad).any():
        return
    rows = np.flatnonzero(bad)
    for cond in sorted({state.condition[r] for r in rows.tolist()}):
        these = rows[[state.condition[r] == cond for r in rows.tolist()]]
        filtered.append((f"node {cond} (telemetry)", int(these.size), these[:3].tolist()))
    alive &= ~bad


def _tolerates_congestion(ctx: CycleContext) -> bool:
    """Whether the task's profile says CONGESTED nodes do it no harm (see above)."""
    prof = ctx.profile
    if prof is None or prof.history_level == "prior" or prof.io_read_mib_s + prof.io_write_mib_s + prof.net_mib_s == 0:
        return False
    from .core import policy_strategy          # core imports this module
    return prof.io_intensity < policy_strategy(ctx.state).args.profiles.io_heavy


def stable_top(total: np.ndarray, k: int, tied: np.ndarray) -> np.ndarray:
    """The ``k`` (< len(total)) positions with the highest ``total``, equal values by lowest
    position; ``tied``: the positions of the maximum, ascending. Usually ``k`` or more
    nodes tie for the best score and the answer is their first ``k``; otherwise the k-th
    largest *value* (which no selection algorithm can disagree on) splits the rest."""
    if tied.size >= k:
        return tied[:k]
    n = total.size
    kth = np.partition(total, n - k)[n - k]
    above = (total > kth).nonzero()[0]
    return np.concatenate([above, (total == kth).nonzero()[0][: k - above.size]])


def total_score(scorers: list[tuple[Plugin, float]], ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
    """The weighted sum of ``scorers`` over ``rows`` (each normalised first if its plugin
    asks to be): what a cycle ranks the feasible nodes by."""
    parts = []
    for p, _ in scorers:
        s = p.score(ctx, rows)
        parts.append(_normalize(s) if p.normalize else s)
    total = np.empty(rows.size, dtype=np.float64)
    if compiled.KERNELS is not None and compiled.KERNELS.weighted_total(parts, [w for _, w in scorers], total):
        return total        # the loop below, in one call (kernels/src/cycle.rs): the same bits
    total.fill(0.0)
    for (_, w), s in zip(scorers, parts):
        total += w * s if w != 1.0 else s
    return total


# below this many feasible rows a cycle scores every row: finding the classes would cost
# about what it saves
CLASS_SCORING_MIN_ROWS = 64


def class_scores(scorers: list[tuple[Plugin, float]], ctx: CycleContext, rows: np.ndarray
                 ) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """``(values, slot)`` with ``values[slot]`` equal to ``total_score(scorers, ctx, rows)``
    element for element: the totals of the node classes among ``rows`` and each row's class
    position when every scorer says its score is a function of the class
    (``Plugin.per_class``); ``(the totals of every row, None)`` without the kernels, with a
    scorer that reads more of a node, with few rows, or when the classes are more than half
    the rows.

    The classes' first rows (ascending, as ``rows`` is) are scored. The arithmetic per
    element is the same (the weighted sum in the same order; a normalised scorer's min and
    max are over the same set of values), so the totals are the same bits."""
    if compiled.KERNELS is None or rows.size < CLASS_SCORING_MIN_ROWS:
        return total_score(scorers, ctx, rows), None
    for p, _ in scorers:
        if not p.per_class(ctx):
            return total_score(scorers, ctx, rows), None
    nc = node_classes(ctx.state)
    n = rows.size
    reps, slot = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    k = compiled.KERNELS.class_rows(nc.ids, compiled.int64_rows(rows), nc.scratch(), reps, slot)
    if 2 * k > n:
        return total_score(scorers, ctx, rows), None
    return total_score(scorers, ctx, reps[:k]), slot


def _filter_pass_compiled(masks: list[tuple[np.ndarray, str]], n: int
                          ) -> tuple[Optional[np.ndarray], list[tuple[str, int, list[int]]], Optional[np.ndarray]]:
    """``run_cycle``'s filter loop by the kernel (``kernels/src/cycle.rs`` ``filter_pass``):
    the alive rows, the filtered list, the same as the loop's (alive all true when no mask
    dropped a row), and the alive rows' positions (``alive.nonzero()[0]``). ``(None, [],
    None)`` when a mask is not a contiguous bool array of ``n`` rows: the caller's loop
    takes it then."""
    alive = np.empty(n, dtype=bool)
    samples = np.empty((len(masks), 3), dtype=np.int64)
    rows = np.empty(n, dtype=np.int64)
    try:
        nf, drops = compiled.KERNELS.filter_pass([m for m, _ in masks], alive, samples, rows)
    except (BufferError, ValueError):
        return None, [], None
    if not drops:
        return alive, [], rows[:nf]
    first = samples.tolist()          # one conversion for every filter's sample
    return alive, [(masks[i][1], k, first[i][:k]) for i, k in drops], rows[:nf]


def _rank_compiled(total: np.ndarray, k: int) -> Optional[tuple[np.ndarray, list[int]]]:
    """(the positions of the best score, ascending; the ``k`` best positions by (score
    desc, position asc)) by the kernel (``kernels/src/cycle.rs`` ``rank_scores``); None
    for a NaN score, whose numpy path the caller keeps."""
    tied = np.empty(total.size, dtype=np.int64)
    best = np.empty(max(k, 1), dtype=np.int64)
    nt, nb = compiled.KERNELS.rank_scores(total, k, tied, best)
    if nt == 0:
        return None
    return tied[:nt], best[:nb].tolist()


def _rank_classes(values: np.ndarray, slot: np.ndarray, k: int) -> Optional[tuple[np.ndarray, list[int]]]:
    """``_rank_compiled``'s answer for the scores ``values[slot]``, by the kernel
    (``rank_classes``) without spreading them over the rows; None for a NaN score."""
    tied, best = np.empty(slot.size, dtype=np.int64), np.empty(max(k, 1), dtype=np.int64)
    nt, nb = compiled.KERNELS.rank_classes(values, slot, k, tied, best)
    if nt == 0:
        return None
    return tied[:nt], best[:nb].tolist()


def run_cycle(profile: Profile, ctx: CycleContext) -> CycleResult:
    """One scheduling cycle for one task. Pure: reads ``ctx.state``, changes nothing."""
    state = ctx.state
    path: list[str] = []
    bp = profile.by_point
    for p in bp["pre_filter"]:
        st = p.pre_filter(ctx)
        if not st.ok:
            path.append(f"pre-filter: {p.name}: {st.reason}")
            return CycleResult(Status(st.code, st.reason, p.name), None, [], [], 0, path)
    path.append("pre-filter: ok")

    n = state.n_nodes
    # The kernel makes the pass in one sweep per mask. The loop below is its reference:
    # ``alive`` is None while no filter has dropped a node (every row alive); ``left`` counts
    # its rows, so a filter costs one ``&`` and one count, and the dropped rows are only
    # found for a filter that dropped some (``.nonzero()[0]`` is ``np.flatnonzero`` for 1-D)
    alive: Optional[np.ndarray] = None
    left = n
    filtered: list[tuple[str, int, list[int]]] = []
    masks = [out for out in (p.filter(ctx) for p in profile.filters) if out is not None]
    if ctx.allowed is not None:
        masks.append((ctx.allowed, ctx.allowed_reason))
    rows: Optional[np.ndarray] = None
    if compiled.KERNELS is not None:
        alive, filtered, rows = _filter_pass_compiled(masks, n)
    if alive is None:                       # no kernel, or a mask it does not take
        for mask, reason in masks:
            kept = mask.astype(bool) if alive is None else alive & mask   # a copy: a mask may be the state's own
            now = int(np.count_nonzero(kept))
            if now < left:
                drop = ~kept if alive is None else alive & ~kept
                filtered.append((reason, left - now, drop.nonzero()[0][:3].tolist()))
                alive, left = kept, now
    if alive is None:
        alive = np.ones(n, dtype=bool)
    reasons = len(filtered)
    _avoid_bad_conditions(state, alive, filtered, ctx)
    if rows is None or len(filtered) > reasons:       # no kernel, or telemetry dropped some
        rows = alive.nonzero()[0]
    nf = int(rows.size)
    detail = ", ".join(f"{r}: {k}" for r, k, _ in filtered)
    path.append(f"filter: {n} nodes -> {nf} feasible" + (f" ({detail})" if detail else ""))
    if nf == 0:
        reason = filtered[0][0] if filtered else "no nodes"
        return CycleResult(Status(Code.UNSCHEDULABLE, reason), None, filtered, [], 0, path)

    values, slot = class_scores(profile.scorers, ctx, rows)
    k = min(profile.top_k, nf)
    # Scored per class, the rows' scores are ``values[slot]``; they are spread into ``total``
    # only for a path below that reads every row's (a NaN score, legacy candidates).
    total: Optional[np.ndarray] = values if slot is None else None
    if slot is not None:                    # scored per class (so the kernels are built)
        ranked = _rank_classes(values, slot, k)
    else:
        ranked = _rank_compiled(values, k) if compiled.KERNELS is not None else None
    if ranked is not None:
        tied, best = ranked
    else:
        total = values if slot is None else values[slot]
        tied, best = (total == total.max()).nonzero()[0], None
    if tied.size == 1:
        pick = int(tied[0])
    elif profile.tie_break == "random":
        pick = int(tied[rng.draw(int(tied.size), ctx.seed, 0x71E)])
    elif profile.tie_break == "name":
        # each row's position in node-id order (ids never change; rows are only appended)
        rank = state.derived(("name-rank", state.n_nodes),
                             lambda: np.argsort(np.argsort(np.array(state.node_ids))))
        pick = int(tied[np.argmin(rank[rows[tied]])])
    elif profile.tie_break in profile.secondary:
        sec = profile.secondary[profile.tie_break].score(ctx, rows[tied])
        pick = int(tied[int(np.argmax(sec))])
    else:
        pick = int(tied[0])
    row = int(rows[pick])

    # provenance candidates: top-K by score (ties: chosen first, then lowest row)
    if best is not None and (profile.stable_candidates or nf <= k):
        # the kernel's k best by (score desc, row asc) are stable_top's set (or every row)
        # in the order the sort below gives them: the chosen row leads, displacing the last
        order = [pick, *[i for i in best if i != pick][:max(k - 1, 0)]]
    else:
        if total is None:
            total = values[slot]
        if nf <= k:
            idx = np.arange(nf)
        elif profile.stable_candidates:
            idx = stable_top(total, k, tied)
        else:
            idx = np.argpartition(-total, k - 1)[:k]
        order = sorted((int(i) for i in idx), key=lambda i: (i != pick, -total[i], i))
        if pick not in order:
            order = [pick] + order[:-1]
    score_of = values.__getitem__ if slot is None else (lambda i: values[slot[i]])
    cands = [(int(rows[i]), float(score_of(i))) for i in order]
    names = profile.scorer_names
    path.append(f"score: {names} top={state.node_ids[row]} ({score_of(pick):g}); "
                f"{tied.size} tied, tie-break {profile.tie_break}")

    devices = None
    for p in bp["select_devices"]:
        devices = p.select_devices(ctx, row)
        if devices is not None:
            break
    if devices is None:
        devices = default_devices(state, row, ctx.req)
    plan = Plan(row, state.node_ids[row], devices)
    if devices:
        path.append(f"reserve gpu{devices} {ctx.req.gpu_milli} milli")
    reserved: list[Plugin] = []
    for p in bp["reserve"]:
        st = p.reserve(ctx, plan)
        if not st.ok:
            for q in reversed(reserved):
                q.unreserve(ctx, plan)
            path.append(f"reserve: {p.name}: {st.reason}")
            return CycleResult(Status(st.code, st.reason, p.name), None, filtered, cands, nf, path)
        reserved.append(p)
    for p in bp["permit"]:
        st = p.permit(ctx, plan)
        if not st.ok:
            for q in reversed(reserved):
                q.unreserve(ctx, plan)
            path.append(f"permit: {p.name}: {st.reason}")
            return CycleResult(Status(st.code, st.reason, p.name), None, filtered, cands, nf, path)
    path.append(f"bind {plan.node_id}")
    return CycleResult(OK, plan, filtered, cands, nf, path)
