"""The Confluent wire format through the real schema registry."""
from __future__ import annotations

import random
import struct

import pytest

from suanli.errors import DecodeError, EncodeError
from suanli.schemas.codec import split_frame

pytestmark = pytest.mark.stack


def task_submitted(task_id: str = "t-1") -> dict:
    return {
        "event_id": f"ev-{task_id}", "task_id": task_id, "tenant": "acme", "cell": "openb",
        "submitted_at": 1_700_000_000_123,
        "resources": {"cpu_milli": 6000, "memory_mib": 12288, "gpu_count": 1, "gpu_milli": 460,
                      "gpu_models": ["V100M16", "V100M32"], "gpu_memory_mib": 0, "accelerators": []},
        "qos_tier": "GOLD", "priority": 3, "labels": {"team": "vision", "workload": "training"},
        "deadline": None, "duration_estimate_ms": 3_600_000, "command": ["python", "train.py"],
        "profile": None, "env": {"OMP_NUM_THREADS": "4", "DATA": "/mnt/data"}, "job_id": "fl-7",
    }


def test_round_trip_keeps_every_field_and_times_as_epoch_millis(codec):
    event = task_submitted()
    data = codec.encode("TaskSubmitted", event)
    kind, decoded = codec.decode(data, topic="t", partition=0, offset=0)
    assert kind == "TaskSubmitted"
    assert decoded == event
    assert isinstance(decoded["submitted_at"], int)


def test_header_is_magic_zero_and_the_registry_id(codec, registry):
    data = codec.encode("TaskSubmitted", task_submitted())
    assert data[0] == 0
    schema_id, _ = split_frame(data)
    assert schema_id == registry.lookup("io.suanli.events.TaskSubmitted", codec.events["TaskSubmitted"].schema)
    assert registry.schema_by_id(schema_id)["name"] == "TaskSubmitted"


def test_value_that_does_not_fit_is_an_encode_error(codec):
    bad = task_submitted()
    bad["resources"]["cpu_milli"] = "six"
    with pytest.raises(EncodeError, match="TaskSubmitted"):
        codec.encode("TaskSubmitted", bad)
    with pytest.raises(EncodeError, match="unknown event kind"):
        codec.encode("NoSuchEvent", {})


@pytest.mark.parametrize("data, reason", [
    (b"", "shorter than the 5-byte"),
    (b"\x00\x00\x01", "shorter than the 5-byte"),
    (b'{"task_id": "json, not avro"}', "magic byte"),
    (b"\x01\x00\x00\x00\x01abc", "magic byte"),
    (struct.pack(">bI", 0, 2_000_000_000) + b"\x02", "unknown schema id 2000000000"),
    (None, "no value"),
])
def test_bad_bytes_name_topic_partition_and_offset(codec, data, reason):
    with pytest.raises(DecodeError) as info:
        codec.decode(data, topic="suanli.raw.tasks", partition=3, offset=42)
    message = str(info.value)
    assert reason in message
    assert "suanli.raw.tasks[3]@42" in message
    assert (info.value.topic, info.value.partition, info.value.offset) == ("suanli.raw.tasks", 3, 42)


def test_truncated_and_padded_bodies_are_decode_errors(codec):
    data = codec.encode("TaskSubmitted", task_submitted())
    with pytest.raises(DecodeError, match="does not match schema id"):
        codec.decode(data[:-7], topic="x", partition=0, offset=1)
    with pytest.raises(DecodeError, match="trailing bytes"):
        codec.decode(data + b"\x00\x00", topic="x", partition=0, offset=2)


def test_random_garbage_never_raises_anything_but_decode_error(codec):
    rng = random.Random(7)
    header = codec.encode("TaskSubmitted", task_submitted())[:5]
    good = codec.encode("TaskSubmitted", task_submitted())
    for i in range(3000):
        body = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 80)))
        if i % 3 == 0:
            data = header + body          # a real schema id with a garbage body
        elif i % 3 == 1:
            cut = rng.randint(5, len(good))
            data = good[:cut] + body      # a real record, cut and with garbage after
        else:
            data = body
        try:
            codec.decode(data, topic="fuzz", partition=0, offset=i)
        except DecodeError:
            pass


def test_kind_of_reads_the_kind_from_the_schema_id_without_the_body(codec):
    data = codec.encode("TaskSubmitted", task_submitted())
    assert codec.kind_of(data) == "TaskSubmitted"
    assert codec.kind_of(data[:5] + b"\xff\xff not an avro body") == "TaskSubmitted"   # the body is not read
    assert codec.kind_of(b"\x00\x7f\xff\xff\xf0") is None                              # an id the registry lacks
    assert codec.kind_of(b"\x01\x00\x00\x00\x01") is None and codec.kind_of(None) is None and codec.kind_of(b"") is None
