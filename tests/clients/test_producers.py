"""Producers in other languages against the REAL broker and registry.

Each client (Go/franz-go, Java/kafka-clients, TypeScript/kafkajs, the kcat shell script,
and the Python SDK) produces TaskSubmitted and ReservationBid events; the Python codec
must decode every record to exactly the event that was meant. Then a small control plane
runs with its whole workload submitted by those clients, and must place every task.

Every test runs twice: on the suite's plaintext broker, and over SASL_SSL (SCRAM-SHA-512 over
TLS) on the session's secure broker (``secure_stack``), every client authenticating as the
control plane's principal through the ``SUANLI_KAFKA_*`` environment, the plane's workers too.
"""
from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import pytest

from client_helpers import (LANGS, PRODUCERS, REPO, ensure_built, kafka_env, produce_argv, python_sdk, run,
                            shell_argv)
from suanli.deploy.plane import Plane, PlaneOptions
from suanli.schemas.codec import split_frame
from suanli.streams.kafka_io import EventConsumer, ensure_topics
from suanli.streams.topics import TopicNames, TopicSpec

pytestmark = pytest.mark.stack

T0 = 1_767_225_600_000


@pytest.fixture(params=["plaintext", "sasl_ssl"])
def kafka(request, stack):
    """The broker a test's producers write to: the suite's plaintext one, or the secure one."""
    return stack if request.param == "plaintext" else request.getfixturevalue("secure_stack")


def _resources(cpu: int, mem: int, gpus: int = 0, milli: int = 0, models: tuple[str, ...] = (), gpu_mem: int = 0) -> dict:
    return {"cpu_milli": cpu, "memory_mib": mem, "gpu_count": gpus, "gpu_milli": milli, "gpu_models": list(models),
            "gpu_memory_mib": gpu_mem, "accelerators": []}


def _with_defaults(event: dict) -> dict:
    """The event as a reader of today's schema decodes it: a profile sent with the fields
    its producer knows comes back with every later field at its default."""
    if not event.get("profile"):
        return event
    from suanli.processors.model import TaskProfile, to_avro
    return {**event, "profile": {**to_avro(TaskProfile()), **event["profile"]}}


def _events(lang: str, run_id: str, cell: str) -> dict[str, dict]:
    """What one language sends: a task from flags, a task from a JSON file, a bid."""
    flag_task = {
        "event_id": f"submit/{run_id}-{lang}-flags", "task_id": f"{run_id}-{lang}-flags", "tenant": f"tenant-{lang}",
        "cell": cell, "submitted_at": T0 + 1, "resources": _resources(6000, 12288, 1, 460, ("V100M16", "V100M32")),
        "qos_tier": "GOLD", "priority": 3, "labels": {"team": "vision", "lang": lang, "scheduling": "urgent"},
        "deadline": None,
        "duration_estimate_ms": 7_200_000, "command": None, "profile": None, "env": {},
        "job_id": None}
    file_task = {
        "event_id": f"submit/{run_id}-{lang}-file", "task_id": f"{run_id}-{lang}-file", "tenant": "视觉",
        "cell": cell, "submitted_at": T0 + 2,
        "resources": _resources(32000, 262144, 2, 1000, ("A100",), 40960),
        "qos_tier": "BRONZE", "priority": -5, "labels": {"2": "two", "10": "ten", "team": "算力"},
        "deadline": T0 + 86_400_000, "duration_estimate_ms": None, "command": ["python", "train.py", "--epochs=3"],
        "profile": {"duration_class": "long", "io_intensity": 0.5, "parallelism": 2, "sla_level": "", "model_arch": "bert",
                    "data_locations": ["site-a"], "extra": {"b": 2.5, "a": -1.0}},
        "env": {"EPOCHS": "3", "DATA_DIR": "/mnt/数据"}, "job_id": f"job-{run_id}-{lang}"}
    if lang == "shell":
        file_task["profile"] = None  # the shell encoder writes no profile
    bid = {"event_id": f"bid/{run_id}-{lang}-bid", "bid_id": f"{run_id}-{lang}-bid", "tenant": f"tenant-{lang}",
           "cell": cell, "resources": _resources(64000, 524288, 8, 1000, ("A100",)), "start_at": T0 + 3_600_000,
           "duration_ms": 14_400_000, "price": 2.75, "at": T0 + 3, "latest_start_at": None, "gang": True}
    flex_bid = {**bid, "event_id": f"bid/{run_id}-{lang}-flex", "bid_id": f"{run_id}-{lang}-flex",
                "resources": _resources(16000, 131072, 4, 1000), "price": 1.5,
                "latest_start_at": T0 + 3 * 3_600_000, "gang": False}
    return {"flags": flag_task, "file": file_task, "bid": bid, "flex": flex_bid}


