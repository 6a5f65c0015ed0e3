"""The ServerApp: FedAvg (plaintext or SecAgg+) with central evaluation and a JSON report.

Run config (pyproject.toml, overridable with ``flwr run --run-config``): ``num-rounds``,
``min-clients``, ``secagg``, ``num-shares`` and ``threshold`` (integers: counts fixed for the
run; floats: fractions that Flower 1.42's SecAggPlusWorkflow turns into counts in every round
from the nodes sampled, see ``SecAggPlusWorkflow.setup_stage``), ``stage-timeout`` (s, 0 = wait
for every reply or the SuperLink's dead-node error), ``quantise`` (``"none"`` | ``"int8"``,
plaintext only), ``local-epochs``, ``batch-size``, ``control`` (path of a JSON file
``{"batch_size": N}`` read at the start of every round, ``fldigits/control.py``; ``""`` or
no file: ``batch-size``), ``lr``, ``poll`` (s between reply pulls), ``report`` (path of the
JSON-lines report; appended).

Every round samples every SuperNode connected when it starts (``fraction_fit=1.0``), waiting
for at least ``min-clients``: nodes that join between rounds take part from the next round.
The fit config of round r is ``{"server_round": r, "batch-size": <the control's batch size>}``.

After each round the server evaluates the global model on the held-out test set and appends
one line to ``report``::

    {"round", "ok", "accuracy", "loss", "clients": [partition ids aggregated],
     "nodes": {pid: flower node id}, "clouds": {pid: cloud}, "bytes_up": {pid: n},
     "bytes_down": {pid: n}, "secagg", "quantise", "batch_size": the batch size sent,
     "client_batch_size": {pid: the batch size each aggregated client reports it used},
     "wall_ms", "elapsed_ms"}

``ok`` is false when the round's aggregation did not happen (e.g. SecAgg+ fell below its
threshold); the run then fails at the end (the ServerApp raises), after all lines are
written. Byte keys are partition ids; a node that never replied is keyed ``node:<id>``.
SecAgg+ is Flower's legacy workflow (``DefaultWorkflow(fit_workflow=SecAggPlusWorkflow)``
in a LegacyContext), the only SecAgg+ path that worked with separate OS processes, with one
fix (:class:`SurvivorsSecAggPlusWorkflow`): a node lost before it shared its keys no longer
fails the round.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from flwr.common import Context, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server import Grid, LegacyContext, ServerApp, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

from fldigits.control import BatchControl
from fldigits.metering import MeteredGrid
from fldigits.task import dequantise_update, evaluate, init_params, load_data

app = ServerApp()


class Reporter:
    """Owns the report file; fed by the strategy (contributors) and evaluate_fn (metrics)."""

    def __init__(self, path: Path, grid: MeteredGrid, secagg: bool, quantise: str) -> None:
        self.path, self.grid, self.secagg, self.quantise = path, grid, secagg, quantise
        self.contributors: dict[int, list[int]] = {}   # round -> node ids aggregated
        self.batch: dict[int, int] = {}                # round -> batch size sent in the fit config
        self.client_batch: dict[int, dict[str, int]] = {}   # round -> partition -> batch size used
        self.failed: list[int] = []
        self.t_start = self.t_round = time.monotonic()
        path.parent.mkdir(parents=True, exist_ok=True)

    def key(self, nid: int) -> str:
        pid = self.grid.partition.get(nid)
        return str(pid) if pid is not None else f"node:{nid}"

    def end_round(self, rnd: int, loss: float, acc: float) -> None:
        now = time.monotonic()
        up, down = self.grid.take()
        if rnd == 0:      # evaluation of the initial model: the rounds' clock starts here
            self.t_start = self.t_round = now
            return
        nids = self.contributors.get(rnd)
        if nids is None:
            self.failed.append(rnd)
        nodes = sorted(set(up) | set(down) | set(nids or []), key=lambda n: (n not in self.grid.partition,
                                                                       self.grid.partition.get(n, 0), n))
        line = {
            "round": rnd, "ok": nids is not None, "accuracy": round(acc, 4), "loss": round(loss, 4),
            "clients": sorted(self.grid.partition.get(n, -1) for n in nids or []),
            "nodes": {self.key(n): n for n in nodes},
            "clouds": {self.key(n): self.grid.cloud[n] for n in nodes if n in self.grid.cloud},
            "bytes_up": {self.key(n): up.get(n, 0) for n in nodes},
            "bytes_down": {self.key(n): down.get(n, 0) for n in nodes},
            "secagg": self.secagg, "quantise": self.quantise,
            "batch_size": self.batch.get(rnd), "client_batch_size": self.client_batch.get(rnd, {}),
            "wall_ms": round((now - self.t_round) * 1000, 1),
            "elapsed_ms": round((now - self.t_start) * 1000, 1),
        }
        with self.path.open("a") as f:
            f.write(json.dumps(line) + "\n")
        self.t_round = time.monotonic()


class DigitsFedAvg(FedAvg):
    """FedAvg that records who was aggregated and decodes int8 plaintext updates."""

    def __init__(self, reporter: Reporter, quantise: str, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(**kwargs)
        self.reporter, self.quantise = reporter, quantise
        self.global_params: list[np.ndarray] = init_params()

    def configure_fit(self, server_round, parameters, client_manager):  # type: ignore[no-untyped-def]
        self.global_params = parameters_to_ndarrays(parameters)   # the base int8 deltas refer to
        return super().configure_fit(server_round, parameters, client_manager)

    def aggregate_fit(self, server_round, results, failures):  # type: ignore[no-untyped-def]
        if not results:
            return None, {}
        if self.quantise == "int8":
            for _, res in results:
                res.parameters = ndarrays_to_parameters(
                    dequantise_update(parameters_to_ndarrays(res.parameters), self.global_params))
        aggregated = super().aggregate_fit(server_round, results, failures)
        if aggregated[0] is not None:
            self.reporter.contributors[server_round] = sorted(proxy.node_id for proxy, _ in results)
            self.reporter.client_batch[server_round] = {
                str(res.metrics["partition-id"]): int(res.metrics["batch-size"])
                for _, res in results if "partition-id" in res.metrics and "batch-size" in res.metrics}
        return aggregated


class SurvivorsSecAggPlusWorkflow(SecAggPlusWorkflow):
    """Flower 1.42's SecAgg+ workflow, except that a node lost before it shared its keys
    (in the setup or share-keys stage) no longer fails the round.

    Stock Flower keeps such a node in ``sampled_node_ids`` and in its neighbours' neighbour
    sets, so the unmask stage asks for (and, finding none, fails on: "Not enough shares")
    the key shares of a node that never distributed any. Nothing of such a node is in the
    aggregate: the clients add pairwise masks only with the neighbours whose shares they
    received (``secaggplus_mod._collect_masked_vectors``: ``available_clients``). So after
    the share-keys stage the round's nodes become the ones that shared their keys, and each
    node's neighbours those of them. With no node lost before then, both sets are unchanged
    (the stock protocol, bit for bit); nodes lost later are unmasked as before.
    """

    def share_keys_stage(self, grid, context, state):  # type: ignore[no-untyped-def]
        ok = super().share_keys_stage(grid, context, state)
        survivors = set(state.active_node_ids)
        state.sampled_node_ids = survivors
        state.nid_to_neighbours = {nid: nbrs & survivors for nid, nbrs in state.nid_to_neighbours.items()
                                   if nid in survivors}
        return ok


def _count_or_fraction(value: object) -> int | float:
    """A SecAgg+ parameter from the run config: a float is a fraction (Flower sizes it per round)."""
    return float(value) if isinstance(value, float) else int(value)  # type: ignore[arg-type]


@app.main()
def main(grid: Grid, context: Context) -> None:
    rc = context.run_config
    secagg, quantise = bool(rc["secagg"]), str(rc["quantise"])
    if quantise not in ("none", "int8"):
        raise ValueError(f"quantise must be 'none' or 'int8', not {quantise!r}")
    if secagg and quantise != "none":
        raise ValueError("quantise='int8' applies to plaintext uploads only: SecAgg+ re-encodes the float "
                         "model into its own 32-bit modular field, so int8 cannot reduce its bytes")
    data = load_data()
    metered = MeteredGrid(grid, poll=float(rc["poll"]))
    reporter = Reporter(Path(str(rc["report"])), metered, secagg, quantise)

    def evaluate_fn(rnd: int, params: list[np.ndarray], _cfg: dict) -> tuple[float, dict]:
        loss, acc = evaluate(params, data.x_test, data.y_test)
        reporter.end_round(rnd, loss, acc)
        return loss, {"accuracy": acc}

    control = BatchControl(str(rc.get("control", "")) or None, int(rc["batch-size"]))

    def fit_config(rnd: int) -> dict:
        batch = control.current()
        reporter.batch[rnd] = batch
        return {"server_round": rnd, "batch-size": batch}

    m = int(rc["min-clients"])
    strategy = DigitsFedAvg(
        reporter, quantise, fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=m,
        min_available_clients=m, initial_parameters=ndarrays_to_parameters(init_params()),
        evaluate_fn=evaluate_fn, on_fit_config_fn=fit_config)
    ctx = LegacyContext(context, config=ServerConfig(num_rounds=int(rc["num-rounds"])), strategy=strategy)
    fit = None
    if secagg:
        timeout = float(rc["stage-timeout"]) or None
        # max_weight bounds num_examples/max_weight <= 1, so no client's weight overflows the field
        fit = SurvivorsSecAggPlusWorkflow(num_shares=_count_or_fraction(rc["num-shares"]),
                                          reconstruction_threshold=_count_or_fraction(rc["threshold"]),
                                          max_weight=float(len(data.y_train)), timeout=timeout)
    DefaultWorkflow(fit_workflow=fit)(metered, ctx)
    if reporter.failed:
        raise RuntimeError(f"aggregation failed in round(s) {reporter.failed}; see {reporter.path}")
