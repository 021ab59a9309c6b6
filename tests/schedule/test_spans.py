"""tokenpcap.schedule.spans: the tokens a piece of a call's buffer carries, by hand for
pipeline and sequence-parallel pieces, and the vectorized form equal to the scalar one."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.schedule.spans import token_range, token_ranges


def test_token_range_of_pipeline_messages():
    class C:
        token_start, token_end, seq_start, seq_end = 4096, 5120, 0, 1024

    # [s, b, h] with b = 1: a message of the first quarter of the bytes holds positions 0..255
    assert token_range(C, 0, 1 << 20, 4 << 20, 1024) == (4096, 4096 + 256)
    assert token_range(C, 3 << 20, 1 << 20, 4 << 20, 1024) == (4096 + 768, 5120)

    class SP(C):
        seq_start, seq_end = 256, 512              # TP rank 1 of 4 with sequence parallelism
    assert token_range(SP, 0, 1 << 19, 1 << 20, 1024) == (4096 + 256, 4096 + 384)

    class G:
        token_start = token_end = seq_start = seq_end = -1
    assert token_range(G, 0, 100, 1000, 1024) == (-1, -1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 8), st.integers(1, 4), st.integers(0, 1024),
                          st.integers(0, 1024), st.integers(0, 1 << 22), st.integers(0, 1 << 22),
                          st.integers(1, 1 << 22)), min_size=1, max_size=20))
def test_the_vectorized_ranges_are_the_scalar_ones(rows):
    seq = 1024
    attr, offs, sizes, want = [], [], [], []
    for first, samples, a, b, off, n, size in rows:
        s0, s1 = min(a, b), max(a, b)
        ts = first * seq if first >= 0 else -1
        te = ts + samples * seq if first >= 0 else -1
        off, n = min(off, size), min(n, size - min(off, size))
        c = SimpleNamespace(token_start=ts, token_end=te, seq_start=s0, seq_end=s1)
        attr.append((ts, te, s0, s1, size))
        offs.append(off)
        sizes.append(n)
        want.append(token_range(c, off, n, size, seq) if s1 > s0 and n > 0 or ts < 0 else None)
    t0, t1 = token_ranges(np.asarray(attr, np.int64), np.asarray(offs, np.int64),
                          np.asarray(sizes, np.int64), seq)
    for i, w in enumerate(want):
        if w is not None:
            assert (int(t0[i]), int(t1[i])) == w, rows[i]
