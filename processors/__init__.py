"""The pure scheduling core of Suanli (stdlib + numpy only; no I/O, no wall clock).

Public API::

    from suanli.processors import CellState, decide, model
    state = CellState("cell-a")
    event = model.from_avro("TaskSubmitted", avro_dict)          # or a model.TaskSubmitted(...)
    state, decisions = decide(state, event, ("cell.cell-a", 0, 42))

See ``README.md`` for the vocabulary and the life of one input, ``model.py`` for the
typed events, ``core.py`` for the contracts, ``state.py`` for the state, ``framework.py``
for the plugin framework and ``strategies/`` for the policies.
"""
from . import model
from .core import decide, evolve
from .framework import REGISTRY, Code, PluginRegistry, Request, Status
from .state import CellState
from .strategies import config_digest, get_strategy, names as strategy_names

__all__ = ["model", "CellState", "evolve", "decide", "REGISTRY", "PluginRegistry", "Status", "Code",
           "Request", "get_strategy", "config_digest", "strategy_names"]
