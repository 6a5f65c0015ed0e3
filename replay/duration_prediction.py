"""Duration prediction, measured on the openb trace replayed in time order (issue 20, C9).

Run: ``python -m suanli.replay.duration_prediction [--pods CSV] [--json OUT] [--quiet]``.

**Truth.** A task's duration = ``deletion_time - scheduled_time`` (s → ms). Tasks without
both (openb: the Pending pods, never scheduled) are skipped and counted. A Running pod whose
``deletion_time`` equals the trace's last deletion time is **censored** (it was still
running when the trace was cut; its true duration is longer than the one shown): it is
neither scored nor learnt from, and counted. Failed pods are kept: they held their slot for
that long, which is what the scheduler needs to predict.

**Replay.** Events merged in time order: a task's *arrival* at ``creation_time`` (every
predictor is asked about it then) and its *completion* at ``deletion_time`` (its duration
is learnt then, never earlier). At equal times arrivals go first, so a prediction only
uses completions strictly before the arrival; ties between tasks keep trace order.

**Declared estimate (synthetic).** openb has no user estimate, and ``replay/openb.py`` puts
the *true* duration in ``duration_estimate_ms`` (an oracle, never used here). Following
Tsafrir, Etsion & Feitelson ("Modeling user runtime estimates", JSSPP 2005) — users pick
a few round values, well above the actual run time — the declared estimate is the true
duration rounded **up** to the next of :data:`ROUND_LIMITS_S` (5, 15, 30 min, 1, 2, 4, 8,
12, 24, 48 h, 7, 30, 180 d). ``lazy_share`` (default 0) makes a deterministic share of
tasks (by CRC32 of the name) declare the next limit at or above 24 h instead, like users
who always ask for the queue's default; it is reported as a sensitivity run at 0.3.
This model flatters any predictor that *uses* the declared value: the estimate is never
below the truth and is the truth's bin, so ``declared × learnt ratio`` is close to an
oracle of the bin (real estimates are noisier, sometimes too low). It hurts the declared
estimate *as a prediction* less than real users would (real over-estimates are often several-fold;
here at most the gap to the next limit), so baseline (a) is, if anything, too good.

**Predictors.** (a) the declared estimate; (b) the signature's running mean (mean of that
signature's completed tasks so far; with none yet, the global running mean; with no
completion at all, 0); (c) :class:`suanli.processors.duration_model.DurationPredictor`
(default config). The ablation runs (c) with features added one at a time.

**Metrics** over the scored tasks: MAE in minutes, median and p90 relative error
``|pred - actual| / actual`` (numpy's linear-interpolation percentiles).
"""
from __future__ import annotations

import argparse
import csv
import json
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol, Sequence

import numpy as np

from suanli.errors import ReplayError
from suanli.processors.duration_model import DurationConfig, DurationFeatures, DurationPredictor

from .openb import QOS_TIER

DEFAULT_PODS = "/work/shared/data/openb/openb_pod_list_default.csv"
ROUND_LIMITS_S = (300, 900, 1800, 3600, 7200, 14400, 28800, 43200, 86400, 172800,
                  604800, 2592000, 15552000)
LAZY_FLOOR_S = 86400
TENANT = "openb"

# The ablation: features added one at a time; the last row is the default predictor (c).
ABLATION: tuple[tuple[str, DurationConfig], ...] = (
    ("signature median, no qos", DurationConfig(levels=("signature", "global"), prior=0.0, use_qos=False,
                                                use_declared=False)),
    ("+ qos in signature", DurationConfig(levels=("signature", "global"), prior=0.0, use_declared=False)),
    ("+ back-off (shape, gpu-class) and shrinkage", DurationConfig(use_declared=False)),
    ("+ time of day", DurationConfig(use_declared=False, time_of_day=True)),
    ("+ declared ratio (no time of day)", DurationConfig()),
    ("+ declared ratio + time of day", DurationConfig(time_of_day=True)),
)
DEFAULT_CONFIG = DurationConfig()


