"""The plan's per-phase rows and small formulas (tokenpcap.plan.rows) against their sources."""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, strategies as st

from tokenpcap.collectives.layout import RankLayout
from tokenpcap.errors import InputError
from tokenpcap.plan.rows import bytes_per_nic, pipeline_bubble_fraction, wire_time_ns


def test_pipeline_bubble():
    # Narayanan et al. 2021 Sec. 2.2.1: 1F1B bubble fraction (p - 1) / m; interleaved / v.
    assert pipeline_bubble_fraction(8, 96) == Fraction(7, 96)
    assert pipeline_bubble_fraction(1, 4) == 0
    assert pipeline_bubble_fraction(4, 8, virtual_stages=2) == Fraction(3, 16)
    with pytest.raises(InputError):
        pipeline_bubble_fraction(0, 1)


def test_wire_time():
    assert wire_time_ns(50_000, 400) == 1000 and wire_time_ns(1, 400) == 1 and \
        wire_time_ns(0, 400) == 0


@given(st.integers(0, 1 << 50), st.sampled_from([25, 100, 200, 400, 800]))
def test_wire_time_is_the_ceiling_at_integer_rates(nbytes, gbps):
    # 1 Gb/s is 1 bit per ns: the time is ceil(8 n / rate) ns, in integers.
    assert wire_time_ns(nbytes, gbps) == -(-8 * nbytes // gbps)


@given(st.integers(0, 1 << 40), st.sampled_from([12.5, 56.25, 187.5]))
def test_wire_time_at_decimal_rates_is_exact(nbytes, gbps):
    # The rate as written in decimal: 12.5 Gb/s is 25/2 bits per ns, no float rounding.
    r = Fraction(str(gbps))
    want = -(-(8 * nbytes * r.denominator) // r.numerator)
    assert wire_time_ns(nbytes, gbps) == want


@given(st.data())
def test_bytes_per_nic_keeps_every_byte(data):
    nodes = data.draw(st.integers(1, 4))
    gpn = data.draw(st.sampled_from([1, 2, 4, 8]))
    npn = data.draw(st.sampled_from([n for n in (1, 2, 4, 8) if n <= gpn]))
    lay = RankLayout(dp=nodes * gpn, tp=1, pp=1, gpus_per_node=gpn, nics_per_node=npn)
    by = np.array(data.draw(st.lists(st.integers(0, 1 << 40), min_size=lay.world_size * npn,
                                     max_size=lay.world_size * npn)), np.int64)
    by = by.reshape(lay.world_size, npn)
    per = bytes_per_nic(by, lay)
    assert per.dtype == np.int64 and per.shape == (nodes * npn,)
    assert int(per.sum()) == int(by.sum())
    # NIC node * npn + local takes the bytes of its node's ranks through that local NIC.
    for node in range(nodes):
        rows = by[node * gpn:(node + 1) * gpn]
        assert (per[node * npn:(node + 1) * npn] == rows.sum(axis=0)).all()
