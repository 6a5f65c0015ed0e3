"""Exit codes of `suanli replay`, `whatif` and `export`: 0 ok, 1 divergence, 2 refused."""
import json

from suanli.cli import main
from synth import DATA


def test_replay_verify_identical_then_diverged(logdir, tmp_path, capsys):
    out = tmp_path / "v.json"
    assert main(["replay", str(logdir), "--verify", "--quiet", "--json", str(out)]) == 0
    assert "IDENTICAL" in capsys.readouterr().out
    assert json.loads(out.read_text())["identical"] is True

    path = logdir / "strategy.json"
    path.write_text(path.read_text().replace('"bestfit_weight": 1.0', '"bestfit_weight": 2.0'))
    assert main(["replay", str(logdir), "--verify", "--quiet", "--json", str(out)]) == 1
    text = capsys.readouterr().out
    assert "DIVERGED at decision #0" in text and "config_digest" in text
    doc = json.loads(out.read_text())
    assert doc["identical"] is False and doc["divergence"]["index"] == 0
    assert doc["divergence"]["recorded"]["input"].startswith("t.cells[0]@")


def test_replay_without_verify_prints_counts(logdir, capsys):
    assert main(["replay", str(logdir), "--quiet"]) == 0
    assert "TaskPlaced" in capsys.readouterr().out


def test_refused_inputs_exit_2(tmp_path, capsys, openb_small):
    assert main(["replay", str(tmp_path / "missing"), "--verify"]) == 2
    assert main(["whatif", "--protocol", "timed", "--nodes", openb_small[0]]) == 2
    assert main(["whatif"]) == 2
    assert main(["whatif", "--protocol", "fgd", "--nodes", openb_small[0], "--pods", openb_small[1],
                 "--policy", "nosuch"]) == 2
    assert main(["export", "--cell", "c", "--out", str(tmp_path / "x"), "--from-offset", "1", "--since", "0"]) == 2
    err = capsys.readouterr().err
    assert "not a directory" in err and "unknown strategy 'nosuch'" in err


def test_timed_mode_refuses_multigpu20(tmp_path, capsys):
    pods = DATA / "openb_pod_list_multigpu20.csv"
    assert pods.exists(), f"openb trace missing at {pods}"
    rc = main(["whatif", "--protocol", "timed", "--nodes", str(DATA / "openb_node_list_gpu_node.csv"),
               "--pods", str(pods), "--json", str(tmp_path / "x.json")])
    assert rc == 2
    assert "not a timed trace" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()
