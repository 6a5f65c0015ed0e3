"""Reservations on the real stack (issue 15): bids from Go and from the API, the auction in the
scheduler, claims, lending to bronze, purge, and replay.

A plane of its own (intake, scheduler and telemetry workers and the simulated cluster: every
30th node of the openb GPU node list) and ``suanli api serve`` in front of it; policy
``reservations: {clear_every_ms: 5000, purge_idle_ms: 15000}``.

1. 2,000 tasks without reservations (trace GPU shapes; 70 % bronze running 2-4 minutes, 30 %
   silver running 5-15 s) fill the cluster.
2. 200 bids (1-8 GPUs, windows opening 60-90 s later, 10 s of start slack, 40 s long): 100
   produced from Go (``clients/go/bin/produce --file`` of JSON lines), 100 posted to
   ``POST /v1/bids``. Every one must reach GRANTED or a loss with a reason, in the decisions
   and in ``GET /v1/bids/{id}``.
3. Nine in ten winners get a claimant (label ``reservation``) submitted before their window
   opens; a few ask fewer GPUs than they reserved. The tenth are never claimed.
4. Checks: every claimant is placed on its token's node at the first tick of the cell clock at
   or after its window opens (ticks come every ``tick_ms`` of wall time, plus the ticker's
   jitter: a claim waits about one tick at most), dispatched there and reported
   RUNNING by the simulated connector; bronze work lent the held GPUs is
   preempted by the owner; every unclaimed token expires; unused GPUs of short claims are
   released; the cell log, exported up to the last input decided, replays IDENTICAL.
"""
from __future__ import annotations

import asyncio
import csv
import json
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from api_helpers import ApiProcess, write_tokens

from suanli.bench.gold_migration import Follower, StackPlane, gpu_pods, make_task, publish_all, replay_verify
from suanli.config import load_settings

pytestmark = pytest.mark.stack

REPO = Path(__file__).resolve().parents[2]
TENANT = "alpha"
S = 1000


def _nodes_csv(tmp: Path) -> Path:
    src = load_settings().openb_dir / "openb_node_list_gpu_node.csv"
    rows = list(csv.reader(open(src, newline="")))
    out = tmp / "nodes.csv"
    with open(out, "w", newline="") as f:
        csv.writer(f).writerows([rows[0], *rows[1::30]])
    return out


def _go_produce() -> Path:
    go = REPO / "clients" / "go"
    from api_helpers import GO_BIN
    subprocess.run([shutil.which("go") or GO_BIN, "build", "-o", "bin/", "./cmd/..."], cwd=go, check=True,
                   timeout=600)
    return go / "bin" / "produce"


def _bid(i: int, run: str, cell: str, now: int, rng: random.Random) -> dict:
    start = now + 60 * S + (i % 10) * 3 * S
    return {"bid_id": f"{run}-b{i:03d}", "cell": cell, "start_at": start, "latest_start_at": start + 10 * S,
            "duration_ms": 40 * S, "price": round(rng.uniform(1.0, 5.0), 2), "gang": i % 7 != 3,
            "gpus": rng.choice([1, 1, 2, 2, 4, 8])}


def test_bids_from_go_and_the_api_are_cleared_claimed_lent_purged_and_replayed(stack, tmp_path):
    settings_nodes = _nodes_csv(tmp_path)
    produce = _go_produce()
    plane = StackPlane(settings_nodes, time_scale=1.0, prefix="trsv", log=print)
    plane.start()
    api = None
    try:
        api = ApiProcess(plane.settings, write_tokens(tmp_path / "tokens.toml"), tmp_path / "api.log")
        api.wait_ready()
        figures = asyncio.run(_scenario(plane, api, produce, tmp_path))
    finally:
        if api is not None:
            api.stop()
        plane.stop()
    with tempfile.TemporaryDirectory() as d:
        verdict = replay_verify(plane.settings, plane.cell, figures["decided_offset"], Path(d))
    print(json.dumps({k: v for k, v in figures.items() if k != "decided_offset"}, indent=1))
    assert verdict["identical"] is True and verdict["exit_code"] == 0, verdict


