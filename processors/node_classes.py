"""Equivalence classes of node states, for scorers whose value depends only on them.

A GPU node's fragmentation score depends on its free CPU, its free-milli vector and its
GPU model, nothing else. Node states repeat heavily: a fresh cluster has a handful of node
types (the openb cluster: 1,213 GPU nodes, a few dozen distinct states), and a placement
makes one new state out of one old one. So a scorer can compute once per *class* and read
the value of a row through its class id, instead of once per row.

:func:`node_classes` keeps a dense class id per row in the state's derived cache. Ids are
assigned in order of first sight and refreshed only for rows whose ``stamp`` changed (a
row's state changes only through ``CellState.touch``), so keeping them costs O(changed
rows) per decision. Ids are a cache, never part of a decision: a value read through a
class is the value of any of its rows, so results are identical with or without it.
"""
from __future__ import annotations

import numpy as np

from .state import CellState

_KEY = "node-classes"


class NodeClasses:
    """Class ids of a state's rows (``ids[row]``), ``count`` classes seen so far."""
    __slots__ = ("ids", "stamp", "table", "width", "generation", "clock", "seen", "cuts", "_marks")

    def __init__(self, n: int, width: int, generation: int):
        self.ids = np.full(n, -1, dtype=np.int64)
        self.stamp = np.full(n, -1, dtype=np.int64)
        self.table: dict[tuple[int, ...], int] = {}
        self.width = width
        # changes whenever ids may have been renumbered: per-class caches key on it
        self.generation = generation
        self.clock = -1                  # the state's clock when the ids were last refreshed
        # how far into the state's ``touched`` rows the ids are refreshed, and in which cut
        # of that list (-1: none yet, so the first refresh scans the stamps)
        self.seen = 0
        self.cuts = -1
        self._marks = np.full(0, -1, dtype=np.int64)

    def scratch(self) -> np.ndarray:
        """-1 for every class id so far: the marks ``suanli_kernels.class_rows`` borrows
        (and leaves -1), longer than every id (grown, doubling, with the table)."""
        if self._marks.size < len(self.table):
            self._marks = np.full(max(256, 2 * len(self.table)), -1, dtype=np.int64)
        return self._marks

    @property
    def count(self) -> int:
        return len(self.table)


def _state_keys(s: CellState, rows: np.ndarray) -> list[tuple[int, ...]]:
    """Per row: (free CPU, free milli per device (-1 = none)..., model index), as ints."""
    keys = np.column_stack([s.cpu_free[rows], s.gpu_free[rows], s.model_idx[rows]])
    return [tuple(k) for k in keys.tolist()]


def _state_key(s: CellState, row: int) -> tuple[int, ...]:
    """``_state_keys(s, [row])[0]``, without building the array."""
    return (int(s.cpu_free[row]), *s.gpu_free[row].tolist(), int(s.model_idx[row]))


def node_classes(s: CellState) -> NodeClasses:
    """The state's node classes, brought up to date with its stamps: the rows the state
    touched since the last call (``CellState.touched``), or a pass over every stamp when
    that list was cut meanwhile or the ids are new.

    Renumbers from scratch (a new ``generation``) when the node count or the device width
    changed, or when retired classes outnumber live rows four to one (ids are never reused
    otherwise, so a long run would grow the table without bound)."""
    nc: NodeClasses | None = s._derived.get(_KEY)
    if nc is not None and nc.clock == s.clock:
        # nothing changed since the last refresh: every change of a row, a new row (and with
        # it a wider device array) among them, ticks the clock (``CellState.touch``)
        return nc
    width = s.max_gpus + 2
    if nc is None or nc.ids.size != s.n_nodes or nc.width != width or nc.count > 4 * max(s.n_nodes, 256):
        generation = 0 if nc is None else nc.generation + 1
        nc = s._derived[_KEY] = NodeClasses(s.n_nodes, width, generation)
    nc.clock = s.clock
    touched = s.touched
    if nc.cuts == s.touched_cuts and nc.seen <= len(touched):
        # the rows touched since the last refresh (a decision: one or two), ascending as
        # the scan below would give them; a row whose stamp is already seen is no change
        rows = sorted({r for r in touched[nc.seen:] if nc.stamp[r] != s.stamp[r]})
    else:
        rows = (nc.stamp != s.stamp).nonzero()[0].tolist()
    nc.seen, nc.cuts = len(touched), s.touched_cuts
    if rows:
        if len(rows) == 1:               # the usual case, a decision changed one row: no [k, G + 2] array
            keys = [_state_key(s, rows[0])]
        else:
            keys = _state_keys(s, np.array(rows, dtype=np.int64))
        table, ids, stamp, now = nc.table, nc.ids, nc.stamp, s.stamp
        for row, k in zip(rows, keys):
            cid = table.get(k)
            if cid is None:
                cid = table[k] = len(table)
            ids[row] = cid
            stamp[row] = now[row]
    return nc


def unknown_classes(cids: np.ndarray, rows: np.ndarray, known: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the classes among ``cids`` that ``known`` does not mark, ascending; one row of each,
    from ``rows``), where ``cids[i]`` is the class of ``rows[i]``. Costs O(len(rows)) plus
    the unknown ones, not O(all rows + all classes ever seen): a decision usually meets one
    new class (the row it changed last), and the row that represents it is at hand."""
    miss = (~known[cids]).nonzero()[0]
    if miss.size <= 1:                  # the usual case: none, or the row changed last
        return cids[miss], rows[miss]
    # Ids are dense (< len(known)), so a mark per id finds the distinct ones in O(len(rows))
    # where np.unique sorted them (most of a decision's cost when a new typical-task digest
    # leaves every class unknown). Any row of a class represents it: its state is the class.
    missing = cids[miss]
    seen = np.zeros(known.size, dtype=bool)
    seen[missing] = True
    rep = np.empty(known.size, dtype=rows.dtype)
    rep[missing] = rows[miss]
    classes = np.flatnonzero(seen)
    return classes, rep[classes]
