"""feed: the writers' shared ring. Every worker gets, for each chunk, the row ranges of its own
files' parts in the buffer the chunk took (an empty list when it has none), and those ranges
hold exactly the parts' rows, whether the parts were copied in or lowered there; a buffer is
taken again only once every worker released it; a chunk larger than a buffer goes through the
queues part by part. The worker side is played in this process (the ring's semaphores are the
same objects a forked worker would inherit)."""
from __future__ import annotations

import multiprocessing as mp
from itertools import pairwise

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.generate.feed import RowSlots, feed_chunk
from tokenpcap.records import PACKET_DTYPE

CTX = mp.get_context("fork")


def _rows(n: int, seed: int) -> np.ndarray:
    """``PACKET_DTYPE (n,)`` of random bytes (every field, as the copy moves bytes)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, n * PACKET_DTYPE.itemsize, dtype=np.uint8).view(PACKET_DTYPE)


def _never():
    raise AssertionError("a buffer was waited for although every worker had released it")


def _collect(ring, where, parts, slot=None):
    sent = []
    feed_chunk(ring, where, parts, lambda w, item: sent.append((w, item)), _never, slot)
    return sent


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=6),
       workers=st.integers(1, 3), lowered=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_each_worker_gets_exactly_its_files_rows(sizes, workers, lowered, seed):
    ring = RowSlots(CTX, workers, slot_rows=256, slots=2)
    where = [(f % workers, f // workers) for f in range(len(sizes))]
    rows = _rows(sum(sizes), seed)
    bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    if lowered:             # the chunk's rows written into the buffer first, parts are views
        k, buf = ring.take(_never)
        buf[:rows.size] = rows
        src = buf[:rows.size]
    else:
        k, src = None, rows
    parts = [(f, src[a:b], [f"label {f}"], np.zeros(b - a, np.int64))
             for f, (a, b) in enumerate(pairwise(bounds)) if b > a]
    sent = _collect(ring, where, parts, k)
    assert sorted(w for w, _ in sent) == list(range(workers))       # every worker, once
    got = {}
    for w, (slot, mine) in sent:
        for i, a, b, labels, codes in mine:
            f = i * workers + w
            assert where[f] == (w, i) and labels == [f"label {f}"] and codes.size == b - a
            got[f] = ring.view(slot, a, b).tobytes()
        ring.release(w)
    want = {f: rows[a:b].tobytes() for f, (a, b) in enumerate(pairwise(bounds)) if b > a}
    assert got == want


def test_a_buffer_is_taken_again_only_when_every_worker_released_it():
    ring = RowSlots(CTX, 2, slot_rows=8, slots=2)
    first, _ = ring.take(_never)
    second, _ = ring.take(_never)
    assert (first, second) == (0, 1)
    ring.release(0)                     # worker 1 still reads buffer 0
    waits = []

    def check():
        waits.append(1)
        if len(waits) == 1:
            ring.release(1)             # now it has finished too

    third, _ = ring.take(check)
    assert third == 0 and waits == [1]


def test_a_chunk_larger_than_a_buffer_goes_part_by_part_through_the_queues():
    ring = RowSlots(CTX, 2, slot_rows=8, slots=2)
    rows = _rows(12, 1)
    parts = [(0, rows[:5], None, None), (1, rows[5:], None, None)]
    sent = _collect(ring, [(0, 0), (1, 0)], parts)
    assert [(w, i) for w, (i, *_) in sent] == [(0, 0), (1, 0)]
    assert sent[1][1][1].tobytes() == rows[5:].tobytes()
    k, _ = ring.take(_never)            # no buffer was used
    assert k == 0
