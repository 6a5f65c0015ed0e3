"""`suanli whatif`: the JSON contract of the fgd protocol, timed and log reports."""
import json

from suanli.cli import main


def test_fgd_protocol_json_is_exactly_the_contract(openb_small, tmp_path):
    out = tmp_path / "p.json"
    rc = main(["whatif", "--nodes", openb_small[0], "--pods", openb_small[1], "--protocol", "fgd",
               "--seeds", "42-44", "--policy", "bestfit,default:bestfit_weight=2.0", "--workers", "1",
               "--json", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert set(doc) == {"protocol", "workload", "node_names", "policies"}
    assert doc["protocol"] == "fgd" and doc["workload"] == "pods" and doc["node_names"] == "shuffled"
    assert list(doc["policies"]) == ["bestfit", "default:bestfit_weight=2.0"]
    for v in doc["policies"].values():
        assert set(v) == {"unallocated_gpu_pct", "frag_gpu_pct", "seconds"}
        for k in ("unallocated_gpu_pct", "frag_gpu_pct"):
            assert set(v[k]) == {"mean", "sd", "per_seed"} and len(v[k]["per_seed"]) == 3
    assert not (tmp_path / "p-report").exists()         # fgd writes a report only when asked


def test_fgd_protocol_report(openb_small, tmp_path):
    rc = main(["whatif", "--nodes", openb_small[0], "--pods", openb_small[1], "--protocol", "fgd", "--seeds", "42",
               "--policy", "bestfit", "--workers", "1", "--report", str(tmp_path / "r")])
    assert rc == 0
    assert {p.name for p in (tmp_path / "r").iterdir()} == {"allocation_vs_arrived.png", "unallocated.png", "report.html"}


def test_timed_report_is_self_contained(openb_small, tmp_path, capsys):
    out = tmp_path / "t.json"
    rc = main(["whatif", "--nodes", openb_small[0], "--pods", openb_small[1], "--protocol", "timed", "--seeds", "42",
               "--shrink", "0.6", "--shrink-seed", "3", "--load", "3000", "--policy", "bestfit,default",
               "--json", str(out), "--quiet"])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["protocol"] == "timed" and doc["cluster"]["nodes_kept"] == round(0.6 * doc["cluster"]["nodes_total"])
    for pol in doc["policies"].values():
        assert set(pol["queueing_s"]) == {"n", "mean", "p50", "p95", "p99", "max"}
        assert {"gpu_allocation_pct", "frag_gpu_pct", "qos", "rejections", "placement_success_pct"} <= set(pol)
    report = tmp_path / "t-report"
    assert {p.name for p in report.iterdir()} == {"allocation_vs_demand.png", "queueing_cdf.png",
                                                   "fragmentation.png", "report.html"}
    page = (report / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3 and "http" not in page
    assert "random.Random(3).sample" in page
    table = capsys.readouterr().out
    assert "queueing s, all placed: p99" in table and "bestfit" in table


def test_log_whatif_compares_recorded_with_other_policies(logdir, tmp_path):
    out = tmp_path / "w.json"
    rc = main(["whatif", str(logdir), "--policy", "recorded,bestfit", "--json", str(out), "--quiet"])
    assert rc == 0
    doc = json.loads(out.read_text())
    rec, bf = doc["policies"]["recorded"], doc["policies"]["bestfit"]
    assert rec["strategy"] == "default" and bf["strategy"] == "bestfit"
    assert rec["tasks"]["submitted"] == bf["tasks"]["submitted"] == 200
    assert (tmp_path / "w-report" / "report.html").exists()
