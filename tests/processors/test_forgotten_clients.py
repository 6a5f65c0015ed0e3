"""What a cell keeps of a forgotten federated client (processors/forgotten_clients.py): only
the labels the rules read, one dict per label set, and a lossless JSON form."""
from __future__ import annotations

import json

from suanli.processors.forgotten_clients import ClientView
from suanli.processors.model import Request, Task
from suanli.processors.state import TaskRecord


def _record(tid: str, seq: int, labels: dict, job_id: str | None = "J") -> TaskRecord:
    task = Task(task_id=tid, tenant="t", request=Request(250, 512, 0, 0), qos_tier="SILVER",
                labels=labels, job_id=job_id)
    return TaskRecord(task, seq, status="COMPLETED")


def test_a_past_client_keeps_only_what_the_rules_read_and_shares_its_labels():
    shared: dict = {}
    labels = {"federated-role": "client", "data-site": "s1", "federated-up-bytes": "9", "team": "x"}
    a = ClientView.forgotten(_record("a", 3, labels), shared)
    b = ClientView.forgotten(_record("b", 4, dict(labels), job_id=None), shared)
    assert (a.seq, a.task_id, a.status, a.by_job_id, a.cpu, a.mem) == (3, "a", "COMPLETED", True, 250, 512)
    assert a.labels == {"federated-role": "client", "data-site": "s1", "federated-up-bytes": "9"}
    assert a.labels is b.labels and not b.by_job_id
    again = ClientView.from_json(json.loads(json.dumps(a.to_json())), {})
    assert again == a
