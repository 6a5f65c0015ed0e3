"""Loaded by every Python process started with this directory on ``PYTHONPATH`` (see
``bench/kafka_requests.py``): counts each request the process sends to Kafka through
aiokafka, by API (``FetchRequest``, ``ProduceRequest``, ...) and by second, and writes the
counts with the process's argv and CPU seconds to ``$SUANLI_KAFKA_REQUESTS_DIR/<pid>.json``
(at most every 2 s while it sends, and at exit). Standalone on purpose: it runs before
anything of Suanli is imported. Every aiokafka request goes through
``AIOKafkaConnection.send``, the consumer's fetches, the producer's batches, offset commits,
metadata and heartbeats alike."""
import atexit
import json
import os
import sys
import time

_DIR = os.environ.get("SUANLI_KAFKA_REQUESTS_DIR")
if _DIR:
    try:
        from aiokafka import conn as _conn
    except ImportError:     # a Python without aiokafka sends no Kafka requests to count
        _conn = None
if _DIR and _conn is not None:
    _by_second = {}         # int(time.time()) -> {api: requests}
    _written = [0.0]
    _path = os.path.join(_DIR, f"{os.getpid()}.json")
    _send = _conn.AIOKafkaConnection.send

    def _write():
        with open(_path + ".tmp", "w") as f:
            json.dump({"argv": sys.argv[:6], "cpu_seconds": time.process_time(),
                       "by_second": {str(s): c for s, c in sorted(_by_second.items())}}, f)
        os.replace(_path + ".tmp", _path)

    def _counted_send(self, request, expect_response=True):
        # "FetchRequest_v4" -> "FetchRequest": the version says nothing about the cost
        api = type(request).__name__.split("_v")[0]
        now = time.time()
        second = _by_second.setdefault(int(now), {})
        second[api] = second.get(api, 0) + 1
        if now - _written[0] > 2.0:
            _written[0] = now
            try:
                _write()
            except OSError:
                pass
        return _send(self, request, expect_response)

    def _at_exit():
        try:
            _write()
        except OSError:
            pass

    _conn.AIOKafkaConnection.send = _counted_send
    atexit.register(_at_exit)
