"""The transfers' dependency countdowns, one slab per call in flight (part of
:mod:`tokenpcap.schedule.engine.kernel`, grown by :class:`tokenpcap.schedule.engine.state.Engine`).

A transfer is launched when both its ranks have started its call and each transfer it depends
on has arrived: a countdown from its canonical row's ``CT_WAIT`` (dependencies + 2,
:mod:`tokenpcap.schedule.flatbuild`) to 0 (:func:`tokenpcap.schedule.engine.access.release_one`).
Only the calls between their first rank's start and their last transfer's launch need their
countdowns, so they live in slabs of one int32 pool ``S.tw``, not in an array of every transfer
of the run:

* **Allocation.** When a rank starts a call (``progs._start``) whose countdowns are not held
  (``S.c_slab[c] < 0``) and that has transfers, :func:`take` gives it a slab of ``2**k`` words,
  the least power of two above its transfer count: word 0 counts its transfers not yet
  launched, word ``1 + j`` is transfer ``j``'s countdown, copied from the call's template rows.
  A slab comes from the free list of its size class (``sc[SLAB_FREE + k]``, last freed first)
  or else from the pool's unused end (``sc[SLAB_TOP]``).
* **Release.** When the last of its transfers is launched, no release can come for the call
  again: a transfer's two rank releases come from the starts of its two ranks' parts and its
  dependency releases from the arrivals of transfers of the same call, each once, and all of
  them came before it reached 0. :func:`give_back` puts the slab at the head of its size class's
  free list (the next offset in its first two words, low and high 31 bits) and marks the call's
  countdowns not held.
* **Room.** Parts never allocate (:func:`~tokenpcap.schedule.engine.compiled.part`), so the pool
  has ``cf[SLAB_HEAD]`` words past ``sc[SLAB_TOP]`` before every event
  (:func:`tokenpcap.schedule.engine.kernel.run` returns 3 and :func:`grow` makes it larger):
  what one event can take at most, each of the (at most two) ranks it lets run on starting every
  call of its program (:func:`slab_words`). The pool is ``np.empty``: the pages beyond the highest
  slab ever used are never touched, so the resident memory is that high-water mark, which the
  calls in flight at once set (their slabs at most twice their countdowns, plus the slabs of
  other sizes free at that moment).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.errors import InputError
from tokenpcap.schedule.engine.compiled import part
from tokenpcap.schedule.engine.events import SLAB_FREE, SLAB_LIVE, SLAB_TOP

__all__ = ["take", "give_back", "slab_class", "slab_words", "grow", "pool", "MAX_CALL_TRANSFERS"]

#: Transfers one call may have: its countdowns and their count are int32, its slab at most
#: ``2**31`` words (size classes 1 .. 31, ``sc[SLAB_FREE + k]``).
MAX_CALL_TRANSFERS = (1 << 31) - 1
_LOW31 = (1 << 31) - 1


@part
def _class(n):
    """The size class of a slab for ``n`` countdowns: the least ``k >= 1`` with
    ``2**k >= n + 1``."""
    k = 1
    while (1 << k) < n + 1:
        k += 1
    return k


@part
def take(S, sc, c, n):
    """A slab for the ``n`` countdowns of call ``c`` (module docstring), its word 0 set to ``n``
    and its offset in ``S.tw`` returned (and kept in ``S.c_slab[c]``); the countdowns are the
    caller's to fill. The pool has room (the caller's headroom)."""
    tw = S.tw
    k = _class(n)
    o = sc[SLAB_FREE + k]
    if o >= 0:
        hi = tw[o + 1]
        sc[SLAB_FREE + k] = -1 if hi < 0 else tw[o] + hi * 2147483648
    else:
        o = sc[SLAB_TOP]
        sc[SLAB_TOP] = o + (1 << k)
    sc[SLAB_LIVE] += 1 << k
    tw[o] = n
    S.c_slab[c] = o
    return o


@part
def give_back(S, sc, c, n):
    """Call ``c``'s last transfer is launched: its slab (of ``n`` countdowns) goes to the head of
    its size class's free list (module docstring)."""
    tw = S.tw
    k = _class(n)
    o = S.c_slab[c]
    nxt = sc[SLAB_FREE + k]
    if nxt >= 0:
        tw[o] = nxt & _LOW31
        tw[o + 1] = nxt >> 31
    else:
        tw[o] = -1
        tw[o + 1] = -1
    sc[SLAB_FREE + k] = o
    sc[SLAB_LIVE] -= 1 << k
    S.c_slab[c] = -1


def slab_class(n: np.ndarray) -> np.ndarray:
    """int64: the size class of each count of countdowns ``n`` (as :func:`take` computes it)."""
    n = np.asarray(n, np.int64)
    k = np.ceil(np.log2(np.maximum(n + 1, 2))).astype(np.int64)
    k += (np.left_shift(1, k) < n + 1)                  # float rounding at exact powers
    k -= (k > 1) & (np.left_shift(1, k - 1) >= n + 1)
    return k


def slab_words(ntr: np.ndarray) -> np.ndarray:
    """int64 ``(C,)``: the words of the slab of each call of ``ntr`` (int ``(C,)``) transfers, 0
    for a call without transfers. The headroom ``cf[SLAB_HEAD]`` is twice the largest sum of
    these over the calls one rank takes part in (module docstring).

    Raises:
        InputError: a call of more than :data:`MAX_CALL_TRANSFERS` transfers, or 2**31 calls or
            more (a handle's call, :mod:`tokenpcap.schedule.engine.access`).
    """
    ntr = np.asarray(ntr, np.int64)
    if ntr.size and int(ntr.max()) > MAX_CALL_TRANSFERS:
        raise InputError(f"collective call transfers: got {int(ntr.max()):,}, expected at most "
                         f"{MAX_CALL_TRANSFERS:,} (a larger collectives.slice_bytes)")
    if ntr.size >= 1 << 31:
        raise InputError(f"collective calls: got {ntr.size:,}, expected fewer than 2**31 (fewer "
                         "iterations or a smaller job)")
    return np.where(ntr > 0, np.left_shift(1, slab_class(ntr)), 0)


def pool(words: int) -> np.ndarray:
    """An empty pool of ``words`` int32 words (never written: module docstring)."""
    return np.empty(max(2, int(words)), np.int32)


def grow(tw: np.ndarray, top: int, need: int) -> np.ndarray:
    """The pool ``tw`` with at least ``need`` words, twice as many at the least; its first
    ``top`` words (every slab, held or free) copied."""
    new = pool(max(int(need), 2 * tw.shape[0]))
    new[:top] = tw[:top]
    return new

