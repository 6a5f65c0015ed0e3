"""A cell forgets its oldest finished tasks (processors/retention.py) and decides exactly as
if it had not: the same inputs, with and without forgetting (and across restores), give the
same decisions."""
from __future__ import annotations

import json
import random

import pytest
from core_helpers import Feed

from suanli.processors import state as state_module
from suanli.processors.elastic import ElasticArgs, elastic_label
from suanli.processors.plugins.fgd import shape_counts_through
from suanli.processors.state import TERMINAL, CellState

NODES = [("n0", 2, "T4"), ("n1", 4, "T4"), ("n2", 8, "V100"), ("n3", 0, ""), ("n4", 4, "V100")]


def _config(finished: int, ids: int = 1_000_000) -> dict:
    # FGD's observed histogram re-read every 7 arrivals, so its cutoffs fall behind tasks
    # that arrived, finished and were forgotten after them
    return {"seed": 3, "retry_every_ms": 0, "refresh_every": 7, "retention": {"finished_tasks": finished,
                                                                           "forgotten_ids": ids},
            "qos": {"grace_ms": 500, "batch_window_ms": 2_000}}


def _script(seed: int, steps: int = 600) -> list[tuple[str, dict]]:
    """A seeded mix of inputs: arrivals of every tier and shape (gangs, urgent and batch ones
    among them), completions, failures, cancellations, nodes going DOWN and back,
    heartbeats, ticks, duplicate submissions of old ids and stale reports of old tasks
    from other nodes. Node names in status reports are filled in at feed time."""
    rnd = random.Random(seed)
    out: list[tuple[str, dict]] = []
    at = 10
    n = 0
    for _ in range(steps):
        at += rnd.randint(1, 400)
        r = rnd.random()
        if r < 0.35 or n < 5:
            n += 1
            gpus = rnd.choice([0, 0, 1, 1, 2, 4])
            labels = {}
            if rnd.random() < 0.08:                       # gangs of two, their names reused
                labels.update({"gang": f"g{n % 3}", "gang-size": "2"})
            if rnd.random() < 0.05:
                labels["scheduling"] = rnd.choice(["urgent", "batch"])
            out.append(("task", {"tid": f"t{n}", "cpu": rnd.choice([500, 1000, 4000]), "gpus": gpus,
                                 "milli": rnd.choice([250, 500, 1000]) if gpus == 1 else (1000 if gpus else 0),
                                 "qos": rnd.choice(["GOLD", "SILVER", "SILVER", "BRONZE"]), "at": at,
                                 "priority": rnd.randint(0, 3), "labels": labels}))
        elif r < 0.60:
            out.append(("end", {"tid": f"t{rnd.randint(1, n)}", "status": rnd.choice(["COMPLETED", "COMPLETED",
                                                                                     "FAILED"]), "at": at}))
        elif r < 0.66:
            out.append(("cancel", {"tid": f"t{rnd.randint(1, n)}", "at": at}))
        elif r < 0.72:
            out.append(("running", {"tid": f"t{rnd.randint(1, n)}", "at": at}))
        elif r < 0.78:
            out.append(("dup", {"tid": f"t{rnd.randint(1, n)}", "at": at}))
        elif r < 0.84:
            out.append(("stale", {"tid": f"t{rnd.randint(1, n)}", "node": rnd.choice(NODES)[0], "at": at}))
        elif r < 0.88:
            node = rnd.choice(NODES)[0]
            out.append(("node", {"node": node, "status": "DOWN", "at": at}))
            out.append(("node", {"node": node, "status": "READY", "at": at + 1}))
        else:
            out.append(("tick", {"at": at}))
    return out


