"""The batch size of each round, from the aggregator's control file (stdlib only, so the
project's own venv can unit-test it).

The file (``aggregator.py --control FILE``, run config ``control``) holds a JSON object
``{"batch_size": N}``; Suanli's runner rewrites it atomically (temp file + rename) when the
elastic policy changes the batch size. The ServerApp asks :meth:`BatchControl.current` at the
start of every round (when it configures the round's training) and sends the answer to the
clients as ``"batch-size"`` in the fit config.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path


class BatchControl:
    """``current()``: the file's ``batch_size`` when the file exists and holds a valid one;
    the run config's default when there is no file (or no path); the last valid value (the
    default at first) when the file cannot be read or is not ``{"batch_size": <int >= 1>}``,
    with one line on stderr per distinct problem."""

    def __init__(self, path: str | Path | None, default: int) -> None:
        self.path = Path(path) if path else None
        self.default = self.value = int(default)
        self._warned: str | None = None

    def _warn(self, problem: str) -> None:
        if problem != self._warned:
            print(f"fldigits: control file {self.path}: {problem}; batch size stays {self.value}",
                  file=sys.stderr, flush=True)
            self._warned = problem

    def current(self) -> int:
        if self.path is None:
            return self.default
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            self.value = self.default
            return self.value
        except OSError as exc:
            self._warn(f"unreadable ({exc})")
            return self.value
        try:
            doc = json.loads(text)
        except ValueError:
            self._warn("not JSON")
            return self.value
        batch = doc.get("batch_size") if isinstance(doc, dict) else None
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            self._warn(f'not {{"batch_size": <integer >= 1>}}: {text[:80]!r}')
            return self.value
        self.value = batch
        self._warned = None
        return batch
