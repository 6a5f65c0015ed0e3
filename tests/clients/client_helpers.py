"""Builds and runs the clients under clients/ (Go, Java, TypeScript, kcat shell, Python SDK).

A missing toolchain or dependency FAILS the test with what to install: CI installs them
with .ci/setup.d/20-clients.sh. Builds are incremental: each client is rebuilt only when
its sources are newer than its build output (Go's own cache does the rest).
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
CLIENTS = REPO / "clients"
VECTORS = REPO / "schemas" / "vectors"
SETUP = ".ci/setup.d/20-clients.sh"

# The compiled clients; "shell" (kcat) and "python" (the SDK) have no vectors mode.
LANGS = ("go", "java", "typescript")
PRODUCERS = ("go", "java", "typescript", "shell", "python")

_built: set[str] = set()


# Where the toolchains live when a login shell's PATH is not inherited (Go's tarball install).
_FALLBACK = {"go": Path("/usr/local/go/bin/go")}


def require(tool: str, what: str) -> str:
    path = shutil.which(tool)
    if path is None and tool in _FALLBACK and _FALLBACK[tool].exists():
        path = str(_FALLBACK[tool])
    if path is None:
        pytest.fail(f"`{tool}` not found: the {what} client needs it (CI installs it with {SETUP})")
    return path


def newer_librdkafka() -> Path:
    """A directory whose ``librdkafka.so.1`` is the one bundled in the confluent-kafka wheel.

    Debian bookworm's librdkafka (2.0.2, under its kcat) fails SCRAM authentication against
    Kafka 4 brokers; 2.6.1 and later succeed (edenhill/kcat#462). kcat links librdkafka
    dynamically, so over SASL_SSL the shell producer runs with this one on LD_LIBRARY_PATH."""
    import confluent_kafka

    bundled = sorted((Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs").glob("librdkafka-*.so.1"))
    if not bundled:
        pytest.fail("confluent-kafka's wheel has no bundled librdkafka: reinstall the test extras")
    target = REPO / ".suanli" / "cache" / "librdkafka"
    target.mkdir(parents=True, exist_ok=True)
    link = target / "librdkafka.so.1"
    if not link.exists() or link.resolve() != bundled[0].resolve():
        link.unlink(missing_ok=True)
        link.symlink_to(bundled[0])
    return target


def kafka_env(settings) -> dict[str, str]:
    """The environment of a producer process that talks to ``settings``' Kafka: the
    ``SUANLI_KAFKA_*`` variables of its security (none for PLAINTEXT) over this process's,
    and for SASL_SSL a librdkafka that can authenticate (:func:`newer_librdkafka`)."""
    security = settings.kafka_security
    if security is None:
        return dict(os.environ)
    library = str(newer_librdkafka())
    path = os.environ.get("LD_LIBRARY_PATH")
    return {**os.environ, **security.env(), "LD_LIBRARY_PATH": f"{library}:{path}" if path else library}


def run(argv: list[str], *, cwd: Path | None = None, timeout: float = 300, check: bool = True,
        stdin: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                          input=stdin, env=env)
    if check and proc.returncode != 0:
        pytest.fail(f"`{' '.join(map(str, argv))}` exited {proc.returncode}\n--- stdout\n{proc.stdout[-4000:]}"
                    f"\n--- stderr\n{proc.stderr[-4000:]}")
    return proc


def _newest(paths: list[Path]) -> float:
    return max((p.stat().st_mtime for root in paths if root.exists()
                for p in ([root] if root.is_file() else root.rglob("*")) if p.is_file()), default=0.0)


def _stale(output: Path, sources: list[Path]) -> bool:
    return not output.exists() or output.stat().st_mtime < _newest(sources)


def ensure_built(lang: str) -> None:
    """Build one client (once per test session); fail with the reason if it cannot be built."""
    if lang in _built:
        return
    if lang == "go":
        run([require("go", "Go"), "build", "-o", "bin/", "./cmd/..."], cwd=CLIENTS / "go")
    elif lang == "java":
        require("java", "Java")
        require("mvn", "Java")
        root = CLIENTS / "java"
        if _stale(root / "target" / "suanli-client.jar", [root / "pom.xml", root / "src"]):
            run(["mvn", "-q", "-B", "-Dstyle.color=never", "package", "-DskipTests"], cwd=root, timeout=600)
    elif lang == "typescript":
        require("node", "TypeScript")
        root = CLIENTS / "typescript"
        if not (root / "node_modules" / "kafkajs").exists():
            pytest.fail(f"clients/typescript/node_modules is missing: run `npm ci --prefix clients/typescript` "
                        f"(CI: {SETUP})")
        if _stale(root / "dist" / "produce.js", [root / "src", root / "tsconfig.json", root / "package-lock.json"]):
            require("npm", "TypeScript")
            run(["npm", "run", "-s", "build"], cwd=root)
    elif lang == "shell":
        for tool in ("kcat", "curl", "perl", "od", "sed"):
            require(tool, "shell")
    elif lang != "python":
        raise ValueError(lang)
    _built.add(lang)


def produce_argv(lang: str) -> list[str]:
    """The command line of a language's producer (flags follow)."""
    ensure_built(lang)
    return {
        "go": [str(CLIENTS / "go" / "bin" / "produce")],
        "java": ["java", "-jar", str(CLIENTS / "java" / "target" / "suanli-client.jar"), "produce"],
        "typescript": ["node", str(CLIENTS / "typescript" / "dist" / "produce.js")],
    }[lang]


def vectors_argv(lang: str) -> list[str]:
    ensure_built(lang)
    return {
        "go": [str(CLIENTS / "go" / "bin" / "vectors")],
        "java": ["java", "-jar", str(CLIENTS / "java" / "target" / "suanli-client.jar"), "vectors"],
        "typescript": ["node", str(CLIENTS / "typescript" / "dist" / "vectors.js")],
    }[lang]


SHELL = CLIENTS / "shell" / "produce.sh"


def _resources_flags(r: dict[str, Any]) -> list[str]:
    if r.get("accelerators"):
        raise ValueError("the shell encoder sends no accelerator requests")
    flags = ["--cpu-milli", r["cpu_milli"], "--memory-mib", r["memory_mib"], "--gpu-count", r.get("gpu_count", 0),
             "--gpu-milli", r.get("gpu_milli", 0), "--gpu-memory-mib", r.get("gpu_memory_mib", 0)]
    for model in r.get("gpu_models", []):
        flags += ["--gpu-model", model]
    return flags


def shell_argv(kind: str, event: dict[str, Any]) -> list[str]:
    """produce.sh's command line for an event; ValueError if the shell encoder cannot express it."""
    if kind == "TaskSubmitted":
        if event.get("profile") is not None:
            raise ValueError("the shell encoder sends no profile")
        argv = ["task", "--task-id", event["task_id"], "--event-id", event["event_id"], "--tenant", event["tenant"],
                "--cell", event["cell"], "--at", event["submitted_at"], *_resources_flags(event["resources"]),
                "--qos", event.get("qos_tier", "SILVER"), "--priority", event.get("priority", 0)]
        for key, value in event.get("labels", {}).items():
            argv += ["--label", f"{key}={value}"]
        if event.get("deadline") is not None:
            argv += ["--deadline", event["deadline"]]
        if event.get("duration_estimate_ms") is not None:
            argv += ["--duration-ms", event["duration_estimate_ms"]]
        if event.get("command") is not None:
            argv += ["--no-args"] + [x for arg in event["command"] for x in ("--arg", arg)]
        for name, value in event.get("env", {}).items():
            argv += ["--env", f"{name}={value}"]
        if event.get("job_id") is not None:
            argv += ["--job", event["job_id"]]
    elif kind == "ReservationBid":
        argv = ["bid", "--bid-id", event["bid_id"], "--event-id", event["event_id"], "--tenant", event["tenant"],
                "--cell", event["cell"], *_resources_flags(event["resources"]), "--start-at", event["start_at"],
                "--duration-ms", event["duration_ms"], "--price", repr(float(event["price"])), "--at", event["at"]]
        if event.get("latest_start_at") is not None:
            argv += ["--latest-start", event["latest_start_at"]]
        if "gang" in event:
            argv += [f"--gang={'true' if event['gang'] else 'false'}"]
    elif kind == "TaskCancelled":
        argv = ["cancel", "--task-id", event["task_id"], "--event-id", event["event_id"], "--tenant",
                event["tenant"], "--cell", event["cell"], "--reason", event.get("reason", ""), "--at", event["at"]]
    else:
        raise ValueError(f"the shell encoder does not write {kind}")
    ensure_built("shell")
    return [str(SHELL), *map(str, argv)]


def python_sdk():
    """The clients/python/suanli_client module."""
    spec = importlib.util.spec_from_file_location("suanli_client", CLIENTS / "python" / "suanli_client.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
