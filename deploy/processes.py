"""Background service processes with pid files: start, check, stop by process id.

A pid file records the pid and a marker string that must appear in the process's
command line, so a recycled pid is never mistaken for our service (and never killed).
"""
from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class ServiceProcess:
    """One service of the stack, identified by its pid file."""

    name: str
    pid_file: Path
    log_file: Path
    marker: str  # a string unique to this service's command line

    def pid(self) -> int | None:
        """Pid of the running service, or None (stale pid files are removed).

        The pid file is removed only when the process is gone or its command line is
        readable and lacks the marker (a recycled pid). An empty or unreadable command
        line of a live process (the moment of an exec, a loaded machine) is not evidence:
        dropping the file then would orphan a running service for good."""
        try:
            pid = int(self.pid_file.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        if _cmdline_contains(pid, self.marker) is not False:
            return pid
        self.pid_file.unlink(missing_ok=True)
        return None

    def start(self, argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> int:
        """Start the service detached (own session), logging to ``log_file``."""
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                list(argv), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True,
            )
        self.pid_file.write_text(f"{proc.pid}\n")
        return proc.pid

    def stop(self, timeout: float = 20.0) -> bool:
        """SIGTERM, wait up to ``timeout`` s, then SIGKILL. Returns True if it was running."""
        pid = self.pid()
        if pid is None:
            return False
        _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        if _alive(pid):
            _signal(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)
        return True

    def rss_mib(self) -> float | None:
        """Resident memory of the running service in MiB, from /proc."""
        pid = self.pid()
        return None if pid is None else rss_mib(pid)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def stop_child(proc: subprocess.Popen[Any], grace: float = 15.0) -> None:
    """Stop a child process this process started: SIGTERM, ``grace`` seconds to exit, then
    SIGKILL; reaped either way. Nothing happens to one that has already exited."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=5)


def rss_mib(pid: int) -> float | None:
    """Resident memory of process ``pid`` in MiB, from /proc (None once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of ours counts as gone.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        if state == "Z":
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            return False
    except OSError:
        return False
    return True


def _cmdline_contains(pid: int, marker: str) -> bool | None:
    """True/False for a live process whose command line could be read; False for a dead
    one; None when it is alive but its command line reads empty or fails (unknown)."""
    if not _alive(pid):
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    if not cmdline.strip():
        return None
    return marker in cmdline


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a live process, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks
