"""The replay fast path (replay/log_replay.py) against the worker's own path (CellRunner.apply).

Each shortcut of the replay is held to what it replaces: ``regenerate`` to the decisions
``CellRunner.apply`` sends, ``model.to_avro`` to its definition, ``Codec.decode_many`` to
``Codec.decode``, the prefix test of ``drop_redeliveries`` to decoding every record; and
verify still reports a tampered decision anywhere in its bytes.
"""
import dataclasses
import io
import random
from collections.abc import Mapping

import pytest
from fastavro import schemaless_reader as fastavro_reader, schemaless_writer

import synth
from synth import make_logdir
from suanli.errors import DecodeError
from suanli.processors import model
from suanli.replay.log_replay import _drop_decoded, decided_prefix, drop_redeliveries, first_divergence, regenerate
from suanli.replay.logdir import DECISIONS_FILE, LogDir, read_records, write_records
from suanli.replay.rerun import replay_logdir
from suanli.replay.verify import verify
from suanli.streams.cell_runner import CellRunner
from suanli.streams.records import RawRecord


def _awkward_log(codec) -> list[RawRecord]:
    """A partition with everything apply treats specially: two cells, completions naming
    no node (dead letters), cancellations of placed tasks (StopCommands), a policy change,
    ticks, heartbeats of unknown nodes, undecodable values, a foreign record kind and
    redelivered offsets."""
    items = synth.inputs(n_tasks=160, seed=11)
    rnd = random.Random(5)
    extra: list[tuple[int, tuple[str, str, dict]]] = []
    for k in range(0, 160, 7):
        extra.append((rnd.randrange(20, len(items)), ("c1", "TaskCancelled", {
            "event_id": f"cancel/{k}", "task_id": f"c1-task{k}", "tenant": "t", "cell": "c1", "reason": "user",
            "at": 10_000 + k})))
    extra.append((30, ("c1", "PolicyChanged", {"event_id": "pol/1", "cell": "c1", "strategy": "bestfit",
                                                "config_json": "{}", "changed_by": "test", "at": 5_000})))
    extra.append((40, ("c1", "CellTick", {"event_id": "tick/1", "cell": "c1", "at": 6_000, "period_ms": 1000})))
    extra.append((50, ("c1", "NodeHeartbeat", {"event_id": "hb/x", "node_id": "nope", "cell": "c1", "seq": 1,
                                               "at": 6_001})))
    extra.append((60, ("c1", "NodeHeartbeat", {"event_id": "hb/0", "node_id": "n0", "cell": "c1", "seq": 1,
                                               "at": 6_002})))
    for pos, item in sorted(extra, key=lambda e: e[0], reverse=True):
        items.insert(pos, item)
    records = synth.encode_log(codec, items)
    good = records[10].value
    bad = [None, b"", b"\x01junk", good + b"\x00", good[:-4], b"\x00\x00\x00\x03\xe7xx",
           codec.encode("DispatchAck", {"event_id": "ack/1", "dispatch_id": "d", "task_id": "t", "node_id": "n0",
                                        "connector": "sim", "cell": "c1", "accepted": True, "message": "",
                                        "at": 1})]
    out: list[RawRecord] = []
    offset = 0
    for i, r in enumerate(records):
        out.append(RawRecord(r.topic, 0, offset, r.timestamp, r.key, r.value))
        offset += 1
        if i % 37 == 5:                                  # redelivered: an offset already applied
            out.append(RawRecord(r.topic, 0, offset - 1, r.timestamp, r.key, r.value))
        if i % 41 == 3 and bad:
            out.append(RawRecord(r.topic, 0, offset, r.timestamp, b"c1", bad.pop()))
            offset += 1
    assert not bad
    return out