# What each event of _events is and how the decoded records are matched to it.
SENT = (("flags", "TaskSubmitted", "task_id"), ("file", "TaskSubmitted", "task_id"),
        ("bid", "ReservationBid", "bid_id"), ("flex", "ReservationBid", "bid_id"))


def _task_flags(t: dict) -> list[str]:
    r = t["resources"]
    argv = ["--task-id", t["task_id"], "--event-id", t["event_id"], "--tenant", t["tenant"], "--cell", t["cell"],
            "--at", t["submitted_at"], "--cpu-milli", r["cpu_milli"], "--memory-mib", r["memory_mib"],
            "--gpu-count", r["gpu_count"], "--gpu-milli", r["gpu_milli"], "--qos", t["qos_tier"],
            "--priority", t["priority"], "--duration-ms", t["duration_estimate_ms"]]
    argv += [x for m in r["gpu_models"] for x in ("--gpu-model", m)]
    argv += [x for k, v in t["labels"].items() for x in ("--label", f"{k}={v}")]
    return [str(a) for a in argv]


def _bid_flags(b: dict) -> list[str]:
    r = b["resources"]
    argv = ["--bid-id", b["bid_id"], "--event-id", b["event_id"], "--tenant", b["tenant"], "--cell", b["cell"],
            "--cpu-milli", r["cpu_milli"], "--memory-mib", r["memory_mib"], "--gpu-count", r["gpu_count"],
            "--gpu-milli", r["gpu_milli"], "--start-at", b["start_at"], "--duration-ms", b["duration_ms"],
            "--price", b["price"], "--at", b["at"]]
    argv += [x for m in r["gpu_models"] for x in ("--gpu-model", m)]
    if r.get("gpu_memory_mib"):
        argv += ["--gpu-memory-mib", r["gpu_memory_mib"]]
    if b.get("latest_start_at") is not None:
        argv += ["--latest-start", b["latest_start_at"]]
    if not b.get("gang", True):
        argv.append("--gang=false")  # the one form every producer takes (Go's bool flags need '=')
    return [str(a) for a in argv]


def _commands(lang: str, events: dict[str, dict], topic: str, settings, tmp: Path) -> list[list[str]]:
    """The producer command lines that send ``events`` (all but the Python SDK's)."""
    conn = ["--brokers", settings.bootstrap_servers, "--registry", settings.registry_url, "--topic", topic]
    if lang == "shell":
        return [shell_argv(kind, events[name]) + conn for name, kind, _key in SENT]
    base = produce_argv(lang) + conn
    path = tmp / f"{lang}-tasks.json"
    path.write_text(json.dumps([events["file"]], ensure_ascii=False))
    return [base + _task_flags(events["flags"]),
            base + ["--kind", "TaskSubmitted", "--file", str(path)],
            base + _bid_flags(events["bid"]),
            base + _bid_flags(events["flex"])]


async def _read(settings, codec, topic: str) -> list:
    async with EventConsumer(settings.bootstrap_servers, codec, [topic]) as consumer:
        return await consumer.read_until_end()


@pytest.mark.parametrize("lang", PRODUCERS)
def test_producer_writes_events_the_python_codec_decodes(lang, kafka, codec, registry, tmp_path):
    run_id = f"p{uuid.uuid4().hex[:8]}"
    topic = TopicNames(run_id).raw_tasks
    asyncio.run(ensure_topics(kafka.bootstrap_servers, [TopicSpec(topic, 2)]))
    events = _events(lang, run_id, cell=f"cell-{run_id}")

    if lang == "python":
        sdk = python_sdk()

        async def produce() -> None:
            async with sdk.SuanliClient(kafka, namespace=run_id) as client:
                await client.submit_event("TaskSubmitted", events["flags"])
                await client.submit_event("TaskSubmitted", events["file"])
                await client.submit_event("ReservationBid", events["bid"])
                flex = events["flex"]
                await client.submit_bid(tenant=flex["tenant"], cell=flex["cell"], bid_id=flex["bid_id"],
                                        resources={"cpu_milli": 16000, "memory_mib": 131072, "gpu": 4},
                                        start_at_ms=flex["start_at"],
                                        latest_start_at_ms=flex["latest_start_at"], gang=flex["gang"],
                                        duration_ms=flex["duration_ms"], price=flex["price"], now_ms=flex["at"])
        asyncio.run(produce())
    else:
        for argv in _commands(lang, events, topic, kafka, tmp_path):
            proc = run(argv, cwd=REPO, timeout=120, env=kafka_env(kafka))
            assert "produced 1 " in proc.stdout, proc.stdout

    records = asyncio.run(_read(kafka, codec, topic))
    assert [r.error for r in records if r.error] == []
    got = {r.key.decode(): (r.kind, r.payload, split_frame(r.value)[0]) for r in records}
    assert set(got) == {events[name][key] for name, _kind, key in SENT}
    latest = {kind: registry.latest(f"io.suanli.events.{kind}")["id"] for kind in ("TaskSubmitted", "ReservationBid")}
    for name, kind, key in SENT:
        want = _with_defaults(events[name])
        got_kind, payload, schema_id = got[want[key]]
        assert got_kind == kind
        assert payload == want, f"{lang} {name}: decoded {payload}\n want {want}"
        assert schema_id == latest[kind], f"{lang} {name}: schema id {schema_id}, latest is {latest[kind]}"
    # the urgent task (labelled scheduling: urgent) carries the lane header, as the plane's producers
    # put it (streams/intake.lane_headers); no other record carries any header
    headers = {r.key.decode(): r.headers for r in records}
    assert headers.pop(events["flags"]["task_id"]) == (("suanli-lane", b"urgent"),), lang
    assert set(headers.values()) == {()}, (lang, headers)


