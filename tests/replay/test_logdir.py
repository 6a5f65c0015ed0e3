"""Log directories: Avro OCF round trip, self-describing schemas, refusal of bad input."""
import json

import fastavro
import pytest

import synth
from suanli.errors import ReplayError
from suanli.replay.dir_registry import LOCAL_ID_BASE, DirRegistry
from suanli.replay.logdir import LogDir, read_records, write_logdir, write_records
from suanli.replay.rerun import replay_logdir
from suanli.replay.verify import verify
from suanli.streams.records import RawRecord


def test_ocf_round_trip_keeps_every_field_and_byte(tmp_path):
    records = [RawRecord("t.cells", 3, 10 + i, 1_700_000_000_000 + i, None if i == 1 else f"k{i}".encode(),
                         None if i == 2 else bytes([0, 0, 0, 0, i]) + bytes(range(256)))
               for i in range(5)]
    path = tmp_path / "x.avro"
    assert write_records(path, records, role="inputs", cell="c") == 5
    assert list(read_records(path)) == records
    with open(path, "rb") as f:
        reader = fastavro.reader(f)
        assert reader.metadata["suanli.role"] == "inputs" and reader.metadata["suanli.cell"] == "c"
        assert reader.writer_schema["name"] == "io.suanli.replay.LogRecord"


def test_directory_is_self_describing_and_replays_without_a_registry(logdir):
    log = LogDir.open(logdir)
    assert isinstance(log.registry(), DirRegistry)          # schemas come from the directory only
    schema_files = sorted(p.name for p in (logdir / "schemas").glob("*.avsc"))
    assert schema_files and all(json.loads((logdir / "schemas" / f).read_text())["type"] == "record" for f in schema_files)
    assert json.loads((logdir / "strategy.json").read_text())["config"]["bestfit_weight"] == 1.0
    assert log.meta["initial_policy"] == {"strategy": "default", "config": {}}
    replayed = replay_logdir(log)
    assert replayed.local_schemas == {}                     # every id the core encodes was exported
    report = verify(log, replayed)
    assert report.identical, report.details
    assert report.duplicates > 0 and report.regenerated == report.recorded - report.duplicates


def test_dir_registry_matches_by_meaning_and_flags_unknown_schemas():
    codec, registry = synth.offline_codec()
    event = codec.events["TaskPlaced"]
    sid = registry.lookup(event.subject, event.schema)
    assert sid is not None and registry.register(event.subject, json.dumps(event.schema)) == sid
    reordered = json.loads(json.dumps(event.schema))
    reordered["doc"] = "another doc: same binary encoding"
    assert registry.register(event.subject, reordered) == sid
    new = {"type": "record", "name": "Brand", "namespace": "io.x", "fields": [{"name": "a", "type": "int"}]}
    assert registry.register("io.x.Brand", new) == LOCAL_ID_BASE
    assert registry.local == {"io.x.Brand": LOCAL_ID_BASE}


def test_write_refuses_a_directory_that_would_not_be_self_describing(tmp_path):
    codec, _ = synth.offline_codec()
    value = codec.encode("TaskCancelled", {"event_id": "e", "task_id": "t", "cell": "c", "tenant": "", "reason": "",
                                           "at": 1})
    with pytest.raises(ReplayError, match="no writer schema"):
        write_logdir(tmp_path / "d", cell_meta={"cell": "c", "inputs": {"partition": 0}}, strategy={},
                     inputs=[RawRecord("t", 0, 0, 0, b"c", value)], decisions=[], schemas={})


@pytest.mark.parametrize("damage", ["no-dir", "no-cell-json", "bad-json", "no-inputs", "bad-strategy", "no-schemas"])
def test_open_refuses_incomplete_directories(logdir, damage):
    target = logdir
    if damage == "no-dir":
        target = logdir / "nope"
    elif damage == "no-cell-json":
        (logdir / "cell.json").unlink()
    elif damage == "bad-json":
        (logdir / "cell.json").write_text("{not json")
    elif damage == "no-inputs":
        (logdir / "inputs.avro").unlink()
    elif damage == "bad-strategy":
        (logdir / "strategy.json").write_text('{"strategy": 3}')
    elif damage == "no-schemas":
        for f in (logdir / "schemas").iterdir():
            f.unlink()
        (logdir / "schemas").rmdir()
    with pytest.raises(ReplayError):
        replay_logdir(LogDir.open(target))
