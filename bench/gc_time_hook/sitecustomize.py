"""Loaded by every Python process started with this directory on ``PYTHONPATH`` (see
``bench/gc_time.py``): counts the cyclic collector's passes and the wall time they take,
per generation, and writes them with the process's argv and CPU seconds to
``$SUANLI_GC_TIME_DIR/<pid>.json`` (after a full pass, at most every 2 s otherwise, and at exit).
Standalone on purpose: it runs before anything of Suanli is imported."""
import atexit
import gc
import json
import os
import sys
import time

_DIR = os.environ.get("SUANLI_GC_TIME_DIR")
if _DIR:
    _stats = {"collections": [0, 0, 0], "seconds": [0.0, 0.0, 0.0]}
    _began = [0.0]
    _written = [0.0]
    _path = os.path.join(_DIR, f"{os.getpid()}.json")

    def _write():
        with open(_path + ".tmp", "w") as f:
            json.dump({"argv": sys.argv[:6], "thresholds": gc.get_threshold(),
                       "cpu_seconds": time.process_time(), **_stats}, f)
        os.replace(_path + ".tmp", _path)

    def _on_collect(phase, info):
        if phase == "start":
            _began[0] = time.perf_counter()
            return
        g = info["generation"]
        _stats["collections"][g] += 1
        _stats["seconds"][g] += time.perf_counter() - _began[0]
        now = time.monotonic()
        if g == 2 or now - _written[0] > 2.0:
            _written[0] = now
            try:
                _write()
            except OSError:
                pass

    def _at_exit():
        try:
            _write()
        except OSError:
            pass

    gc.callbacks.append(_on_collect)
    atexit.register(_at_exit)