def _feed(f: Feed, step: tuple[str, dict], known: dict[str, str]) -> None:
    kind, a = step
    if kind == "task":
        f.task(a["tid"], cpu=a["cpu"], gpus=a["gpus"], milli=a["milli"], qos=a["qos"], at=a["at"],
               priority=a["priority"], labels=a["labels"])
    elif kind == "end":
        f.send("TaskStatusChanged", {"task_id": a["tid"], "node_id": known.get(a["tid"], ""), "status": a["status"],
                                     "at": a["at"], "exit_code": 0, "message": ""})
    elif kind == "running":
        f.send("TaskStatusChanged", {"task_id": a["tid"], "node_id": known.get(a["tid"], ""), "status": "RUNNING",
                                     "at": a["at"], "exit_code": 0, "message": ""})
    elif kind == "cancel":
        f.send("TaskCancelled", {"task_id": a["tid"], "reason": "test", "at": a["at"]})
    elif kind == "dup":
        f.task(a["tid"], cpu=300, at=a["at"])
    elif kind == "stale":
        f.send("TaskStatusChanged", {"task_id": a["tid"], "node_id": a["node"], "status": "RUNNING",
                                     "at": a["at"], "exit_code": 0, "message": ""})
    elif kind == "node":
        f.send("NodeStatusChanged", {"node_id": a["node"], "status": a["status"], "reason": "test", "at": a["at"]})
    else:
        f.send("CellTick", {"at": a["at"]})


def _run(seed: int, *, forget: bool, restore_every: int = 0, ids: int = 1_000_000) -> tuple[list, Feed]:
    """All outputs of the script; ``known``: where each task was last placed, read from the
    outputs (not from the state, which may have forgotten it), so both runs send the same
    inputs."""
    f = Feed(strategy="default", config=_config(0, ids))
    if not forget:
        f.state.forget_finished = lambda *_a: 0
    for nid, gpus, model in NODES:
        f.node(nid, cpu=16000, mem=65536, gpus=gpus, model=model or "T4")
    known: dict[str, str] = {}
    for i, step in enumerate(_script(seed)):
        seen = len(f.outputs)
        _feed(f, step, known)
        for kind, out in f.outputs[seen:]:
            if kind == "TaskPlaced":
                known[out["task_id"]] = out["node_id"]
            elif kind == "TaskMigrated":
                known[out["task_id"]] = out["to_node"]
        if forget:
            s = f.state
            s.check()
            assert not set(s.forgotten) & set(s.tasks)
            assert all(s.tasks[t].status in TERMINAL for t in s.finished)
        if restore_every and i % restore_every == restore_every - 1:
            f.state = CellState.from_snapshot(json.loads(json.dumps(f.state.to_snapshot(), sort_keys=True)))
    return f.outputs, f


def _same_three_ways(run, seed: int, restore_every: int) -> tuple[list, Feed, Feed]:
    """``run``'s outputs with no forgetting, with forgetting, and with forgetting and a restore
    from the snapshot every ``restore_every`` inputs, asserted equal; then the outputs, the
    cell that kept everything and the one that forgot."""
    kept, full = run(seed, forget=False)
    forgot, lean = run(seed, forget=True)
    restored, _ = run(seed, forget=True, restore_every=restore_every)
    assert forgot == kept
    assert restored == kept
    return kept, full, lean


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_forgetting_finished_tasks_changes_no_decision_live_or_restored(seed):
    kept, full, lean = _same_three_ways(_run, seed, restore_every=37)
    # the runs did what they are for: tasks were forgotten, and inputs about them came after
    assert len(lean.state.forgotten) > 50
    assert len(lean.state.tasks) + len(lean.state.forgotten) == len(full.state.tasks)
    gone = set(lean.state.forgotten)
    stale_stops = [o for k, o in kept if k == "StopCommand" and o["task_id"] in gone
                   and o["reason"].startswith("stale copy")]
    assert stale_stops, "no stale copy of a forgotten task was stopped"
    gang_ids = {step[1]["tid"] for step in _script(seed) if step[0] == "task" and step[1]["labels"].get("gang")}
    placed = {o["task_id"] for k, o in kept if k == "TaskPlaced"}
    assert gang_ids & placed & gone, "no gang member was placed, finished and then forgotten"