def test_regenerate_sends_what_cell_runner_apply_sends_to_the_decisions_topic():
    codec, _ = synth.offline_codec()
    records = _awkward_log(codec)
    reference_runner = CellRunner(codec, synth.TOPICS)
    reference = [o.value for r in records for o in reference_runner.apply(r) if o.topic == synth.DECISIONS_TOPIC]
    kinds = {codec.decode(v)[0] for v in reference}
    assert {"TaskPlaced", "TaskReleased"} <= kinds and len(reference) > 150
    seen: list[int] = []
    runner = CellRunner(codec, synth.TOPICS)
    fast = regenerate(codec, records, runner=runner, observer=lambda rec, produced: seen.append(len(produced)))
    assert fast == reference
    assert len(seen) == len(records) and sum(seen) == len(fast)
    assert runner.digest(0) == reference_runner.digest(0)     # the same state changes, caches included


def test_runner_observer_sees_the_typed_outputs_as_in_the_worker():
    codec, _ = synth.offline_codec()
    records = synth.encode_log(codec, synth.inputs(n_tasks=40, other_cell=None))
    calls: dict[str, list] = {"apply": [], "replay": []}
    for name in calls:
        runner = CellRunner(codec, synth.TOPICS)
        runner.observer = lambda rec, cell, state, outs, name=name: calls[name].append((rec.offset, cell, outs))
        if name == "apply":
            for r in records:
                runner.apply(r)
        else:
            regenerate(codec, records, runner=runner)
    assert calls["replay"] == calls["apply"] and calls["apply"]


