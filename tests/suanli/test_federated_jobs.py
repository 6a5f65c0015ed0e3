"""The federated job's pure parts: the spec, the plan, the round events (no services)."""
from __future__ import annotations

from pathlib import Path

import pytest

from suanli.errors import ValidationError
from suanli.federated_jobs import (Ports, cross_site_bytes, load_spec, plan, round_event, round_line, site_links)

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
