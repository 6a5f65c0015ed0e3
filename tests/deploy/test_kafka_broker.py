"""The embedded broker's configuration: one node alone, or node N of a quorum of three
(deploy/kafka_broker.py), and the settings that choose between them (suanli/config.py)."""
from __future__ import annotations

import pytest

from suanli.config import load_settings
from suanli.deploy.kafka_broker import server_properties, voters_of
from suanli.errors import ConfigError


def _props(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def test_a_single_broker_is_its_own_quorum_with_replication_one(tmp_path):
    props = _props(server_properties(data_dir=tmp_path, port=19092, controller_port=19093))
    assert props["controller.quorum.bootstrap.servers"] == "127.0.0.1:19093"
    assert "controller.quorum.voters" not in props
    assert (props["default.replication.factor"], props["min.insync.replicas"]) == ("1", "1")


def test_a_quorum_node_names_every_voter_and_replicates_three_times(tmp_path):
    settings = load_settings(brokers=3, kafka_port=29092, controller_port=29093)
    voters = voters_of(settings.broker_ports)
    assert voters == "1@127.0.0.1:29093,2@127.0.0.1:29095,3@127.0.0.1:29097"
    props = _props(server_properties(data_dir=tmp_path, port=29094, controller_port=29095, node_id=2, voters=voters))
    assert props["node.id"] == "2" and props["controller.quorum.voters"] == voters
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:29094,CONTROLLER://127.0.0.1:29095"
    assert (props["default.replication.factor"], props["min.insync.replicas"]) == ("3", "2")
    assert (props["offsets.topic.replication.factor"], props["transaction.state.log.min.isr"]) == ("3", "2")


def test_settings_of_three_brokers_list_them_all_and_replicate_three_times():
    s = load_settings(brokers=3, kafka_port=29092, controller_port=29093)
    assert s.bootstrap_servers == "127.0.0.1:29092,127.0.0.1:29094,127.0.0.1:29096"
    assert s.replication == 3
    assert load_settings(brokers=1).replication == 1
    assert load_settings(brokers=3, kafka="kafka.example:9092").replication == 1   # external: its own defaults


def test_two_brokers_are_refused_with_the_reason():
    with pytest.raises(ConfigError, match="1 broker or 3"):
        load_settings(brokers=2)
