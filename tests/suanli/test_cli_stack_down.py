"""Every subcommand with the stack down: no traceback; exit 2 and how to start the stack for
those that need Kafka or the registry.

"Down" here is the embedded stack's ports pointed at loopback ports where nothing listens
(``SUANLI_KAFKA_PORT``, ``SUANLI_REGISTRY_PORT`` ...) and ``SUANLI_HOME`` at a fresh
directory, so the running stack that other tests use is neither seen nor touched. The
commands that start the stack themselves (``stack up``, ``up``, ``test``) run in external
mode instead (``SUANLI_KAFKA``/``SUANLI_REGISTRY`` at dead ports), where they only check the
services and start nothing.

The walk is enumerated from the argparse parser: a new subcommand fails
``test_every_subcommand_is_walked`` until it is added to ``CASES`` with minimal arguments.
No assertion is about time; each call only has a generous bound so a hang fails instead of
blocking the suite.
"""
from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from suanli.cli import build_parser
from suanli.cli_services import needs_of

REPO = Path(__file__).resolve().parents[2]
SUANLI = [sys.executable, "-m", "suanli"]
CALL_BOUND_S = 180          # a bound against hangs, not a timing assertion

STACK = "stack"             # needs Kafka/the registry: exit 2, "not running"/"does not answer", how to start
ANY = "any"                 # needs no service: may succeed or refuse, never a traceback

# leaf command -> (argv after it, expectation, mode). Placeholders: {tmp} a scratch directory,
# {logdir} a small log directory (no broker), {task} a task YAML, {openb} a tiny openb trace,
# {dead} a loopback port where nothing listens, {taken} a port something else holds, {bid} a bid YAML.
CASES: dict[str, tuple[list[str], str, str]] = {
    "stack up": ([], STACK, "external"),
    "stack down": ([], ANY, "embedded"),            # pid files under the fresh SUANLI_HOME: nothing to stop
    "stack status": ([], ANY, "embedded"),
    "stack prune": (["--yes"], STACK, "embedded"),
    "up": (["--tasks", "1", "--exit-when-drained"], STACK, "external"),
    "test": (["--skip-setup", "--keep-stack", "--", "--collect-only", "-q", "tests/suanli/none.py"], STACK,
             "external"),
    "submit": (["{task}"], STACK, "embedded"),
    "reserve": (["-f", "{bid}"], STACK, "embedded"),
    "reservations": ([], STACK, "embedded"),
    "tenant add": (["alpha"], STACK, "embedded"),
    "status": (["t-1"], STACK, "embedded"),
    "nodes": ([], STACK, "embedded"),
    "nodes drain": (["n-1"], STACK, "embedded"),
    "nodes cordon": (["n-1"], STACK, "embedded"),
    "nodes uncordon": (["n-1"], STACK, "embedded"),
    "pending": ([], STACK, "embedded"),
    "export": (["--cell", "c1", "--out", "{tmp}/export"], STACK, "embedded"),
    "replay": (["{logdir}", "--verify"], ANY, "embedded"),
    "whatif": (["{logdir}", "--policy", "recorded,bestfit", "--report", "{tmp}/report"], ANY, "embedded"),
    "explain": (["t-1"], STACK, "embedded"),
    "profile": (["t-1"], STACK, "embedded"),
    "policy set": (["--cell", "c1"], STACK, "embedded"),
    "policy show": (["--cell", "c1"], STACK, "embedded"),
    "strategy list": (["--no-discover"], ANY, "embedded"),
    "strategy show": (["bestfit", "--no-discover"], ANY, "embedded"),
    "strategy bench": (["bestfit", "--data", "{openb}", "--seeds", "42", "--workers", "1"], ANY, "embedded"),
    "audit why": (["t-1"], STACK, "embedded"),
    "audit list": ([], STACK, "embedded"),
    "audit rebuild": ([], STACK, "embedded"),
    "audit follow": ([], STACK, "embedded"),
    "connect up": ([], STACK, "embedded"),
    "connect down": ([], ANY, "embedded"),          # pid files under the fresh SUANLI_HOME
    "connect status": ([], ANY, "embedded"),
    "api serve": (["--port", "0", "--grpc-port", "0"], STACK, "embedded"),
    "api hash-token": ([], ANY, "embedded"),           # no token on standard input: refused with how
    "bench": (["--quick"], STACK, "embedded"),
    # node_exporter's port is held by someone else: refused before anything starts
    "prometheus up": (["--timeout", "5"], ANY, "embedded+taken"),
    "prometheus down": ([], ANY, "embedded"),
    "prometheus status": ([], ANY, "embedded"),
    "prometheus targets": ([], ANY, "embedded"),    # Prometheus's port is dead: refused with a reason
    "prometheus source": (["--node", "n-1=127.0.0.1", "--url", "http://127.0.0.1:{dead}"], STACK, "embedded"),
    "topology path": (["n-1", "zone:z1"], STACK, "embedded"),
    "topology show": ([], STACK, "embedded"),
    "job run": (["{tmp}/job.yaml"], STACK, "embedded"),
    "job plan": (["{tmp}/job.yaml"], ANY, "embedded"),
    "job show": (["j-1"], STACK, "embedded"),
    "job fed run": (["{tmp}/fed.yaml"], STACK, "embedded"),
    "job fed plan": (["{tmp}/fed.yaml"], ANY, "embedded"),
    "sim fault silence": (["--nodes", "1", "--timeout", "2"], STACK, "embedded"),
    "sim fault restore": (["--timeout", "2"], STACK, "embedded"),
    "sim fault status": (["--timeout", "2"], STACK, "embedded"),
    "sim health": (["--cell", "c1"], STACK, "embedded"),
    "cost": ([], STACK, "embedded"),
}

