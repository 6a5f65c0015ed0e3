"""Label-based matching: the rule table routes each task; provenance records the rule."""
import json

from kit import Cell

RULES = [
    {"name": "realtime", "match": {"workload": "realtime-inference"}, "strategy": "latency"},
    {"name": "training", "match": {"workload": "training"},
     "blend": [{"strategy": "gpu-packing", "weight": 1.0}, {"strategy": "default", "weight": 1.0}]},
    {"name": "analytics", "match": {"workload": ["analytics", "etl"]}, "strategy": "analytics"},
    {"name": "batch", "match": {"workload": "batch"}, "strategy": "batch"},
]


def _cell(strategy="rules"):
    c = Cell(strategy, {"rules": RULES})
    c.node("gpu-hz", cpu=64000, gpus=8, model="G2", zone="hz-a", region="hangzhou")
    c.node("gpu-bj", cpu=64000, gpus=8, model="G2", zone="bj-a", region="beijing")
    c.node("cpu-bj", cpu=32000, zone="bj-a", region="beijing")
    return c


def test_realtime_inference_goes_to_latency():
    c = _cell()
    c.task("inf", gpus=1, milli=250, labels={"workload": "realtime-inference", "users-zone": "hz-a"})
    p = c.placed("inf")
    assert p["node_id"] == "gpu-hz"
    prov = p["provenance"]
    assert prov["matched_rule"] == "rules[0] realtime: workload=realtime-inference -> latency"
    assert prov["strategy"]["name"] == "latency"
    assert "match: " + prov["matched_rule"] in prov["path"]


def test_training_goes_to_packing_blend():
    c = _cell()
    c.task("w0", gpus=2, milli=1000, labels={"workload": "training"})
    c.task("w1", gpus=2, milli=1000, labels={"workload": "training"})
    p0, p1 = c.placed("w0"), c.placed("w1")
    assert p0["node_id"] == p1["node_id"]                 # packed onto one node
    assert p1["provenance"]["strategy"]["name"] == "blend(gpu-packing:1,default:1)"
    assert p1["provenance"]["matched_rule"].startswith("rules[1] training: workload=training -> blend(")


def test_analytics_goes_to_cpu_memory_strategy():
    c = _cell()
    c.task("etl", cpu=8000, mem=16384, labels={"workload": "etl"})
    p = c.placed("etl")
    assert p["node_id"] == "cpu-bj"
    assert p["provenance"]["matched_rule"] == "rules[2] analytics: workload=analytics|etl -> analytics"


def test_batch_goes_to_cpsat():
    c = _cell()
    c.task("b", gpus=1, milli=500, labels={"workload": "batch"})
    prov = c.placed("b")["provenance"]
    assert prov["strategy"]["name"] == "batch" and prov["matched_rule"].startswith("rules[3] batch")
    assert any(line.startswith("batch: CP-SAT") for line in prov["path"])


def test_unmatched_uses_cell_strategy_and_rules_work_on_any_strategy():
    c = _cell("bestfit")
    c.task("plain", cpu=1000)
    prov = c.placed("plain")["provenance"]
    assert prov["matched_rule"] is None and prov["strategy"]["name"] == "bestfit"
    assert "match: no rule -> bestfit" in prov["path"]
    c.task("inf", gpus=1, milli=250, labels={"workload": "realtime-inference", "users-zone": "bj-a"})
    assert c.placed("inf")["provenance"]["strategy"]["name"] == "latency"


def test_matching_is_deterministic():
    def run():
        c = _cell()
        for i, w in enumerate(["training", "realtime-inference", "etl", "batch", "other"] * 3):
            c.task(f"t{i}", cpu=1000, gpus=1, milli=1000 if w == "training" else 300,
                   labels={"workload": w, "users-zone": "bj-a"})
        return json.dumps(c.outputs, sort_keys=True)
    assert run() == run()


def test_typed_rules_and_task_records_match_like_the_json_forms():
    from suanli.processors import matching
    from suanli.processors import strategies as S

    c = _cell()
    c.task("inf", gpus=1, milli=250, labels={"workload": "realtime-inference"})
    c.task("w", gpus=2, milli=1000, labels={"workload": "training"}, qos="GOLD")
    typed = S.parse_config("rules", {"rules": RULES}).rules
    for tid, want in (("inf", "rules[0] realtime: workload=realtime-inference -> latency"),
                      ("w", "rules[1] training: workload=training -> blend(gpu-packing:1,default:1)")):
        rec = c.state.tasks[tid]
        plain = {"qos": rec.task.qos_tier, "tenant": rec.task.tenant, "labels": rec.task.labels}
        for rules in (RULES, typed):
            for task in (rec, plain):
                i, rule = matching.match(rules, task, rec.task.request.kind)
                assert matching.describe(i, rule) == want
    gold = [{"match": {"@qos": "GOLD", "@kind": "whole"}, "strategy": "bestfit"}]
    rec = c.state.tasks["w"]
    assert matching.match(S.parse_config("rules", {"rules": gold}).rules, rec, "whole")[0] == 0
    assert matching.match(gold, c.state.tasks["inf"], "shared") is None