def _bid_batch(run_id: str, cell: str, n: int) -> list[dict]:
    """``n`` varied bids: prices, GPU counts, fixed and flexible windows, gang or not."""
    bids = []
    for i in range(n):
        bid = {"event_id": f"bid/{run_id}-{i}", "bid_id": f"{run_id}-b{i:03d}", "tenant": f"tenant-{i % 7}",
               "cell": cell, "resources": _resources(4000 * (1 + i % 4), 16384, 1 + i % 8, 1000,
                                                      ("A100",) if i % 5 == 0 else ()),
               "start_at": T0 + 3_600_000 * (1 + i % 6), "duration_ms": 1_800_000 * (1 + i % 4),
               "price": round(0.5 + (i * 37 % 100) / 40, 3), "at": T0 + i}
        if i % 3:  # the others leave both out: their defaults (null, true) apply
            bid["latest_start_at"] = bid["start_at"] + 600_000 * (i % 4) if i % 2 else None
            bid["gang"] = i % 4 != 1
        bids.append(bid)
    return bids


def test_go_produces_a_batch_of_bids_from_json_lines(kafka, codec, tmp_path):
    """The acceptance test's way to send many bids from Go: one JSON object a line, one batch."""
    run_id = f"p{uuid.uuid4().hex[:8]}"
    topic = TopicNames(run_id).raw_tasks
    asyncio.run(ensure_topics(kafka.bootstrap_servers, [TopicSpec(topic, 2)]))
    bids = _bid_batch(run_id, f"cell-{run_id}", 100)
    path = tmp_path / "bids.jsonl"
    path.write_text("".join(json.dumps(b) + "\n" for b in bids))
    conn = ["--brokers", kafka.bootstrap_servers, "--registry", kafka.registry_url, "--topic", topic]
    proc = run(produce_argv("go") + conn + ["--kind", "ReservationBid", "--file", str(path)], cwd=REPO, timeout=120,
               env=kafka_env(kafka))
    assert f"produced 100 ReservationBid to {topic}" in proc.stdout, proc.stdout

    records = asyncio.run(_read(kafka, codec, topic))
    assert [r.error for r in records if r.error] == []
    got = {r.key.decode(): r.payload for r in records}
    assert len(records) == len(got) == 100
    for bid in bids:
        want = {"latest_start_at": None, "gang": True, **bid}
        assert got[bid["bid_id"]] == want


def test_python_sdk_submits_a_task_spec_and_cancels_it(kafka, codec):
    run_id = f"p{uuid.uuid4().hex[:8]}"
    topic = TopicNames(run_id).raw_tasks
    asyncio.run(ensure_topics(kafka.bootstrap_servers, [TopicSpec(topic, 1)]))
    sdk = python_sdk()

    async def produce() -> tuple[str, str]:
        async with sdk.SuanliClient(kafka, namespace=run_id) as client:
            task_id = await client.submit_task({"tenant": "vision", "cell": "openb", "qos": "gold",
                                                "resources": {"cpu": 4, "memory": "8Gi", "gpu": 0.5}}, now_ms=T0)
            bid_id = await client.submit_bid(tenant="vision", cell="openb", start_at_ms=T0 + 1, duration_ms=60_000,
                                             price=1.25, resources={"cpu": 8, "memory": "16Gi", "gpu": 2}, now_ms=T0)
            await client.cancel(task_id, tenant="vision", cell="openb", reason="done", now_ms=T0 + 5)
            return task_id, bid_id
    task_id, bid_id = asyncio.run(produce())
    records = asyncio.run(_read(kafka, codec, topic))
    by_kind = {r.kind: r.payload for r in records}
    assert by_kind["TaskSubmitted"]["task_id"] == task_id
    assert by_kind["TaskSubmitted"]["resources"]["gpu_milli"] == 500
    assert by_kind["TaskSubmitted"]["qos_tier"] == "GOLD"
    assert by_kind["ReservationBid"]["bid_id"] == bid_id
    assert by_kind["ReservationBid"]["resources"]["gpu_count"] == 2
    assert by_kind["TaskCancelled"] == {"event_id": by_kind["TaskCancelled"]["event_id"], "task_id": task_id,
                                        "tenant": "vision", "cell": "openb", "reason": "done", "at": T0 + 5}


