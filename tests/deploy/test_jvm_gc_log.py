"""The JVM collection log: the option a real JVM accepts, and its pauses read back."""
from __future__ import annotations

import shutil
import subprocess
from datetime import datetime

import pytest

from suanli.deploy import jvm_gc_log
from suanli.deploy.kafka_broker import launch_command

LINES = [
    "[2026-12-05T09:26:04.900+0000][info][gc] Using G1",
    "[2026-12-05T09:26:05.123+0000][info][gc] GC(170) Pause Young (Prepare Mixed) (G1 Evacuation Pause) "
    "458M->361M(512M) 10.798ms",
    "[2026-12-05T09:26:06.000+0000][info][gc] GC(174) Concurrent Mark Cycle 507.578ms",
    "[2026-12-05T09:26:06.500+0000][info][gc] GC(174) Pause Remark 374M->374M(512M) 13.537ms",
    "[2026-12-05T09:26:09.000+0000][info][gc] GC(175) Pause Young (Mixed) (G1 Evacuation Pause) 383M->357M(512M) 26.045ms",
    "not a log line at all",
]


def at(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def test_only_the_pauses_of_the_window_count_and_concurrent_phases_are_not_pauses():
    start, end = at("2026-12-05T09:26:05.000+0000"), at("2026-12-05T09:26:09.000+0000")
    p = jvm_gc_log.pauses_between(LINES, start, end)
    assert (p.count, round(p.total_ms, 3), p.max_ms) == (2, 24.335, 13.537)
    assert jvm_gc_log.pauses_between(LINES, end, end + 1).count == 1          # the end is exclusive
    assert jvm_gc_log.pauses_between(LINES, 0, start).count == 0


def test_the_broker_logs_its_collections_only_when_asked(tmp_path):
    log = tmp_path / "kafka-gc.log"
    assert jvm_gc_log.option(log) in launch_command(classpath="cp", properties=tmp_path / "p", heap="512m",
                                                    gc_log=log)
    assert not any(a.startswith("-Xlog") for a in launch_command(classpath="cp", properties=tmp_path / "p",
                                                                 heap="512m"))


def test_a_real_jvm_accepts_the_option_and_its_pauses_read_back(tmp_path):
    if shutil.which("java") is None:
        pytest.fail("java is not on PATH: the embedded stack needs it (README, .ci/run)")
    source = tmp_path / "Gc.java"
    source.write_text("public class Gc { public static void main(String[] a) { System.gc(); System.gc(); } }\n")
    log = tmp_path / "x-gc.log"
    run = subprocess.run(["java", "-XX:+UseG1GC", jvm_gc_log.option(log), str(source)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    p = jvm_gc_log.read_pauses(log, 0, 4e9)
    assert p is not None and p.count == 2 and p.max_ms > 0         # two System.gc() full pauses
    assert jvm_gc_log.read_pauses(tmp_path / "absent-gc.log", 0, 4e9) is None