async def _scenario(plane: StackPlane, api: ApiProcess, produce: Path, tmp: Path) -> dict:
    from suanli.bench.gold_migration import set_policy
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.kafka_io import EventProducer
    from suanli.streams.topics import TopicNames

    s = plane.settings
    rng = random.Random(15)
    pods = gpu_pods(load_settings().openb_dir / "openb_pod_list_default.csv")
    with RegistryClient(s.registry_url) as registry:
        codec = Codec(registry)
        async with Follower(plane, codec) as f, \
                EventProducer(s.bootstrap_servers, codec, namespace=s.namespace) as producer:
            await set_policy(producer, plane.cell, plane.run,
                             {"reservations": {"clear_every_ms": 5000, "purge_idle_ms": 15000},
                              "retry_every_ms": 2000})
            await f.until(lambda v: len(v.nodes) >= plane.expected_nodes and v.policies >= 1, 180,
                          "nodes registered and the policy in the cell log")

            # 1. the load without reservations
            load = []
            for i in range(2000):
                bronze = rng.random() < 0.7
                dur = rng.randint(120, 240) * S if bronze else rng.randint(5, 15) * S
                load.append(make_task(pods[i % len(pods)], run=plane.run, cell=plane.cell, name=f"w{i:04d}",
                                      tier="BRONZE" if bronze else "SILVER", duration_ms=dur))
            await publish_all(producer, load, 0)
            load_ids = {t["task_id"] for t in load}
            await f.until(lambda v: all(v.decided(t) for t in load_ids), 300, "every load task decided")

            # 2. 200 bids: 100 from Go, 100 from the API
            now = int(time.time() * 1000)
            bids = [_bid(i, plane.run, plane.cell, now, rng) for i in range(200)]
            lines = []
            for b in bids[:100]:
                lines.append(json.dumps({
                    "event_id": f"{b['bid_id']}/bid", "bid_id": b["bid_id"], "tenant": TENANT, "cell": b["cell"],
                    "resources": {"cpu_milli": 1000, "memory_mib": 2048, "gpu_count": b["gpus"], "gpu_milli": 1000,
                                  "gpu_models": [], "gpu_memory_mib": 0, "accelerators": []},
                    "start_at": b["start_at"], "duration_ms": b["duration_ms"], "price": b["price"], "at": now,
                    "latest_start_at": b["latest_start_at"], "gang": b["gang"]}))
            (tmp / "bids.jsonl").write_text("\n".join(lines) + "\n")
            go = subprocess.run([str(produce), "--brokers", s.bootstrap_servers, "--registry", s.registry_url,
                                 "--topic", TopicNames(s.namespace).raw_tasks, "--kind", "ReservationBid",
                                 "--file", str(tmp / "bids.jsonl")], capture_output=True, text=True, timeout=120)
            assert go.returncode == 0 and "produced 100 ReservationBid" in go.stdout, go.stdout + go.stderr
            with api.client(TENANT) as http:
                for b in bids[100:]:
                    r = http.post("/v1/bids", json={
                        "bid_id": b["bid_id"], "cell": b["cell"],
                        "resources": {"cpu": 1, "memory": "2Gi", "gpu": b["gpus"]},
                        "start_at": b["start_at"], "latest_start_at": b["latest_start_at"],
                        "duration_ms": b["duration_ms"], "price": b["price"], "gang": b["gang"]})
                    assert r.status_code == 202, r.text
            bid_ids = {b["bid_id"] for b in bids}

            def outcomes(v):
                return {p["bid_id"]: (k, p) for k, _, p in v.decisions
                        if k in ("ReservationGranted", "ReservationRejected")}
            await f.until(lambda v: bid_ids <= set(outcomes(v)), 180, "an outcome for every bid")
            out = outcomes(f.view)
            grants = {bid: p for bid, (k, p) in out.items() if k == "ReservationGranted"}
            losses = {bid: p for bid, (k, p) in out.items() if k == "ReservationRejected"}
            assert len(grants) + len(losses) == 200 and grants, (len(grants), len(losses))
            assert all(p["reason"] for p in losses.values())
            with api.client(TENANT) as http:
                for bid in sorted(bid_ids)[::20]:
                    view = http.get(f"/v1/bids/{bid}").json()
                    assert view["status"] == ("GRANTED" if bid in grants else "LOST"), view

            # 3. claimants for nine in ten winners, before their windows open
            granted = sorted(grants)
            unclaimed = set(granted[9::10])
            claims, short, claim_tasks = {}, set(), []
            for i, bid in enumerate(granted):
                if bid in unclaimed:
                    continue
                g = grants[bid]
                gpus = len(g["gpu_devices"])
                if i % 5 == 1 and gpus > 1:
                    gpus //= 2
                    short.add(g["reservation_id"])
                task = make_task(pods[0], run=plane.run, cell=plane.cell, name=f"own-{bid}", tier="SILVER",
                                 labels={"reservation": g["reservation_id"]}, duration_ms=20 * S)
                task["tenant"] = TENANT
                task["resources"] = {**task["resources"], "gpu_count": gpus, "gpu_milli": 1000, "cpu_milli": 1000,
                                     "memory_mib": 2048}
                claims[task["task_id"]] = g
                claim_tasks.append(task)
            late = [t for t, g in claims.items() if g["start_at"] <= int(time.time() * 1000)]
            assert not late, f"{len(late)} windows opened before their claimants were sent: the stack is too slow"
            await publish_all(producer, claim_tasks, 0)

            def placed(v):
                return {p["task_id"]: p for k, _, p in v.decisions if k == "TaskPlaced" and p["task_id"] in claims}

            def expired(v):
                return {p["reservation_id"] for k, _, p in v.decisions if k == "ReservationExpired"}
            unclaimed_rids = {grants[b]["reservation_id"] for b in unclaimed}
            await f.until(lambda v: set(placed(v)) == set(claims) and unclaimed_rids <= expired(v), 240,
                          "every claimant placed and every unclaimed token expired")

            def ran(v):          # the connector ran it where the decision put it: the whole way back
                return {p["task_id"] for _, p in v.statuses.values()
                        if p["status"] == "RUNNING" and p["task_id"] in claims
                        and p["node_id"] == placed(v)[p["task_id"]]["node_id"]}
            await f.until(lambda v: ran(v) == set(claims), 120,
                          "every claimant reported RUNNING by the simulated connector on its token's node")
            await f.catch_up()
            v = f.view

    # 4. the checks
    def first_tick(at: int) -> tuple[int, int]:
        """The cell log's first CellTick at or after ``at``: (offset, its at)."""
        return next((off, t) for off, t in v.ticks if t >= at)

    delays = []
    wrong = []
    for tid, p in placed(v).items():
        g = claims[tid]
        # The window rule runs on the cell clock, not on the input's own time (decided_at),
        # which is behind the clock when the input was stamped before one the log showed earlier.
        offset = p["provenance"]["input"]["offset"]
        delay = v.clock_at(offset) - g["start_at"]
        delays.append(delay)
        due, _ = first_tick(g["start_at"])
        if not (p["node_id"] == g["node_id"] and set(p["gpu_devices"]) <= set(g["gpu_devices"])
                and any("reservation" in step and "claimed" in step for step in p["provenance"]["path"])
                and delay >= 0 and offset <= due):
            wrong.append((tid, delay, offset, due, p["node_id"], g["node_id"],
                          p["provenance"]["path"]))
    assert not wrong, (f"{len(wrong)} of {len(claims)} claimants not started on their token at the first tick of "
                       f"the cell clock after their window opened (task, cell clock - window start in ms, input "
                       f"offset, that tick's offset, node, token's node, path): {wrong[:5]}")
    # The ticker beats every tick_ms of wall time, give or take its event loop's jitter.
    gaps = [b - a for (_, a), (_, b) in zip(v.ticks, v.ticks[1:])]
    preempted = [p for k, _, p in v.decisions if k == "TaskPreempted" and p["preempted_by"] in claims]
    assert preempted, "no bronze work was lent a token's GPUs and preempted by its owner"
    bronze = {t["task_id"] for t in load if t["qos_tier"] == "BRONZE"}
    assert {p["task_id"] for p in preempted} <= bronze
    released = {p["reservation_id"] for k, _, p in v.decisions if k == "ReservationReleased"}
    assert short <= released, short - released
    return {"bids": 200, "granted": len(grants), "lost": len(losses),
            "lost_reasons": sorted({p["reason"].split(":")[0] for p in losses.values()}),
            "claimed": len(claims), "unclaimed_expired": len(unclaimed_rids),
            "claim_delay_ms": {"max": max(delays), "p50": sorted(delays)[len(delays) // 2]},
            "tick_gap_ms": {"max": max(gaps), "p50": sorted(gaps)[len(gaps) // 2], "tick_ms": s.tick_ms},
            "bronze_preempted_by_owners": len(preempted), "short_claims_released": len(short),
            "decided_offset": v.decided_offset}

