"""processors/federated.py: the traffic model of a federated round and the choice of the
aggregator's node (pure: distances are given as arrays)."""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from suanli.processors.federated import (Client, aggregator_costs, best_index, choose_aggregator, describe,
                                         home_site_of, job_of, quantisation_factor, role_of, round_traffic)

MB = 1_000_000


def test_job_of_reads_the_label_until_the_task_has_a_job_id():
    assert job_of(SimpleNamespace(labels={"job": "j1"})) == "j1"
    assert job_of(SimpleNamespace(labels={})) is None
    assert job_of(SimpleNamespace(labels={"job": ""})) is None
    assert job_of(SimpleNamespace(labels={"job": "j1"}, job_id="j2")) == "j2"      # the field wins once set
    assert job_of(SimpleNamespace(labels={"job": "j1"}, job_id=None)) == "j1"
    assert role_of(SimpleNamespace(labels={"federated-role": "client"})) == "client"
    assert role_of(SimpleNamespace(labels={"federated-role": "boss"})) is None


def test_round_traffic_counts_links_and_cloud_pairs_with_int8_updates():
    r = round_traffic(["a", "a", "b"], "b", up_bytes=4 * MB, down_bytes=4 * MB, quantisation="int8")
    # int8: each update is a quarter of its float32 size; the global model goes down as float32
    assert r.factor == 4.0 and r.quantisation == "int8"
    assert r.links == {("a", "b"): 2 * MB, ("b", "a"): 8 * MB, ("b", "b"): 5 * MB}
    assert r.pairs == {("a", "b"): 10 * MB}
    assert r.cross_cloud_bytes == 10 * MB
    assert r.total_bytes == 15 * MB
    down_too = round_traffic(["a"], "b", 4 * MB, 4 * MB, "int8", quantise_down=True)
    assert down_too.links == {("a", "b"): MB, ("b", "a"): MB}
    plain = round_traffic(["a", "c"], "b", 3, 5)
    assert plain.pairs == {("a", "b"): 8, ("b", "c"): 8} and plain.factor == 1.0
    assert round_traffic(["a"], "b", 5, 0, "int8").links[("a", "b")] == 2        # whole bytes, rounded up


def test_round_traffic_refuses_unknown_encodings_and_negative_sizes():
    with pytest.raises(ValueError, match="unknown quantisation 'int3'"):
        round_traffic(["a"], "b", 1, 1, "int3")
    with pytest.raises(ValueError, match=">= 0"):
        round_traffic(["a"], "b", -1, 1)
    assert quantisation_factor("") == 1.0 and quantisation_factor("float16") == 2.0


def _three():
    """Candidates a-1, a-2 (site a) and b-1 (site b); one client at a, two at b; 1 MB each way."""
    clients = [Client("c0", "a", "site:a", MB, MB), Client("c1", "b", "site:b", MB, MB),
               Client("c2", "b", "site:b", MB, MB)]
    dist = {"site:a": np.array([1.0, 1.0, 50.0]), "site:b": np.array([50.0, 50.0, 1.0])}
    return aggregator_costs(clients, ["a-1", "a-2", "b-1"], ["a", "a", "b"], dist)


def test_costs_weigh_bytes_by_path_and_count_cross_cloud_bytes():
    costs = _three()
    # a-1: 2 MB x 1 ms + 4 MB x 50 ms; b-1: 2 MB x 50 ms + 4 MB x 1 ms (byte.ms per round)
    assert costs.weighted.tolist() == [202 * MB, 202 * MB, 104 * MB]
    assert costs.cross_cloud.tolist() == [4 * MB, 4 * MB, 2 * MB]
    assert costs.pairs("a") == ((("a", "b"), 4 * MB),)
    assert costs.candidate(2).pair_bytes == ((("a", "b"), 2 * MB),)


def test_the_site_with_most_client_traffic_wins_and_the_home_cloud_is_compared():
    costs = _three()
    home = home_site_of({}, costs.clients)            # the first client's site
    assert home == "a"
    choice = choose_aggregator(costs, home)
    assert choice.chosen.node_id == "b-1" and choice.home.node_id == "a-1"
    assert choice.explanation == ("aggregator on node:b-1 (site b): 104 MB·ms/round vs 202 at home a on node:a-1 "
                                  "(-49 %) over 3 clients; cross-cloud 2 MB/round vs 4 MB")
    at_home = describe(costs, 2, "b")
    assert at_home.home == at_home.chosen and "the home cloud" in at_home.explanation
    assert home_site_of({"home-site": "z"}, costs.clients) == "z"
    assert "no candidate at home z" in describe(costs, 2, "z").explanation
    assert "no home cloud named" in describe(costs, 2, None).explanation


def test_ties_go_to_the_smallest_node_id_whatever_the_order():
    clients = [Client("c0", "a", "site:a", MB, MB)]
    dist = {"site:a": np.array([1.0, 1.0, 1.0])}
    fwd = aggregator_costs(clients, ["a-3", "a-1", "a-2"], ["a"] * 3, dist)
    rev = aggregator_costs(clients, ["a-2", "a-1", "a-3"], ["a"] * 3, dist)
    assert choose_aggregator(fwd).chosen.node_id == choose_aggregator(rev).chosen.node_id == "a-1"


def test_masked_best_is_the_smallest_id_among_the_allowed():
    clients = [Client("c0", "a", "site:a", MB, MB)]
    costs = aggregator_costs(clients, ["a-3", "a-1", "a-2"], ["a"] * 3, {"site:a": np.ones(3)})
    assert costs.node_ids[best_index(costs, np.array([True, False, True]))] == "a-2"


def test_an_unreachable_node_is_never_chosen():
    clients = [Client("c0", "a", "site:a", MB, MB), Client("c1", "b", "site:b", MB, 0)]
    dist = {"site:a": np.array([1.0, 2.0]), "site:b": np.array([math.inf, 1.0])}
    costs = aggregator_costs(clients, ["n1", "n2"], ["a", "b"], dist)
    assert math.isinf(costs.weighted[0])
    assert choose_aggregator(costs).chosen.node_id == "n2"
    none = aggregator_costs(clients, ["n1"], ["a"], {"site:a": np.array([1.0]), "site:b": np.array([math.inf])})
    assert choose_aggregator(none) is None
    assert "cannot reach" in describe(none, 0, "a").explanation


def test_separate_download_paths_and_shape_checks():
    clients = [Client("c0", "a", "site:a", MB, 2 * MB)]
    costs = aggregator_costs(clients, ["n1"], ["b"], {"site:a": np.array([1.0])}, {"site:a": np.array([3.0])})
    assert costs.weighted.tolist() == [7 * MB]
    with pytest.raises(ValueError, match="expected"):
        aggregator_costs(clients, ["n1", "n2"], ["b", "b"], {"site:a": np.array([1.0])})
