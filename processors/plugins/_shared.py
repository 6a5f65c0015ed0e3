"""Helpers shared by the placement plugins: what a placement leaves free, who holds a
label, and the power model's common arguments."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..args import arg
from ..framework import CycleContext
from ..state import CellState, TaskRecord


def after(ctx: CycleContext, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Free CPU milli, memory MiB and GPU milli (node total) of ``rows`` after placing the task."""
    s, r = ctx.state, ctx.req
    return (s.cpu_free[rows] - r.cpu, s.mem_free[rows] - r.mem, s.gpu_free_total[rows] - r.gpu_total)


def holders(s: CellState, key: str, value: str) -> list[TaskRecord]:
    """Tasks holding resources whose label ``key`` equals ``value``, in no particular order."""
    return [t for t in s.holding_records() if t.task.labels.get(key) == value]


def qos(ctx: CycleContext) -> Optional[str]:
    """The task's QoS tier (None for a task the state does not hold)."""
    rec = ctx.task
    return rec.task.qos_tier if rec is not None else None


@dataclass(frozen=True, slots=True)
class PowerArgs:
    """The power model of the green plugins (Carbon, Pue)."""
    watts_per_gpu: float = arg(300.0, "power of one busy GPU, W", ge=0)
    watts_per_core: float = arg(10.0, "power of one busy core, W", ge=0)
    default_pue: float = arg(1.5, "PUE of nodes without a pue (0 or missing)", gt=0)
