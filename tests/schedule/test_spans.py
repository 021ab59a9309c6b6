"""tokenpcap.schedule.spans: the tokens a piece of a call's buffer carries, by hand for
pipeline and sequence-parallel pieces, and the vectorized form equal to the scalar one."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.collectives.protocols import wire_bytes
from tokenpcap.schedule.spans import token_range, token_ranges
from tokenpcap.wire.lines import LINE_PROTOCOLS

PROTOCOL_IDS_BY_LINE = {v: k for k, v in LINE_PROTOCOLS.items()}


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


def test_an_ll_message_carries_the_tokens_of_its_data_not_of_its_wire_bytes():
    # NCCL's LL: 16-byte lines of 8 data bytes (prims_ll.h), so the second half of a 1 MiB
    # buffer goes as 1 MiB on the wire and holds the positions 512..1023 only; LL128's 2048-byte
    # slices carry 1920 data bytes (prims_ll128.h): 15 slices hold the last 28,800 bytes
    class C:
        token_start, token_end, seq_start, seq_end = 4096, 5120, 0, 1024
    half = 1 << 19
    assert token_range(C, half, 2 * half, 2 * half, 1024, LINE_PROTOCOLS["LL"]) == (4096 + 512, 5120)
    assert token_range(C, 0, 2 * half, 2 * half, 1024, LINE_PROTOCOLS["LL"]) == (4096, 4096 + 512)
    tail = 15 * 1920                         # 28,800 B: the last 28,800 / 1024 = 28.1 positions
    got = token_range(C, (1 << 20) - tail, 15 * 2048, 1 << 20, 1024, LINE_PROTOCOLS["LL128"])
    assert got == (4096 + 1024 - 29, 5120)
    t0, t1 = token_ranges(np.array([[4096, 5120, 0, 1024, 2 * half]], np.int64),
                          np.array([half], np.int64), np.array([2 * half], np.int64), 1024,
                          np.array([LINE_PROTOCOLS["LL"]], np.uint8))
    assert (int(t0[0]), int(t1[0])) == (4096 + 512, 5120)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 8), st.integers(1, 4), st.integers(0, 1024),
                          st.integers(0, 1024), st.integers(0, 1 << 22), st.integers(0, 1 << 22),
                          st.integers(1, 1 << 22), st.integers(0, 2)), min_size=1, max_size=20))
def test_the_vectorized_ranges_are_the_scalar_ones(rows):
    seq = 1024
    attr, offs, sizes, lines, want = [], [], [], [], []
    for first, samples, a, b, off, n, size, line in rows:
        s0, s1 = min(a, b), max(a, b)
        ts = first * seq if first >= 0 else -1
        te = ts + samples * seq if first >= 0 else -1
        off, n = min(off, size), min(n, size - min(off, size))
        c = SimpleNamespace(token_start=ts, token_end=te, seq_start=s0, seq_end=s1)
        attr.append((ts, te, s0, s1, size))
        offs.append(off)
        n = int(wire_bytes(PROTOCOL_IDS_BY_LINE[line], n))   # the wire bytes of n data bytes
        sizes.append(n)
        lines.append(line)
        want.append(token_range(c, off, n, size, seq, line)
                    if s1 > s0 and n > 0 or ts < 0 else None)
    t0, t1 = token_ranges(np.asarray(attr, np.int64), np.asarray(offs, np.int64),
                          np.asarray(sizes, np.int64), seq, np.asarray(lines, np.uint8))
    for i, w in enumerate(want):
        if w is not None:
            assert (int(t0[i]), int(t1[i])) == w, rows[i]