def declared_estimate(true_ms: int, name: str = "", lazy_share: float = 0.0) -> int:
    """The synthetic user estimate: ``true_ms`` rounded up to the next round limit (the last
    limit when beyond them all); a ``lazy_share`` of names asks for >= 24 h regardless."""
    floor_s = 0
    if lazy_share > 0 and (zlib.crc32(name.encode()) % 10_000) < lazy_share * 10_000:
        floor_s = LAZY_FLOOR_S
    for lim in ROUND_LIMITS_S:
        if lim * 1000 >= true_ms and lim >= floor_s:
            return lim * 1000
    return ROUND_LIMITS_S[-1] * 1000


@dataclass(frozen=True)
class Task:
    """One scored pod: what is known at arrival, and the truth."""

    name: str
    arrive_ms: int
    complete_ms: int
    duration_ms: int
    features: DurationFeatures


@dataclass(frozen=True)
class Trace:
    tasks: tuple[Task, ...]
    total: int
    skipped_no_times: int
    censored: int


def _int(v: Optional[str]) -> Optional[int]:
    return None if v is None or v.strip() == "" else int(float(v))


def load(path: str | Path, lazy_share: float = 0.0) -> Trace:
    """Read an openb pod list into scored tasks (see the module docstring for what is kept)."""
    try:
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise ReplayError(f"cannot read the pod list {path}: {e}") from e
    if rows and "deletion_time" not in rows[0]:
        raise ReplayError(f"{path} has no times (creation/deletion/scheduled_time): cannot measure durations")
    ends = [d for d in (_int(r.get("deletion_time")) for r in rows) if d is not None]
    trace_end = max(ends) if ends else None
    tasks, skipped, censored = [], 0, 0
    for r in rows:
        created, deleted, sched = (_int(r.get(k)) for k in ("creation_time", "deletion_time", "scheduled_time"))
        if created is None or deleted is None or sched is None or deleted < sched:
            skipped += 1
            continue
        if deleted == trace_end and (r.get("pod_phase") or "").strip() == "Running":
            censored += 1
            continue
        dur = max(1, (deleted - sched) * 1000)
        num = _int(r.get("num_gpu")) or 0
        spec = (r.get("gpu_spec") or "").strip()
        feats = DurationFeatures(
            tenant=TENANT, program="", cpu_milli=_int(r.get("cpu_milli")) or 0,
            memory_mib=_int(r.get("memory_mib")) or 0, gpu_count=num,
            gpu_milli=(_int(r.get("gpu_milli")) or 0) if num > 0 else 0,
            gpu_models=tuple(m for m in spec.split("|") if m),
            qos_tier=QOS_TIER.get((r.get("qos") or "").strip(), "SILVER"),
            declared_ms=declared_estimate(dur, r["name"], lazy_share), submitted_at=created * 1000)
        tasks.append(Task(r["name"], created * 1000, deleted * 1000, dur, feats))
    return Trace(tuple(tasks), len(rows), skipped, censored)


def events(tasks: Sequence[Task]) -> list[tuple[int, int, int]]:
    """``(time_ms, kind, index)``, kind 0 = arrival, 1 = completion, in replay order:
    by time, arrivals before completions at the same time, then trace order."""
    ev = [(t.arrive_ms, 0, i) for i, t in enumerate(tasks)] + [(t.complete_ms, 1, i) for i, t in enumerate(tasks)]
    ev.sort()
    return ev


class Predictor(Protocol):
    def predict(self, f: DurationFeatures) -> int: ...
    def observe(self, f: DurationFeatures, duration_ms: int) -> None: ...


class Declared:
    """(a) The user's declared estimate, as is."""

    def predict(self, f: DurationFeatures) -> int:
        return f.declared_ms or 0

    def observe(self, f: DurationFeatures, duration_ms: int) -> None:
        pass


