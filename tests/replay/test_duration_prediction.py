"""The duration-prediction evaluation (replay/duration_prediction.py) on a tiny hand-made trace."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from suanli.errors import ReplayError
from suanli.processors.duration_model import DurationFeatures
from suanli.replay import duration_prediction as dp

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
# One signature. p1 arrives while p0 runs; p2 arrives at the very second p0 completes (ties:
# the arrival goes first, so p2 must not see p0); p3 arrives after p0, p1, p2 completed.
ROWS = [
    "p0,4000,8192,1,500,,LS,Succeeded,0,1000,0",       # 1000 s
    "p1,4000,8192,1,500,,LS,Failed,10,410,10",         # 400 s, completes at 410
    "p2,4000,8192,1,500,,LS,Succeeded,1000,1600,1000", # 600 s
    "p3,4000,8192,1,500,,LS,Running,2000,2700,2000",   # 700 s (Running, but ended before the cut)
    "p4,4000,8192,1,500,,LS,Pending,2100,4000,",       # never scheduled: skipped
    "p5,4000,8192,1,500,,LS,Running,2200,5000,2200",   # running at the trace end (5000): censored
]
ACTUAL_S = np.array([1000, 400, 600, 700], dtype=float)


@pytest.fixture()
def pods(tmp_path: Path) -> Path:
    p = tmp_path / "pods.csv"
    p.write_text("\n".join([HEADER, *ROWS]) + "\n")
    return p


def test_declared_estimate_rounds_up_to_the_next_limit() -> None:
    assert dp.declared_estimate(1) == 300_000
    assert dp.declared_estimate(300_000) == 300_000
    assert dp.declared_estimate(300_001) == 900_000
    assert dp.declared_estimate(5 * 3_600_000) == 8 * 3_600_000
    assert dp.declared_estimate(10**12) == dp.ROUND_LIMITS_S[-1] * 1000   # beyond all: the last
    names = [f"pod-{i}" for i in range(1000)]
    lazy = [dp.declared_estimate(60_000, n, lazy_share=0.3) for n in names]
    share = sum(v == 86_400_000 for v in lazy) / len(names)
    assert 0.25 < share < 0.35 and set(lazy) == {300_000, 86_400_000}
    assert lazy == [dp.declared_estimate(60_000, n, lazy_share=0.3) for n in names]  # deterministic


def test_load_skips_and_censors_as_documented(pods: Path) -> None:
    tr = dp.load(pods)
    assert (tr.total, tr.skipped_no_times, tr.censored) == (6, 1, 1)
    assert [t.name for t in tr.tasks] == ["p0", "p1", "p2", "p3"]
    assert [t.duration_ms for t in tr.tasks] == [1_000_000, 400_000, 600_000, 700_000]
    assert [t.features.declared_ms for t in tr.tasks] == [1_800_000, 900_000, 900_000, 900_000]
    f = tr.tasks[0].features
    assert (f.qos_tier, f.gpu_count, f.gpu_milli, f.submitted_at, f.program) == ("GOLD", 1, 500, 0, "")


class Recorder:
    """A predictor that remembers, at each arrival, the completions it had been shown."""

    def __init__(self, tasks: list[dp.Task]) -> None:
        self.by_features = {id(t.features): t for t in tasks}
        self.seen: list[str] = []
        self.at_arrival: dict[str, list[str]] = {}

    def predict(self, f: DurationFeatures) -> int:
        self.at_arrival[self.by_features[id(f)].name] = list(self.seen)
        return 0

    def observe(self, f: DurationFeatures, duration_ms: int) -> None:
        self.seen.append(self.by_features[id(f)].name)


def test_history_never_sees_a_completion_before_it_happens(pods: Path) -> None:
    tasks = list(dp.load(pods).tasks)
    rec = Recorder(tasks)
    dp.replay(tasks, [rec])
    assert rec.at_arrival == {"p0": [], "p1": [], "p2": ["p1"], "p3": ["p1", "p0", "p2"]}
    by = {t.name: t for t in tasks}
    for name, seen in rec.at_arrival.items():
        assert all(by[s].complete_ms < by[name].arrive_ms for s in seen)


def test_predictions_use_only_the_past(pods: Path) -> None:
    tasks = dp.load(pods).tasks
    preds = dp.replay(tasks, [dp.Declared(), dp.SignatureMean(), dp.Model(dp.DEFAULT_CONFIG)])
    # (b): nothing completed before p0 and p1 (had p0 leaked in at its arrival, p1 would get
    # 1000 s); p2 knows only p1 (p0 completes at p2's arrival second); p3 knows all three.
    assert preds[1].tolist() == [0, 0, 400_000, round(2_000_000 / 3)]
    # (c): with no history, the declared value; p2 from p1 alone: 400 s, both by p1's duration
    # and by p1's ratio 400/900 applied to p2's declared 900 s.
    assert preds[2][0] == 1_800_000 and preds[2][1] == 900_000
    assert preds[2][2] == pytest.approx(400_000, abs=2)


def test_figures_are_computed_as_documented(pods: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    assert dp.main(["--pods", str(pods), "--json", str(out), "--quiet", "--sensitivity-lazy-share", "-1"]) == 0
    res = json.loads(out.read_text())
    assert res["command"].startswith("python -m suanli.replay.duration_prediction --pods")
    t = res["trace"]
    assert (t["pods"], t["scored"], t["skipped_no_scheduled_or_deletion_time"], t["censored_running_at_trace_end"],
            t["arrived_before_any_completion"]) == (6, 4, 1, 1, 2)
    a = res["results"]["declared"]
    # declared 1800, 900, 900, 900 s against 1000, 400, 600, 700 s
    err = np.array([800, 500, 300, 200.0])
    rel = err / ACTUAL_S
    assert a["n"] == 4
    assert a["mae_min"] == pytest.approx(err.mean() / 60, abs=1e-3)
    assert a["median_rel_err"] == pytest.approx(np.median(rel), abs=1e-4)
    assert a["p90_rel_err"] == pytest.approx(np.percentile(rel, 90), abs=1e-4)
    b = res["results"]["signature_mean"]
    err_b = np.abs(np.array([0, 0, 400, 2000 / 3]) - ACTUAL_S)
    assert b["mae_min"] == pytest.approx(err_b.mean() / 60, abs=1e-3)
    assert b["median_rel_err"] == pytest.approx(np.median(err_b / ACTUAL_S), abs=1e-4)
    assert (b["fell_back_to_global_mean"], b["no_history_predicted_0"]) == (0, 2)
    assert len(res["ablation"]) == len(dp.ABLATION)
    c = res["results"]["predictor"]
    assert sum(c["sources"].values()) == 4
    assert res["beats_both"]["mae_min"] == (c["mae_min"] < min(a["mae_min"], b["mae_min"]))


def test_a_trace_without_times_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "multigpu.csv"
    p.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\nx,1000,1024,2,1000\n")
    with pytest.raises(ReplayError):
        dp.load(p)
