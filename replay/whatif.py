"""``suanli whatif``: the same inputs under several policies, compared.

Three sources of inputs, one core (``processors.decide``, through ``CellRunner`` for logs):

* ``fgd``: the FGD evaluation protocol (``fgd_protocol.run_protocol``), 10 seeds;
* ``timed``: an openb trace with arrivals and departures (``timed.py``);
* ``log``: a log directory's recorded inputs (``rerun.replay_logdir``), the policy under
  test replacing the recorded one for the whole run (recorded PolicyChanged inputs are
  dropped); the policy ``recorded`` is the directory's own ``strategy.json``, with its
  PolicyChanged inputs kept, i.e. what the cell did.

Each returns a result dict (see ``report.py`` for its rendering); for ``fgd`` the keys
``protocol, workload, policies`` are exactly ``run_protocol``'s and are all that
``--json`` writes; ``setup``/``series`` only feed the report.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from suanli.errors import ReplayError

from . import fgd_protocol, timed
from .logdir import LogDir
from suanli.processors.model import from_avro

from .metrics import RunMetrics, input_time
from .progress import Progress
from .rerun import replay_logdir
from .strategy_config import explicit, parse_policy

DEFINITIONS = [
    "queueing time = the placement decision's time (TaskPlaced provenance.decided_at, an event time) "
    "minus the task's submitted_at; percentiles by linear interpolation (numpy) over placed tasks",
    "GPU allocation % = GPU milli held by placed tasks / cluster GPU capacity; demand % = GPU milli of tasks "
    "placed or waiting / capacity; time means over the arrival window (first to last submission)",
    "fragmentation % = expected GPU milli the workload's typical tasks cannot use (FGD paper, processors/frag.py) "
    "/ capacity, sampled at evenly spaced inputs",
    "abandoned = a task withdrawn while still waiting (timed mode: its departure time came before any placement)",
    "rejections: 'unschedulable' = refused for good (no node could ever host it), by reason; 'had to wait' = "
    "the filter that removed the most nodes at a task's first attempt",
]


def run_fgd(nodes_csv: str, pods_csv: str, policies: list[str], seeds: list[int], *, workers: int = 2,
            curves: bool = False, node_names: str = "shuffled", progress: bool = False) -> dict[str, Any]:
    for p in policies:
        parse_policy(p)
    result = fgd_protocol.run_protocol(nodes_csv, pods_csv, policies, seeds, workers, node_names, progress=progress)
    result["setup"] = {"nodes": nodes_csv, "pods": pods_csv, "seeds": f"{seeds[0]}..{seeds[-1]} ({len(seeds)})",
                       "protocol": "../shared/data/openb/PROTOCOL.md steps 1-8 (replay/fgd_protocol.py)"}
    if curves:
        with Progress(len(policies), f"whatif curves (seed {seeds[0]})", unit="runs", enabled=progress) as bar:
            result["series"] = {}
            for p in policies:
                result["series"][p] = {"seed": seeds[0], "curve": fgd_protocol.run_experiment(
                    nodes_csv, pods_csv, p, seeds[0], full=True, curve=True, node_names=node_names)["curve"]}
                bar.update()
    return result


def contract(result: dict[str, Any]) -> dict[str, Any]:
    """What ``--json`` writes for the fgd protocol (the CLI contract)."""
    return {k: result[k] for k in ("protocol", "workload", "node_names", "policies")}


def run_timed(nodes_csv: str, pods_csv: str, policies: list[str], *, seed: int = 42, shrink: float | None = None,
              shrink_seed: int = 0, load: float = 1.0, progress: bool = False) -> dict[str, Any]:
    specs = [parse_policy(p) for p in policies]
    w = timed.build(nodes_csv, pods_csv, shrink_fraction=shrink, shrink_seed=shrink_seed, load=load)
    out: dict[str, Any] = {"protocol": "timed", "workload": w.name, "policies": {}, "series": {}}
    for label, spec in specs:
        r = timed.run(w, spec, seed=seed, progress=progress)
        out["policies"][label] = {"strategy": spec["strategy"], "config": _brief(r["config"]), **r["summary"]}
        out["series"][label] = r["series"]
    c = w.cluster.description
    out["setup"] = {
        "nodes": f"{nodes_csv} ({c['nodes_total']:,} nodes, {c['gpus_total']:,} GPUs)",
        "cluster": f"{c['nodes_kept']:,} nodes, {c['gpus_kept']:,} GPUs: {c['method']}",
        "pods": f"{pods_csv} ({w.info['tasks']:,} tasks; {w.info['without_departure']} without a departure)",
        "arrivals": "creation_time, as in the trace (load 1)" if load == 1 else
                    f"creation_time / {load:g} (load factor {load:g}: arrivals compressed, lifetimes kept)",
        "departures": "arrival + (deletion_time - creation_time): COMPLETED if placed, TaskCancelled "
                      "(abandoned) if still waiting; at equal times departures first",
        "seed": str(seed),
    }
    out["cluster"] = c
    out["load"] = load
    out["seed"] = seed
    out["definitions"] = DEFINITIONS
    return out


def _brief(config: dict[str, Any]) -> dict[str, Any]:
    """A config for display: long typical-task lists summarised."""
    return {k: (f"<{len(v)} typical task shapes>" if k == "typical_tasks" and isinstance(v, list) else v)
            for k, v in config.items()}


def run_log(path: str | Path, policies: list[str], *, progress: bool = False) -> dict[str, Any]:
    log = LogDir.open(path)
    out: dict[str, Any] = {"protocol": "log", "workload": log.cell, "policies": {}, "series": {}}
    for item in policies:
        if item == "recorded":
            label, spec, drop = "recorded", None, False
        else:
            (label, spec), drop = parse_policy(item), True
        codec = log.codec()
        metrics = RunMetrics(None, frag_every=max(1, int(log.meta["counts"]["inputs"]) // 200))

        def observe(record, produced, state, metrics=metrics, codec=codec):
            try:
                event = from_avro(*codec.decode(record.value))
            except Exception:  # noqa: BLE001 - the runner dead-letters it; nothing to count
                return
            metrics.on_input(event, input_time(event))
            for value in produced:
                metrics.on_decision(from_avro(*codec.decode(value)))
            metrics.after_input(state)

        # The observer sees each input after the core decided it; on_input only needs the
        # input's own fields, so the order of the two calls does not change any figure.
        rp = replay_logdir(log, policy=spec, drop_policy_changes=drop, progress=progress, observer=observe,
                           label=f"whatif {label}")
        metrics.finish(rp.state)
        summary = metrics.summary()
        summary.update(seconds=round(rp.seconds, 3), inputs=rp.inputs, events_per_s=round(rp.events_per_s),
                       dropped_policy_changes=rp.dropped_policy_changes)
        out["policies"][label] = {"strategy": rp.policy["strategy"], "config": _brief(explicit(rp.policy)["config"]),
                                  **summary}
        out["series"][label] = metrics.plot_series()
    out["setup"] = {"log directory": str(path), "cell": log.cell,
                    "inputs": f"{log.meta['counts']['inputs']:,} records of {log.meta['inputs']['topic']}"
                              f"[{log.meta['inputs']['partition']}] offsets [{log.meta['inputs']['from_offset']}, "
                              f"{log.meta['inputs']['to_offset']})",
                    "policy under test": "replaces the recorded policy for the whole run ('recorded' = as run)"}
    out["definitions"] = DEFINITIONS
    return out


def validate_sources(log: str | None, nodes: str | None, pods: str | None, protocol: str | None) -> str:
    """Which mode the arguments ask for; ReplayError when they do not add up."""
    if log:
        if protocol:
            raise ReplayError("give either a log directory or --protocol with --nodes/--pods, not both")
        return "log"
    if protocol not in ("fgd", "timed"):
        raise ReplayError("whatif needs a log directory, or --protocol fgd|timed with --nodes and --pods")
    for flag, value in (("--nodes", nodes), ("--pods", pods)):
        if not value:
            raise ReplayError(f"--protocol {protocol} needs {flag}")
        if not Path(value).is_file():
            raise ReplayError(f"{flag} {value}: no such file")
    return protocol
