"""The federated job's pure parts: the spec, the plan, the round events (no services)."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from suanli.errors import ValidationError
from suanli.federated_jobs import (FederatedResult, FederatedRunner, Ports, cross_site_bytes, growth_order, load_spec,
                                   partition_sites, partitions_to_add, partitions_to_release, plan, round_event,
                                   round_line, site_links, write_control)

SPEC = {"name": "digits", "tenant": "lab", "cell": "fed", "rounds": 3,
        "clouds": [{"site": "cloud-a", "clients": 1}, {"site": "cloud-b", "clients": 2}]}
PORTS = Ports(7000, (7100, 7101, 7102))


def test_the_plan_pins_each_client_to_its_cloud_and_numbers_partitions_in_cloud_order():
    p = plan(load_spec(SPEC), job_id="digits-1", job_dir=Path("/j"), ports=PORTS, python="/fl/bin/python")
    assert [(c.task_id, c.partition, c.site) for c in p.clients] == [
        ("digits-1-c0", 0, "cloud-a"), ("digits-1-c1", 1, "cloud-b"), ("digits-1-c2", 2, "cloud-b")]
    c1 = p.clients[1].spec
    assert c1.job == "digits-1"
    assert c1.labels == {"federated-role": "client", "data-site": "cloud-b", "partition": "1"}
    argv = c1.command
    assert argv[0] == "/fl/bin/python" and argv[1].endswith("connectors/flower/client.py")
    assert argv[argv.index("--superlink") + 1] == "127.0.0.1:7000"
    assert argv[argv.index("--clientappio-port") + 1] == "7101"
    assert argv[argv.index("--num-partitions") + 1] == "3"
    assert (c1.tenant, c1.cell) == ("lab", "fed")


def test_the_aggregator_is_free_to_go_where_traffic_is_least_unless_the_policy_is_home():
    traffic = plan(load_spec(SPEC), job_id="j", job_dir=Path("/j"), ports=PORTS, python="py").aggregator
    assert traffic.spec.job == "j"
    assert traffic.spec.labels == {"federated-role": "aggregator", "home-site": "cloud-a"}
    argv = traffic.spec.command
    assert argv[argv.index("--rounds") + 1] == "3" and "--secagg" in argv
    assert argv[argv.index("--threshold") + 1] == "2"           # max(2, ceil(3 * 3 / 5))
    assert argv[argv.index("--report") + 1] == "/j/rounds.jsonl"
    home = plan(load_spec({**SPEC, "aggregator": "home", "home": "cloud-b", "secagg": False}), job_id="j",
                job_dir=Path("/j"), ports=PORTS, python="py").aggregator
    assert home.spec.labels["data-site"] == "cloud-b" and "--no-secagg" in home.spec.command


@pytest.mark.parametrize("change, words", [
    ({"clouds": [{"site": "a", "clients": 1}, {"site": "a", "clients": 1}]}, "each site once"),
    ({"home": "nowhere"}, "home: 'nowhere' is not one of"),
    ({"threshold": 9}, "threshold: 9 is more than"),
    ({"quantise": "fp4"}, "quantise"),
    ({"quantise": "int8"}, "quantise: int8 needs secagg: false"),
    ({"clouds": [{"site": "a", "clients": 11}]}, "clouds.0.clients"),
    ({"rounds": 0}, "rounds"),
    ({"colour": "red"}, "colour"),
])
def test_a_bad_spec_names_the_field_to_fix(change, words):
    with pytest.raises(ValidationError, match=words):
        load_spec({**SPEC, **change})


def test_too_few_ports_for_the_clients_is_refused():
    with pytest.raises(ValidationError, match="3 clients need as many client ports"):
        plan(load_spec(SPEC), job_id="j", job_dir=Path("/j"), ports=Ports(1, (4,)), python="py")


def test_a_round_report_becomes_a_job_round_with_bytes_per_site_pair():
    report = {"round": 2, "accuracy": 0.81, "loss": 0.6, "clients": [0, 2], "bytes_up": {"0": 100, "2": 300},
              "bytes_down": {"0": 50, "2": 70}, "secagg": True, "ok": True, "quantise": "int8", "wall_ms": 1234}
    e = round_event(report, job_id="j", tenant="lab", cell="fed", task_of={"0": "j-c0", "2": "j-c2-r1"},
                    site_of={"j-c0": "cloud-a", "j-c2-r1": "cloud-b"}, aggregator_site="cloud-b",
                    aggregator_node="n-b", at=5)
    assert e["event_id"] == "j:round:2" and e["clients"] == ["j-c0", "j-c2-r1"]
    assert e["bytes_up"] == {"j-c0": 100, "j-c2-r1": 300} and e["aggregated"] is True
    assert e["links"] == [{"src_site": "cloud-a", "dst_site": "cloud-b", "bytes": 100},
                          {"src_site": "cloud-b", "dst_site": "cloud-a", "bytes": 50},
                          {"src_site": "cloud-b", "dst_site": "cloud-b", "bytes": 370}]
    assert cross_site_bytes(e["links"]) == 150
    assert "round 2/3: accuracy 0.810" in round_line(e, 3)


def test_a_round_without_a_model_says_so():
    e = round_event({"round": 1, "ok": False, "clients": [], "loss": None, "accuracy": None}, job_id="j", tenant="t",
                    cell="c", task_of={}, site_of={}, aggregator_site="s", aggregator_node="n", at=0)
    assert e["aggregated"] is False and "no model" in round_line(e, 1)


def test_site_links_are_sorted_and_sum_per_pair():
    links = site_links({"a": 1, "b": 2}, {}, {"a": "x", "b": "x"}, "y")
    assert links == [{"src_site": "x", "dst_site": "y", "bytes": 3}]


# ------------------------------------------------------------------------------ elastic (C15)
ELASTIC = {**SPEC, "clouds": [{"site": "cloud-a", "clients": 3}, {"site": "cloud-b", "clients": 2}],
           "elastic": {"min_clients": 2, "max_clients": 5, "window": 3, "batch_size": 32, "start_clients": 3}}
PORTS5 = Ports(7000, (7100, 7101, 7102, 7103, 7104))


def elastic_plan(spec: dict | None = None):
    return plan(load_spec(spec or ELASTIC), job_id="d-1", job_dir=Path("/j"), ports=PORTS5, python="py")


@pytest.mark.parametrize("elastic, words", [
    ({"min_clients": 0}, r"elastic: bad value for min_clients: 0; allowed: an integer >= 1"),
    ({"min_clients": 4, "max_clients": 3}, r"elastic: bad value for max_clients: 3; allowed: >= min_clients \(4\)"),
    ({"plateau": 2}, r"elastic: bad value for plateau: 2"),
    ({"colour": "red"}, r"elastic: unknown key 'colour'; allowed: min_clients, .*batch_size, start_clients"),
    ({"batch_size": 8}, r"elastic: bad value for batch_size: 8; allowed: from min_batch \(16\)"),
    ({"batch_size": "big"}, r"elastic: bad value for batch_size: 'big'"),
    ({"start_clients": 1}, r"elastic: bad value for start_clients: 1; allowed: an integer from min_clients \(2\)"),
    ({"max_clients": 5, "start_clients": 6}, r"start_clients: 6; allowed: an integer from min_clients \(2\) to "
                                              r"max_clients \(5\)"),
    ({"max_clients": 6}, r"elastic.max_clients: 6 is more than the job's 5 data partitions"),
    ({"min_clients": 1, "max_clients": 3}, r"elastic.min_clients: 1, but SecAgg\+ needs at least 2"),
])
def test_a_bad_elastic_block_names_what_to_fix(elastic, words):
    with pytest.raises(ValidationError, match=words):
        load_spec({**ELASTIC, "elastic": elastic})


def test_elastic_refuses_a_fixed_threshold_and_a_non_mapping():
    with pytest.raises(ValidationError, match="threshold: 3, but with elastic .* leave threshold out"):
        load_spec({**ELASTIC, "threshold": 3})
    with pytest.raises(ValidationError, match="elastic: a mapping of min_clients"):
        load_spec({**ELASTIC, "elastic": "yes"})
    # plain FedAvg may run a single client
    assert load_spec({**ELASTIC, "secagg": False, "elastic": {"min_clients": 1, "max_clients": 5}}).elastic.policy.min_clients == 1


def test_elastic_defaults_start_at_the_minimum_with_a_batch_size_in_range():
    e = load_spec({**ELASTIC, "elastic": {"max_clients": 4}}).elastic
    assert (e.policy.min_clients, e.start_clients, e.batch_size) == (2, 2, 32)
    assert load_spec({**ELASTIC, "elastic": {"max_clients": 5, "min_batch": 64, "max_batch": 128}}).elastic.batch_size == 64
    assert load_spec({**ELASTIC, "elastic": {"max_clients": 5, "min_batch": 1, "max_batch": 8}}).elastic.batch_size == 8
    # ElasticArgs' default max_clients (16) is more than this job's partitions: say so
    with pytest.raises(ValidationError, match=r"elastic.max_clients: 16 is more than the job's 5 data partitions"):
        load_spec({**ELASTIC, "elastic": {}})


def test_growth_goes_round_robin_over_the_clouds_and_the_job_starts_with_its_head():
    job = load_spec(ELASTIC)
    assert partition_sites(job) == [(0, "cloud-a"), (1, "cloud-a"), (2, "cloud-a"), (3, "cloud-b"), (4, "cloud-b")]
    assert growth_order(job) == [(0, "cloud-a"), (3, "cloud-b"), (1, "cloud-a"), (4, "cloud-b"), (2, "cloud-a")]
    p = elastic_plan()
    assert p.order == tuple(growth_order(job))
    assert [(c.task_id, c.partition, c.site) for c in p.clients] == [
        ("d-1-c0", 0, "cloud-a"), ("d-1-c3", 3, "cloud-b"), ("d-1-c1", 1, "cloud-a")]
    argv = p.clients[1].spec.command
    assert argv[argv.index("--num-partitions") + 1] == "5"        # every client knows all partitions
    assert argv[argv.index("--clientappio-port") + 1] == "7103"
    assert p.control == Path("/j/control.json")
    # without elastic: every partition at the start, in cloud order (as before)
    fixed = plan(load_spec(SPEC), job_id="j", job_dir=Path("/j"), ports=PORTS, python="py")
    assert fixed.order == ((0, "cloud-a"), (1, "cloud-b"), (2, "cloud-b")) and fixed.control is None
    assert "--control" not in fixed.aggregator.spec.command and "elastic" not in fixed.aggregator.spec.labels


def test_the_elastic_aggregator_carries_its_policy_and_takes_a_varying_number_of_clients():
    from suanli.processors.elastic import ELASTIC_LABEL, ElasticArgs, parse_label

    agg = elastic_plan().aggregator.spec
    args, batch = parse_label(agg.labels[ELASTIC_LABEL])
    assert args == ElasticArgs(min_clients=2, max_clients=5, window=3) and batch == 32
    assert agg.labels["federated-role"] == "aggregator"
    argv = agg.command
    flag = {k: argv[argv.index(k) + 1] for k in ("--min-clients", "--num-shares", "--threshold", "--batch-size",
                                                 "--control")}
    assert flag == {"--min-clients": "2", "--num-shares": "1.0", "--threshold": "0.6", "--batch-size": "32",
                    "--control": "/j/control.json"}
    assert "--secagg" in argv


def test_partition_choice_for_growth_and_shrink():
    order = [0, 3, 1, 4, 2]
    assert partitions_to_add(order, [0, 3], 4) == [1, 4]
    assert partitions_to_add(order, [0, 3, 1], 3) == []
    assert partitions_to_add(order, [0, 3, 1], 9) == [4, 2]            # no more partitions than there are
    assert partitions_to_add(order, [0, 1], 3) == [3]                   # the first unused in the order
    assert partitions_to_release([0, 3, 1, 4], 2) == [4, 1]             # newest first
    assert partitions_to_release([0, 3], 2) == [] and partitions_to_release([0, 3], 5) == []
    assert partitions_to_release([0, 3], -1) == [3, 0]


def test_the_control_file_is_replaced_whole(tmp_path: Path):
    path = tmp_path / "control.json"
    write_control(path, 64)
    write_control(path, 128)
    assert json.loads(path.read_text()) == {"batch_size": 128}
    assert [f.name for f in tmp_path.iterdir()] == ["control.json"]


def resized(decision_id: str, action: str, c0: int, c1: int, b0: int = 32, b1: int = 32, rnd: int = 4,
            job_id: str = "d-1") -> dict:
    return {"event_id": f"e-{decision_id}", "decision_id": decision_id, "task_id": "d-1-agg", "job_id": job_id,
            "tenant": "lab", "cell": "fed", "action": action, "clients_from": c0, "clients_to": c1,
            "batch_size_from": b0, "batch_size_to": b1, "round": rnd, "reason": f"because {decision_id}",
            "at": 1, "provenance": {}}


class FakeService:
    def __init__(self) -> None:
        self.submitted: list[str] = []
        self.cancelled: list[tuple[str, str]] = []

    async def submit_task(self, tenant: str, spec) -> None:
        self.submitted.append(spec.id)

    async def cancel_task(self, tenant: str, task_id: str, request) -> None:
        self.cancelled.append((task_id, request.reason))


def test_the_runner_applies_its_jobs_resizes_and_shrinks_are_not_losses(tmp_path: Path):
    job = load_spec({**ELASTIC, "elastic": {**ELASTIC["elastic"], "start_clients": 2}})
    p = plan(job, job_id="d-1", job_dir=tmp_path, ports=PORTS5, python="py")
    lines: list[str] = []
    runner = FederatedRunner(job, p, settings=None, ports=PORTS5, python="py", say=lines.append)
    service, model, result = FakeService(), SimpleNamespace(lifecycle=SimpleNamespace(tasks={})), FederatedResult("d-1", "")
    assert runner.running == [0, 3]

    runner._listen("decision", "JobResized", resized("a", "grow", 2, 4, rnd=3))
    runner._listen("decision", "JobResized", resized("a", "grow", 2, 4, rnd=3))          # a repeat
    runner._listen("decision", "JobResized", resized("x", "grow", 2, 5, job_id="other-1"))
    asyncio.run(runner._apply_resizes(service, model, result))
    assert service.submitted == ["d-1-c1", "d-1-c4"] and runner.running == [0, 3, 1, 4]
    assert "[job] grow 2 -> 4 clients: because a" in lines

    runner._listen("decision", "JobResized", resized("b", "shrink", 4, 2, b1=64, rnd=5))
    asyncio.run(runner._apply_resizes(service, model, result))
    assert service.cancelled == [("d-1-c4", "job d-1 shrinks: because b"), ("d-1-c1", "job d-1 shrinks: because b")]
    assert runner.running == [0, 3]
    assert json.loads((tmp_path / "control.json").read_text()) == {"batch_size": 64}
    # the cancelled clients' end is not a loss; the running ones' is
    assert runner._partition_of("d-1-c4") is None and runner._partition_of("d-1-c1") is None
    assert runner._partition_of("d-1-c3") == 3

    runner._listen("decision", "JobResized", resized("c", "hold", 2, 2, b0=64, b1=32, rnd=6))
    runner._listen("decision", "JobResized", resized("d", "grow", 2, 3, rnd=7))
    asyncio.run(runner._apply_resizes(service, model, result))
    assert json.loads((tmp_path / "control.json").read_text()) == {"batch_size": 32}
    assert service.submitted[-1] == "d-1-c1-r1" and runner.running == [0, 3, 1]   # partition 1 again, a new task
    assert "[job] hold 2 clients, batch 64 -> 32: because c" in lines

    assert [(r["action"], r["clients_from"], r["clients_to"], r["batch_size_to"], r["round"]) for r in result.resizes] == [
        ("grow", 2, 4, 32, 3), ("shrink", 4, 2, 64, 5), ("hold", 2, 2, 32, 6), ("grow", 2, 3, 32, 7)]
    assert result.resizes[1]["cancelled"] == ["d-1-c4", "d-1-c1"] and result.resizes[3]["started"] == ["d-1-c1-r1"]
    assert result.to_json()["resizes"] == result.resizes and result.lost == []

    # a lost client is still replaced in its place
    view = SimpleNamespace(status="FAILED", message="node lost")
    asyncio.run(runner._client_ended(service, "d-1-c3", view, result))
    assert service.submitted[-1] == "d-1-c3-r1" and runner.running == [0, 3, 1]
    assert runner.holder[3] == "d-1-c3-r1" and result.replacements == ["d-1-c3-r1"]