def test_a_forgotten_id_is_still_a_duplicate_until_its_tombstone_goes():
    f = Feed(strategy="bestfit", config={"seed": 1, "retention": {"finished_tasks": 0, "forgotten_ids": 2}})
    f.node("a", cpu=8000)
    for i in range(4):
        f.task(f"t{i}", cpu=500)
        f.status(f"t{i}", "COMPLETED", at=10 + i)
    s = f.state
    # with nothing kept, finished tasks go two at a time (a batch of at least one over 0)
    assert list(s.forgotten) == ["t2", "t3"] and not s.tasks and not s.finished
    assert f.task("t3", cpu=500) == []                                     # still known: a duplicate
    placed = f.task("t0", cpu=500)                                         # its tombstone went: new
    assert [k for k, _ in placed] == ["TaskPlaced"]


def _job_task(f: Feed, tid: str, job: str, labels: dict, cpu: int = 100, at: int = 1):
    return f.send("TaskSubmitted", {"task_id": tid, "tenant": "t", "cell": "test", "submitted_at": at,
                                    "resources": {"cpu_milli": cpu, "memory_mib": 1, "gpu_count": 0, "gpu_milli": 0,
                                                  "gpu_models": []}, "qos_tier": "SILVER", "labels": labels,
                                    "job_id": job})


def test_finished_job_members_are_forgotten_clients_leave_what_their_job_reads():
    f = Feed(strategy="bestfit", config={"seed": 1, "retention": {"finished_tasks": 0, "forgotten_ids": 5}})
    f.node("a", cpu=1000)
    f.task("big", cpu=1000)
    f.task("g", cpu=100, labels={"gang": "x", "gang-size": "2"})   # pending: 1 of 2 members
    _job_task(f, "j", "J", {})                                     # an array job's member
    _job_task(f, "agg", "F", {"federated-role": "aggregator"})
    _job_task(f, "cl", "F", {"federated-role": "client", "data-site": "s", "federated-up-bytes": "7",
                             "other": "x"}, cpu=300)
    _job_task(f, "el", "E", {"elastic": ELASTIC})
    for i, tid in enumerate(("g", "j", "agg", "cl", "el")):
        f.send("TaskCancelled", {"task_id": tid, "reason": "test", "at": 5 + i})
    s = f.state
    s.check()
    assert {"g", "j", "agg", "cl"} <= set(s.forgotten) and s.gang_members("x") == []
    assert s.job_tasks("J") == [] and s.job_tasks("F") == [] and list(s.group("federated-job", "F")) == []
    # what later tasks of its job read of the client stays; the elastic policy's task stays whole
    (cl,) = s.job_clients("F", by_job_id=True)
    assert (cl.task_id, cl.status, cl.node, cl.labels, cl.cpu) == \
        ("cl", "CANCELLED", None, {"federated-role": "client", "data-site": "s", "federated-up-bytes": "7"}, 300)
    assert "el" in s.tasks and "el" not in s.finished
    restored = CellState.from_snapshot(json.loads(json.dumps(s.to_snapshot())))
    assert restored.job_clients("F") == s.job_clients("F")
    restored.check()
    f.task("g2", cpu=100, labels={"gang": "x", "gang-size": "2"})  # the gang starts again from none
    assert s.gang_members("x") == ["g2"]
    assert f.state.forgotten["j"] == ("CANCELLED", None)
    _job_task(f, "j", "J", {})                                     # still a duplicate
    assert s.job_tasks("J") == []
    # the client goes with its tombstone (5 are kept)
    f.status("big", "COMPLETED", at=29)
    for i in range(5):
        f.task(f"t{i}", cpu=10)
        f.status(f"t{i}", "COMPLETED", at=30 + i)
    assert "cl" not in s.forgotten and s.job_clients("F") == [] and not s.past_clients
    s.check()


ELASTIC = elastic_label(ElasticArgs(min_clients=1, max_clients=6, window=2, plateau=0.01), 32)
JOB_NODES = [("a1", "site-a"), ("a2", "site-a"), ("b1", "site-b"), ("c1", "site-c")]


