"""``ModelLocality``: prefer nodes that hold the task's model weights (#20, cold starts)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..args import arg
from ..framework import REGISTRY, CycleContext, Plugin
from ..model_cache import holders, locate, model_of
from ..model_loading import load_ms


@dataclass(frozen=True, slots=True)
class ModelLocalityArgs:
    points_per_second: float = arg(10.0, "score points per second of model load saved against the origin", ge=0)
    cap: float = arg(3000.0, "most points a node can get (a 70 GiB model saves ~600 s)", ge=0)
    local_points: float = arg(1000.0, "default 1.5.0 on: points more for a node holding the model itself "
                              "(a disk read rather than a LAN copy that takes a second cache slot at the site)",
                              ge=0)


def _zeros(n: int) -> np.ndarray:
    """A read-only zero score of ``n`` rows, kept per size (the hot path of tasks without a model)."""
    z = _ZEROS.get(n)
    if z is None:
        z = _ZEROS[n] = np.zeros(n, dtype=np.float64)
        z.flags.writeable = False
        if len(_ZEROS) > 64:                 # cell sizes change rarely; keep a few
            _ZEROS.pop(next(iter(_ZEROS)))
    return z


_ZEROS: dict[int, np.ndarray] = {}


def _cached_model(ctx: CycleContext):
    """The task's model when it has one and some node of the cell caches models, else None."""
    rec = ctx.task
    if rec is None or not ctx.state.model_caches:
        return None
    return model_of(rec.task)


def held_here(ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
    """Per row, 1.0 where the node's own cache holds (or is loading) the task's model."""
    out = np.zeros(rows.size, dtype=np.float64)
    s, model = ctx.state, _cached_model(ctx)
    if model is None:
        return out
    ids = s.node_ids
    for i, row in enumerate(rows.tolist()):
        c = s.model_caches.get(ids[row])
        if c is not None and model.model_arch in c.entries:
            out[i] = 1.0
    return out


def saved_seconds(ctx: CycleContext, rows: np.ndarray) -> np.ndarray:
    """Per row, the seconds of load the node saves against the origin for the task's model
    (its own cache, else a peer of its site; ``model_cache.locate``); zeros for a task
    without a model or a cell whose nodes hold none."""
    out = np.zeros(rows.size, dtype=np.float64)
    s, model = ctx.state, _cached_model(ctx)
    if model is None:
        return out
    held = holders(s, model.model_arch)
    if not held:
        return out
    origin = load_ms(model.size_mib, "origin")
    sites = {s.nodes[n].site for n, _ in held if s.nodes[n].site}
    ids = s.node_ids
    # only rows at a site holding it (or holding it themselves) can save anything
    for i, row in enumerate(rows.tolist()):
        nid = ids[row]
        node = s.nodes[nid]
        if node.site in sites or nid in s.model_caches:
            _, wait, _ = locate(s, nid, model.model_arch, model.size_mib, held)
            out[i] = max(0.0, (origin - wait) / 1000.0)
    return out


@REGISTRY.register
class ModelLocality(Plugin):
    """Model locality: ``min(cap, points_per_second x seconds saved)``, the seconds of model
    load a node saves against fetching the weights from the origin (its own cache: a disk
    read; a peer of its site: a LAN copy; what is left of a load in flight counts against
    it). The load times are ``processors/model_loading.py``'s. Plus ``local_points`` for a
    node that holds the model itself (``default`` 1.5.0 on; 1.4.0 runs it with 0): a local
    read saves only a few seconds over a peer's LAN copy, which the packing terms outweigh,
    but the copy also takes a second slot in the site's caches and a busier p50. A task without a model
    scores 0 on every node, so the plugin changes no other decision. The core notes where
    the chosen node gets the model in the decision's provenance (``Provenance.notes``).
    Args: :class:`ModelLocalityArgs`."""
    name = "ModelLocality"
    Args = ModelLocalityArgs
    args: ModelLocalityArgs

    def per_class(self, ctx) -> bool:
        # a node's own cache is not its class's; without a model to look for, every row is 0
        return _cached_model(ctx) is None

    def score(self, ctx, rows):
        a = self.args
        if _cached_model(ctx) is None:         # most tasks: no model, or no node caches any
            return _zeros(rows.size)
        out = np.minimum(a.cap, a.points_per_second * saved_seconds(ctx, rows))
        if a.local_points:
            out = out + a.local_points * held_here(ctx, rows)
        return out
