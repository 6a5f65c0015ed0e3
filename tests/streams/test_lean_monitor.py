"""``streams/lean_monitor.py``: Faust's monitor without per-record statistics, keeping what
Faust reads back (the stuck-stream check's inbound time)."""
from __future__ import annotations

from types import SimpleNamespace

from faust.types import TP

from suanli.config import settings
from suanli.streams.app import make_app
from suanli.streams.lean_monitor import LeanMonitor

TP0 = TP("t", 0)


def test_every_worker_app_has_it():
    assert isinstance(make_app("intake", settings()).monitor, LeanMonitor)


def test_per_record_hooks_keep_no_statistics():
    m = LeanMonitor()
    stream = SimpleNamespace(task_owner=None)
    message = SimpleNamespace(time_in=None)
    for offset in range(3):
        m.on_message_in(TP0, offset, message)
        state = m.on_stream_event_in(TP0, offset, stream, object())
        m.on_stream_event_out(TP0, offset, stream, object(), state)
        m.on_message_out(TP0, offset, message)
        m.on_send_completed(None, m.on_send_initiated(None, "t", None, 1, 1), None)
    assert m.messages_received_total == 0 and m.events_total == 0 and m.messages_sent == 0
    assert not m.events_by_stream and not m.messages_received_by_topic and not m.send_latency
    assert message.time_in is None


def test_the_inbound_time_faust_reads_back_is_kept():
    m = LeanMonitor()
    assert m.stream_inbound_time.get(TP0) is None
    m.on_stream_event_in(TP0, 0, SimpleNamespace(task_owner=None), object())
    first = m.stream_inbound_time[TP0]
    m.on_stream_event_in(TP0, 1, SimpleNamespace(task_owner=None), object())
    assert m.stream_inbound_time[TP0] >= first > 0
