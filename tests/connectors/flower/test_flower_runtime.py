"""Real federated runs: flower-superlink, SuperNodes and the ServerApp as separate OS
processes on 127.0.0.1 (free ports), driven by connectors/flower/aggregator.py and client.py
exactly as Suanli tasks run them, with the Flower venv of ``suanli.deploy.flower``
(``ensure_venv()`` builds it if .ci/setup.d/85-flower.sh has not). Never skipped.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from contextlib import ExitStack, closing
from pathlib import Path

import pytest

from suanli.deploy.flower import CONNECTOR_DIR, ensure_venv


@pytest.fixture(scope="module")
def python() -> Path:
    return ensure_venv()


def free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_node(stack: ExitStack, python: Path, tmp: Path, link: int, pid: int, n: int) -> subprocess.Popen:
    log = (tmp / f"node{pid}.log").open("wb")
    stack.enter_context(log)
    proc = subprocess.Popen(
        [str(python), str(CONNECTOR_DIR / "client.py"), "--superlink", f"127.0.0.1:{link}",
         "--clientappio-port", str(free_port()), "--partition-id", str(pid), "--num-partitions", str(n),
         "--cloud", f"cloud{pid % 2}", "--work-dir", str(tmp / f"node{pid}")],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def stop() -> None:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    stack.callback(stop)
    return proc


def start_aggregator(python: Path, tmp: Path, link: int, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [str(python), str(CONNECTOR_DIR / "aggregator.py"), "--fleet-port", str(link),
         "--report", str(tmp / "report.jsonl"), "--work-dir", str(tmp / "agg"), "--timeout", "400", *args],
        stdout=(tmp / "aggregator.log").open("wb"), stderr=subprocess.PIPE, start_new_session=True)


def finish(agg: subprocess.Popen, tmp: Path) -> list[dict]:
    try:
        _, err = agg.communicate(timeout=450)
    except subprocess.TimeoutExpired:
        os.killpg(agg.pid, signal.SIGTERM)
        _, err = agg.communicate(timeout=30)
    log = (tmp / "aggregator.log").read_text(errors="replace")[-3000:]
    assert agg.returncode == 0, f"aggregator exited {agg.returncode}: {err.decode()}\n{log}"
    return [json.loads(line) for line in (tmp / "report.jsonl").read_text().splitlines()]


def run_job(python: Path, tmp: Path, n: int, *args: str) -> tuple[list[dict], float]:
    link = free_port()
    t0 = time.monotonic()
    with ExitStack() as stack:
        for i in range(n):
            start_node(stack, python, tmp, link, i, n)
        rows = finish(start_aggregator(python, tmp, link, *args), tmp)
    return rows, time.monotonic() - t0


def check_rounds(rows: list[dict], rounds: int, n: int, secagg: bool) -> None:
    assert [r["round"] for r in rows] == list(range(1, rounds + 1))
    for r in rows:
        assert r["ok"] and r["secagg"] is secagg and r["clients"] == list(range(n))
        assert set(r["bytes_up"]) == set(r["bytes_down"]) == {str(i) for i in range(n)}
        assert all(v > 0 for v in r["bytes_up"].values()) and all(v > 0 for v in r["bytes_down"].values())
        assert r["clouds"] == {str(i): f"cloud{i % 2}" for i in range(n)}
        assert r["wall_ms"] > 0
    # the model learns: honest bounds for softmax regression on digits after 1 and 3 rounds
    assert rows[0]["accuracy"] > 0.5
    assert rows[-1]["accuracy"] > rows[0]["accuracy"] and rows[-1]["accuracy"] > 0.85


@pytest.fixture(scope="module")
def plain_bytes(python: Path, tmp_path_factory) -> dict[str, int]:
    tmp = tmp_path_factory.mktemp("flower-plain")
    rows, wall = run_job(python, tmp, 3, "--rounds", "3", "--min-clients", "3", "--no-secagg")
    check_rounds(rows, 3, 3, secagg=False)
    print(f"plain 3x3: {wall:.0f}s, rounds {[r['wall_ms'] for r in rows]} ms")
    return rows[-1]["bytes_up"]


def test_plain_fedavg_three_clients_three_rounds(plain_bytes: dict[str, int]) -> None:
    # a float32 model of 650 weights is ~2.6 kB; the upload is that plus record overhead
    assert all(2600 < v < 6000 for v in plain_bytes.values())


def test_secagg_three_clients_three_rounds(python: Path, tmp_path: Path, plain_bytes: dict[str, int]) -> None:
    rows, wall = run_job(python, tmp_path, 3, "--rounds", "3", "--min-clients", "3", "--secagg",
                         "--num-shares", "3", "--threshold", "2")
    check_rounds(rows, 3, 3, secagg=True)
    print(f"secagg 3x3: {wall:.0f}s, rounds {[r['wall_ms'] for r in rows]} ms")
    # SecAgg+ sends keys, encrypted shares, a 64-bit masked vector and unmasking shares
    for pid, plain in plain_bytes.items():
        assert rows[-1]["bytes_up"][pid] > plain and rows[-1]["bytes_down"][pid] > plain
    assert wall < 240, "3 clients x 3 rounds of SecAgg+ should take well under 4 minutes"


def test_int8_uploads_are_smaller(python: Path, tmp_path: Path, plain_bytes: dict[str, int]) -> None:
    rows, _ = run_job(python, tmp_path, 3, "--rounds", "3", "--min-clients", "3", "--no-secagg",
                      "--quantise", "int8")
    check_rounds(rows, 3, 3, secagg=False)
    assert all(r["quantise"] == "int8" for r in rows)
    # 650 weights: 2600 B as float32, 650 B + 8 B of scales as int8; the records' framing
    # (metrics, config, object headers, ~1.9 kB) is the same in both
    for pid, plain in plain_bytes.items():
        assert plain - rows[-1]["bytes_up"][pid] > 1200


def test_int8_with_secagg_is_refused(python: Path, tmp_path: Path) -> None:
    agg = start_aggregator(python, tmp_path, free_port(), "--rounds", "1", "--min-clients", "1",
                           "--secagg", "--quantise", "int8")
    _, err = agg.communicate(timeout=60)
    assert agg.returncode == 2 and b"plaintext only" in err


def test_secagg_survives_two_of_five_nodes_killed(python: Path, tmp_path: Path) -> None:
    """5 SuperNodes, SecAgg+ with 5 shares and threshold 3: SIGKILL two of them in round 2 as
    soon as they receive the collect-masked-vectors request (stage 2); round 2 still
    aggregates, unmasking the dead nodes' pairwise masks from the survivors' shares. Dead
    nodes are detected by missed heartbeats (2 x 10 s with client.py's --heartbeat 10).

    Flower 1.42's SecAgg+ tolerates dropouts only after the share-keys stage: a node lost in
    setup or share-keys leaves no shares behind and the unmask stage fails ("Not enough
    shares"), which is reported as a failed round (exit 1) - hence the kill point."""
    link = free_port()
    with ExitStack() as stack:
        nodes = [start_node(stack, python, tmp_path, link, i, 5) for i in range(5)]
        agg = start_aggregator(python, tmp_path, link, "--rounds", "2", "--min-clients", "5", "--secagg",
                               "--num-shares", "5", "--threshold", "3")
        deadline = time.monotonic() + 300
        pending = {3, 4}
        while pending:                 # round 1 has 4 SecAgg+ requests; the 7th is round 2's stage 2
            assert agg.poll() is None and time.monotonic() < deadline, "round 2 stage 2 never reached"
            for i in list(pending):
                if (tmp_path / f"node{i}.log").read_text(errors="replace").count("Receiving: train message") >= 7:
                    os.killpg(nodes[i].pid, signal.SIGKILL)
                    pending.discard(i)
            time.sleep(0.05)
        t_kill = time.monotonic()
        rows = finish(agg, tmp_path)
        print(f"dropout: round 2 finished {time.monotonic() - t_kill:.0f}s after the kill")
    assert [r["round"] for r in rows] == [1, 2] and all(r["ok"] for r in rows)
    assert rows[0]["clients"] == [0, 1, 2, 3, 4]
    assert rows[1]["clients"] == [0, 1, 2]
    assert rows[1]["accuracy"] > 0.5
