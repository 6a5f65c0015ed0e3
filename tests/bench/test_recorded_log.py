"""bench/recorded_log.py: a recorded log verifies IDENTICAL, and a changed decision is found."""
import pytest

from suanli.bench import recorded_log
from suanli.replay.logdir import DECISIONS_FILE, LogDir, read_records, write_records
from suanli.replay.rerun import replay_logdir
from suanli.replay.verify import verify
from suanli.streams.records import RawRecord


def test_a_recorded_log_replays_identically_and_a_changed_decision_diverges(tmp_path):
    out = tmp_path / "log"
    counts = recorded_log.record(out, nodes=40, tasks=300)
    assert counts["inputs"] == 40 + 300 + 150 and counts["decisions"] >= 300
    report = verify(LogDir.open(out), replay_logdir(LogDir.open(out)))
    assert report.identical and report.recorded == counts["decisions"]

    records = list(read_records(out / DECISIONS_FILE))
    bad = records[200]
    records[200] = RawRecord(bad.topic, bad.partition, bad.offset, bad.timestamp, bad.key,
                             bad.value[:-1] + bytes([bad.value[-1] ^ 1]))
    write_records(out / DECISIONS_FILE, records, role="decisions", cell=recorded_log.CELL)
    assert not verify(LogDir.open(out), replay_logdir(LogDir.open(out))).identical


def test_the_command_refuses_an_existing_directory(tmp_path, capsys):
    with pytest.raises(SystemExit):
        recorded_log.main([str(tmp_path)])
    assert "exists" in capsys.readouterr().err
