"""The pure scheduling core of Suanli (stdlib + numpy only; no I/O, no wall clock).

Public API::

    from suanli.processors import CellState, evolve, decide
    state = CellState("cell-a")
    state, outputs = decide(state, "TaskSubmitted", payload, ("cell.cell-a", 0, 42))

See ``core.py`` for the contracts, ``state.py`` for the state, ``framework.py`` for the
plugin framework and ``strategies/`` for the policies (random, bestfit, fgd, default).
"""
from .core import decide, evolve
from .framework import REGISTRY, Code, PluginRegistry, Request, Status
from .state import CellState
from .strategies import config_digest, get_strategy, names as strategy_names

__all__ = ["CellState", "evolve", "decide", "REGISTRY", "PluginRegistry", "Status", "Code",
           "Request", "get_strategy", "config_digest", "strategy_names"]
