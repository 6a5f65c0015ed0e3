"""A Grid wrapper that meters the bytes of every message per node, and polls faster.

**What is counted.** Flower 1.42 moves a Message as a tree of content-addressed objects
(the Message, its RecordDict, each ArrayRecord/ConfigRecord/MetricRecord, each Array chunk),
each serialised by ``deflate()`` and pushed/pulled through the SuperLink's HTTP API. For each
message the ServerApp pushes to a node (``bytes_down``) and each reply it pulls from a node
(``bytes_up``) we add ``sum(len(o.deflate()))`` over that message's whole object tree, i.e.
exactly the object bodies (plus Flower's small per-object header) that travel SuperLink <->
SuperNode. Every message of the workflow passes through here, so all four SecAgg+ stages
are included.

**Not counted:** HTTP/TCP framing and headers, the object-id/tree negotiation requests, the
SuperNodes' polling and heartbeat requests, the FAB and run-config downloads, and the hop
ServerApp <-> SuperLink itself (the same bytes again, on loopback). Error replies that the
SuperLink synthesises for a dead node carry no node data and are not counted as upload.
Content-addressing could let a node skip an object it already holds; no object of this app
repeats across messages (the model changes each round), so that saving is nil here.

**Why a wrapper.** ``HttpGrid.send_and_receive`` sleeps 3 s between pulls; the SecAgg+
workflow makes 4 round trips per round, so this loop (same push/pull calls, ``poll`` s between
pulls) is most of the speed-up. Its timeout semantics are those of the Grid contract.
"""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable

from flwr.common import Message
from flwr.server import Grid
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

TAG_RECORD = "fl.node"   # set by client_app.tag_mod


def message_bytes(msg: Message) -> int:
    """Serialised size of a message's whole object tree (see module docstring)."""
    return sum(len(obj.deflate()) for obj in get_all_nested_objects(msg).values())


class MeteredGrid(Grid):
    """Delegates to ``inner``; counts bytes per node id since the last :meth:`take`."""

    def __init__(self, inner: Grid, poll: float = 0.1) -> None:
        self.inner = inner
        self.poll = poll
        self.up: dict[int, int] = defaultdict(int)
        self.down: dict[int, int] = defaultdict(int)
        self.partition: dict[int, int] = {}     # node id -> partition id, learnt from replies
        self.cloud: dict[int, str] = {}

    # --- delegation -------------------------------------------------------------------------
    def set_run(self, run) -> None:  # type: ignore[no-untyped-def]
        self.inner.set_run(run)

    @property
    def run(self):  # type: ignore[no-untyped-def]
        return self.inner.run

    def create_message(self, *args, **kwargs) -> Message:  # type: ignore[no-untyped-def]
        return self.inner.create_message(*args, **kwargs)

    def get_node_ids(self) -> Iterable[int]:
        return self.inner.get_node_ids()

    def get_nodes(self):  # type: ignore[no-untyped-def]
        return self.inner.get_nodes()

    # --- metered traffic --------------------------------------------------------------------
    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        messages = list(messages)
        ids = list(self.inner.push_messages(messages))
        for msg in messages:
            self.down[msg.metadata.dst_node_id] += message_bytes(msg)
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        replies = list(self.inner.pull_messages(message_ids))
        for msg in replies:
            if msg.has_error():
                continue
            nid = msg.metadata.src_node_id
            self.up[nid] += message_bytes(msg)
            tag = msg.content.config_records.get(TAG_RECORD)
            if tag is not None:
                self.partition[nid] = int(tag["partition-id"])
                self.cloud[nid] = str(tag["cloud"])
        return replies

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        # as Flower's own Grid: a message the SuperLink refused (None id) gets no reply to wait for
        pending = {mid for mid in self.push_messages(messages) if mid}
        deadline = None if timeout is None else time.monotonic() + timeout
        out: list[Message] = []
        while pending:
            got = list(self.pull_messages(pending))
            out.extend(got)
            pending.difference_update(m.metadata.reply_to_message_id for m in got)
            if not pending or (deadline is not None and time.monotonic() >= deadline):
                break
            time.sleep(self.poll)
        return out

    def take(self) -> tuple[dict[int, int], dict[int, int]]:
        """(bytes up, bytes down) per node id since the previous call; resets the counters."""
        up, down = dict(self.up), dict(self.down)
        self.up.clear()
        self.down.clear()
        return up, down
