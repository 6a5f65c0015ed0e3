"""The online duration predictor (processors/duration_model.py): pure, deterministic, bounded."""
from __future__ import annotations

import json

import pytest

from suanli.errors import ConfigError
from suanli.processors.duration_model import (DurationConfig, DurationFeatures, DurationPredictor,
                                              Prediction, gpu_class, signature)


def feat(cpu: int = 4000, mem: int = 8192, gpus: int = 1, milli: int = 500, qos: str = "GOLD",
         tenant: str = "t", program: str = "train", declared: int | None = None, at: int = 0,
         models: tuple[str, ...] = ()) -> DurationFeatures:
    return DurationFeatures(tenant, program, cpu, mem, gpus, milli, models, qos, declared, at)


def test_signature_is_stable_and_separates_fields() -> None:
    a = signature("t", "img", 1000, 2048, 1, 500, ("V100", "T4"), "GOLD")
    assert a == signature("t", "img", 1000, 2048, 1, 500, ("T4", "V100"), "GOLD")  # models are a set
    assert a == feat(1000, 2048, 1, 500, "GOLD", "t", "img", models=("T4", "V100")).signature
    assert a != signature("t", "img", 1000, 2048, 1, 500, ("V100", "T4"), "BRONZE")
    # a separator inside free text cannot make two different kinds collide
    assert signature("a/b", "c", 1, 1, 0, 0, (), "") != signature("a", "b/c", 1, 1, 0, 0, (), "")


def test_gpu_class() -> None:
    assert gpu_class(0, 0) == "cpu"
    assert gpu_class(1, 200) == "share<=250"
    assert gpu_class(1, 460) == "share<=500"
    assert gpu_class(1, 990) == "share<1000"
    assert gpu_class(1, 1000) == "gpu1"
    assert gpu_class(8, 1000) == "gpu8"


def test_never_seen_is_none_or_declared() -> None:
    p = DurationPredictor()
    assert p.predict(feat()) == Prediction(0, "none", 0, 0, 0)
    d = p.predict(feat(declared=3_600_000))
    assert (d.duration_ms, d.source, d.n) == (3_600_000, "declared", 0)
    assert p.stats(feat()).n == 0


def test_one_observation_gives_itself_back_at_signature_level() -> None:
    p = DurationPredictor()
    p.observe(feat(), 123_457)
    pr = p.predict(feat())
    assert (pr.duration_ms, pr.source, pr.n) == (123_457, "signature", 1)
    assert pr.lo_ms <= pr.duration_ms <= pr.hi_ms
    s = p.stats(feat())
    assert (s.n, s.mean_ms, s.p50_ms, s.last_ms, s.cv) == (1, 123_457.0, 123_457.0, 123_457, 0.0)


def test_back_off_to_shape_then_gpu_class_then_global() -> None:
    p = DurationPredictor()
    p.observe(feat(qos="GOLD"), 60_000)
    assert p.predict(feat(qos="BRONZE")).source == "shape"          # same shape, other tier
    assert p.predict(feat(qos="BRONZE")).duration_ms == 60_000
    assert p.predict(feat(cpu=8000)).source == "gpu-class"          # other shape, same shared class
    assert p.predict(feat(gpus=0, milli=0)).source == "global"      # CPU-only: only the global level


def test_shrinkage_pulls_a_thin_key_toward_its_parent() -> None:
    p = DurationPredictor(DurationConfig(prior=2.0, use_declared=False))
    for _ in range(20):
        p.observe(feat(qos="BRONZE"), 1_000_000)
    p.observe(feat(qos="GOLD"), 10_000)
    one = p.predict(feat(qos="GOLD")).duration_ms
    assert 10_000 < one < 1_000_000   # one observation does not stand alone
    for _ in range(50):
        p.observe(feat(qos="GOLD"), 10_000)
    many = p.predict(feat(qos="GOLD")).duration_ms
    assert 10_000 <= many < one       # many do, nearly
    assert many < 20_000
    # without shrinkage the finest key answers alone
    q = DurationPredictor(DurationConfig(prior=0.0, use_declared=False))
    for _ in range(20):
        q.observe(feat(qos="BRONZE"), 1_000_000)
    q.observe(feat(qos="GOLD"), 10_000)
    assert q.predict(feat(qos="GOLD")).duration_ms == 10_000


def test_median_resists_the_tail() -> None:
    p = DurationPredictor(DurationConfig(prior=0.0, use_declared=False))
    for ms in (1000, 1100, 1200, 1300, 10**9):
        p.observe(feat(), ms)
    assert 1100 <= p.predict(feat()).duration_ms <= 1300
    s = p.stats(feat())
    assert s.mean_ms == pytest.approx((1000 + 1100 + 1200 + 1300 + 10**9) / 5)
    assert s.p99_ms > 1e8 and s.cv > 1