def _jobs_run(seed: int, *, forget: bool, restore_every: int = 0) -> tuple[list, Feed]:
    """A seeded run of jobs under the ``federated`` rule: array jobs (members with a job id
    and no role), federated jobs (clients at a data site, aggregators, an elastic policy on
    some) with their rounds, members finishing, failing and cancelled all along. ``known``
    as in :func:`_run`."""
    rnd = random.Random(seed)
    config = {"seed": 3, "retry_every_ms": 0, "retention": {"finished_tasks": 0, "forgotten_ids": 1_000_000},
              "rules": [{"name": "federated", "match": {"federated-role": "*"}, "strategy": "federated"}]}
    f = Feed(strategy="default", config=config)
    if not forget:
        f.state.forget_finished = lambda *_a: 0
    for nid, site in JOB_NODES:
        f.send("NodeRegistered", {"node_id": nid, "cell": "test", "site": site, "cpu_milli": 8000,
                                  "memory_mib": 65536, "accelerators": [], "registered_at": 0, "labels": {}})
    known: dict[str, str] = {}
    at, n, rounds = 10, 0, {}
    for i in range(500):
        at += rnd.randint(1, 300)
        seen = len(f.outputs)
        r = rnd.random()
        if r < 0.45 or n < 4:
            n += 1
            job = f"j{rnd.randint(0, 5)}"
            kind = rnd.random()
            if kind < 0.4:
                labels = {}                                        # an array job's member
            elif kind < 0.8:
                labels = {"federated-role": "client", "data-site": rnd.choice(["site-a", "site-b", "site-c"])}
            else:
                labels = {"federated-role": "aggregator", **({"elastic": ELASTIC} if rnd.random() < 0.5 else {})}
            _job_task(f, f"t{n}", job, labels, cpu=rnd.choice([500, 1000, 3000]), at=at)
        elif r < 0.80:
            tid = f"t{rnd.randint(1, n)}"
            f.send("TaskStatusChanged", {"task_id": tid, "node_id": known.get(tid, ""), "at": at, "exit_code": 0,
                                         "status": rnd.choice(["COMPLETED", "COMPLETED", "FAILED"]), "message": ""})
        elif r < 0.85:
            f.send("TaskCancelled", {"task_id": f"t{rnd.randint(1, n)}", "reason": "test", "at": at})
        elif r < 0.97:
            job = f"j{rnd.randint(0, 5)}"
            rounds[job] = rounds.get(job, 0) + 1
            f.send("JobRound", {"event_id": f"{job}:{rounds[job]}", "job_id": job, "tenant": "t", "cell": "test",
                                "round": rounds[job], "loss": rnd.uniform(0.1, 2.0), "accuracy": None,
                                "aggregated": True, "at": at})
        else:
            f.send("CellTick", {"at": at})
        for kind, out in f.outputs[seen:]:
            if kind == "TaskPlaced":
                known[out["task_id"]] = out["node_id"]
        if forget:
            f.state.check()
        if restore_every and i % restore_every == restore_every - 1:
            f.state = CellState.from_snapshot(json.loads(json.dumps(f.state.to_snapshot(), sort_keys=True)))
    return f.outputs, f


@pytest.mark.parametrize("seed", [1, 2])
def test_forgetting_job_members_changes_no_decision_of_their_jobs(seed):
    """Array-job members, aggregators and clients are forgotten; the decisions that read
    their jobs (the aggregator's traffic score, the elastic policy) stay the same."""
    kept, full, lean = _same_three_ways(_jobs_run, seed, restore_every=41)
    # the run did what it is for: members of every kind were placed and the rules read jobs
    # whose other members were forgotten by then
    kinds = {k for k, _ in kept}
    assert {"TaskPlaced", "JobResized"} <= kinds, kinds
    assert any("federated job" in " ".join(o["provenance"]["path"]) for k, o in kept if k == "TaskPlaced")
    s = lean.state
    gone = set(s.forgotten)
    roles = {tid: t.task.labels.get("federated-role") for tid, t in full.state.tasks.items()}
    assert len(s.tasks) + len(gone) == len(roles)
    assert {tid for tid in gone if roles.get(tid) is None}, "no array-job member was forgotten"
    assert {tid for tid in gone if roles.get(tid) == "aggregator"}, "no aggregator was forgotten"
    clients = {tid for tid in gone if roles.get(tid) == "client"}
    assert clients, "no client was forgotten"
    assert clients == {c.task_id for cs in s.past_clients.values() for c in cs}
    assert not {tid for tid in gone if "elastic" in full.state.tasks[tid].task.labels}, \
        "an elastic policy's task was forgotten"


