"""A small typed Python client for Suanli producers.

A thin wrapper over :class:`suanli.streams.kafka_io.EventProducer` (aiokafka, idempotent,
acks=all, Confluent wire format through the registry) and :mod:`suanli.schemas.task_spec`
(the validated YAML/JSON form of a task)::

    import asyncio
    from suanli_client import SuanliClient

    async def main():
        async with SuanliClient() as client:          # SUANLI_KAFKA / SUANLI_REGISTRY / SUANLI_NAMESPACE
            task_id = await client.submit_task({"tenant": "vision", "cell": "openb",
                                                "resources": {"cpu": 4, "memory": "8Gi", "gpu": 0.5}})
            bid_id = await client.submit_bid(tenant="vision", cell="openb",
                                             resources={"cpu": 32, "memory": "256Gi", "gpu": 8},
                                             start_at_ms=..., duration_ms=4 * 3600_000, price=2.5)
            await client.cancel(task_id, tenant="vision", cell="openb", reason="not needed")

    asyncio.run(main())

Every call returns once the broker has stored the event. Needs the ``suanli`` package
(``pip install -e .`` at the repository root); this file is not packaged on its own.
"""
from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict

from suanli.config import Settings, load_settings
from suanli.schemas.codec import Codec
from suanli.schemas.registry import RegistryClient
from suanli.schemas.task_spec import ResourcesSpec, TaskSpec, task_from_document
from suanli.streams.kafka_io import EventProducer

__all__ = ["SuanliClient", "TaskResources", "TaskSubmitted", "ReservationBid", "TaskCancelled"]


class TaskResources(TypedDict):
    cpu_milli: int
    memory_mib: int
    gpu_count: int
    gpu_milli: int
    gpu_models: list[str]
    gpu_memory_mib: int
    accelerators: list[dict[str, Any]]


class TaskSubmitted(TypedDict, total=False):
    event_id: str
    task_id: str
    tenant: str
    cell: str
    submitted_at: int                  # epoch milliseconds
    resources: TaskResources
    qos_tier: Literal["GOLD", "SILVER", "BRONZE"]
    priority: int
    labels: dict[str, str]
    deadline: int | None
    duration_estimate_ms: int | None
    command: list[str] | None
    profile: dict[str, Any] | None
    env: dict[str, str]                # environment of the command (process connectors)
    job_id: str | None                 # the job it is a member of (issue 22); None: no job


class ReservationBid(TypedDict):
    event_id: str
    bid_id: str
    tenant: str
    cell: str
    resources: TaskResources
    start_at: int                      # earliest start, epoch milliseconds
    duration_ms: int
    price: float                       # maximum per GPU-hour
    at: int
    latest_start_at: NotRequired[int | None]   # latest start; None (the default) = start_at
    gang: NotRequired[bool]                    # True (the default): all GPUs or none


class TaskCancelled(TypedDict):
    event_id: str
    task_id: str
    tenant: str
    cell: str
    reason: str
    at: int


def _now_ms() -> int:
    return int(time.time() * 1000)


def resources_of(spec: ResourcesSpec | Mapping[str, Any]) -> TaskResources:
    """TaskResources of a resources spec (``cpu``/``cpu_milli``, ``memory``/``memory_mib``, ``gpu``,
    ``gpu_models``), converted exactly as ``suanli submit`` converts a task's."""
    spec = spec if isinstance(spec, ResourcesSpec) else ResourcesSpec.model_validate(dict(spec))
    event = TaskSpec(id="resources", resources=spec).to_event(0)
    return event["resources"]


class SuanliClient:
    """Produces task submissions, reservation bids and cancellations to a Suanli control plane."""

    def __init__(self, settings: Settings | None = None, *, namespace: str | None = None):
        self.settings = settings or load_settings()
        self.namespace = namespace or self.settings.namespace
        self._registry: RegistryClient | None = None
        self._producer: EventProducer | None = None

    async def __aenter__(self) -> SuanliClient:
        self._registry = RegistryClient(self.settings.registry_url)
        # PLAINTEXT, or SASL/SCRAM over TLS as the settings say (SUANLI_KAFKA_* variables)
        self._producer = EventProducer(self.settings.bootstrap_servers, Codec(self._registry),
                                       linger_ms=0, namespace=self.namespace, security=self.settings.kafka_security)
        try:
            await self._producer.__aenter__()
        except BaseException:
            self._registry.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self._producer is not None:
                await self._producer.__aexit__(*exc)
        finally:
            if self._registry is not None:
                self._registry.close()
            self._producer = self._registry = None

    async def submit_event(self, kind: str, payload: Mapping[str, Any]) -> None:
        """Produce any producer-side event (``TaskSubmitted``, ``ReservationBid``, ...) to its raw
        topic, keyed as the contract says; returns once stored. Raises
        :class:`suanli.errors.EncodeError` if the payload does not fit the schema."""
        if self._producer is None:
            raise RuntimeError("use `async with SuanliClient() as client`")
        future = await self._producer.publish(kind, dict(payload))
        await future

    async def submit_task(self, task: TaskSpec | Mapping[str, Any], *, now_ms: int | None = None) -> str:
        """Submit a task given in the ``suanli submit`` form (validated; errors name the field).
        Returns the task id (generated when the spec has none)."""
        now = _now_ms() if now_ms is None else now_ms
        event: TaskSubmitted = (task.to_event(now) if isinstance(task, TaskSpec)  # type: ignore[assignment]
                                else task_from_document(dict(task), now))
        await self.submit_event("TaskSubmitted", event)
        return event["task_id"]

    async def submit_bid(self, *, tenant: str, cell: str, resources: ResourcesSpec | Mapping[str, Any],
                         start_at_ms: int, duration_ms: int, price: float, bid_id: str | None = None,
                         latest_start_at_ms: int | None = None, gang: bool = True,
                         now_ms: int | None = None) -> str:
        """Bid for capacity in a future window; returns the bid id.

        The window lasts ``duration_ms`` and starts at ``start_at_ms``, or, with
        ``latest_start_at_ms``, at any time between the two. ``price`` is the most the bidder
        pays per GPU-hour. ``gang=False`` lets the auction grant fewer GPUs than asked (at
        least one) when the whole ask does not fit."""
        if latest_start_at_ms is not None and latest_start_at_ms < start_at_ms:
            raise ValueError(f"latest_start_at_ms {latest_start_at_ms} is before start_at_ms {start_at_ms}")
        bid_id = bid_id or f"bid-{uuid.uuid4().hex[:12]}"
        bid: ReservationBid = {
            "event_id": f"bid/{bid_id}", "bid_id": bid_id, "tenant": tenant, "cell": cell,
            "resources": resources_of(resources), "start_at": int(start_at_ms), "duration_ms": int(duration_ms),
            "price": float(price), "at": _now_ms() if now_ms is None else now_ms,
            "latest_start_at": None if latest_start_at_ms is None else int(latest_start_at_ms), "gang": bool(gang),
        }
        await self.submit_event("ReservationBid", bid)
        return bid_id

    async def cancel(self, task_id: str, *, tenant: str, cell: str, reason: str = "",
                     now_ms: int | None = None) -> None:
        """Cancel a task (its owner and cell as submitted)."""
        event: TaskCancelled = {"event_id": f"cancel/{task_id}/{uuid.uuid4().hex[:8]}", "task_id": task_id,
                                "tenant": tenant, "cell": cell, "reason": reason,
                                "at": _now_ms() if now_ms is None else now_ms}
        await self.submit_event("TaskCancelled", event)
