"""The API's /metrics says what its read model holds (``streams/metrics.py``
``read_model_families``): tasks kept, finished and forgotten, jobs kept and forgotten, the
decisions kept, and the statuses of unknown tasks held and dropped; on the real app over a
read model that forgets."""
from __future__ import annotations

import re

from api_helpers import ListSink, feed, make_service, node, placed, released, submitted, write_tokens
from fastapi.testclient import TestClient

from suanli.api.auth import TokenStore
from suanli.api.readmodel import ReadModel
from suanli.api.rest import create_app


def _value(text: str, series: str) -> float:
    found = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
    assert found, f"{series} not in /metrics"
    return float(found.group(1))


def test_metrics_count_what_the_read_model_keeps_and_forgets(tmp_path):
    model = ReadModel(keep_finished=2, keep_ids=100)
    records = [node()]
    for i in range(6):
        records += [submitted(f"t{i}", "alpha"), placed(f"t{i}", "alpha", offset=10 + i)]
    for i in range(5):                                        # t5 keeps running
        records.append(released(f"t{i}", "alpha", offset=20 + i))
    job = [("cell_log", "TaskSubmitted", {**submitted("m1", "alpha")[2], "job_id": "j1"}),
           ("decisions", "TaskPlaced", {**placed("m1", "alpha", offset=30)[2], "job_id": "j1"})]
    ghost = ("cell_log", "TaskStatusChanged", {"event_id": "g:RUNNING", "task_id": "never-submitted", "cell": "c",
                                               "node_id": "n1", "status": "RUNNING", "at": 5})
    feed(model, *records, *job, ghost)
    app = create_app(make_service(ListSink(), model), TokenStore.from_file(write_tokens(tmp_path / "t.toml")))
    text = TestClient(app).get("/metrics").text
    life = model.lifecycle
    assert len(life.forgotten) >= 2 and life.jobs == {"j1": ["m1"]}
    assert _value(text, 'suanli_api_read_model_tasks{held="kept"}') == len(life.tasks) == 7 - len(life.forgotten)
    assert _value(text, 'suanli_api_read_model_tasks{held="finished"}') == life.finished_held() == 5 - len(life.forgotten)
    assert _value(text, 'suanli_api_read_model_tasks{held="forgotten"}') == len(life.forgotten)
    assert _value(text, 'suanli_api_read_model_jobs{held="kept"}') == 1
    assert _value(text, 'suanli_api_read_model_jobs{held="forgotten"}') == 0
    kept_decisions = sum(len(v) for v in model.decisions.values())
    assert _value(text, "suanli_api_read_model_decisions") == kept_decisions == 12 - 2 * len(life.forgotten)
    assert "never-submitted" not in life.tasks                 # a status of an unknown task makes no task
    assert _value(text, "suanli_api_read_model_orphan_statuses") == life.orphans_held() == 1
    assert _value(text, "suanli_api_read_model_orphan_statuses_dropped_total") == life.orphans_dropped == 0