class SignatureMean:
    """(b) The running mean of the signature's completed tasks; else the global running
    mean; else 0. Counts how often each fallback answered."""

    def __init__(self) -> None:
        self.sums: dict[str, tuple[int, int]] = {}
        self.g_n = self.g_sum = 0
        self.fell_back_global = self.no_history = 0

    def predict(self, f: DurationFeatures) -> int:
        s = self.sums.get(f.signature)
        if s:
            return round(s[1] / s[0])
        if self.g_n:
            self.fell_back_global += 1
            return round(self.g_sum / self.g_n)
        self.no_history += 1
        return 0

    def observe(self, f: DurationFeatures, duration_ms: int) -> None:
        n, s = self.sums.get(f.signature, (0, 0))
        self.sums[f.signature] = (n + 1, s + duration_ms)
        self.g_n += 1
        self.g_sum += duration_ms


class Model:
    """(c) The duration model behind the :class:`Predictor` protocol; counts sources and time."""

    def __init__(self, config: DurationConfig) -> None:
        self.p = DurationPredictor(config)
        self.sources: dict[str, int] = {}
        self.predict_s = self.observe_s = 0.0

    def predict(self, f: DurationFeatures) -> int:
        t0 = time.perf_counter()
        pr = self.p.predict(f)
        self.predict_s += time.perf_counter() - t0
        self.sources[pr.source] = self.sources.get(pr.source, 0) + 1
        return pr.duration_ms

    def observe(self, f: DurationFeatures, duration_ms: int) -> None:
        t0 = time.perf_counter()
        self.p.observe(f, duration_ms)
        self.observe_s += time.perf_counter() - t0


def replay(tasks: Sequence[Task], predictors: Sequence[Predictor]) -> np.ndarray:
    """Replay ``tasks`` in time order through every predictor; ``preds[j, i]`` is predictor
    j's answer for task i at its arrival."""
    preds = np.zeros((len(predictors), len(tasks)), dtype=np.float64)
    for _t, kind, i in events(tasks):
        f = tasks[i].features
        for j, p in enumerate(predictors):
            if kind == 0:
                preds[j, i] = p.predict(f)
            else:
                p.observe(f, tasks[i].duration_ms)
    return preds


def metrics(pred: np.ndarray, actual: np.ndarray) -> dict[str, Any]:
    """MAE (minutes), median and p90 relative error, count."""
    err = np.abs(pred - actual)
    rel = err / actual
    return {"n": int(len(actual)), "mae_min": round(float(err.mean()) / 60_000, 3),
            "median_rel_err": round(float(np.percentile(rel, 50)), 4),
            "p90_rel_err": round(float(np.percentile(rel, 90)), 4)}


def evaluate(path: str | Path, lazy_share: float = 0.0, ablation: bool = True) -> dict[str, Any]:
    """Every figure of the report, as a JSON-ready dict."""
    trace = load(path, lazy_share)
    if not trace.tasks:
        raise ReplayError(f"{path}: no task with both a scheduled and a deletion time")
    actual = np.array([t.duration_ms for t in trace.tasks], dtype=np.float64)
    sig_mean, model = SignatureMean(), Model(DEFAULT_CONFIG)
    rows = list(ABLATION) if ablation else []
    abl = [Model(c) for _name, c in rows]
    preds = replay(trace.tasks, [Declared(), sig_mean, model, *abl])
    first_completion = min(t.complete_ms for t in trace.tasks)
    n = len(trace.tasks)
    out: dict[str, Any] = {
        "trace": {"pods": trace.total, "skipped_no_scheduled_or_deletion_time": trace.skipped_no_times,
                  "censored_running_at_trace_end": trace.censored, "scored": n,
                  "arrived_before_any_completion": int(sum(t.arrive_ms <= first_completion for t in trace.tasks)),
                  "signatures": len({t.features.signature for t in trace.tasks}),
                  "duration_s_p50": float(np.percentile(actual, 50)) / 1000,
                  "duration_s_p90": float(np.percentile(actual, 90)) / 1000,
                  "duration_s_max": float(actual.max()) / 1000},
        "declared_model": {"round_limits_s": list(ROUND_LIMITS_S), "lazy_share": lazy_share,
                           "lazy_floor_s": LAZY_FLOOR_S, "synthetic": True},
        "results": {
            "declared": metrics(preds[0], actual),
            "signature_mean": {**metrics(preds[1], actual), "fell_back_to_global_mean": sig_mean.fell_back_global,
                               "no_history_predicted_0": sig_mean.no_history},
            "predictor": {**metrics(preds[2], actual), "config": DEFAULT_CONFIG.to_json(),
                          "sources": dict(sorted(model.sources.items())),
                          "predict_us_mean": round(model.predict_s / n * 1e6, 2),
                          "observe_us_mean": round(model.observe_s / n * 1e6, 2),
                          "keys_held": model.p.size()}},
        "ablation": [{"features": name, **metrics(preds[3 + k], actual), "config": c.to_json()}
                     for k, (name, c) in enumerate(rows)],
    }
    r = out["results"]
    out["beats_both"] = {m: r["predictor"][m] < min(r["declared"][m], r["signature_mean"][m])
                         for m in ("mae_min", "median_rel_err", "p90_rel_err")}
    return out


