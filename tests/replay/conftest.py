import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from synth import DATA, make_logdir  # noqa: E402

@pytest.fixture()
def logdir(tmp_path) -> Path:
    return make_logdir(tmp_path / "log", redeliver_every=13)


@pytest.fixture(scope="session")
def openb_small(tmp_path_factory) -> tuple[str, str]:
    """Every 20th node and pod of openb (about 61 nodes, 408 pods), with times."""
    assert DATA.exists(), f"the openb trace is missing at {DATA} (set SUANLI_OPENB_DIR)"
    d = tmp_path_factory.mktemp("openb")
    nodes = (DATA / "openb_node_list_gpu_node.csv").read_text().splitlines()
    pods = (DATA / "openb_pod_list_default.csv").read_text().splitlines()
    n, p = d / "nodes.csv", d / "pods.csv"
    n.write_text("\n".join(nodes[:1] + nodes[1::20]) + "\n")
    p.write_text("\n".join(pods[:1] + pods[1::20]) + "\n")
    return str(n), str(p)
