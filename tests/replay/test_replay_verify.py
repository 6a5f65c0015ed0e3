"""Replay fidelity and divergence detection on a synthetic cell log."""
import json

import pytest

import synth
from synth import make_logdir
from suanli.streams.cell_runner import CellRunner
from suanli.replay.logdir import DECISIONS_FILE, LogDir, read_records, write_records
from suanli.replay.rerun import replay_logdir
from suanli.replay.verify import describe, verify


def _verify(path):
    log = LogDir.open(path)
    replayed = replay_logdir(log)
    return verify(log, replayed), replayed


@pytest.mark.parametrize("lo", [20, 60, 120])
def test_range_starting_mid_log_replays_from_its_prefix(tmp_path, lo):
    path = make_logdir(tmp_path / "mid", lo=lo)
    log = LogDir.open(path)
    assert log.meta["inputs"]["from_offset"] == lo and log.meta["counts"]["prefix"] > 0
    report, replayed = _verify(path)
    assert report.identical, describe(report, replayed)
    assert report.recorded > 50


def test_snapshot_restore_decides_like_the_uninterrupted_run():
    codec, _ = synth.offline_codec()
    records = synth.encode_log(codec, synth.inputs(n_tasks=200, other_cell=None))

    def run(split=None):
        runner, out = CellRunner(codec, synth.TOPICS), []
        for i, rec in enumerate(records):
            if i == split:
                blob = runner.snapshot(0)
                runner = CellRunner(codec, synth.TOPICS)
                runner.restore(0, blob)
            out += [r.value for r in runner.apply(rec) if r.topic == synth.DECISIONS_TOPIC]
        return out

    assert run() == run(split=20)


def test_one_byte_change_of_strategy_json_is_reported(logdir):
    text = (logdir / "strategy.json").read_text()
    assert '"bestfit_weight": 1.0' in text
    (logdir / "strategy.json").write_text(text.replace('"bestfit_weight": 1.0', '"bestfit_weight": 2.0'))
    report, replayed = _verify(logdir)
    assert not report.identical
    assert report.divergence.index == 0     # the very first decision names another config digest
    assert any(f.startswith("provenance.strategy.config_digest") for f in report.details["fields"])
    assert replayed.policy["config"]["bestfit_weight"] == 2.0
    text = describe(report, replayed)
    assert "DIVERGED at decision #0" in text and "input=t.cells[0]@" in text


def test_explicit_defaults_replay_identically(logdir):
    """strategy.json spells the defaults out; unchanged, it means the recorded {} config."""
    doc = json.loads((logdir / "strategy.json").read_text())
    doc["config"]["seed"] = 0                 # rewriting a default with its own value changes nothing
    (logdir / "strategy.json").write_text(json.dumps(doc))
    report, _ = _verify(logdir)
    assert report.identical


def test_tampered_or_missing_recorded_decisions_are_located(logdir):
    records = list(read_records(logdir / DECISIONS_FILE))
    k = 40
    bad = records[k]
    value = bytearray(bad.value)
    value[-1] ^= 0x01
    records[k] = bad.__class__(bad.topic, bad.partition, bad.offset, bad.timestamp, bad.key, bytes(value))
    write_records(logdir / DECISIONS_FILE, records, role="decisions", cell="c1")
    report, _ = _verify(logdir)
    dupes_before = sum(1 for r in records[:k] if r.value in [x.value for x in records[: records.index(r)]])
    assert report.divergence.index == k - dupes_before


def _decided_at(logdir):
    """The recorded decisions with the cell-log offset of the input each answered."""
    log = LogDir.open(logdir)
    codec = log.codec()
    records = list(read_records(logdir / DECISIONS_FILE))
    return records, [codec.decode(r.value)[1]["provenance"]["input"]["offset"] for r in records]


def test_a_recording_cut_inside_one_inputs_decisions_diverges(logdir):
    records, at = _decided_at(logdir)
    cut = next(i for i in range(5, len(at))                               # between two answers of one input
               if at[i] == at[i - 1] and records[i].value != records[i - 1].value)
    write_records(logdir / DECISIONS_FILE, records[:cut], role="decisions", cell="c1")
    report, replayed = _verify(logdir)
    assert report.divergence.recorded is None and report.undecided is None
    assert report.divergence.index == report.recorded - report.duplicates      # right after the last one kept
    assert "sequence ended" in describe(report, replayed)


def test_inputs_the_recording_had_not_decided_yet_are_named_not_a_divergence(logdir):
    """An export of a live cell: the scheduler had decided up to some input; the rest of the
    log is replayed but only the decided part can be compared."""
    records, at = _decided_at(logdir)
    cut = next(i for i in range(10, len(at)) if at[i] != at[i - 1])     # after the last answer of an input
    write_records(logdir / DECISIONS_FILE, records[:cut], role="decisions", cell="c1")
    report, replayed = _verify(logdir)
    later = sum(1 for r in LogDir.open(logdir).inputs() if r.offset > at[cut - 1])
    compared = report.recorded - report.duplicates                          # redeliveries dropped first
    assert report.identical and report.undecided == {"after_offset": at[cut - 1], "inputs": later,
                                                     "decisions_not_compared": report.regenerated - compared}
    assert later > 0 and f"the {later:,} inputs after it had no recorded decision" in describe(report, replayed)

    # a decided input whose recorded answer differs is still a divergence, tail or not
    bad = bytearray(records[cut - 1].value)
    bad[-1] ^= 0x01
    r = records[cut - 1]
    records[cut - 1] = r.__class__(r.topic, r.partition, r.offset, r.timestamp, r.key, bytes(bad))
    write_records(logdir / DECISIONS_FILE, records[:cut], role="decisions", cell="c1")
    report, _ = _verify(logdir)
    assert not report.identical and report.divergence.recorded is not None and report.undecided is None
