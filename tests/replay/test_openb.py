import pytest

from suanli.config import load_settings
from suanli.replay.openb import read_nodes, read_pods
from suanli.replay import fgd_protocol as fp

DATA = load_settings().openb_dir


def test_openb_import_counts():
    nodes = read_nodes(DATA / "openb_node_list_gpu_node.csv")
    assert len(nodes) == 1213
    assert sum(a["count"] for n in nodes for a in n["accelerators"]) == 6212
    pods = read_pods(DATA / "openb_pod_list_default.csv")
    assert len(pods) == 8152
    p = pods[1]
    assert p["resources"]["gpu_count"] == 1 and p["resources"]["gpu_milli"] == 460
    assert p["qos_tier"] == "GOLD" and p["labels"]["qos"] == "LS"
    assert p["submitted_at"] == 427061 * 1000


def test_multigpu20_has_five_columns():
    pods = read_pods(DATA / "openb_pod_list_multigpu20.csv")
    assert len(pods) == 8324 and pods[0]["submitted_at"] == 0


def test_gpu_spec_parsed():
    pods = read_pods(DATA / "openb_pod_list_gpuspec10.csv")
    specs = {tuple(p["resources"]["gpu_models"]) for p in pods}
    assert ("V100M16", "V100M32") in specs


def _small(tmp_path):
    nodes = (DATA / "openb_node_list_gpu_node.csv").read_text().splitlines()
    pods = (DATA / "openb_pod_list_default.csv").read_text().splitlines()
    n, p = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    n.write_text("\n".join(nodes[:1] + nodes[1::20]) + "\n")     # ~61 nodes
    p.write_text("\n".join(pods[:1] + pods[1::20]) + "\n")       # ~408 pods
    return str(n), str(p)


@pytest.mark.parametrize("policy", ["bestfit", "random", "fgd", "default"])
def test_protocol_small_subset_is_deterministic(tmp_path, policy):
    n, p = _small(tmp_path)
    a = fp.run_experiment(n, p, policy, 42)
    b = fp.run_experiment(n, p, policy, 42)
    assert a["unallocated_gpu_pct"] == b["unallocated_gpu_pct"] is not None
    assert a["frag_gpu_pct"] == b["frag_gpu_pct"]
    assert 0 <= a["unallocated_gpu_pct"] <= 100


def test_run_protocol_shape(tmp_path):
    n, p = _small(tmp_path)
    r = fp.run_protocol(n, p, ["bestfit"], [42, 43], workers=1)
    assert r["protocol"] == "fgd" and r["workload"] == "pods"
    v = r["policies"]["bestfit"]
    assert set(v) == {"unallocated_gpu_pct", "frag_gpu_pct", "seconds"}
    assert len(v["unallocated_gpu_pct"]["per_seed"]) == 2


def test_opaque_names_are_a_seeded_permutation_of_the_same_nodes():
    nodes = read_nodes(DATA / "openb_node_list_gpu_node.csv")[:50]
    a, b, c = fp.opaque_names(nodes, 42), fp.opaque_names(nodes, 42), fp.opaque_names(nodes, 43)
    assert a == b and a != c
    assert sorted(n["node_id"] for n in a) == [f"node-{k:04d}" for k in range(50)]
    # same registration order and resources; only the names (and so the name order) change
    for old, new in zip(nodes, a):
        assert {k: v for k, v in new.items() if k not in ("node_id", "event_id")} == \
               {k: v for k, v in old.items() if k not in ("node_id", "event_id")}
        assert new["event_id"] == f"{new['cell']}/node/{new['node_id']}"
    order = [nodes.index(next(o for o, n in zip(nodes, a) if n["node_id"] == nid))
             for nid in sorted(n["node_id"] for n in a)]
    assert order != list(range(50))          # the name order is not the CSV order


def test_node_names_option(tmp_path):
    n, p = _small(tmp_path)
    csv_run = fp.run_experiment(n, p, "gpu-packing", 42, node_names="csv")
    assert csv_run["unallocated_gpu_pct"] is not None
    from suanli.errors import ReplayError
    with pytest.raises(ReplayError, match="node_names must be one of shuffled, csv"):
        fp.run_experiment(n, p, "gpu-packing", 42, node_names="alphabetical")
    r = fp.run_protocol(n, p, ["bestfit"], [42], workers=1, node_names="csv")
    assert r["node_names"] == "csv"


@pytest.mark.parametrize("seed, size, digest", [(42, 10771, "0cecfb43a106f6ce"), (7, 10715, "ce0e7555426b26ec")])
def test_the_workload_is_the_order_the_dict_workload_had(seed, size, digest):
    """Pinned to what ``workload`` built before it came from ``workload_order`` (the
    digest of its task and event ids, from the code of b88e04e), and the experiment's
    decoded records are those dicts decoded."""
    import hashlib

    from suanli.processors.model import TaskSubmitted, from_avro

    nodes_csv, pods_csv = DATA / "openb_node_list_gpu_node.csv", DATA / "openb_pod_list_default.csv"
    _nodes, pods, _typical, capacity = fp.load_inputs(nodes_csv, pods_csv)
    w = fp.workload(pods, capacity, seed)
    ids = "\n".join(f"{t['task_id']} {t['event_id']}" for t in w)
    assert (len(w), hashlib.sha256(ids.encode()).hexdigest()[:16]) == (size, digest)
    records, gpus = fp.load_pod_records(nodes_csv, pods_csv)
    order = fp.workload_order(list(gpus), capacity, seed)
    assert len(order) == size and sum(c is not None for _, c in order) == size - len(pods)
    decoded = [records[i] if c is None else fp.copy_of(records[i], c) for i, c in order]
    assert decoded == [from_avro(TaskSubmitted, t) for t in w]


def test_gc_paused_restores_the_collector_as_it_was():
    import gc

    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        with fp.gc_paused():
            assert not gc.isenabled()
            raise RuntimeError("the block fails")
    assert gc.isenabled()
    gc.disable()
    try:
        with fp.gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()                # off before: left off
    finally:
        gc.enable()


def test_the_decoded_opaque_nodes_are_the_opaque_dicts_decoded():
    from suanli.processors.model import NodeRegistered, from_avro

    nodes_csv, pods_csv = DATA / "openb_node_list_gpu_node.csv", DATA / "openb_pod_list_default.csv"
    nodes = fp.load_inputs(nodes_csv, pods_csv)[0]
    records = fp.load_node_records(nodes_csv, pods_csv)
    assert list(records) == [from_avro(NodeRegistered, n) for n in nodes]
    for seed in (42, 43):
        assert list(fp.opaque_records(records, seed)) == [from_avro(NodeRegistered, n)
                                                          for n in fp.opaque_names(nodes, seed)]


def test_a_protocol_run_decodes_its_inputs_before_forking(tmp_path):
    """The parent decodes the lists (its forked workers inherit the records): with two
    workers it runs no experiment itself, so its caches are filled by run_protocol alone."""
    n, p = _small(tmp_path)
    fp._records.cache_clear()
    r = fp.run_protocol(n, p, ["bestfit"], [42, 43], workers=2)
    assert len(r["policies"]["bestfit"]["unallocated_gpu_pct"]["per_seed"]) == 2
    assert fp._records.cache_info().currsize == 1
