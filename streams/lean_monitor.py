"""Faust's main sensor, without its per-record statistics.

Every Faust app has a ``Monitor`` (``faust/sensors/monitor.py``) that Faust calls for each
record read, each event a stream takes and hands back, each message sent and each table
access: counters per topic, stream and task, a ``str`` of the stream, a state dict per
event, timestamps and latency deques. They feed Faust's web views and its statsd,
Prometheus and Datadog sensors, none of which a Suanli worker runs (``web_enabled=False``;
the workers' metrics are their own, ``streams/metrics.py``). In an E2E max phase the hook
for an event taken alone was 5.6 % of the intake worker's busy samples (BENCHMARKS.md).

:class:`LeanMonitor` keeps the one thing Faust itself reads back from its monitor:
``stream_inbound_time`` per partition, from which the aiokafka driver tells a stuck stream
from an idle one (``verify_event_path``), and the rare hooks (commits, send errors,
rebalances) as Faust has them. Everything else a record would record is dropped.
``make_app`` (``streams/app.py``) installs it.
"""
from __future__ import annotations

from time import monotonic
from typing import Any, Optional

from faust.sensors import Monitor


class LeanMonitor(Monitor):
    """``Monitor`` whose per-record hooks do only what Faust reads back (above)."""

    def on_message_in(self, tp: Any, offset: int, message: Any) -> None:
        pass

    def on_stream_event_in(self, tp: Any, offset: int, stream: Any, event: Any) -> Optional[dict]:
        self.stream_inbound_time[tp] = monotonic()      # the driver's stuck-stream check reads it
        return None

    def on_stream_event_out(self, tp: Any, offset: int, stream: Any, event: Any,
                            state: Optional[dict] = None) -> None:
        pass

    def on_message_out(self, tp: Any, offset: int, message: Any) -> None:
        pass

    def on_send_initiated(self, producer: Any, topic: str, message: Any, keysize: int, valsize: int) -> Any:
        return None

    def on_send_completed(self, producer: Any, state: Any, metadata: Any) -> None:
        pass

    def on_table_get(self, table: Any, key: Any) -> None:
        pass

    def on_table_set(self, table: Any, key: Any, value: Any) -> None:
        pass

    def on_table_del(self, table: Any, key: Any) -> None:
        pass
