"""Cost family: cost-cheapest and cost-spot-mix."""
from kit import Cell


def _priced(strategy, config=None):
    c = Cell(strategy, config)
    c.node("od", cpu=32000, gpus=4, model="T4", pricing="ON_DEMAND", price_per_hour=4.0)
    c.node("spot", cpu=32000, gpus=4, model="T4", pricing="SPOT", price_per_hour=1.5)
    c.node("rsv", cpu=32000, gpus=4, model="T4", pricing="RESERVED", price_per_hour=2.5)
    return c


def test_cheapest_feasible_node():
    c = _priced("cost-cheapest")
    c.task("a", gpus=1, milli=1000)
    assert c.node_of("a") == "spot"
    c.task("big", cpu=1000, gpus=4, milli=1000)     # spot is partly used now: next cheapest
    assert c.node_of("big") == "rsv"


def test_cheapest_uses_per_model_prices_when_node_has_none():
    c = Cell("cost-cheapest", {"price_by_model": {"T4": 0.5, "V100": 2.5}})
    c.node("v", cpu=32000, gpus=4, model="V100")
    c.node("t", cpu=32000, gpus=4, model="T4")
    c.task("a", gpus=1, milli=1000)
    assert c.node_of("a") == "t"


def test_spot_mix_by_qos():
    c = _priced("cost-spot-mix", {"reserved_marginal": 0.9})
    c.task("bronze", gpus=1, milli=1000, qos="BRONZE")
    assert c.node_of("bronze") == "spot"
    c.task("gold", gpus=1, milli=1000, qos="GOLD")
    assert c.node_of("gold") == "rsv"                  # 2.25 < 4.0 on demand < 16.5 risky spot
    c.task("pre", gpus=1, milli=1000, qos="GOLD", labels={"preemptible": "true"})
    assert c.node_of("pre") == "spot"


def test_spot_mix_reserved_first_when_already_paid():
    c = _priced("cost-spot-mix")
    c.task("silver", gpus=1, milli=1000)
    assert c.node_of("silver") == "rsv"
