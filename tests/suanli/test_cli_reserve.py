"""`suanli reserve` and `suanli reservations`: the bid file, the tables, and (on the stack) a
bid on the raw topic and the tokens folded from a hand-written log."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid

import pytest

from suanli.cli import build_parser
from suanli.cli_reserve import bid_lines, read_bid, token_lines, token_row
from suanli.cli_services import STACK, needs_of
from suanli.errors import ValidationError
from suanli.processors import model as m
from suanli.projections.reservations import ReservationsView

NOW = 1_900_000_000_000
H = 3_600_000
BID = """\
id: {bid}
tenant: vision
cell: {cell}
gpus: 2
gpu_model: A100
cpu: 8
memory: 32Gi
start: +10m
latest_start: +1h
duration: 4h
price: 2.5
gang: false
"""


def prov(at: int, path=()) -> m.Provenance:
    return m.Provenance(input=m.LogPosition(topic="x", partition=0, offset=0),
                        strategy=m.StrategyRef(name="auction", version="1", config_digest="d"),
                        candidates=(), filtered=(), path=tuple(path), decided_at=at)


def log(bid: dict, cell: str) -> list:
    """What the plane would write about the bid: forwarded, granted, claimed, unused GPU given back;
    and a second bid, lost."""
    rid = f"rsv-{bid['bid_id']}"
    return [
        ("cell_log", m.from_avro("ReservationBid", bid)),
        ("cell_log", m.from_avro("ReservationBid", {**bid, "event_id": "lost-bid", "bid_id": "b-lost", "price": 0.1})),
        ("cell_log", m.TaskSubmitted(event_id="sub-job", task_id="job", tenant="vision", cell=cell, submitted_at=NOW,
                                     resources=m.TaskResources(cpu_milli=1000, memory_mib=1024, gpu_count=1,
                                                               gpu_milli=1000), labels={"reservation": rid})),
        ("decisions", m.ReservationGranted(event_id="g", reservation_id=rid, bid_id=bid["bid_id"], tenant="vision",
                                           cell=cell, node_id="n7", gpu_devices=(4, 5), start_at=NOW + H,
                                           end_at=NOW + 5 * H, clearing_price=1.25, provenance=prov(NOW),
                                           bid_price=2.5, wanted_gpus=2, cpu_milli=8000, memory_mib=32768)),
        ("decisions", m.ReservationRejected(event_id="r", bid_id="b-lost", tenant="vision", cell=cell,
                                            reason="outbid", needed_price=1.25, at=NOW, provenance=prov(NOW))),
        ("decisions", m.TaskPlaced(event_id="p", decision_id=f"{cell}/x/0/1/0", task_id="job", tenant="vision",
                                   cell=cell, node_id="n7", gpu_devices=(5,), gpu_milli=1000, cpu_milli=1000,
                                   memory_mib=1024, provenance=prov(NOW + H, [f"reservation {rid}: claimed"]))),
        ("decisions", m.ReservationReleased(event_id="rel", reservation_id=rid, cell=cell, reason="unused at the claim",
                                            at=NOW + H, gpu_devices=(4,), node_id="n7", claimed_by="job")),
    ]


# ------------------------------------------------------------------ without services
def test_both_commands_are_registered_and_need_the_stack(tmp_path):
    path = tmp_path / "bid.yaml"
    path.write_text(BID.format(bid="b-1", cell="c"))
    parser = build_parser()
    assert needs_of(parser.parse_args(["reserve", "-f", str(path)])) == STACK
    assert needs_of(parser.parse_args(["reservations", "--bids", "--json"])) == STACK
    with pytest.raises(SystemExit):
        parser.parse_args(["reserve"])              # -f is required


def test_read_bid_parses_the_file_and_overrides_the_cell(tmp_path):
    path = tmp_path / "bid.yaml"
    path.write_text(BID.format(bid="b-1", cell="c"))
    event = read_bid(str(path), "other", NOW)
    assert (event["bid_id"], event["cell"], event["gang"], event["resources"]["gpu_count"]) == ("b-1", "other", False, 2)
    assert (event["start_at"], event["latest_start_at"], event["duration_ms"]) == (NOW + 600_000, NOW + H, 4 * H)
    path.write_text("gpus: [1\n")
    with pytest.raises(ValidationError, match="not valid YAML"):
        read_bid(str(path), None, NOW)
    path.write_text(BID.format(bid="b-1", cell="c").replace("latest_start: +1h", "latest_start: +1m"))
    with pytest.raises(ValidationError, match="latest_start: .* is before the earliest start"):
        read_bid(str(path), None, NOW)


def test_the_tables():
    view = ReservationsView()
    payload = {"event_id": "e", "bid_id": "b-1", "tenant": "vision", "cell": "c",
               "resources": {"cpu_milli": 8000, "memory_mib": 32768, "gpu_count": 2, "gpu_milli": 1000},
               "start_at": NOW, "duration_ms": 4 * H, "price": 2.5, "at": NOW, "latest_start_at": None, "gang": True}
    for _role, event in log(payload, "c"):
        view.apply_event(event)
    tokens = token_lines(view.tokens_of(), 50)
    assert tokens[0].startswith("token") and "rsv-b-1" in tokens[1] and "CLAIMED" in tokens[1]
    assert "job" in tokens[1] and "1/2, 1 back" in tokens[1] and "n7" in tokens[1] and "4,5" in tokens[1]
    bids = bid_lines(view.bids_of(), view, 50)
    assert any("b-1" in line and "GRANTED" in line and "rsv-b-1 on n7" in line for line in bids)
    assert any("b-lost" in line and "LOST" in line and "1.25 per GPU-hour would have won" in line for line in bids)
    assert token_lines([], 5) == ["no reservation tokens"] and bid_lines([], view, 5) == ["no bids"]
    row = token_row(view.token("rsv-b-1"))
    assert (row["status"], row["used_gpus"], row["gpus_released"], row["use"]) == ("CLAIMED", 1, 1, 0.5)
    json.dumps(row)


# ------------------------------------------------------------------ on the stack
@pytest.mark.stack
def test_reserve_stores_the_bid_and_reservations_folds_the_log(stack, tmp_path):
    from suanli.config import load_settings, to_env
    from suanli.schemas.codec import Codec
    from suanli.schemas.registry import RegistryClient
    from suanli.streams.kafka_io import EventConsumer, EventProducer, ensure_topics
    from suanli.streams.topics import TopicNames, core_topics

    settings = load_settings(namespace=f"t{uuid.uuid4().hex[:10]}", partitions=1)
    names = TopicNames(settings.namespace)
    asyncio.run(ensure_topics(settings.bootstrap_servers, core_topics(settings.partitions, settings.namespace)))
    env = {**os.environ, **to_env(settings)}

    def cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "suanli", *args], capture_output=True, text=True, env=env,
                              input=stdin, timeout=120)

    bad = cli("reserve", "-f", "-", stdin=BID.format(bid="b-bad", cell="c1").replace("gpus: 2", "gpus: 0"))
    assert bad.returncode == 2 and "gpus: a reservation holds whole GPUs" in bad.stderr and "Traceback" not in bad.stderr
    path = tmp_path / "bid.yaml"
    path.write_text(BID.format(bid="b-cli", cell="c1"))
    good = cli("reserve", "-f", str(path), "--json")
    assert good.returncode == 0, good.stderr
    written = json.loads(good.stdout)
    assert written["reservation_id"] == "rsv-b-cli" and written["stored"]["topic"] == names.raw_tasks
    text = cli("reserve", "-f", "-", stdin=BID.format(bid="b-text", cell="c1"))
    assert text.returncode == 0 and "bid b-text for 2 GPUs (fewer will do)" in text.stdout and "rsv-b-text" in text.stdout

    async def raw_and_plane() -> list:
        with RegistryClient(settings.registry_url) as registry:
            codec = Codec(registry)
            async with EventConsumer(settings.bootstrap_servers, codec, [names.raw_tasks]) as consumer:
                raw = [r for r in await consumer.read_until_end()]
            stored = next(r.payload for r in raw if r.kind == "ReservationBid" and r.payload["bid_id"] == "b-cli")
            async with EventProducer(settings.bootstrap_servers, codec) as producer:
                for role, event in log(stored, "c1"):
                    await (await producer.send(getattr(names, role), event.KIND, m.to_avro(event), key="c1"))
            return raw

    raw = asyncio.run(raw_and_plane())
    assert [r.payload["bid_id"] for r in raw if r.kind == "ReservationBid"] == ["b-cli", "b-text"]   # not b-bad
    stored = next(r.payload for r in raw if r.payload["bid_id"] == "b-cli")
    assert stored["gang"] is False and stored["latest_start_at"] == stored["start_at"] + 50 * 60_000

    tokens = cli("reservations", "--json")
    assert tokens.returncode == 0, tokens.stderr
    [token] = json.loads(tokens.stdout)
    assert {k: token[k] for k in ("reservation_id", "bid_id", "tenant", "node_id", "gpu_devices", "clearing_price",
                                  "status", "claimed_by", "used_gpus", "gpus_released", "use")} == {
        "reservation_id": "rsv-b-cli", "bid_id": "b-cli", "tenant": "vision", "node_id": "n7", "gpu_devices": [4, 5],
        "clearing_price": 1.25, "status": "CLAIMED", "claimed_by": ["job"], "used_gpus": 1, "gpus_released": 1,
        "use": 0.5}
    bids = {b["bid_id"]: b for b in json.loads(cli("reservations", "--bids", "--json").stdout)}
    assert (bids["b-cli"]["status"], bids["b-cli"]["reservation_status"], bids["b-cli"]["gang"]) == \
        ("GRANTED", "CLAIMED", False)
    assert (bids["b-lost"]["status"], bids["b-lost"]["needed_price"]) == ("LOST", 1.25)
    table = cli("reservations", "--cell", "c1")
    assert table.returncode == 0 and "rsv-b-cli" in table.stdout and "CLAIMED" in table.stdout
    assert "no reservation tokens" in cli("reservations", "--cell", "elsewhere").stdout
