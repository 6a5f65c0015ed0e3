"""The ClientApp: local SGD on this SuperNode's Dirichlet partition.

Node config (``flower-supernode --node-config``): ``partition-id`` (int), ``num-partitions``
(int), ``cloud`` (str, default ``"default"``). Run config: ``local-epochs``, ``batch-size``,
``lr``, ``quantise`` (``"none"`` | ``"int8"``), ``secagg`` (bool). The fit config's
``batch-size`` (sent by the ServerApp every round) overrides the run config's; the fit
metrics report the batch size used (``batch-size``) with the partition id and cloud.

Every reply carries a ``fl.node`` ConfigRecord {partition-id, cloud} (``tag_mod``) so the
server can map Flower node ids to partitions for every message, SecAgg+ stages included.
"""
from __future__ import annotations

from typing import Any

import numpy as np
from flwr.client import ClientApp, NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.common import ConfigRecord, Context, Message

from fldigits.task import Dataset, dirichlet_partition, load_data, quantise_update, train

TAG_RECORD = "fl.node"
_DATA: dict[int, tuple[Dataset, list[np.ndarray]]] = {}   # per process: load the split once


def _partition(ctx: Context) -> tuple[np.ndarray, np.ndarray]:
    n = int(ctx.node_config["num-partitions"])
    pid = int(ctx.node_config["partition-id"])
    if n not in _DATA:
        data = load_data()
        _DATA[n] = (data, dirichlet_partition(data.y_train, n))
    data, parts = _DATA[n]
    return data.x_train[parts[pid]], data.y_train[parts[pid]]


class DigitsClient(NumPyClient):
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def fit(self, parameters: list[np.ndarray], config: dict[str, Any]) -> tuple[list[np.ndarray], int, dict]:
        rc, nc = self.ctx.run_config, self.ctx.node_config
        x, y = _partition(self.ctx)
        pid = int(nc["partition-id"])
        rnd = int(config.get("server_round", 0))
        batch = int(config["batch-size"]) if "batch-size" in config else int(rc["batch-size"])
        new = train(parameters, x, y, epochs=int(rc["local-epochs"]), batch_size=batch,
                    lr=float(rc["lr"]), seed=1000 * rnd + pid)
        # int8 is refused with SecAgg+ by the server and the aggregator (SecAgg+ re-quantises
        # the plain float model into its own modular field), so only plaintext uploads use it.
        if str(rc["quantise"]) == "int8" and not bool(rc["secagg"]):
            new = quantise_update(new, parameters)
        return new, len(y), {"partition-id": pid, "cloud": str(nc.get("cloud", "default")), "batch-size": batch}


def tag_mod(msg: Message, ctx: Context, call_next: Any) -> Message:
    """Outermost mod: stamp the reply with this node's partition id and cloud."""
    out = call_next(msg, ctx)
    if out.has_content():
        out.content.config_records[TAG_RECORD] = ConfigRecord(
            {"partition-id": int(ctx.node_config["partition-id"]),
             "cloud": str(ctx.node_config.get("cloud", "default"))})
    return out


def client_fn(ctx: Context):
    return DigitsClient(ctx).to_client()


def secagg_mod(msg: Message, ctx: Context, call_next: Any) -> Message:
    """SecAgg+ when the run asks for it. secaggplus_mod itself cannot be left on for plain
    runs: it expects its config record in every train message (KeyError otherwise)."""
    if bool(ctx.run_config["secagg"]):
        return secaggplus_mod(msg, ctx, call_next)
    return call_next(msg, ctx)


# One app for both modes; the run config picks plaintext or SecAgg+ per run.
app = ClientApp(client_fn=client_fn, mods=[tag_mod, secagg_mod])
