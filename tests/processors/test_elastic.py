"""processors/elastic.py: grow while the loss improves and capacity is free, shrink for
gold work, change the batch size on a plateau or a loss increase; every reason names its
figures."""
import math

import pytest

from suanli.errors import StrategyConfigError
from suanli.processors.elastic import ElasticArgs, decide, improvement

A = ElasticArgs(min_clients=2, max_clients=8, window=3, plateau=0.02, min_batch=16, max_batch=256, batch_step=2.0)
FALLING = [1.0, 0.9, 0.8, 0.7]          # -30 % over 3 rounds
FLAT = [1.0, 0.999, 0.995, 0.99]        # -1 %: within the 2 % plateau
RISING = [1.0, 1.01, 1.05, 1.1]         # +10 %


def test_grow_by_the_free_slots_up_to_the_max():
    d = decide(FALLING, current_clients=3, free_slots=2, gold_waiting=0, batch_size=64, args=A)
    assert (d.action, d.clients, d.batch_size) == ("grow", 5, 64)
    assert d.reason == ("loss 1 -> 0.7 over 3 rounds (-30.0 %, plateau within ±2 %): improving and 2 slots free: "
                        "grow 3 -> 5 clients (max 8)")
    capped = decide(FALLING, 6, 10, 0, 64, A)
    assert (capped.action, capped.clients) == ("grow", 8)


def test_shrink_toward_the_min_when_gold_waits_whatever_the_loss():
    d = decide(FALLING, current_clients=6, free_slots=4, gold_waiting=3, batch_size=64, args=A)
    assert (d.action, d.clients, d.batch_size) == ("shrink", 3, 64)
    assert d.reason == "3 gold tasks wait: shrink 6 -> 3 clients (min 2), releasing 3 slots now"
    floor = decide([], 6, 0, 50, 64, A)
    assert (floor.action, floor.clients) == ("shrink", 2)
    at_min = decide(FALLING, 2, 4, 1, 64, A)
    assert (at_min.action, at_min.clients) == ("hold", 2) and "1 gold tasks wait" in at_min.reason
    assert decide(FALLING, 9, 0, 0, 64, A).clients == 8                     # above the max


def test_plateau_raises_the_batch_size_and_says_so():
    d = decide(FLAT, 4, 4, 0, 64, A)
    assert (d.action, d.clients, d.batch_size) == ("hold", 4, 128)
    assert d.reason == "loss 1 -> 0.99 over 3 rounds (-1.0 %, plateau within ±2 %): plateau, raise the batch size 64 -> 128"
    top = decide(FLAT, 4, 4, 0, 256, A)
    assert top.batch_size == 256 and "already at the max 256" in top.reason
    assert decide(FLAT, 4, 4, 0, 200, A).batch_size == 256                  # capped


def test_loss_increase_lowers_the_batch_size():
    d = decide(RISING, 4, 4, 0, 64, A)
    assert (d.action, d.clients, d.batch_size) == ("hold", 4, 32)
    assert "(+10.0 %, plateau within ±2 %): loss increased, lower the batch size 64 -> 32" in d.reason
    assert decide(RISING, 4, 4, 0, 16, A).batch_size == 16
    nan = decide([1.0, 0.9, float("nan"), 0.8], 4, 4, 0, 64, A)
    assert nan.batch_size == 32 and "not finite" in nan.reason


def test_hold_without_a_trend_or_without_room():
    d = decide([1.0, 0.9], 4, 4, 0, 64, A)
    assert (d.action, d.clients, d.batch_size) == ("hold", 4, 64)
    assert d.reason == "2 of 4 losses needed for a trend: hold 4 clients, batch 64"
    assert decide([1.0], 1, 4, 0, 64, A).clients == 2                       # below the min: grow to it
    no_room = decide(FALLING, 4, 0, 0, 64, A)
    assert no_room.action == "hold" and "no free slots" in no_room.reason
    full = decide(FALLING, 8, 4, 0, 64, A)
    assert full.action == "hold" and "already at the max 8 clients" in full.reason


def test_only_the_last_window_counts_and_decisions_are_deterministic():
    hist = [5.0, 1.0, 0.999, 0.998, 0.997]
    assert improvement(hist, 3) == pytest.approx(0.003)
    assert decide(hist, 4, 4, 0, 64, A) == decide(list(hist), 4, 4, 0, 64, A)
    assert improvement([0.0, 0.0], 1) == 0.0 and improvement([0.0, 1.0], 1) == -math.inf


def test_arguments_are_validated_by_name():
    with pytest.raises(StrategyConfigError, match="max_clients"):
        ElasticArgs.parse({"min_clients": 5, "max_clients": 2})
    with pytest.raises(StrategyConfigError, match="batch_step"):
        ElasticArgs.parse({"batch_step": 1})
    with pytest.raises(StrategyConfigError, match="unknown argument 'bogus'"):
        ElasticArgs.parse({"bogus": 1})
    assert ElasticArgs.parse(None) == ElasticArgs()
    with pytest.raises(ValueError):
        decide(FALLING, -1, 0, 0, 64, A)
    with pytest.raises(ValueError):
        decide(FALLING, 1, 0, 0, 0, A)