def _to_avro_by_definition(value):
    """What model.to_avro is defined to return, asked per value (the oracle for its cache)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _to_avro_by_definition(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple):
        return [_to_avro_by_definition(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _to_avro_by_definition(v) for k, v in value.items()}
    return value


def test_to_avro_is_its_definition_for_every_output():
    codec, _ = synth.offline_codec()
    runner = CellRunner(codec, synth.TOPICS)
    outputs: list = []
    runner.observer = lambda rec, cell, state, outs: outputs.extend(outs)
    for r in _awkward_log(codec):
        runner.apply(r)
    assert {type(o).__name__ for o in outputs} >= {"TaskPlaced", "TaskReleased", "StopCommand"}
    for o in outputs:
        ref = _to_avro_by_definition(o)
        assert model.to_avro(o) == ref
        assert codec.encode(o.KIND, model.to_avro(o)) == codec.encode(o.KIND, ref)
    odd = {"t": (1, (2.5, -0.0), {"k": (None, True)}), "m": {"x": [b"b"]}}
    assert model.to_avro(odd) == _to_avro_by_definition(odd) and type(model.to_avro(odd)["t"]) is list


def test_decode_many_is_decode_item_by_item():
    codec, _ = synth.offline_codec()
    values = [r.value for r in _awkward_log(codec)]
    decoded = codec.decode_many(values)
    assert len(decoded) == len(values)
    errors = 0
    for value, got in zip(values, decoded):
        try:
            want = codec.decode(value)
        except DecodeError as exc:
            errors += 1
            assert isinstance(got, DecodeError) and str(got) == str(exc) and got.schema_id == exc.schema_id
        else:
            assert got == want
    assert errors >= 5


def test_decode_many_reads_an_older_writer_like_decode():
    """An exported directory's schemas come back from the registry re-serialised (another
    attribute order, explicit namespaces): decode_many drops the resolution only when the
    canonical forms agree (``Codec._reader``, which ``decode`` uses too), and still resolves a
    writer that lacks a field."""
    codec, _ = synth.offline_codec()
    schema = dict(codec.events["TaskCancelled"].schema)
    older = dict(schema, fields=[f for f in schema["fields"] if f["name"] != "reason"])
    reordered = dict(reversed(list(schema.items())))
    codec.registry._by_id[901] = older                  # noqa: SLF001 - a recorded older version
    codec.registry._by_id[902] = reordered              # noqa: SLF001 - the same schema, re-serialised
    def framed(sid, sch, payload):
        buf = io.BytesIO()
        schemaless_writer(buf, sch, payload)
        return b"\x00" + sid.to_bytes(4, "big") + buf.getvalue()

    payload = {"event_id": "e", "task_id": "t", "tenant": "x", "cell": "c", "at": 7}
    values = [framed(901, older, payload), framed(902, reordered, dict(payload, reason="r"))]
    assert codec.decode_many(values) == [codec.decode(v) for v in values]
    assert codec.decode_many(values)[0][1]["reason"] == ""          # the reader's default
    assert codec._readers[901][2] is not None and codec._readers[902][2] is None   # noqa: SLF001
    # reading 902 with resolution gives the same value the shortcut gave
    from suanli.schemas.codec import parse_plain
    resolved = fastavro_reader(io.BytesIO(values[1][5:]), parse_plain(reordered), parse_plain(schema))
    assert resolved == codec.decode(values[1])[1]


def test_drop_redeliveries_prefix_shortcut_agrees_with_decoding_everything():
    codec, _ = synth.offline_codec()
    records = synth.encode_log(codec, synth.inputs(n_tasks=60))
    values = [r.value for r in synth.live_run(codec, records)]
    assert drop_redeliveries(codec, values) == (values, 0)
    dupes = values[:5] + values[3:9] + values[20:]
    assert drop_redeliveries(codec, dupes) == _drop_decoded(codec, dupes) == (values[:9] + values[20:], 2)
    broken = values[:4] + [b"\x00\x00\x00\x00", None, values[2][:-2]] + values[4:]
    assert drop_redeliveries(codec, broken) == _drop_decoded(codec, broken) == (broken, 0)
    # a duplicate event id whose bytes are damaged after the id is not dropped (it cannot be decoded)
    damaged = values + [values[7][:-3]]
    assert drop_redeliveries(codec, damaged) == (damaged, 0)


def test_first_divergence():
    assert first_divergence([b"a", b"b"], [b"a", b"b"]) is None
    d = first_divergence([b"a", b"b"], [b"a", b"c", b"d"])
    assert (d.index, d.recorded, d.regenerated) == (1, b"b", b"c")
    d = first_divergence([b"a"], [b"a", b"x"])
    assert (d.index, d.recorded, d.regenerated) == (1, None, b"x")


@pytest.mark.parametrize("where", ["event_id", "middle", "provenance_end"])
def test_a_tampered_recorded_decision_is_reported_different(tmp_path, where):
    path = make_logdir(tmp_path / "log", n_tasks=120)
    log = LogDir.open(path)
    assert verify(log, replay_logdir(log)).identical
    records = list(read_records(path / DECISIONS_FILE))
    k = 17
    value = bytearray(records[k].value)
    i = {"event_id": 7, "middle": len(value) // 2, "provenance_end": len(value) - 2}[where]
    value[i] ^= 0x04
    r = records[k]
    records[k] = RawRecord(r.topic, r.partition, r.offset, r.timestamp, r.key, bytes(value))
    write_records(path / DECISIONS_FILE, records, role="decisions", cell="c1")
    log = LogDir.open(path)
    report = verify(log, replay_logdir(log))
    assert not report.identical
    assert report.divergence.index == k


def test_decided_prefix_keeps_each_partition_up_to_its_last_decided_input_in_log_order():
    log = [RawRecord("cells", p, o, 1000 + o, b"c", bytes([p, o])) for o in (2, 0, 1, 3) for p in (1, 0)]
    decisions = [{"provenance": {"input": {"partition": 0, "offset": 1}}},
                 {"provenance": {"input": {"partition": 1, "offset": 2}}},
                 {"provenance": {"input": {"partition": 0, "offset": 0}}}]
    kept = decided_prefix(log, decisions)
    assert [(r.partition, r.offset) for r in kept] == [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]
    assert all(type(r) is RawRecord for r in kept)
    assert decided_prefix(log, []) == []
