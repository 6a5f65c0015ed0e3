"""The JVM collection log: the option a real JVM accepts, and its pauses read back."""
from __future__ import annotations

import shutil
import subprocess
from datetime import datetime

import pytest

from suanli.deploy import jvm_gc_log
from suanli.deploy.kafka_broker import COLLECTORS, launch_command
from suanli.errors import StackError

LINES = [
    "[2026-12-05T09:26:04.900+0000][info][gc] Using G1",
    "[2026-12-05T09:26:05.123+0000][info][gc] GC(170) Pause Young (Prepare Mixed) (G1 Evacuation Pause) "
    "458M->361M(512M) 10.798ms",
    "[2026-12-05T09:26:06.000+0000][info][gc] GC(174) Concurrent Mark Cycle 507.578ms",
    "[2026-12-05T09:26:06.500+0000][info][gc] GC(174) Pause Remark 374M->374M(512M) 13.537ms",
    "[2026-12-05T09:26:09.000+0000][info][gc] GC(175) Pause Young (Mixed) (G1 Evacuation Pause) 383M->357M(512M) 26.045ms",
    "not a log line at all",
    "[2026-12-05T09:26:04.950+0000][info][gc,phases] GC(169)   Evacuate Collection Set: 5.5ms",   # part of a pause
]
ZGC_LINES = [
    "[2026-12-05T12:50:34.398+0000][info][gc,phases] GC(0) Pause Mark Start 0.012ms",
    "[2026-12-05T12:50:34.409+0000][info][gc,phases] GC(0) Concurrent Mark 11.182ms",
    "[2026-12-05T12:50:34.409+0000][info][gc,phases] GC(0) Pause Mark End 0.016ms",
    "[2026-12-05T12:50:34.415+0000][info][gc,phases] GC(0) Pause Relocate Start 0.007ms",
    "[2026-12-05T12:50:34.420+0000][info][gc,phases] GC(0) Concurrent Relocate 4.414ms",
    "[2026-12-05T12:50:34.420+0000][info][gc       ] GC(0) Garbage Collection (System.gc()) 60M(1%)->46M(1%)",
]


def at(text: str) -> float:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def test_only_the_pauses_of_the_window_count_and_concurrent_phases_are_not_pauses():
    start, end = at("2026-12-05T09:26:05.000+0000"), at("2026-12-05T09:26:09.000+0000")
    p = jvm_gc_log.pauses_between(LINES, start, end)
    assert (p.count, round(p.total_ms, 3), p.max_ms) == (2, 24.335, 13.537)
    assert jvm_gc_log.pauses_between(LINES, end, end + 1).count == 1          # the end is exclusive
    assert jvm_gc_log.pauses_between(LINES, 0, start).count == 0


def test_zgc_pauses_are_its_three_short_stops_not_its_concurrent_work():
    p = jvm_gc_log.pauses_between(ZGC_LINES, 0, 4e9)
    assert (p.count, round(p.total_ms, 3), p.max_ms) == (3, 0.035, 0.016)


def test_the_broker_runs_zgc_unless_told_g1_and_refuses_another_collector(tmp_path):
    def args(**kw):
        return launch_command(classpath="cp", properties=tmp_path / "p", heap="512m", **kw)

    assert "-XX:+UseZGC" in args() and "-XX:+UseG1GC" not in args()
    assert "-XX:+UseG1GC" in args(collector="g1") and "-XX:+UseZGC" not in args(collector="g1")
    with pytest.raises(StackError, match="unknown broker garbage collector 'cms'"):
        args(collector="cms")


def test_the_broker_logs_its_collections_only_when_asked(tmp_path):
    log = tmp_path / "kafka-gc.log"
    assert jvm_gc_log.option(log) in launch_command(classpath="cp", properties=tmp_path / "p", heap="512m",
                                                    gc_log=log)
    assert not any(a.startswith("-Xlog") for a in launch_command(classpath="cp", properties=tmp_path / "p",
                                                                 heap="512m"))


@pytest.mark.parametrize("collector, pauses", [("g1", 2), ("zgc", 6)])   # a full pause / 3 short stops per System.gc()
def test_a_real_jvm_accepts_the_option_and_its_pauses_read_back(tmp_path, collector, pauses):
    if shutil.which("java") is None:
        pytest.fail("java is not on PATH: the embedded stack needs it (README, .ci/run)")
    source = tmp_path / "Gc.java"
    source.write_text("public class Gc { public static void main(String[] a) { System.gc(); System.gc(); } }\n")
    log = tmp_path / "x-gc.log"
    run = subprocess.run(["java", *COLLECTORS[collector], jvm_gc_log.option(log), str(source)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    p = jvm_gc_log.read_pauses(log, 0, 4e9)
    assert p is not None and p.count == pauses and p.max_ms > 0
    assert jvm_gc_log.read_pauses(tmp_path / "absent-gc.log", 0, 4e9) is None
