"""Green family: green-carbon and green-pue."""
from kit import Cell


def test_green_carbon_picks_lowest_emissions():
    c = Cell("green-carbon")
    c.node("coal", cpu=32000, gpus=4, pue=1.1, carbon_g_per_kwh=800.0)
    c.node("hydro", cpu=32000, gpus=4, pue=1.6, carbon_g_per_kwh=30.0)
    c.node("mixed", cpu=32000, gpus=4, pue=1.2, carbon_g_per_kwh=300.0)
    c.task("t", gpus=1, milli=1000)
    assert c.node_of("t") == "hydro"


def test_green_pue_prefers_efficient_site_then_busy_nodes():
    c = Cell("green-pue", {"idle_watts": 500})
    c.node("old", cpu=32000, gpus=4, pue=1.8)
    c.node("new1", cpu=32000, gpus=4, pue=1.1)
    c.node("new2", cpu=32000, gpus=4, pue=1.1)
    c.task("a", gpus=1, milli=1000)
    first = c.node_of("a")
    assert first in ("new1", "new2")
    c.task("b", gpus=1, milli=1000)
    assert c.node_of("b") == first                     # waking the other idle node costs its idle power
