import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import synth  # noqa: E402

from suanli.replay.export import build_logdir  # noqa: E402

DATA = Path("/work/shared/data/openb")


def make_logdir(out: Path, *, lo: int = 0, n_tasks: int = 200, redeliver_every: int = 0) -> Path:
    """A log directory of cell c1 built from a synthetic partition (cells c1 and c2)."""
    codec, registry = synth.offline_codec()
    records = synth.encode_log(codec, synth.inputs(n_tasks=n_tasks))
    decisions = synth.live_run(codec, records, redeliver_every=redeliver_every)
    key = b"c1"
    build_logdir(out, codec, registry, cell="c1", namespace="t", cell_log_topic=synth.CELL_LOG, partition=0,
                 lo=lo, hi=len(records), prefix=[r for r in records[:lo] if r.key == key],
                 inputs=[r for r in records[lo:] if r.key == key],
                 decision_candidates=[r for r in decisions if r.key == key], log=lambda _m: None)
    return out


@pytest.fixture()
def logdir(tmp_path) -> Path:
    return make_logdir(tmp_path / "log", redeliver_every=13)


@pytest.fixture(scope="session")
def openb_small(tmp_path_factory) -> tuple[str, str]:
    """Every 20th node and pod of openb (about 61 nodes, 408 pods), with times."""
    if not DATA.exists():
        pytest.skip("openb trace not available")
    d = tmp_path_factory.mktemp("openb")
    nodes = (DATA / "openb_node_list_gpu_node.csv").read_text().splitlines()
    pods = (DATA / "openb_pod_list_default.csv").read_text().splitlines()
    n, p = d / "nodes.csv", d / "pods.csv"
    n.write_text("\n".join(nodes[:1] + nodes[1::20]) + "\n")
    p.write_text("\n".join(pods[:1] + pods[1::20]) + "\n")
    return str(n), str(p)
