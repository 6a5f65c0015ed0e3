"""Count and time the Kafka responses every process of a run parses (a measuring aid).

Put this directory first on ``PYTHONPATH`` and every Python process started from that
shell (the plane's workers and the simulator inherit the environment) wraps aiokafka's
response parsing. At exit (or SIGTERM) each writes
``$SUANLI_KAFKA_RESPONSES_DIR/resp-<pid>.txt`` (default ``/tmp/suanli-kafka-responses``):
its command line, then per response type the count and the CPU seconds spent parsing, then
one line per Metadata response with its wall time, topic count and parse seconds.

How BENCHMARKS' figures on intake's readability probe were taken (stop 61):
``PYTHONPATH=bench/kafka_responses python -m suanli.bench.e2e --max-only --tasks 5000``
with the stack up, once before the probe's fix and once after.
"""
import atexit
import collections
import os
import signal
import sys
import time


def _install() -> None:
    try:
        import aiokafka.protocol.struct as struct_mod
    except ImportError:
        return
    counts: collections.Counter = collections.Counter()
    seconds: collections.Counter = collections.Counter()
    metadata: list[str] = []
    decode = struct_mod.Struct.decode.__func__

    def timed(cls, data):  # noqa: ANN001 - aiokafka's signature
        started = time.process_time()
        out = decode(cls, data)
        name = cls.__name__
        if "Response" in name:
            spent = time.process_time() - started
            counts[name] += 1
            seconds[name] += spent
            if name.startswith("Metadata"):
                metadata.append(f"{time.time():.1f} topics={len(out.topics)} {spent:.4f}s")
        return out

    struct_mod.Struct.decode = classmethod(timed)
    folder = os.environ.get("SUANLI_KAFKA_RESPONSES_DIR", "/tmp/suanli-kafka-responses")

    def dump() -> None:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"resp-{os.getpid()}.txt"), "w") as f:
            f.write(" ".join(sys.argv) + "\n")
            for name, spent in seconds.most_common():
                f.write(f"{name} {counts[name]} {spent:.3f}s\n")
            f.write("\n".join(metadata) + "\n")

    atexit.register(dump)
    previous = signal.getsignal(signal.SIGTERM)

    def on_term(signum, frame):  # noqa: ANN001
        dump()
        if callable(previous):
            previous(signum, frame)
        else:
            raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)


_install()