def table(res: dict[str, Any]) -> str:
    """The report as plain text."""
    t = res["trace"]
    lines = [f"openb duration prediction: {t['scored']} scored of {t['pods']} pods "
             f"({t['skipped_no_scheduled_or_deletion_time']} without scheduled/deletion time skipped, "
             f"{t['censored_running_at_trace_end']} censored: running at trace end); "
             f"declared estimate synthetic (lazy share {res['declared_model']['lazy_share']})",
             f"{'predictor':48} {'n':>6} {'MAE min':>9} {'med rel':>8} {'p90 rel':>8}"]
    def row(name: str, m: dict[str, Any]) -> str:
        return f"{name:48} {m['n']:>6} {m['mae_min']:>9.2f} {m['median_rel_err']:>8.3f} {m['p90_rel_err']:>8.3f}"
    names = {"declared": "(a) declared estimate", "signature_mean": "(b) signature running mean",
             "predictor": "(c) duration predictor"}
    lines += [row(names[k], m) for k, m in res["results"].items()]
    sm = res["results"]["signature_mean"]
    lines.append(f"    (b) fell back to the global mean {sm['fell_back_to_global_mean']}x, "
                 f"no history at all {sm['no_history_predicted_0']}x; (c) sources {res['results']['predictor']['sources']}")
    if res["ablation"]:
        lines.append("ablation (c), features added one at a time:")
        lines += [row("  " + a["features"], a) for a in res["ablation"]]
    for key, s in res.get("sensitivity", {}).items():
        lines.append(f"sensitivity: {key}")
        lines += [row("  " + names[k], m) for k, m in s["results"].items()]
    lines.append(f"beats both naive predictors: {res['beats_both']}")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m suanli.replay.duration_prediction", description=__doc__.split("\n")[0])
    p.add_argument("--pods", default=DEFAULT_PODS, help="an openb pod list with times")
    p.add_argument("--json", default=None, help="write the figures here")
    p.add_argument("--lazy-share", type=float, default=0.0, help="share of tasks declaring >= 24 h (main run)")
    p.add_argument("--sensitivity-lazy-share", type=float, default=0.3,
                   help="also run (a)(b)(c) with this lazy share (negative: skip)")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    res = evaluate(args.pods, args.lazy_share)
    if args.sensitivity_lazy_share >= 0:
        s = evaluate(args.pods, args.sensitivity_lazy_share, ablation=False)
        res["sensitivity"] = {f"lazy_share={args.sensitivity_lazy_share}": {
            "results": {k: {m: v[m] for m in ("n", "mae_min", "median_rel_err", "p90_rel_err")}
                        for k, v in s["results"].items()}, "beats_both": s["beats_both"]}}
    cmd = ["python", "-m", "suanli.replay.duration_prediction", *(argv if argv is not None else sys.argv[1:])]
    res = {"command": " ".join(cmd), **res}
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n")
    if not args.quiet:
        print(table(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
