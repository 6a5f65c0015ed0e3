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


def test_elastic_secagg_clients_come_and_go_and_the_batch_size_follows_the_control_file(
        python: Path, tmp_path: Path) -> None:
    """An elastic job's Flower side: SecAgg+ with shares and threshold as fractions of each
    round's nodes (1.0 / 0.6), --min-clients 2. Two SuperNodes start; after round 1 two more
    join and the control file sets batch size 8; once a round has aggregated all four, node 3
    is stopped as the scheduler cancels a task (SIGTERM to its process group) the moment it
    receives the next round's first SecAgg+ message, i.e. before it has shared its keys:
    that round still aggregates the other three (stock Flower 1.42 fails it with "Not enough
    shares"; see SurvivorsSecAggPlusWorkflow), and so do the rounds after it. The batch size
    each client reports it trained with is the one the control file gave."""
    link = free_port()
    control, report = tmp_path / "control.json", tmp_path / "report.jsonl"
    deadline = time.monotonic() + 420

    def lines() -> list[dict]:
        text = report.read_text() if report.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def wait(what: str, done) -> None:  # type: ignore[no-untyped-def]
        while not done():
            assert agg.poll() is None, f"the aggregator exited ({agg.returncode}) before {what}"
            assert time.monotonic() < deadline, f"timed out before {what}"
            time.sleep(0.05)

    with ExitStack() as stack:
        nodes = {i: start_node(stack, python, tmp_path, link, i, 4) for i in (0, 1)}
        agg = start_aggregator(python, tmp_path, link, "--rounds", "7", "--min-clients", "2", "--secagg",
                               "--num-shares", "1.0", "--threshold", "0.6", "--batch-size", "32",
                               "--control", str(control))
        wait("round 1", lambda: len(lines()) >= 1)
        tmp = tmp_path / "control.tmp"
        tmp.write_text(json.dumps({"batch_size": 8}))
        os.replace(tmp, control)
        nodes.update({i: start_node(stack, python, tmp_path, link, i, 4) for i in (2, 3)})
        wait("a round of four clients", lambda: any(r["clients"] == [0, 1, 2, 3] for r in lines()))
        # every completed round is 4 SecAgg+ messages per node: 4k + 1 is the next round's setup
        log3 = tmp_path / "node3.log"
        wait("node 3's next setup message",
             lambda: log3.read_text(errors="replace").count("Receiving: train message") % 4 == 1)
        os.killpg(nodes[3].pid, signal.SIGTERM)
        killed_after = len(lines())
        rows = finish(agg, tmp_path)
    print("elastic:", [(r["round"], r["clients"], r["batch_size"], r["wall_ms"]) for r in rows])
    assert [r["round"] for r in rows] == list(range(1, 8)) and all(r["ok"] for r in rows)
    assert rows[0]["clients"] == [0, 1]
    grown = next(i for i, r in enumerate(rows) if r["clients"] == [0, 1, 2, 3])
    assert grown < killed_after <= 5, "the kill should leave rounds to check"
    lost = rows[killed_after]                 # the round node 3 was sampled for and lost in
    print(f"round {lost['round']}: node 3 sampled, {lost['bytes_up'].get('3')} B up before it stopped")
    assert "3" in lost["nodes"] and lost["clients"] == [0, 1, 2] and lost["accuracy"] > 0.5
    assert all(r["clients"] == [0, 1, 2] for r in rows[killed_after:])
    # the batch size: 32 until the control file is read (round 2 may have started already), then 8
    assert rows[0]["batch_size"] == 32 and rows[1]["batch_size"] in (32, 8)
    assert all(r["batch_size"] == 8 for r in rows[2:])
    for r in rows:                            # ... and it is what every aggregated client trained with
        assert r["client_batch_size"] == {str(c): r["batch_size"] for c in r["clients"]}
    assert rows[-1]["accuracy"] > 0.85
