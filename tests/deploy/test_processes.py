"""Pid-file service handling: a process is started, found and stopped by its pid."""
from __future__ import annotations

import sys

from suanli.deploy.processes import ServiceProcess


def test_start_find_and_stop_by_pid(tmp_path):
    marker = f"suanli-test-marker-{tmp_path.name}"
    service = ServiceProcess("sleeper", tmp_path / "sleeper.pid", tmp_path / "sleeper.log", marker=marker)
    assert service.pid() is None
    pid = service.start([sys.executable, "-c", "import time,sys; print('up', flush=True); time.sleep(60)", marker])
    assert service.pid() == pid
    assert (service.rss_mib() or 0) > 0
    assert service.stop(timeout=5) is True
    assert service.pid() is None
    assert not service.pid_file.exists()
    assert service.stop() is False


def test_a_recycled_pid_is_not_mistaken_for_the_service(tmp_path):
    service = ServiceProcess("ghost", tmp_path / "ghost.pid", tmp_path / "ghost.log", marker="no-such-marker-xyz")
    service.pid_file.write_text("1\n")  # pid 1 is alive but is not our service
    assert service.pid() is None
    assert not service.pid_file.exists()


def test_an_empty_command_line_does_not_orphan_a_live_service(tmp_path, monkeypatch):
    # /proc/PID/cmdline can read empty for a moment (an exec, a loaded machine); taking
    # that for "not ours" used to delete the pid file and orphan the running worker
    from pathlib import Path
    marker = f"suanli-test-marker-{tmp_path.name}"
    service = ServiceProcess("sleeper", tmp_path / "s.pid", tmp_path / "s.log", marker=marker)
    pid = service.start([sys.executable, "-c", "import time; time.sleep(60)", marker])
    real = Path.read_bytes
    try:
        monkeypatch.setattr(Path, "read_bytes",
                            lambda self: b"" if str(self) == f"/proc/{pid}/cmdline" else real(self))
        assert service.pid() == pid and service.pid_file.exists()
        monkeypatch.setattr(Path, "read_bytes", real)
        assert service.pid() == pid
    finally:
        assert service.stop(timeout=5) is True
    assert service.pid() is None and not service.pid_file.exists()
