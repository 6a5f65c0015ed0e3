"""``federated``: ``default`` plus the federated-training plugins (issue 22,
``plugins/federated.py``).

* ``DataSite`` (filter, before ``TopologyNear``): a task labelled ``data-site=<s>`` runs
  only at site ``s`` (a federated client stays with its data partition); no node at ``s``
  in the cell: TaskUnschedulable. ``TopologyNear`` then keeps the nearest of those nodes to
  the place (it counts ``DataSite`` among the filters that make a node feasible, so its
  "nearest" is inside the site).
* ``AggregatorTraffic`` (scorer, weight ``traffic_weight``): a task labelled
  ``federated-role=aggregator`` and ``job=<id>`` goes where one round's weighted traffic to
  the job's clients (bytes x topology path ms) is least; ``default``'s scores only choose
  among nodes within about 1 % of the traffic range of each other (the scorer is
  normalised 0..100; its weight, 10,000 by default, outweighs every other term). The
  decision's path says where the aggregator went and what it saves against the home cloud.

Use it for cells (or, through a label rule, for tasks) that run federated jobs. It is not
folded into ``default``: ``DataSite`` reads ``data-site`` as a hard site, where
``default``'s ``TopologyNear`` reads it as a soft place (a site, zone, rack or node), and a
new scorer changes the scorer list every decision's path names. Tasks without the labels
are placed by it exactly as ``default`` places them, though their paths name the longer
scorer list.

Select it for a whole cell with ``PolicyChanged(strategy="federated", config={...})``, or
per task from a ``default`` cell with a rule: ``{"rules": [{"name": "federated", "match":
{"federated-role": "*"}, "strategy": "federated"}]}``. Config: every key of ``default``
(``version`` is the version of ``default``'s blend underneath) plus ``traffic_weight`` and
``aggregator`` (``AggregatorTraffic``'s arguments: default bytes per round, quantisation of
downloads, the cost of an unreachable node, whether to explain).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..args import arg
from ..framework import Profile
from ..plugins.basic import FILTERS
from ..plugins.federated import AggregatorTrafficArgs
from ..plugins.topology import TopologyNearArgs
from . import default
from ._profile import standard_profile

NAME = "federated"
VERSION = "1.0.0"


@dataclass(frozen=True, slots=True)
class Args(default.Args):
    traffic_weight: float = arg(10_000.0, "weight of AggregatorTraffic (0..100 after normalisation): large, so "
                                "the traffic of a round decides where an aggregator goes", ge=0)
    aggregator: AggregatorTrafficArgs = arg(AggregatorTrafficArgs(), "AggregatorTraffic's arguments")


def build(args: Args) -> Profile:
    base = default.build(args)
    scorers = [{"name": p.name, "args": p.args, "weight": w} for p, w in base.scorers]
    if args.traffic_weight:
        scorers.append({"name": "AggregatorTraffic", "args": args.aggregator, "weight": args.traffic_weight})
    near = {"name": "TopologyNear", "args": TopologyNearArgs(feasible=(*FILTERS, "DataSite"))}
    profile = standard_profile(args, scorers, filters=[*FILTERS, "DataSite", near])
    profile.stable_candidates = base.stable_candidates
    return profile
