"""`suanli strategy bench`: the FGD-protocol table for one strategy."""
from suanli.cli import main
from suanli.config import load_settings

DATA = load_settings().openb_dir


def _subset(tmp_path):
    nodes = (DATA / "openb_node_list_gpu_node.csv").read_text().splitlines()
    pods = (DATA / "openb_pod_list_default.csv").read_text().splitlines()
    (tmp_path / "openb_node_list_gpu_node.csv").write_text("\n".join(nodes[:1] + nodes[1::20]) + "\n")
    (tmp_path / "openb_pod_list_default.csv").write_text("\n".join(pods[:1] + pods[1::20]) + "\n")
    return tmp_path


def test_strategy_bench_prints_the_table_and_its_node_naming(tmp_path, capsys):
    data = str(_subset(tmp_path))
    for names in ("shuffled", "csv"):
        assert main(["strategy", "bench", "gpu-packing", "--data", data, "--seeds", "42-43",
                     "--workers", "1", "--node-names", names]) == 0
        out = capsys.readouterr().out
        assert f"(seeds 42-43, FGD protocol, node names {names}, 2 runs)" in out
        assert "gpu-packing" in out and "per seed: " in out


def test_strategy_bench_refuses_unknown_names_and_missing_data(tmp_path, capsys):
    assert main(["strategy", "bench", "no-such", "--data", str(tmp_path)]) != 0
    assert "unknown strategy 'no-such'" in capsys.readouterr().err
    assert main(["strategy", "bench", "bestfit", "--data", str(tmp_path)]) != 0
    assert "openb trace not found" in capsys.readouterr().err
