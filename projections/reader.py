"""Build read models from Kafka: the I/O edge of the projections."""
from __future__ import annotations

from collections.abc import Collection

from suanli.config import Settings
from suanli.projections.lifecycle import LifecycleView
from suanli.projections.reservations import KINDS as RESERVATION_KINDS
from suanli.projections.reservations import ReservationsView
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.streams.kafka_io import EventConsumer
from suanli.streams.topics import TopicNames


SOURCES = ("cell_log", "decisions", "dead_letters")


async def load_lifecycle(settings: Settings, *, cell: str | Collection[str] | None = None, since_ms: int | None = None,
                         codec: Codec | None = None, sources: tuple[str, ...] = SOURCES) -> LifecycleView:
    """Fold the cell log, then the decisions, then the dead letters of the namespace.

    Reading the cell log first means every node is known before a placement on it is
    audited. ``cell`` keeps one cell (or the cells of a collection); ``since_ms`` counts only
    dead letters from then on.
    ``sources`` (TopicNames attributes, folded in the order of :data:`SOURCES`) reads fewer
    topics: ``("cell_log",)`` is enough to know the nodes, their cells and their statuses.
    """
    cells = None if cell is None else {cell} if isinstance(cell, str) else set(cell)
    unknown = set(sources) - set(SOURCES)
    if unknown:
        raise ValueError(f"unknown lifecycle sources {sorted(unknown)}; known: {', '.join(SOURCES)}")
    names = TopicNames(settings.namespace)
    view = LifecycleView()
    registry = None
    if codec is None:
        registry = RegistryClient(settings.registry_url)
        codec = Codec(registry)
    try:
        for topic in (getattr(names, source) for source in SOURCES if source in sources):
            async with EventConsumer(settings.bootstrap_servers, codec, [topic]) as consumer:
                for r in await consumer.read_until_end():
                    if r.kind is None:
                        continue
                    if r.kind == "DeadLetter":
                        if since_ms is None or r.timestamp >= since_ms:
                            view.apply(r.kind, r.payload)
                    elif cells is None or r.payload.get("cell") in cells:
                        view.apply(r.kind, r.payload)
    finally:
        if registry is not None:
            registry.close()
    return view


RESERVATION_SOURCES = ("cell_log", "decisions")


async def load_reservations(settings: Settings, *, cell: str | None = None, codec: Codec | None = None,
                            sources: tuple[str, ...] = RESERVATION_SOURCES) -> ReservationsView:
    """Fold the bids (forwarded to the cell log), the labelled submissions and the reservation
    decisions of the namespace into a :class:`~suanli.projections.reservations.ReservationsView`
    (the cell log first, so a claimant's label is known before its placement). ``cell`` keeps
    one cell; ``sources`` may add ``raw_tasks`` (bids intake has not forwarded yet)."""
    names = TopicNames(settings.namespace)
    view = ReservationsView()
    registry = None
    if codec is None:
        registry = RegistryClient(settings.registry_url)
        codec = Codec(registry)
    try:
        for source in ("raw_tasks", "cell_log", "decisions"):
            if source not in sources:
                continue
            async with EventConsumer(settings.bootstrap_servers, codec, [getattr(names, source)]) as consumer:
                for r in await consumer.read_until_end():
                    if r.kind in RESERVATION_KINDS and (cell is None or r.payload.get("cell") == cell):
                        view.apply(r.kind, r.payload)
    finally:
        if registry is not None:
            registry.close()
    return view
