"""The elastic policy in the core: a job's rounds resize it (JobResized), from the cell
state alone, so replay decides the same (processors/elastic_jobs.py)."""
from __future__ import annotations

import json

from core_helpers import Feed

from suanli.processors import CellState
from suanli.processors.elastic import ElasticArgs, elastic_label

POLICY = elastic_label(ElasticArgs(min_clients=2, max_clients=6, window=2, plateau=0.01), 32)


def _submit(f: Feed, tid: str, job: str, labels: dict, cpu: int = 1000, qos: str = "SILVER", at: int = 1):
    return f.send("TaskSubmitted", {"task_id": tid, "tenant": "t", "cell": "test", "submitted_at": at,
                                    "resources": {"cpu_milli": cpu, "memory_mib": 1024, "gpu_count": 0,
                                                  "gpu_milli": 0, "gpu_models": []},
                                    "qos_tier": qos, "labels": labels, "job_id": job or None})


def _round(f: Feed, job: str, n: int, loss: float | None, aggregated: bool = True):
    return f.send("JobRound", {"event_id": f"{job}:round:{n}", "job_id": job, "tenant": "t", "cell": "test",
                               "round": n, "loss": loss, "accuracy": None, "aggregated": aggregated,
                               "at": 10_000_000 + n})          # the reporter's clock: not cell time


def _job(f: Feed, job: str = "j", policy: str | None = POLICY):
    """One node of 8 CPUs at site s; two clients of 1 CPU and the aggregator (1 CPU): 5 slots free."""
    f.node("n1", cpu=8000)
    for i in range(2):
        _submit(f, f"{job}-c{i}", job, {"federated-role": "client", "data-site": "s"})
    labels = {"federated-role": "aggregator", **({"elastic": policy} if policy else {})}
    _submit(f, f"{job}-agg", job, labels)


def _resizes(outs):
    return [p for k, p in outs if k == "JobResized"]


def test_an_improving_job_grows_on_free_slots_then_shrinks_when_gold_work_waits():
    f = Feed()
    _job(f)
    assert not _resizes(_round(f, "j", 1, 2.0)) and not _resizes(_round(f, "j", 2, 1.5))   # no trend yet
    grow = _resizes(_round(f, "j", 3, 1.0))
    assert len(grow) == 1
    g = grow[0]
    assert (g["action"], g["clients_from"], g["clients_to"], g["batch_size_from"], g["batch_size_to"]) == \
        ("grow", 2, 6, 32, 32)
    assert (g["task_id"], g["job_id"], g["tenant"], g["round"]) == ("j-agg", "j", "t", 3)
    assert "5 slots free" in g["reason"] and "grow 2 -> 6" in g["reason"]
    path = g["provenance"]["path"]
    assert path[0].startswith("job j round 3: 2 clients (2 running), batch 32") and "5 client slots free" in path[0]
    assert path[1].startswith("grow: ")
    assert g["at"] == f.state.now                  # cell time, not the reporter's clock
    # gold work that cannot be placed waits; the next round gives it the job's slots
    _submit(f, "gold-1", "", {}, cpu=6000, qos="GOLD", at=2)
    assert f.state.tasks["gold-1"].status == "PENDING"
    shrink = _resizes(_round(f, "j", 4, 0.9))
    assert [(s["action"], s["clients_from"], s["clients_to"]) for s in shrink] == [("shrink", 6, 5)]
    assert "1 gold tasks wait" in shrink[0]["reason"]


def test_a_plateau_raises_the_batch_size_and_a_rising_loss_lowers_it():
    f = Feed()
    _job(f)
    f.node("n1", cpu=3000)                        # re-registered full: no slot to grow into
    for n, loss in enumerate((1.0, 1.0, 1.0), start=1):
        outs = _resizes(_round(f, "j", n, loss))
    assert [(o["action"], o["clients_to"], o["batch_size_from"], o["batch_size_to"]) for o in outs] == \
        [("hold", 2, 32, 64)]
    assert "plateau" in outs[0]["reason"]
    rise = _resizes(_round(f, "j", 4, 2.0))
    assert [(o["batch_size_from"], o["batch_size_to"]) for o in rise] == [(64, 32)]


def test_repeated_rounds_jobs_without_the_label_and_bad_labels_change_nothing():
    f = Feed()
    _job(f, "j")
    for n in (1, 2, 3):
        _round(f, "j", n, 3.0 - n)
    assert _resizes(_round(f, "j", 3, 0.5)) == []              # a re-sent round: a duplicate
    g = Feed()
    _job(g, "k", policy=None)
    assert all(_resizes(_round(g, "k", n, 3.0 - n)) == [] for n in (1, 2, 3, 4))
    assert g.state.elastic == {}
    h = Feed()
    _job(h, "b", policy='{"min_clients": 0}')
    assert all(_resizes(_round(h, "b", n, 3.0 - n)) == [] for n in (1, 2, 3, 4))


def test_the_book_survives_a_snapshot_and_replay_decides_the_same():
    def run(snapshot_at: int | None):
        f = Feed()
        _job(f)
        outs = []
        for n, loss in enumerate((2.0, 1.5, 1.0, 0.9, 0.85, 0.84, 0.84), start=1):
            if n == 5:
                _submit(f, "gold-1", "", {}, cpu=6000, qos="GOLD", at=2)
            if snapshot_at == n:
                f.state = CellState.from_snapshot(json.loads(json.dumps(f.state.to_snapshot())))
            outs += _resizes(_round(f, "j", n, loss))
        return outs, f.state.elastic
    first, book = run(None)
    # (no runner acts here: the gold task keeps waiting, and each round gives up one more slot)
    assert [(o["action"], o["clients_to"]) for o in first] == [("grow", 6), ("shrink", 5), ("shrink", 4),
                                                               ("shrink", 3)]
    assert run(None) == (first, book)
    assert run(4) == (first, book)
    assert book["j"]["clients"] == 3 and book["j"]["losses"] == [0.85, 0.84, 0.84]