def test_declared_ratio_is_learnt() -> None:
    """Users of this signature declare 4x what they use: the predictor learns to divide by 4."""
    p = DurationPredictor()
    for i in range(30):
        actual = 60_000 * (1 + i % 7)          # spread durations, a constant 1/4 ratio
        p.observe(feat(declared=4 * actual), actual)
    pr = p.predict(feat(declared=4 * 500_000))
    assert pr.source == "declared"
    assert pr.duration_ms == pytest.approx(500_000, rel=0.02)
    # the same history without the declared value: the signature's median, far from 500 s
    assert abs(p.predict(feat()).duration_ms - 500_000) > 200_000
    # a predictor told not to use it ignores it
    q = DurationPredictor(DurationConfig(use_declared=False))
    for i in range(30):
        actual = 60_000 * (1 + i % 7)
        q.observe(feat(declared=4 * actual), actual)
    assert q.predict(feat(declared=2_000_000)).duration_ms == q.predict(feat()).duration_ms


def test_useless_declared_values_are_outweighed() -> None:
    """Declared values unrelated to the run time (5 min, 1 h, 24 h in turn) against a steady
    100 s: the ratio's variance is large, the durations' small, so the durations win."""
    p = DurationPredictor()
    for i in range(42):
        p.observe(feat(declared=(300_000, 3_600_000, 86_400_000)[i % 3]), 100_000 + (i % 3) * 1000)
    pr = p.predict(feat(declared=86_400_000))
    assert pr.source == "signature"
    assert pr.duration_ms == pytest.approx(101_000, rel=0.05)


def test_keys_are_bounded_and_evict_least_recently_observed() -> None:
    p = DurationPredictor(max_keys=3)
    for cpu in (1000, 2000, 3000):
        p.observe(feat(cpu=cpu), 5_000)
    p.observe(feat(cpu=1000), 5_000)         # 1000 is now the most recently observed
    p.observe(feat(cpu=4000), 7_000)         # evicts 2000, the least recently observed
    assert p.size() == {"signature": 3, "shape": 3, "gpu-class": 1, "global": 1}
    assert p.stats(feat(cpu=2000)).n == 0
    assert p.stats(feat(cpu=1000)).n == 2
    assert p.stats(feat(cpu=3000)).n == 1
    assert p.predict(feat(cpu=2000)).source == "gpu-class"
    for cpu in range(100):
        p.observe(feat(cpu=cpu), 1000 + cpu)
    assert max(p.size().values()) <= 3


def _history(p: DurationPredictor) -> DurationPredictor:
    for i in range(200):
        p.observe(feat(cpu=1000 * (i % 5), qos=("GOLD", "BRONZE")[i % 2], declared=3_600_000 * (1 + i % 3),
                       at=i * 3_600_000), 1000 + (i * 7919) % 900_000)
    return p


def test_to_json_round_trip_is_exact() -> None:
    p = _history(DurationPredictor(DurationConfig(time_of_day=True, max_keys=4)))
    d = p.to_json()
    text = json.dumps(d)
    q = DurationPredictor.from_json(json.loads(text))
    assert q.to_json() == d
    assert json.dumps(q.to_json()) == text
    probes = [feat(cpu=c, qos=t, declared=dec, at=a) for c in (0, 1000, 9000) for t in ("GOLD", "SILVER")
              for dec in (None, 7_200_000) for a in (0, 50_000_000)]
    assert [q.predict(f) for f in probes] == [p.predict(f) for f in probes]
    assert [q.stats(f) for f in probes] == [p.stats(f) for f in probes]
    # and they keep evolving identically (eviction order survived the trip)
    for x in (p, q):
        x.observe(feat(cpu=77_000), 42_000)
    assert q.to_json() == p.to_json()


def test_deterministic() -> None:
    a, b = _history(DurationPredictor()), _history(DurationPredictor())
    assert a.to_json() == b.to_json()
    f = feat(cpu=2000, declared=3_600_000)
    assert a.predict(f) == b.predict(f)


def test_time_of_day_learns_a_daily_pattern() -> None:
    """Night jobs run 10x longer than day jobs of the same kind; only the tod model sees it."""
    hour = 3_600_000
    on, off = DurationPredictor(DurationConfig(time_of_day=True, use_declared=False)), \
        DurationPredictor(DurationConfig(use_declared=False))
    for day in range(20):
        for p in (on, off):
            p.observe(feat(at=day * 24 * hour + 2 * hour), 600_000)   # 02:00
            p.observe(feat(at=day * 24 * hour + 14 * hour), 60_000)   # 14:00
    night, noon = feat(at=30 * 24 * hour + 2 * hour), feat(at=30 * 24 * hour + 14 * hour)
    assert on.predict(night).duration_ms > 3 * on.predict(noon).duration_ms
    assert off.predict(night).duration_ms == off.predict(noon).duration_ms


def test_bad_config_refused() -> None:
    with pytest.raises(ConfigError):
        DurationConfig(levels=("signature",))
    with pytest.raises(ConfigError):
        DurationConfig(levels=("global", "signature"))
    with pytest.raises(ConfigError):
        DurationConfig(max_keys=0)