# The same commands in the variants that need no broker: they must not claim one.
VARIANTS: dict[str, tuple[list[str], str, str]] = {
    "prometheus source --once": (["prometheus", "source", "--node", "n-1=127.0.0.1", "--once",
                                  "--url", "http://127.0.0.1:{dead}"], ANY, "embedded"),
    "topology show --logdir": (["topology", "show", "--logdir", "{logdir}"], ANY, "embedded"),
    "audit list --json": (["audit", "list", "--json"], STACK, "embedded"),
}


def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[str]:
    """Every runnable command: parsers without subcommands, and parsers whose subcommand
    is optional (``nodes``)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]  # noqa: SLF001
    if not subs:
        return [" ".join(path)]
    out = [] if subs[0].required else [" ".join(path)]
    for name, child in subs[0].choices.items():
        out += leaves(child, (*path, name))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Dead ports, a fresh home, a port held by someone else, and the small inputs."""
    tmp = tmp_path_factory.mktemp("stackdown")
    sys.path.insert(0, str(REPO / "tests" / "replay"))
    try:
        from synth import DATA, make_logdir
    finally:
        sys.path.pop(0)
    logdir = make_logdir(tmp / "log", n_tasks=20)
    task = tmp / "task.yaml"
    task.write_text("tenant: t\ncell: c1\nresources: {cpu: 1, memory: 1Gi}\nduration: 1m\n")
    bid = tmp / "bid.yaml"
    bid.write_text("tenant: t\ncell: c1\ngpus: 1\ncpu: 1\nmemory: 1Gi\nstart: +10m\nduration: 1h\nprice: 1\n")
    openb = tmp / "openb"
    openb.mkdir()
    nodes = (DATA / "openb_node_list_gpu_node.csv").read_text().splitlines()
    pods = (DATA / "openb_pod_list_default.csv").read_text().splitlines()
    (openb / "openb_node_list_gpu_node.csv").write_text("\n".join(nodes[:1] + nodes[1::40]) + "\n")
    (openb / "openb_pod_list_default.csv").write_text("\n".join(pods[:1] + pods[1::40]) + "\n")

    dead = {name: free_port() for name in ("kafka", "controller", "registry", "prometheus", "exporter", "other")}
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(8)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUANLI_") or k == "SUANLI_NAMESPACE"}
    env.update(SUANLI_HOME=str(tmp / "home"), SUANLI_KAFKA_PORT=str(dead["kafka"]),
               SUANLI_CONTROLLER_PORT=str(dead["controller"]), SUANLI_REGISTRY_PORT=str(dead["registry"]),
               SUANLI_PROMETHEUS_PORT=str(dead["prometheus"]), SUANLI_NODE_EXPORTER_PORT=str(dead["exporter"]),
               SUANLI_OPENB_DIR=str(DATA), PYTHONUNBUFFERED="1")
    env.pop("SUANLI_CONFIG", None)
    yield {"tmp": tmp, "logdir": logdir, "task": task, "bid": bid, "openb": openb, "dead": dead, "env": env,
           "taken": taken.getsockname()[1]}
    taken.close()


