"""``job:`` in the task form (issue 22): validated like ids, carried as TaskSubmitted.job_id
(null without one), through the Avro contract and into the core's Task."""
from __future__ import annotations

import io

import fastavro
import pytest

from suanli.errors import ValidationError
from suanli.processors import model as m
from suanli.schemas.catalog import catalog
from suanli.schemas.codec import parse_plain
from suanli.schemas.task_spec import task_from_document

BASE = {"tenant": "vision", "cell": "c", "resources": {"cpu": 1, "memory": "1Gi"}}


def test_the_job_becomes_job_id_and_is_null_without_one():
    assert task_from_document({**BASE, "job": "fl-round-7"}, 0)["job_id"] == "fl-round-7"
    assert task_from_document(BASE, 0)["job_id"] is None


@pytest.mark.parametrize("job", ["", "a b", "-lead", "a/b", "x" * 205, 7, ["j"]])
def test_a_bad_job_id_is_refused_naming_the_field(job):
    with pytest.raises(ValidationError) as err:
        task_from_document({**BASE, "job": job}, 0)
    assert str(err.value).startswith("invalid task: job:"), str(err.value)


@pytest.mark.parametrize("job", ["fl-round-7", None])
def test_avro_round_trip_and_the_core_task(job):
    event = task_from_document({**BASE, "id": "t1", "job": job} if job else {**BASE, "id": "t1"}, 5)
    schema = parse_plain(catalog()["TaskSubmitted"].schema)
    body = io.BytesIO()
    fastavro.schemaless_writer(body, schema, event)
    back = fastavro.schemaless_reader(io.BytesIO(body.getvalue()), schema, None)
    assert back == event
    typed = m.from_avro("TaskSubmitted", back)
    assert typed.job_id == job and m.to_avro(typed) == back
    task = m.Task.of(typed)
    assert task.job_id == job
    snap = task.to_json()
    assert ("job_id" in snap) == (job is not None)       # a task of no job snapshots as before
    assert m.Task.from_json(snap) == task


def test_an_old_submission_without_job_id_reads_as_none():
    schema = catalog()["TaskSubmitted"].schema
    writer = {**schema, "fields": [f for f in schema["fields"] if f["name"] != "job_id"]}
    event = {k: v for k, v in task_from_document({**BASE, "id": "t1"}, 5).items() if k != "job_id"}
    body = io.BytesIO()
    fastavro.schemaless_writer(body, parse_plain(writer), event)
    back = fastavro.schemaless_reader(io.BytesIO(body.getvalue()), parse_plain(writer), parse_plain(schema))
    assert back["job_id"] is None


def test_an_elastic_label_that_does_not_parse_is_refused_by_name():
    ok = task_from_document({**BASE, "job": "j", "labels": {"elastic": '{"min_clients": 3, "batch_size": 32}'}}, 0)
    assert ok["labels"]["elastic"]
    for bad, says in (("{not json", "not a JSON object"), ('{"min_clients": 0}', "min_clients"),
                      ('{"batch_size": 4}', "batch_size"), ('{"speed": 1}', "unknown argument 'speed'")):
        with pytest.raises(ValidationError) as err:
            task_from_document({**BASE, "labels": {"elastic": bad}}, 0)
        assert "labels" in str(err.value) and says in str(err.value), str(err.value)