def test_control_plane_places_every_task_produced_by_the_other_languages(kafka, codec, tmp_path):
    for lang in (*LANGS, "shell"):
        ensure_built(lang)  # before the plane starts, so a missing toolchain fails fast
    settings = kafka.model_copy(update={"namespace": f"t{uuid.uuid4().hex[:10]}", "partitions": 2})
    per_lang = 4
    sent: dict[str, list[str]] = {}
    sdk = python_sdk()

    async def workload(publish, send_raw, tasks, names):
        """Every task of the plane's run goes through one of the clients; each also bids."""
        conn = ["--brokers", settings.bootstrap_servers, "--registry", settings.registry_url,
                "--topic", names.raw_tasks]
        commands: list[list[str]] = []
        python_events: list[tuple[str, dict]] = []
        now = int(time.time() * 1000)
        for i, lang in enumerate(PRODUCERS):
            group = tasks[i::len(PRODUCERS)]
            sent[lang] = [t["task_id"] for t in group]
            bid = {"event_id": f"bid/{lang}", "bid_id": f"{group[0]['cell']}-{lang}-bid", "tenant": "openb",
                   "cell": group[0]["cell"], "resources": _resources(8000, 16384, 1, 1000), "start_at": now + 3_600_000,
                   "duration_ms": 3_600_000, "price": 1.5, "at": now}
            if lang == "python":
                python_events += [("TaskSubmitted", t) for t in group] + [("ReservationBid", bid)]
            elif lang == "shell":
                commands += [shell_argv("TaskSubmitted", t) + conn for t in group]
                commands.append(shell_argv("ReservationBid", bid) + conn)
            else:
                path = tmp_path / f"{lang}-tasks.json"
                path.write_text(json.dumps(group))   # openb tasks have no "profile": the default (null) applies
                commands.append(produce_argv(lang) + conn + ["--kind", "TaskSubmitted", "--file", str(path)])
                commands.append(produce_argv(lang) + conn + _bid_flags(bid))

        gate = asyncio.Semaphore(2)

        async def run_one(argv: list[str]) -> None:
            async with gate:
                proc = await asyncio.create_subprocess_exec(*argv, cwd=REPO, stdout=asyncio.subprocess.PIPE,
                                                            stderr=asyncio.subprocess.PIPE, env=kafka_env(settings))
                out, err = await asyncio.wait_for(proc.communicate(), timeout=120)
            if proc.returncode != 0:
                raise AssertionError(f"`{' '.join(argv)}` exited {proc.returncode}:\n{out.decode()}\n{err.decode()}")

        async def run_python() -> None:
            async with sdk.SuanliClient(settings) as client:
                for kind, event in python_events:
                    await client.submit_event(kind, event)

        await asyncio.gather(run_python(), *(run_one(argv) for argv in commands))

    plane = Plane(settings, PlaneOptions(tasks=per_lang * len(PRODUCERS), exit_when_drained=True, quiet=True,
                                         drain_timeout=240, workload=workload), out=lambda _m: None)
    plane.start()
    try:
        result = asyncio.run(plane.run())
    finally:
        plane.stop()

    assert sorted(sent) == sorted(PRODUCERS) and all(len(ids) == per_lang for ids in sent.values()), sent
    assert result["submitted"] == per_lang * len(PRODUCERS), result
    assert result["dead_lettered"] == 0, result          # bids included: intake accepted every record
    assert result["capacity_violations"] == 0, result["violations"]
    records = asyncio.run(_read(settings, codec, TopicNames(settings.namespace).decisions))
    placed = {r.payload["task_id"] for r in records if r.kind == "TaskPlaced"}
    for lang, ids in sent.items():
        assert set(ids) <= placed, f"{lang}: not placed: {sorted(set(ids) - placed)}"
    assert result["placed"] == per_lang * len(PRODUCERS), result
