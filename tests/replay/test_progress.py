"""The progress helper (replay/progress.py): silent off a terminal and with --json/--quiet;
on a pseudo-terminal a bar with the rate and the ETA. No assertion is about time."""
from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
import textwrap
from pathlib import Path

from suanli.replay.progress import Progress, wanted

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
BOUND_S = 120                       # against a hang only


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _on_pty(argv: list[str], *, cwd: Path | None = None) -> tuple[int, str, str]:
    """Run ``argv`` with stderr on a pseudo-terminal (stdout a pipe); (exit, pty text, stdout)."""
    master, slave = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "40"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, env=env, cwd=cwd)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], BOUND_S)
        if not ready:
            proc.kill()
            break
        try:
            data = os.read(master, 65536)
        except OSError:             # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    out = proc.stdout.read().decode()
    proc.wait(BOUND_S)
    text = ANSI.sub("", b"".join(chunks).decode(errors="replace")).replace("\r", "\n")
    return proc.returncode, text, out


def test_silent_without_a_terminal_but_still_counting():
    stream = io.StringIO()
    bar = Progress(1000, "work", stream=stream, enabled=True, interval=0)
    for _ in range(1000):
        bar.update()
    bar.close()
    assert stream.getvalue() == ""
    assert bar.n == 1000 and bar.rate() > 0


def test_silent_when_disabled_even_on_a_terminal():
    stream = FakeTerminal()
    with Progress(10, "work", stream=stream, enabled=False) as bar:
        bar.update(10)
    assert stream.getvalue() == "" and bar.n == 10


def test_wanted_only_on_a_terminal_without_json_or_quiet(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    assert wanted(stream=FakeTerminal())
    assert not wanted(json="out.json", stream=FakeTerminal())     # `--json FILE`
    assert not wanted(json=True, stream=FakeTerminal())           # `--json` (to stdout)
    assert not wanted(quiet=True, stream=FakeTerminal())
    assert not wanted(stream=io.StringIO())                       # a pipe or a log file
    monkeypatch.setenv("TERM", "dumb")
    assert not wanted(stream=FakeTerminal())


def test_on_a_pty_it_shows_the_rate_and_the_eta():
    script = textwrap.dedent("""
        from suanli.replay.progress import Progress
        bar = Progress(1000, "pty work", unit="ev", interval=0)
        bar.update(300)
        bar.update(200)
        bar.refresh()                 # half done: the ETA is on screen now
        bar.update(500)
        bar.close()
        print("stdout stays clean")
    """)
    code, text, out = _on_pty([sys.executable, "-c", script])
    assert code == 0, text
    mid = [line for line in text.splitlines() if "pty work" in line and "500/1,000" in line]
    assert mid, text
    assert re.search(r"[\d,.]+ ev/s", mid[-1]) and re.search(r"ETA \d+:\d\d:\d\d", mid[-1]), mid[-1]
    final = [line for line in text.splitlines() if "1,000/1,000" in line]
    assert final and "ev/s" in final[-1] and "done in" in final[-1], text
    assert out == "stdout stays clean\n"


def test_replay_command_draws_on_a_terminal_and_not_with_json(logdir, tmp_path):
    code, text, out = _on_pty([sys.executable, "-m", "suanli", "replay", str(logdir), "--verify"])
    assert code == 0, text
    assert re.search(r"replay c1 .*\d+/\d+ .*ev/s .*done in", text), text
    assert "IDENTICAL" in out and "\x1b" not in out        # the report on stdout has no bar in it

    code, text, out = _on_pty([sys.executable, "-m", "suanli", "replay", str(logdir), "--verify",
                               "--json", str(tmp_path / "v.json")])
    assert code == 0
    assert "ev/s" not in text and "ETA" not in text and "done in" not in text, text
    assert "IDENTICAL" in out

    code, text, _out = _on_pty([sys.executable, "-m", "suanli", "replay", str(logdir), "--quiet"])
    assert code == 0 and "ev/s" not in text, text


def test_replay_command_is_silent_when_stderr_is_not_a_terminal(logdir):
    done = subprocess.run([sys.executable, "-m", "suanli", "replay", str(logdir), "--verify"], capture_output=True,
                          text=True, timeout=BOUND_S)
    assert done.returncode == 0
    assert done.stderr == ""
    assert "IDENTICAL" in done.stdout


def test_nested_bars_share_one_display_and_release_it(monkeypatch):
    from suanli.replay import progress

    monkeypatch.setenv("TERM", "xterm")
    stream = FakeTerminal()
    with Progress(2, "outer", stream=stream, interval=0) as outer:
        with Progress(5, "inner", stream=stream, interval=0) as inner:
            inner.update(5)
            assert progress._LIVE[1] == 2
        outer.update(2)
    assert progress._LIVE[0] is None and progress._LIVE[1] == 0
    text = ANSI.sub("", stream.getvalue())
    assert "outer" in text and "inner" in text and "done in" in text
