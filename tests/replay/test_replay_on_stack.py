"""A real plane on the embedded stack, exported from Kafka, replays byte for byte.

One small run (~120 nodes, 300 tasks) in a namespace of its own: the cell's log and
decisions are exported with ``export_cell`` (the code behind ``suanli export``), then
replayed offline: the whole log, and a range starting mid-log (state rebuilt from its prefix).
"""
from __future__ import annotations

import asyncio
import uuid

import pytest

from synth import DATA
from suanli.config import load_settings
from suanli.deploy.plane import Plane, PlaneOptions
from suanli.replay.export import export_cell
from suanli.replay.logdir import LogDir
from suanli.replay.rerun import replay_logdir
from suanli.replay.verify import describe, verify

pytestmark = pytest.mark.stack


def test_exported_plane_run_replays_identically(stack, tmp_path):
    nodes = (DATA / "openb_node_list_gpu_node.csv").read_text().splitlines()
    small = tmp_path / "nodes.csv"
    small.write_text("\n".join(nodes[:1] + nodes[1::10]) + "\n")
    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=2)
    plane = Plane(settings, PlaneOptions(tasks=300, rate=500, exit_when_drained=True, quiet=True, drain_timeout=240,
                                         nodes_csv=small), out=lambda _m: None)
    plane.start()
    try:
        result = asyncio.run(plane.run())
    finally:
        plane.stop()
    assert result["submitted"] == 300 and result["placed"] > 0

    meta = asyncio.run(export_cell(settings, plane.cell, tmp_path / "log", log=lambda _m: None))
    log = LogDir.open(tmp_path / "log")
    replayed = replay_logdir(log)
    report = verify(log, replayed)
    assert report.identical, describe(report, replayed)
    placed = sum(1 for v in replayed.regenerated if replayed.codec.decode(v)[0] == "TaskPlaced")
    assert placed == result["placed"]
    assert meta["inputs"]["kinds"]["NodeRegistered"] == len(nodes[1::10])
    assert meta["inputs"]["kinds"].get("TaskStatusChanged", 0) > 0     # completions fed back: releases replayed

    # A range that starts mid-log: the state before it is rebuilt from the prefix records.
    lo, hi = meta["inputs"]["from_offset"], meta["inputs"]["to_offset"]
    mid = lo + (hi - lo) // 2
    asyncio.run(export_cell(settings, plane.cell, tmp_path / "mid", from_offset=mid, log=lambda _m: None))
    log = LogDir.open(tmp_path / "mid")
    assert log.meta["counts"]["prefix"] > 0
    replayed = replay_logdir(log)
    report = verify(log, replayed)
    assert report.identical and report.recorded > 0, describe(report, replayed)

    # And the one-byte change is caught.
    path = tmp_path / "log" / "strategy.json"
    path.write_text(path.read_text().replace('"bestfit_weight": 1.0', '"bestfit_weight": 2.0'))
    log = LogDir.open(tmp_path / "log")
    assert not verify(log, replay_logdir(log)).identical
