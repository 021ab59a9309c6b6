"""RED/ECN marking (:mod:`tokenpcap.schedule.engine.red`).

Oracles: HPCC ns-3's ``SwitchMmu::ShouldSendCN`` boundaries (``switch-mmu.cc``: ``> kmax``
always, ``> kmin`` with ``pmax (q - kmin) / (kmax - kmin)``); SplitMix64's published first
outputs; the exact binomial distribution (computed here from ``math.lgamma``) for the marked
fraction of many packets in each band of ``q - K_min``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from tokenpcap.schedule.engine.red import (red_probability, red_should_mark, red_uniform,
                                           splitmix64)

# SONiC's lossless WRED, HPCC run.py at 400G (KB = 1000 B), SimAI.conf at 400G
PRESETS = [(1_048_576, 2_097_152, 0.05), (1_600_000, 6_400_000, 0.2), (800_000, 3_200_000, 0.2)]


def binomial_interval(n, p, level=0.99):
    """Smallest [lo, hi] with P(X < lo) <= (1-level)/2 and P(X > hi) <= (1-level)/2."""
    tail = (1 - level) / 2
    if p <= 0.0:
        return 0, 0
    if p >= 1.0:
        return n, n
    lp, lq = math.log(p), math.log1p(-p)
    pmf = [math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                    + k * lp + (n - k) * lq) for k in range(n + 1)]
    acc, lo = 0.0, 0
    while acc + pmf[lo] <= tail:
        acc += pmf[lo]
        lo += 1
    acc, hi = 0.0, n
    while acc + pmf[hi] <= tail:
        acc += pmf[hi]
        hi -= 1
    return lo, hi


def test_splitmix64_matches_the_reference_sequence():
    """SplitMix64 seeded with 0 (state += golden each step): 0xE220A8397B1DCDAF,
    0x6E789E6AA1B965F4, 0x06C45D188009454F (Vigna's splitmix64.c)."""
    golden = 0x9E3779B97F4A7C15
    want = [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]
    got = [int(splitmix64(np.uint64((i * golden) % 2**64))) for i in range(3)]
    assert got == want


@pytest.mark.parametrize("kmin,kmax,pmax", PRESETS)
def test_boundaries_are_ns3s(kmin, kmax, pmax):
    for pkt in range(2000):
        assert not red_should_mark(kmin, kmin, kmax, pmax, True, False, 7, 1, 2, pkt)
        assert not red_should_mark(0, kmin, kmax, pmax, True, False, 7, 1, 2, pkt)
        assert red_should_mark(kmax + 1, kmin, kmax, pmax, True, False, 7, 1, 2, pkt)
        assert red_should_mark(10 * kmax, kmin, kmax, pmax, True, False, 7, 1, 2, pkt)
    assert red_probability(kmax, kmin, kmax, pmax) == pmax      # not 1 at q == K_max
    assert red_probability(kmin + 1, kmin, kmax, pmax) == pmax * 1 / (kmax - kmin)
    assert red_probability(kmax + 1, kmin, kmax, pmax) == 1.0


@pytest.mark.parametrize("kmin,kmax,pmax", PRESETS + [(100_000, 200_000, 1.0)])
def test_marked_fraction_per_band_is_binomial(kmin, kmax, pmax):
    n = 4000
    for band in range(1, 11):
        q = kmin + (kmax - kmin) * band // 10
        p = pmax * (q - kmin) / (kmax - kmin)
        marked = sum(red_should_mark(q, kmin, kmax, pmax, True, False, 20, 3, band, pkt)
                     for pkt in range(n))
        lo, hi = binomial_interval(n, p)
        assert lo <= marked <= hi, (band, marked, lo, hi, n * p)


def test_control_and_not_ect_are_never_marked():
    for pkt in range(500):
        assert not red_should_mark(10**9, 1000, 2000, 1.0, True, True, 1, 2, 3, pkt)
        assert not red_should_mark(10**9, 1000, 2000, 1.0, False, False, 1, 2, 3, pkt)


@settings(max_examples=300, deadline=None)
@given(hs.integers(0, 2**62), hs.integers(0, 1023), hs.integers(0, 255),
       hs.integers(0, 2**62))
def test_draw_is_a_pure_function_of_its_key(seed, sw, port, pkt):
    u = red_uniform(seed, sw, port, pkt)
    assert 0.0 <= u < 1.0
    assert red_uniform(seed, sw, port, pkt) == u
    others = {red_uniform(seed + 1, sw, port, pkt), red_uniform(seed, sw + 1, port, pkt),
              red_uniform(seed, sw, port + 1, pkt), red_uniform(seed, sw, port, pkt + 1)}
    assert u not in others


def test_draws_do_not_depend_on_the_order_they_are_asked():
    keys = [(5, s, p, k) for s in range(3) for p in range(4) for k in range(50)]
    first = {k: red_uniform(*k) for k in keys}
    rng = np.random.default_rng(0)
    for i in rng.permutation(len(keys)):
        assert red_uniform(*keys[i]) == first[keys[i]]
    u = np.array(list(first.values()))
    assert 0.4 < u.mean() < 0.6          # 600 draws: mean 0.5, sd 0.012