def test_a_snapshot_from_before_job_members_went_lists_its_finished_members_first():
    f = Feed(strategy="bestfit", config={"seed": 1})
    f.node("a", cpu=8000)
    _job_task(f, "m1", "J", {})
    f.task("t1", cpu=100)
    _job_task(f, "m2", "J", {})
    _job_task(f, "cl", "J", {"federated-role": "client"})
    for i, tid in enumerate(("t1", "m2", "cl", "m1")):
        f.status(tid, "COMPLETED", at=10 + i)
    assert list(f.state.finished) == ["t1", "m2", "cl", "m1"]
    snap = json.loads(json.dumps(f.state.to_snapshot()))
    snap["finished"] = ["t1"]                                  # as written when job members were kept
    old = CellState.from_snapshot(snap)
    assert list(old.finished) == ["m1", "m2", "cl", "t1"]      # they finished before it: first, by arrival
    old.check()
    again = CellState.from_snapshot(json.loads(json.dumps(f.state.to_snapshot())))
    assert list(again.finished) == list(f.state.finished)      # a snapshot of this code: as it was


def test_a_snapshot_from_before_forgetting_restores_its_order_and_shape_log():
    f = Feed(strategy="bestfit", config={"seed": 1})
    f.node("a", cpu=8000, gpus=2)
    for i in range(9):
        f.task(f"t{i}", cpu=500 + 100 * (i % 3), gpus=i % 2, milli=500 if i % 2 else 0)
        if i % 3 == 0:
            f.status(f"t{i}", "COMPLETED", at=10 + i)
    snap = json.loads(json.dumps(f.state.to_snapshot()))
    for key in ("finished", "forgotten", "shape_log"):
        snap.pop(key, None)                                    # as written before cells forgot
    old = CellState.from_snapshot(snap)
    assert list(old.finished) == list(f.state.finished) == ["t0", "t3", "t6"]
    assert old.shape_log.tolist() == f.state.shape_log.tolist()
    for cutoff in range(0, 10):
        assert shape_counts_through(old, cutoff) == shape_counts_through(f.state, cutoff)


def test_the_shape_log_keeps_at_least_its_reach_and_trims_where_a_restored_state_does(monkeypatch):
    monkeypatch.setattr(state_module, "SHAPE_LOG_KEEP", 4)
    f = Feed(strategy="bestfit", config={"seed": 1})
    f.node("a", cpu=64000)
    for i in range(11):
        f.task(f"t{i}", cpu=100 * (1 + i % 2))
        s = f.state
        assert len(s.shape_log) >= min(s.seq, 4) and s.shape_base + len(s.shape_log) == s.seq
        assert s.shape_base % 4 == 0
    restored = CellState.from_snapshot(json.loads(json.dumps(f.state.to_snapshot())))
    assert (restored.shape_base, restored.shape_log.tolist()) == (f.state.shape_base, f.state.shape_log.tolist())
    walked = {"100/0/0/": 0, "200/0/0/": 0}
    for t in sorted(f.state.tasks.values(), key=lambda t: t.seq)[:9]:
        walked[f"{t.task.request.cpu}/0/0/"] += 1
    assert f.state.shape_counts_after(9) == walked
    assert f.state.shape_counts_after(f.state.shape_base - 1) is None       # beyond the log's reach


