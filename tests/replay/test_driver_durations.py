"""The workload driver submits each openb task with its trace duration as duration_estimate_ms
(deletion_time - scheduled_time, in ms): the simulator's run time comes from there."""
from __future__ import annotations

import asyncio

from suanli.config import load_settings
from suanli.replay.driver import drive, openb_tasks

HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


def test_trace_durations_become_duration_estimates(tmp_path):
    pods = tmp_path / "pods.csv"
    pods.write_text(HEADER +
                    "p0,1000,1024,1,460,,LS,Running,10,3610,10\n"          # 3600 s
                    "p1,1000,1024,0,0,,BE,Succeeded,5,65,20\n"             # scheduled later than created: 45 s
                    "p2,1000,1024,0,0,,BE,Pending,5,,\n"                   # never scheduled: no estimate
                    "p3,1000,1024,0,0,,BE,Failed,5,4,5\n")                 # deleted before scheduled: none
    tasks = openb_tasks(pods, 6, run_id="r1", cell="c1", now_ms=7)
    assert [t["duration_estimate_ms"] for t in tasks] == [3_600_000, 45_000, None, None, 3_600_000, 45_000]
    assert (tasks[0]["task_id"], tasks[4]["task_id"]) == ("r1-p0-r0", "r1-p0-r1")  # the list repeats

    published: list[tuple[str, dict]] = []

    async def publish(kind: str, payload: dict) -> None:
        published.append((kind, payload))

    asyncio.run(drive(publish, tasks, rate=0))
    assert [p["duration_estimate_ms"] for _k, p in published] == [t["duration_estimate_ms"] for t in tasks]
    assert all(k == "TaskSubmitted" and p["submitted_at"] > 7 for k, p in published)


def test_the_default_workload_carries_the_trace_durations():
    pods = load_settings().openb_dir / "openb_pod_list_default.csv"
    tasks = openb_tasks(pods, 100, run_id="r", cell="c")
    durations = [t["duration_estimate_ms"] for t in tasks]
    assert sum(d is not None for d in durations) >= 90
    assert durations[0] == (12537496 - 0) * 1000            # openb-pod-0000: scheduled at 0, deleted at 12537496 s
