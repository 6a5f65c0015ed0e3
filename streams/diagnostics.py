"""A worker's state on demand: ``kill -USR1 PID`` logs what its Faust consumer and table
recovery hold (mode, beneath Faust, logs every task's stack on the same signal).

Why: Faust has known stalls (STACK-NOTES: consumers that stop delivering, table recovery
that never ends). A stalled worker is idle in its event loop, so a thread dump shows
nothing; this shows which partitions the consumer fetches, pauses or buffers, the
positions of the Kafka consumer beneath it, and what recovery still waits for. It reads
only, and writes one log record at WARNING (the workers' level).
"""
from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def _tps(tps: Any) -> list[str]:
    return sorted(f"{tp.topic}:{tp.partition}" for tp in (tps or ()))


def _by_tp(mapping: Any) -> dict[str, Any]:
    return {f"{tp.topic}:{tp.partition}": v for tp, v in sorted(dict(mapping or {}).items())}


def consumer_state(app: Any) -> list[str]:
    """Lines describing ``app``'s consumer, its table recovery and the Kafka consumer beneath
    (each part is skipped with its error when that object is not there yet)."""
    lines: list[str] = []
    c = app.consumer
    parts = [
        ("faust consumer", lambda: (
            f"flow_active={c.flow_active} suspend_flow={c.suspend_flow.is_set()} "
            f"flow_control_active={app.flow_control.is_active()} in_recovery={getattr(app, 'in_recovery', None)} "
            f"rebalancing={app.rebalancing} generation={app.consumer_generation_id}")),
        ("fetching", lambda: _tps(c._active_partitions)),
        ("paused", lambda: _tps(c._paused_partitions)),
        ("buffer full", lambda: _tps(c._buffered_partitions)),
        ("read offsets", lambda: _by_tp(c._read_offset)),
        ("recovery", lambda: _recovery_state(app.tables._recovery, app)),
        ("kafka consumer", lambda: kafka_state(c._thread._consumer)),
    ]
    for name, read in parts:
        try:
            lines.append(f"{name}: {read()}")
        except Exception as exc:  # a part not built yet (before the first assignment)
            lines.append(f"{name}: unavailable ({type(exc).__name__}: {exc})")
    return lines


def _recovery_state(recovery: Any, app: Any) -> str:
    return (f"actives={_tps(recovery.active_tps)} offsets={_by_tp(recovery.active_offsets)} "
            f"highwaters={_by_tp(recovery.active_highwaters)} remaining={_by_tp(recovery.active_remaining())} "
            f"standbys={_tps(recovery.standby_tps)} start_signal={recovery.signal_recovery_start.is_set()} "
            f"end_signal={recovery.signal_recovery_end.is_set()} changelog_queue={app.tables.changelog_queue.qsize()}")


def kafka_state(consumer: Any) -> str:
    """An aiokafka consumer's assigned partitions: position, paused, highwater, awaiting reset."""
    assignment = consumer._subscription.subscription.assignment
    states = []
    for tp in sorted(consumer.assignment()):
        st = assignment.state_value(tp)
        states.append(f"{tp.topic}:{tp.partition} position={st._position} paused={st.paused} "
                      f"highwater={st.highwater} awaiting_reset={st.awaiting_reset}")
    return "; ".join(states) or "nothing assigned"


def log_state(app: Any) -> None:
    """Log :func:`consumer_state` as one record at WARNING."""
    log.warning("worker state:\n%s", "\n".join(consumer_state(app)))
