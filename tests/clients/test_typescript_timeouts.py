"""The TypeScript producer gives up with a clear error when nothing answers, instead of
waiting for ever. A real listening socket that accepts and never answers stands in for a
stalled schema registry or broker (nothing here is mocked: it is the case under test)."""
from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from client_helpers import REPO, produce_argv, run


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never writes a byte."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    server.close()


def _produce(*flags: str) -> tuple[int, str]:
    """(exit code, stderr) of one TypeScript produce run."""
    proc = run([*produce_argv("typescript"), "--task-id", "t-timeout", *flags], cwd=REPO, timeout=120, check=False)
    return proc.returncode, proc.stderr


def test_a_broker_that_never_answers_times_out_with_the_phase_named(silent_port):
    code, err = _produce("--brokers", f"127.0.0.1:{silent_port}", "--timeout-ms", "3000")
    assert code == 1, err
    assert "gave up after 3000 ms (--timeout-ms), still connecting to the brokers" in err, err


@pytest.mark.stack
def test_a_registry_that_never_answers_times_out_with_the_phase_named(silent_port, stack):
    code, err = _produce("--brokers", stack.bootstrap_servers, "--topic", "ts-timeout.raw.tasks",
                            "--registry", f"http://127.0.0.1:{silent_port}/apis/ccompat/v7", "--timeout-ms", "5000")
    assert code == 1, err
    assert ("gave up after 5000 ms (--timeout-ms), still reading the schema of TaskSubmitted from the registry"
            in err), err


def test_bad_timeout_flag_is_refused():
    code, err = _produce("--timeout-ms", "soon")
    assert code == 1, err
    assert "--timeout-ms soon: want an integer" in err, err