def _closed_batch_window(batch: int, cpu: int) -> Feed:
    """A cell that forgets every finished task it can, on one node of ``cpu`` milli, whose
    batch window (one solve a tick) has closed on ``batch`` tasks b0..: one solved, the
    rest left in ``batch_due``."""
    f = Feed(strategy="default", config={"seed": 1, "retention": {"finished_tasks": 0},
                                         "qos": {"batch_window_ms": 1_000, "batch_chunk": 1,
                                                 "batch_solves_per_tick": 1}})
    f.node("a", cpu=cpu)
    for i in range(batch):
        f.task(f"b{i}", cpu=100, at=10, labels={"scheduling": "batch"})
    f.send("CellTick", {"at": 2_000})
    return f


def test_a_cancelled_task_a_closed_batch_window_still_names_is_kept_until_the_window_is_done():
    f = _closed_batch_window(3, cpu=8000)                    # one solved, two left
    assert f.state.batch_due == ["b1", "b2"]
    f.send("TaskCancelled", {"task_id": "b1", "reason": "test", "at": 2_001})
    f.task("x", cpu=100, at=2_002)
    f.status("x", "COMPLETED", at=2_003)                     # two finished: time to forget
    assert "b1" in f.state.tasks and "x" in f.state.forgotten
    f.send("CellTick", {"at": 3_000})                        # b1 is read (and skipped), b2 solved next
    f.send("CellTick", {"at": 4_000})
    assert not f.state.batch_due and f.state.tasks["b2"].status != "PENDING"
    f.task("y", cpu=100, at=4_001)
    f.status("y", "COMPLETED", at=4_002)                     # the pass waits for a batch beyond b1
    assert "b1" in f.state.tasks and f.state.finished_pinned == 1
    f.task("z", cpu=100, at=4_003)
    f.status("z", "COMPLETED", at=4_004)
    assert "b1" in f.state.forgotten                         # no longer named: forgotten
    assert f.state.finished_pinned == 0


def test_tasks_kept_because_they_are_named_do_not_make_every_input_try_again(monkeypatch):
    from suanli.processors.state import CellState

    passes = []
    real = CellState.forget_finished
    monkeypatch.setattr(CellState, "forget_finished", lambda self, *a: passes.append(1) or real(self, *a))
    f = _closed_batch_window(21, cpu=64_000)                 # one solved, 20 left
    for i in range(1, 21):                                   # cancelled, but the closed window names them
        f.send("TaskCancelled", {"task_id": f"b{i}", "reason": "test", "at": 2_000 + i})
    assert f.state.finished_pinned == 20
    before = len(passes)
    for i in range(20):
        f.task(f"x{i}", cpu=100, at=3_000 + 2 * i)
        f.status(f"x{i}", "COMPLETED", at=3_001 + 2 * i)
    # a pass per two completions (a batch of 1 beyond the 20 pinned), not one per input (40)
    assert len(passes) - before == 10, len(passes) - before
    assert all(f"b{i}" in f.state.tasks for i in range(1, 21))
    assert sum(f"x{i}" in f.state.forgotten for i in range(20)) == 20


def test_the_label_sets_of_forgotten_clients_stay_bounded_by_the_clients_kept():
    f = Feed(strategy="bestfit", config={"seed": 1, "retention": {"finished_tasks": 0, "forgotten_ids": 10}})
    f.node("a", cpu=64000)
    for i in range(1200):                       # each client at a site of its own
        _job_task(f, f"c{i}", "J", {"federated-role": "client", "data-site": f"s{i}"})
        f.status(f"c{i}", "COMPLETED", at=10 + i)
    s = f.state
    s.check()
    assert len(s.forgotten) <= 10 and len(s.job_clients("J")) == len(s.forgotten)
    assert len(s._past_labels) <= 1024 + 1
    assert [c.labels["data-site"] for c in s.job_clients("J")] == [f"s{i}" for i in range(1190, 1200)]
