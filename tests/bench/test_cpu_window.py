"""bench/cpu_window.py: the CPU each process spent in a window, between samples."""
import itertools
import threading

import pytest

from suanli.bench.cpu_window import CpuSampler


def test_the_cpu_of_a_window_is_interpolated_between_the_samples_around_its_ends():
    s = CpuSampler([("a", lambda: 0.0), ("b", lambda: 0.0)])
    s.times_ms = [1000.0, 2000.0, 3000.0]
    s.samples = [{"a": 0.0, "b": 5.0}, {"a": 1.0, "b": 5.0}, {"a": 3.0, "b": 6.0}]
    assert s.spent(1500, 2500) == {"a": 0.5 + 1.0, "b": 0.5}
    assert s.spent(1000, 3000) == {"a": 3.0, "b": 1.0}
    assert s.spent(0, 9000) == {"a": 3.0, "b": 1.0}                  # outside: the end samples
    assert s.spent(2000, 2000) == {"a": 0.0, "b": 0.0}


def test_a_sampler_samples_at_both_ends_and_in_between_and_stops():
    ticks = itertools.count()
    fourth = threading.Event()                                         # the thread has sampled

    def probe():
        t = next(ticks)
        if t >= 3:
            fourth.set()
        return float(t)
    with CpuSampler([("p", probe)], every=0.01) as s:
        assert fourth.wait(30)
    n = len(s.samples)
    assert n >= 5                                                      # and the one at the end
    assert [x["p"] for x in s.samples] == [float(i) for i in range(n)]
    assert s.times_ms == sorted(s.times_ms)
    assert not s._thread.is_alive()
    assert s.spent(s.times_ms[0], s.times_ms[-1]) == {"p": float(n - 1)}


def test_a_sampler_that_never_ran_says_so():
    with pytest.raises(ValueError, match="no samples"):
        CpuSampler([("p", lambda: 0.0)]).spent(0, 1)
