"""replay/openb_variants.py: held-out stress variants of the openb default list."""
import csv

import pytest

from suanli.config import load_settings
from suanli.errors import ReplayError
from suanli.replay import openb_variants as ov

DATA = load_settings().openb_dir


@pytest.fixture(scope="module")
def rows():
    with open(DATA / "openb_pod_list_default.csv", newline="") as f:
        return list(csv.DictReader(f))


def _gpu(r):
    return int(r["num_gpu"]) * int(r["gpu_milli"])


def test_gpushare_reaches_its_share_of_gpu_demand(rows):
    v = ov.make_variant(rows, "gpushare60", seed=1)
    shared = sum(_gpu(r) for r in v if int(r["num_gpu"]) == 1 and int(r["gpu_milli"]) < 1000)
    assert abs(shared / sum(map(_gpu, v)) - 0.60) < 0.03
    assert len(v) == len(rows)
    assert sum(1 for r in v if r["num_gpu"] == "0") == sum(1 for r in rows if r["num_gpu"] == "0")


def test_multigpu_appends_multi_gpu_tasks_only(rows):
    v = ov.make_variant(rows, "multigpu30", seed=1)
    assert len(v) > len(rows) and all(int(r["num_gpu"]) > 1 for r in v[len(rows):])
    multi = sum(_gpu(r) for r in v if int(r["num_gpu"]) > 1)
    assert 0.30 <= multi / sum(map(_gpu, v)) < 0.31


def test_cpu_and_gpuspec(rows):
    v = ov.make_variant(rows, "cpu100", seed=1)
    cpu_only = sum(int(r["cpu_milli"]) for r in v if r["num_gpu"] == "0")
    gpu_tasks = sum(int(r["cpu_milli"]) for r in v if r["num_gpu"] != "0")
    assert 1.0 <= cpu_only / gpu_tasks < 1.01
    s = ov.make_variant(rows, "gpuspec33", seed=1)
    g = [r for r in s if r["num_gpu"] != "0"]
    assert abs(sum(1 for r in g if r["gpu_spec"]) / len(g) - 0.33) < 0.001
    assert {r["gpu_spec"] for r in g if r["gpu_spec"]} <= {spec for spec, _ in ov.SPECS}


def test_seeded_named_in_order_and_checked(rows, tmp_path):
    a, b = ov.make_variant(rows, "gpushare80", 3), ov.make_variant(rows, "gpushare80", 3)
    assert a == b and a != ov.make_variant(rows, "gpushare80", 4)
    assert [r["name"] for r in a[:2]] == ["openb-pod-0000", "openb-pod-0001"]
    with pytest.raises(ReplayError, match="unknown variant 'gpushared60'"):
        ov.make_variant(rows, "gpushared60")
    with pytest.raises(ReplayError, match="level 120 out of range"):
        ov.make_variant(rows, "gpushare120")
    (p,) = ov.write_variants(DATA / "openb_pod_list_default.csv", tmp_path, ("gpuspec20",))
    assert p.name == "openb_pod_list_gpuspec20.csv" and p.read_text().startswith("name,cpu_milli")
