"""bench/codec_speed.py: the figures are produced for every kind, from records both codecs
agree on, and the replay comparison runs both sides (nothing about speed)."""
import json

import pytest

from suanli.bench import codec_speed


def test_sample_records_are_what_the_plane_moves():
    records = codec_speed.sample_records(nodes=60, tasks=12)
    assert set(records) == {"TaskPlaced", "DispatchCommand", "TaskSubmitted", "NodeRegistered", "NodeHeartbeat"}
    assert records["TaskPlaced"] and all(p["provenance"]["candidates"] for p in records["TaskPlaced"])
    assert len(records["DispatchCommand"]) == len(records["TaskPlaced"])


def test_codec_rounds_give_both_sides_per_kind():
    out = codec_speed.codec_rounds(codec_speed.sample_records(nodes=60, tasks=12), rounds=2, repeat=1)
    for kind, f in out.items():
        for side in ("fastavro", "compiled"):
            for op in ("encode", "decode"):
                assert f[f"{side}_{op}_us"] > 0 and len(f["rounds"][f"{side}_{op}_us"]) == 2, kind
        assert f["encode_speedup"] > 0 and f["decode_speedup"] > 0 and f["mean_bytes"] > 0


def test_a_disagreement_stops_the_bench(monkeypatch):
    """The check before timing is real: a codec that writes other bytes is caught."""
    from suanli.schemas.codec import Codec
    records = codec_speed.sample_records(nodes=20, tasks=4)
    real = Codec.encode

    def skewed(self, kind, payload):
        data = real(self, kind, payload)
        return data + b"\x00" if self.compiled else data

    monkeypatch.setattr(Codec, "encode", skewed)
    with pytest.raises(AssertionError, match="other bytes"):
        codec_speed.codec_rounds(records, rounds=1, repeat=1)


def test_main_writes_the_replay_comparison(tmp_path, capsys):
    path = tmp_path / "codec.json"
    codec_speed.main(["--rounds", "1", "--replay-nodes", "20", "--replay-tasks", "30", "--audit-decisions", "400",
                      "--json", str(path)])
    doc = json.loads(path.read_text())
    assert set(doc["audit"]["best_p95_ms"]) == {"fastavro", "compiled"}
    assert all(v > 0 for side in doc["audit"]["best_p95_ms"].values() for v in side.values())
    assert set(doc["replay"]["runs"]) == {"fastavro", "compiled"}
    assert all(r["verify_identical"] for rs in doc["replay"]["runs"].values() for r in rs)
    assert doc["replay"]["speedup"] > 0
    assert "TaskPlaced" in capsys.readouterr().out


def test_the_audit_comparison_leaves_the_environment_as_it_was(monkeypatch):
    import os
    monkeypatch.setenv("SUANLI_CODEC_COMPILED", "1")
    codec_speed.audit_rounds(200, rounds=1, queries=20)
    assert os.environ["SUANLI_CODEC_COMPILED"] == "1"
    monkeypatch.delenv("SUANLI_CODEC_COMPILED")
    codec_speed.audit_rounds(200, rounds=1, queries=20)
    assert "SUANLI_CODEC_COMPILED" not in os.environ