def _argv(world, words: list[str]) -> list[str]:
    fill = {"tmp": str(world["tmp"]), "logdir": str(world["logdir"]), "task": str(world["task"]),
            "bid": str(world["bid"]), "openb": str(world["openb"]), "dead": str(world["dead"]["other"])}
    return [w.format(**fill) for w in words]


def _env(world, mode: str) -> dict[str, str]:
    env = dict(world["env"])
    if mode == "external":
        env["SUANLI_KAFKA"] = f"127.0.0.1:{world['dead']['kafka']}"
        env["SUANLI_REGISTRY"] = f"http://127.0.0.1:{world['dead']['registry']}/apis/ccompat/v7"
    if mode == "embedded+taken":
        env["SUANLI_NODE_EXPORTER_PORT"] = str(world["taken"])
    return env


def _run(world, name: str, argv: list[str], mode: str) -> tuple[str, list[str], subprocess.CompletedProcess]:
    try:
        done = subprocess.run([*SUANLI, *argv], env=_env(world, mode), cwd=world["tmp"], capture_output=True,
                              text=True, timeout=CALL_BOUND_S, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        done = subprocess.CompletedProcess(exc.cmd, -1, exc.stdout or "", f"did not end within {CALL_BOUND_S}s")
    return name, argv, done


def _cases(world) -> list[tuple[str, list[str], str, str]]:
    out = [(name, _argv(world, [*name.split(), *words]), expect, mode) for name, (words, expect, mode) in CASES.items()]
    out += [(name, _argv(world, words), expect, mode) for name, (words, expect, mode) in VARIANTS.items()]
    return out


def test_every_subcommand_is_walked():
    assert sorted(leaves(build_parser())) == sorted(CASES), "add the new subcommand to CASES"


def test_declared_needs_match_the_expectation(world):
    """Every command declares what it needs, and only the ones expected to need the stack do."""
    parser = build_parser()
    for name, argv, expect, mode in _cases(world):
        args = parser.parse_args(argv)
        assert "needs" in vars(args), f"{name}: no `needs` declared (set_defaults(needs=...))"
        if mode == "embedded":
            assert bool(needs_of(args)) == (expect == STACK), f"{name}: needs {needs_of(args)}, expected {expect}"


def test_every_subcommand_with_the_stack_down(world):
    with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2)) as pool:
        results = list(pool.map(lambda c: _run(world, c[0], c[1], c[3]), _cases(world)))
    expected = {name: expect for name, _argv_, expect, _mode in _cases(world)}
    problems = []
    for name, argv, done in results:
        text = done.stdout + done.stderr
        where = f"`suanli {' '.join(argv)}` -> exit {done.returncode}:\n{text[-1500:]}"
        if "Traceback" in text:
            problems.append(f"traceback: {where}")
        elif done.returncode < 0:
            problems.append(f"hung or killed: {where}")
        elif expected[name] == STACK:
            if done.returncode != 2:
                problems.append(f"exit {done.returncode}, expected 2: {where}")
            elif not re.search(r"not running|not reachable|does not answer", done.stderr):
                problems.append(f"no 'not running' message: {where}")
            elif "SUANLI_KAFKA" not in done.stderr and "./bin/suanli stack up" not in done.stderr:
                problems.append(f"does not say how to start the stack: {where}")
    assert not problems, "\n\n".join(problems)


def test_the_message_names_the_service_and_the_command_to_start_it(world):
    _name, _argv_, done = _run(world, "audit list", ["audit", "list"], "embedded")
    assert done.returncode == 2
    assert done.stdout == ""
    err = done.stderr
    assert err.startswith("suanli: the stack is not running (")
    assert f"Kafka at 127.0.0.1:{world['dead']['kafka']}" in err and "schema registry" in err
    assert "./bin/suanli stack up" in err and "./bin/suanli up" in err
    assert "Connect call failed" not in err and "Traceback" not in err


def test_a_connection_lost_after_the_check_gets_the_same_advice(world, monkeypatch, capsys):
    """The check passes (patched) and the client then fails to connect: still exit 2 and
    the advice, no traceback."""
    import suanli.cli as cli
    from suanli.config import settings

    for key, value in _env(world, "embedded").items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(cli, "require", lambda *_a, **_k: None)
    settings.cache_clear()
    try:
        assert cli.main(["pending"]) == 2
    finally:
        settings.cache_clear()
    err = capsys.readouterr().err
    assert "the stack is not running" in err and "./bin/suanli stack up" in err
    assert "Traceback" not in err
