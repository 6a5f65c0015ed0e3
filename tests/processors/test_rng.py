"""processors/rng.py: the compiled ``mix64`` against the loop it replaces."""
import random

import pytest

from suanli.processors import compiled, rng


def loop_mix(*values: int) -> int:
    """The reference: rng.mix with the kernels switched off."""
    saved, compiled.KERNELS = compiled.KERNELS, None
    try:
        return rng.mix(*values)
    finally:
        compiled.KERNELS = saved


@pytest.mark.parametrize("seed", range(20))
def test_mix_is_the_loops_hash_for_any_int(seed):
    rnd = random.Random(seed)
    edges = [0, 1, -1, 2**63 - 1, -2**63, 2**63, 2**64 - 1, 2**64, 2**100, -2**63 - 1, True, False]
    for _ in range(50):
        values = tuple(rnd.choice(edges) if rnd.random() < 0.3 else rnd.randrange(-2**70, 2**70)
                       for _ in range(rnd.randrange(0, 7)))
        assert rng.mix(*values) == loop_mix(*values), values


def test_the_kernel_leaves_what_does_not_fit_in_64_bits_to_the_loop():
    k = compiled.KERNELS
    assert k.mix64((2**64 - 1, -2**63)) == loop_mix(2**64 - 1, -2**63)
    for big in (2**64, -2**63 - 1):
        with pytest.raises(OverflowError):
            k.mix64((big,))
    with pytest.raises(TypeError):
        rng.mix(1.5)
