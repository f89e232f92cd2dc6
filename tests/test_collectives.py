"""trainmath.time.collectives: ring factors (Patarasuk & Yuan 2009; ZeRO §7.1)."""

from fractions import Fraction

import pytest

from trainmath.time.collectives import ring_all_reduce_factor, ring_gather_factor


def test_ring_factors():
    # each of 8 ranks sends 7 of the 8 chunks in a reduce-scatter, and again in the all-gather
    assert ring_gather_factor(8) == Fraction(7, 8)
    assert ring_all_reduce_factor(8) == Fraction(14, 8)
    assert ring_all_reduce_factor(1) == ring_gather_factor(1) == 0  # nobody to talk to


@pytest.mark.parametrize("bad", [0, -2, 2.5, "8"])
def test_ring_factor_bad_ranks(bad):
    with pytest.raises(ValueError, match=rf"^n \(ranks\) must be a positive whole number, got {bad!r}"):
        ring_gather_factor(bad)
