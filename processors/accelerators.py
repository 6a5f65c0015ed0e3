"""Accelerators in the core (C1): when a task's devices can never be had in its cell.

A node registers its accelerators (``NodeRegistered.accelerators``): GPUs keep their own
representation (devices with milli, ``state.gpu_free``); every other kind (NPU, FPGA, ASIC,
QPU, OTHER) is counted per ``(kind, model)`` in ``state.accel_cap`` / ``accel_free``. A
task asks them in ``TaskResources.accelerators`` (kind, model or '' for any, count; the
contract has no per-device memory for them) and a memory per GPU in ``gpu_memory_mib``
(``Request.accels``, ``Request.gpu_mem``). The filters ``GpuMemory`` and
``AcceleratorFit`` (``plugins/basic.py``) keep the nodes that have them free; placement
takes them and every release gives them back (``core.py``).

:func:`refusal` says why a submission can never be served, for ``decide`` to refuse it
with :class:`~suanli.errors.RejectedInput` (the runner dead-letters it with that reason)
instead of queueing it forever. It looks at the nodes *registered* when the submission is
decided, whatever their status or load; it never refuses a task that asks neither
accelerators nor a GPU memory.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from . import model as m
from .state import CellState


def _what(kind: str, model: str, count: int, memory: int = 0) -> str:
    return (f"{count} free-or-used {kind} devices " + (f"of model {model!r}" if model else "of one model")
            + (f" with at least {memory} MiB each" if memory else ""))


def _largest(s: CellState, kind: str, model: str) -> str:
    """Where the most devices of ``kind`` (and ``model``, or of any one model) are."""
    cols = [j for j, (k, mdl) in enumerate(s.accel_keys) if k == kind and (not model or mdl == model)]
    if not cols or s.n_nodes == 0:
        return f"the cell has no {kind}" + (f" of model {model!r}" if model else "")
    sub = s.accel_cap[:, cols]
    row, col = np.unravel_index(int(np.argmax(sub)), sub.shape)
    n = int(sub[row, col])
    if n == 0:
        return f"the cell has no {kind}" + (f" of model {model!r}" if model else "")
    which = "" if model else f" of model {s.accel_keys[cols[col]][1]!r}"
    return f"largest: {n}{which} on node {s.node_ids[row]}"


def _most_memory(s: CellState, kind: str, model: str) -> str:
    """Where the devices of ``kind`` (and ``model``) with the most memory each are."""
    cols = [j for j, (k, mdl) in enumerate(s.accel_keys) if k == kind and (not model or mdl == model)]
    mem = np.where(s.accel_cap[:, cols] > 0, s.accel_mem[:, cols], -1)
    row, col = np.unravel_index(int(np.argmax(mem)), mem.shape)
    which = "" if model else f" ({s.accel_keys[cols[col]][1]!r})"
    return (f"the most: {int(mem[row, col])} MiB per device{which} on node {s.node_ids[row]}; "
            "a device that reports no memory counts as 0")


def _gpu_rows(s: CellState, req: m.Request) -> np.ndarray:
    """Rows with enough GPUs of an accepted model (capacity, not load)."""
    need = 0 if req.kind == "cpu" else 1 if req.kind == "shared" else req.gpu_count
    ok = s.gpu_count >= need
    if req.models:
        ids = [i for i, name in enumerate(s.models) if name in req.models]
        ok &= np.isin(s.model_idx, np.array(ids, dtype=np.int64))
    return ok


def refusal(s: CellState, e: m.TaskSubmitted, req: m.Request) -> Optional[str]:
    """Why no node registered in the cell could ever serve ``e`` (``req`` its request), or
    None. Checked in this order: GPUs named in ``accelerators`` (they are asked with
    ``gpu_count``, ``gpu_milli`` and ``gpu_models``); each accelerator ask against every
    node's capacity; the GPU memory; then all of the task's asks (CPU and memory included)
    on one node. A task asking neither accelerators nor a GPU memory: always None.

    A task that arrives before any node that could serve it has registered is refused too
    (C1 asks for a refusal, not a queue that waits for hardware that may never come): its
    submitter sends it again once such a node is in the cell."""
    tid = e.task_id
    gpus = [a for a in e.resources.accelerators if a.kind == "GPU" and a.count > 0]
    if gpus:
        return (f"TaskSubmitted {tid!r}: accelerators names GPU ({', '.join(f'{a.count} {a.model!r}' for a in gpus)}); "
                "GPUs are asked with gpu_count, gpu_milli and gpu_models")
    if not req.has_device_needs:
        return None
    where = f"no node in cell {s.cell!r}"
    after = " (a task no registered node could ever serve is refused; send it again once such a node has registered)"
    for kind, model, count, memory in req.accels:
        if not s.accel_mask(((kind, model, count, 0),), s.accel_cap).any():
            return f"TaskSubmitted {tid!r}: {where} has {_what(kind, model, count)} ({_largest(s, kind, model)}){after}"
        if memory and not s.accel_mask(((kind, model, count, memory),), s.accel_cap).any():
            return (f"TaskSubmitted {tid!r}: {where} has {_what(kind, model, count, memory)} "
                    f"({_most_memory(s, kind, model)}){after}")
    gpu_ok = _gpu_rows(s, req)
    if req.gpu_mem:
        mem = s.gpu_memory_mask(req.gpu_mem) if s.n_nodes else np.zeros(0, dtype=bool)
        if not (mem & gpu_ok).any():
            need = 1 if req.kind == "shared" else req.gpu_count
            models = f" of model {'|'.join(req.models)}" if req.models else ""
            have = s.meta_array("gpu_memory_mib", 0, np.int64)[gpu_ok] if s.n_nodes else np.zeros(0)
            if have.size:
                rows = np.flatnonzero(gpu_ok)
                best = int(rows[int(np.argmax(have))])
                largest = f"largest: {int(have.max())} MiB on node {s.node_ids[best]}"
            else:
                largest = f"no node has {need} GPUs{models}"
            return (f"TaskSubmitted {tid!r}: {where} has {need} GPUs{models} with at least {req.gpu_mem} MiB "
                    f"each ({largest}; a node that reports no GPU memory counts as 0){after}")
    ok = gpu_ok & (s.cpu_cap >= req.cpu) & (s.mem_cap >= req.mem)
    if req.gpu_mem:
        ok &= s.gpu_memory_mask(req.gpu_mem)
    if req.accels:
        ok &= s.accel_mask(req.accels, s.accel_cap)
    if not ok.any():
        parts = [f"{req.cpu} CPU milli", f"{req.mem} MiB memory"]
        if req.kind != "cpu":
            parts.append(f"{1 if req.kind == 'shared' else req.gpu_count} GPUs"
                         + (f" of model {'|'.join(req.models)}" if req.models else "")
                         + (f" with {req.gpu_mem} MiB each" if req.gpu_mem else ""))
        parts += [_what(k, mdl, c, mem) for k, mdl, c, mem in req.accels]
        if s.n_nodes == 0:
            return f"TaskSubmitted {tid!r}: {where}: the cell has no nodes yet{after}"
        return f"TaskSubmitted {tid!r}: {where} has all it asks together: {', '.join(parts)}{after}"
    return None


def fits_devices(s: CellState, row: int, req: m.Request) -> bool:
    """Whether ``row`` has the task's GPU memory and its accelerators free now (always True
    for a task that asks neither)."""
    if req.gpu_mem and not s.gpu_memory_mask(req.gpu_mem)[row]:
        return False
    return not req.accels or s.accel_choice(row, req.accels) is not None
