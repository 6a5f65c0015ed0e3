"""``ModelLocality`` in ``default`` 1.4.0 (1.5.0: local_points): prefer the node holding the task's model, say why,
and change nothing for tasks without a model."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core_helpers import Feed  # noqa: E402
from model_helpers import edge_node, model_task  # noqa: E402

CFG = {"seed": 3}


def _placed(outs):
    return [d for k, d in outs if k == "TaskPlaced"]


def _cell(config=CFG):
    f = Feed(strategy="default", config=config)
    for i in range(4):
        edge_node(f, f"n{i}", "s1" if i < 2 else "s2")
    return f


def test_placement_prefers_the_node_holding_the_model_and_notes_why():
    f = _cell()
    first = _placed(model_task(f, "a", "llama@2", size_gib=20, site="s2"))[0]
    f.status("a", "COMPLETED", at=5)
    # the cell is empty again: only the cache tells the nodes apart for the model
    second = _placed(model_task(f, "b", "llama@2", size_gib=20, at=600_000))[0]
    assert second["node_id"] == first["node_id"]
    notes = second["provenance"]["notes"]
    assert len(notes) == 1 and notes[0].startswith(f"model llama@2 cached on {first['node_id']}: saves ~")
    assert "ModelLocality" in " ".join(second["provenance"]["path"])
    assert first["provenance"]["notes"][0].startswith("model llama@2 not cached at the site")


def test_a_peer_at_the_site_scores_above_another_site():
    f = _cell()
    a = _placed(model_task(f, "a", "m@1", size_gib=30))[0]
    site = "s1" if a["node_id"] in ("n0", "n1") else "s2"
    # fill the holder so the next one must go elsewhere
    f.state.cpu_free[f.state.node_index[a["node_id"]]] = 0
    b = _placed(model_task(f, "b", "m@1", size_gib=30, at=900_000))[0]
    peers = {"s1": ("n0", "n1"), "s2": ("n2", "n3")}[site]
    assert b["node_id"] in peers and b["node_id"] != a["node_id"]
    assert "a peer at the site" in b["provenance"]["notes"][0]


def test_tasks_without_a_model_decide_as_version_130():
    """Same inputs under 1.3.0 and 1.4.0: the same nodes, devices and scores; only the
    version and the scorer list in the path differ."""
    runs = []
    for version in ("1.3.0", "1.4.0"):
        f = _cell({**CFG, "version": version})
        model_task(f, "warm", "llama@2", size_gib=20)         # a cached model in the cell
        f.status("warm", "COMPLETED", at=2)
        for i in range(10):
            model_task(f, f"t{i}", None, at=10 + i, gpus=1 + i % 2)
        runs.append(_placed(f.outputs)[1:])
    old, new = runs
    assert len(old) == len(new) == 10
    for o, n in zip(old, new):
        assert (o["node_id"], o["gpu_devices"]) == (n["node_id"], n["gpu_devices"])
        assert o["provenance"]["candidates"] == n["provenance"]["candidates"]
        assert n["provenance"]["notes"] == [] and n["provenance"]["strategy"]["version"] == "1.4.0"


def _local_vs_peer(version):
    """The model sits on n0 (s1) after task a ends; a 2-GPU task without a model then takes
    half of n0, so for a 1-GPU task the packing terms favour the empty n1 by more than the
    few seconds a local read saves over a peer's LAN copy."""
    f = _cell({**CFG, "version": version})
    a = _placed(model_task(f, "a", "m@1", size_gib=8, site="s1"))[0]
    f.status("a", "COMPLETED", at=5)
    fill = _placed(model_task(f, "fill", None, at=10, gpus=2, site="s1"))[0]
    b = _placed(model_task(f, "b", "m@1", size_gib=8, at=600_000, site="s1", gpus=1))[0]
    assert a["node_id"] == fill["node_id"] == "n0"
    return b


def test_v150_reads_the_model_from_the_nodes_own_disk_rather_than_a_peers():
    b = _local_vs_peer("1.5.0")
    assert b["node_id"] == "n0" and b["provenance"]["strategy"]["version"] == "1.5.0"
    assert b["provenance"]["notes"][0].startswith("model m@1 cached on n0: saves")
    old = _local_vs_peer("1.4.0")                # 1.4.0, as recorded: the LAN copy to n1
    assert old["node_id"] == "n1" and "a peer at the site" in old["provenance"]["notes"][0]


def test_v140_ignores_local_points():
    from suanli.processors import strategies as S

    st = S.get_strategy("default", {**CFG, "version": "1.4.0", "model_locality": {"local_points": 5000}})
    ml = [p for p, _ in st.profile.scorers if p.name == "ModelLocality"][0]
    assert ml.args.local_points == 0.0
    st = S.get_strategy("default", {**CFG})
    ml = [p for p, _ in st.profile.scorers if p.name == "ModelLocality"][0]
    assert ml.args.local_points == 1000.0


def test_a_cell_scored_per_node_class_still_finds_the_holder():
    """80 identical nodes are one node class once the cell is empty again, so a cycle would
    score one row of them for every other (``framework.class_scores``); a task with a
    model must still see which of them holds it: ModelLocality reads a node's own cache, and
    says so (``per_class``), so that cycle scores every row."""
    f = Feed(strategy="default", config=CFG)
    for i in range(80):
        edge_node(f, f"n{i:02d}", "s1" if i < 40 else "s2")
    a = _placed(model_task(f, "a", "llama@2", size_gib=20, site="s2"))[0]
    assert a["node_id"] >= "n40"                       # not the first row of the class
    f.status("a", "COMPLETED", at=5)
    b = _placed(model_task(f, "b", "llama@2", size_gib=20, at=600_000))[0]
    assert b["node_id"] == a["node_id"]
    plain = _placed(model_task(f, "c", None, at=600_001))[0]      # no model: the class path's pick
    assert plain["provenance"]["notes"] == []
