"""RDMA flows and PSN sequence checks across batches, with 24-bit wrap (stage 8).

A flow is ``(kind, source, destination, DestQP)``: the UDP source port is not part of the key
(it is per-QP entropy, and both directions of a QP share it). :class:`FlowTable` gives every
packet a dense flow id that stays the same across batches; :class:`PsnTracker` follows each
flow's PSNs in capture order, carrying per-flow state from batch to batch (flat memory).

PSN arithmetic (IBTA vol.1 9.7.1: PSNs are 24-bit and compared modulo 2**24; case C6): the step
between consecutive packets of a flow is taken in ``[-2**23, 2**23)``, so FFFFFF → 000000 is +1
and FFFFFF → 000001 is +2. Unwrapping the steps gives a sequence ``u``; against the highest ``u``
seen so far in the flow (``top``), a packet is

* in order: ``u == top + 1``;
* a gap: ``u > top + 1``: ``u - top - 1`` PSNs were skipped (``psn_missing``), one ``psn_gaps``;
* late: ``u <= top`` (reordered, or a duplicate/retransmission): one ``psn_reordered``.

So FFFFFF then 000001 is exactly one gap of one missing PSN; 1, 2, 4, 3, 5 is one gap (3 missing
when 4 arrives) and one late packet. Only opcodes whose PSN steps by one per packet are followed:
SEND, RDMA WRITE, RDMA READ response, atomics and UD SEND; not ACKs (they carry the acknowledged
PSN), CNPs (PSN unused) nor READ requests (they advance the PSN by the number of response
packets, which depends on the path MTU).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tokenpcap.analysis.decode import KIND_IB, KIND_ROCEV1, KIND_ROCEV2

__all__ = ["FlowTable", "PsnTracker", "SEQUENCED", "psn_step", "batch_hash", "follow_psn"]

PSN_MOD = 1 << 24
_HALF = 1 << 23

#: bool (256,): opcodes whose PSN advances by exactly one per packet.
SEQUENCED = np.zeros(256, bool)
SEQUENCED[[*range(0x00, 0x0C), *range(0x0D, 0x11), 0x13, 0x14, 0x16, 0x17, 0x64, 0x65]] = True

_KEYS = ("kind", "src_hi", "src_lo", "dst_hi", "dst_lo", "destqp")
_MIX = [np.uint64(c) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB,
                               0xD6E8FEB86659FD93, 0xA0761D6478BD642F, 0xE7037ED1A0B428DB)]
_MIX_ARRAY = np.array(_MIX, np.uint64)
#: the hash table of :func:`_factorize`, all -1 between calls (grown to twice the largest batch)
_SLOTS = np.full(1024, -1, np.int64)


def psn_step(psn: np.ndarray, prev: np.ndarray) -> np.ndarray:
    """Signed PSN step modulo 2**24 in ``[-2**23, 2**23)`` (int64), e.g. FFFFFF → 000000 is 1."""
    d = (np.asarray(psn, np.int64) - np.asarray(prev, np.int64) + _HALF) % PSN_MOD
    return d - _HALF


class FlowTable:
    """Dense flow ids for ``(kind, src, dst, DestQP)`` keys, stable across batches, for at most
    ``limit`` flows: the keys first seen after ``limit`` others all get the id ``limit``
    ("other"), and are not kept (memory stays bounded whatever the number of flows).

    Attributes:
        keys: list of key tuples, index = flow id (at most ``limit``).
        limit: the most flows given their own id.
        overflowed: 1 once a key got the id ``limit``, else 0.
    """

    def __init__(self, limit: int | None = None) -> None:
        self._index: dict[tuple[int, ...], int] = {}
        self.keys: list[tuple[int, ...]] = []
        self.limit = (1 << 62) if limit is None else int(limit)
        self.overflowed = 0

    def __len__(self) -> int:
        return len(self.keys)

    def ids(self, dec: np.ndarray, compiled: bool = False) -> np.ndarray:
        """Flow id (int64 (n,)) of every row of a decoded batch (RDMA rows only; callers select).

        Keys are hashed to 64 bits and factorized with ``np.unique``; the few distinct flows are
        then looked up in a dict (a loop per flow, not per packet), in the order of their
        hashes. Hash collisions are detected by comparing every row with its representative
        and resolved exactly. ``compiled``: the same factorization by one compiled pass
        (:func:`_factorize`, a hash table of the batch's keys; the same ids), worth its
        one-off load on captures of millions of packets.
        """
        n = dec.size
        if n == 0:
            return np.zeros(0, np.int64)
        cols = [dec[k] for k in _KEYS]
        found = _factorized(cols) if compiled else None
        rep, inv = self._factorize(cols) if found is None else found
        table = self.number([tuple(int(c[r]) for c in cols) for r in rep.tolist()])
        return table[inv]

    def number(self, keys: list[tuple[int, ...]]) -> np.ndarray:
        """The flow id of each key (int64 (len(keys),)), numbering the keys not seen before in
        the order given (from ``len(self)`` on; ``limit`` once the table is full)."""
        table = np.empty(len(keys), np.int64)
        for j, key in enumerate(keys):
            fid = self._index.get(key)
            if fid is None:
                if len(self.keys) >= self.limit:
                    fid, self.overflowed = self.limit, 1
                else:
                    fid = self._index[key] = len(self.keys)
                    self.keys.append(key)
            table[j] = fid
        return table

    @staticmethod
    def _factorize(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(a row of every distinct key, in the order :meth:`ids` numbers them; each row's
        index into it), by numpy passes."""
        n = cols[0].size
        # a column with one value in the whole batch (the kind, the zero upper halves of IPv4
        # addresses ...) cannot tell rows apart: hash and verify the others only
        varying = [c.astype(np.uint64) for c in cols if c.min() != c.max()]
        h = np.zeros(n, np.uint64)
        for c, m in zip(varying, _MIX):
            h = (h ^ c) * m
            h ^= h >> np.uint64(29)
        # few distinct flows: find them in a sample, place every row by binary search (no
        # full sort); when the sample missed some, the distinct hashes of all rows (numpy's
        # hash-based unique sorts only the distinct values), then the same binary search. The
        # sample's step is odd: flows interleaved round-robin (2, 4, 8 ... QPs) would otherwise
        # alias with it and show the sample a single flow
        u = np.unique(h[::max(1, n // 4096) | 1])
        inv = np.minimum(np.searchsorted(u, h), u.size - 1)
        if not (u[inv] == h).all():
            u = np.unique(h)
            inv = np.searchsorted(u, h)
        rep = np.empty(u.size, np.int64)
        rep[inv] = np.arange(n)                               # a row of every key
        if not all((c == c[rep][inv]).all() for c in varying):
            keys = np.rec.fromarrays(varying)
            _, rep, inv = np.unique(keys, return_index=True, return_inverse=True)
            inv = inv.ravel()
        return rep, inv


def _factorized(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """:meth:`FlowTable._factorize` by :func:`_factorize`: the distinct keys ordered by their
    hash as ``np.unique`` orders them; None when two keys share a hash (the numpy path then
    orders them exactly)."""
    global _SLOTS
    n = cols[0].size
    if _SLOTS.size < 2 * n:
        _SLOTS = np.full(1 << (2 * n - 1).bit_length(), -1, np.int64)
    h = batch_hash(cols, [_varies(c) for c in cols])
    inv = np.empty(n, np.int64)
    rep = np.empty(n, np.int64)
    k = _factorize(*cols, h, inv, rep, _SLOTS, np.empty(n, np.int64))
    if k < 0:
        return None
    order = np.argsort(h[rep[:k]])
    rank = np.empty(k, np.int64)
    rank[order] = np.arange(k)
    return rep[:k][order], rank[inv]


def batch_hash(cols: list[np.ndarray], varies: list[bool]) -> np.ndarray:
    """The hash a batch's flow keys are ordered by (uint64 (n,)): the key columns ``cols``
    (:data:`_KEYS` order, (n,) each) that vary over the batch's rows (``varies``), mixed in
    one after the other (:func:`_mix`); :meth:`FlowTable.ids` numbers a batch's new flows in
    ascending order of it."""
    h = np.zeros(cols[0].size, np.uint64)
    j = 0
    for c, v in zip(cols, varies):
        if v:
            _mix(h, c, _MIX_ARRAY[j])
            j += 1
    return h


@njit(cache=True, nogil=True)
def _varies(col):
    """Whether column ``col`` (n,) holds more than one value."""
    for i in range(1, col.size):
        if col[i] != col[0]:
            return True
    return False


@njit(cache=True, nogil=True)
def _mix(h, col, m):
    """One column's step of :meth:`FlowTable._factorize`'s hash, over every row of ``h``."""
    for i in range(h.size):
        x = (h[i] ^ np.uint64(col[i])) * m
        h[i] = x ^ (x >> np.uint64(29))


@njit(cache=True, nogil=True)
def _factorize(kind, src_hi, src_lo, dst_hi, dst_lo, destqp, h, inv, rep, table, used):
    """The distinct keys of the rows (columns of :data:`_KEYS`, (n,) each) by a hash table over
    their hashes ``h`` (uint64 (n,), :func:`_mix`): a row of each key in first-seen order into
    ``rep`` and each row's key number into ``inv`` (int64 (n,)).
    ``table``: int64 slots, a power of two at least 2n, all -1 (left so); ``used`` int64 (n,)
    scratch. Returns the number of keys, or a negative number when two different keys share
    a hash."""
    n = kind.size
    size = table.size
    k = 0
    for i in range(n):
        x = h[i]
        s = np.int64((x ^ (x >> np.uint64(32))) & np.uint64(size - 1))
        while True:
            r = table[s]
            if r < 0:
                table[s] = k
                used[k] = s
                rep[k] = i
                inv[i] = k
                k += 1
                break
            q = rep[r]
            if h[q] == x:
                if (kind[q] != kind[i] or src_hi[q] != src_hi[i] or src_lo[q] != src_lo[i]
                        or dst_hi[q] != dst_hi[i] or dst_lo[q] != dst_lo[i]
                        or destqp[q] != destqp[i]):
                    k = -1 - k                # a collision: give up, leave the table empty
                    break
                inv[i] = r
                break
            s = (s + 1) & (size - 1)
        if k < 0:
            break
    for r in range(k if k >= 0 else -1 - k):
        table[used[r]] = -1
    return k


class PsnTracker:
    """Per-flow PSN state carried across batches (module docstring for the definitions).

    Attributes (int64 arrays indexed by flow id): ``gaps``, ``missing``, ``reordered``, ``seen``
    (packets followed).
    """

    def __init__(self) -> None:
        self._last = np.zeros(0, np.int64)    # last raw PSN, -1 before the first packet
        self._u = np.zeros(0, np.int64)       # unwrapped PSN of the last packet
        self._top = np.zeros(0, np.int64)     # highest unwrapped PSN so far
        self.gaps = np.zeros(0, np.int64)
        self.missing = np.zeros(0, np.int64)
        self.reordered = np.zeros(0, np.int64)
        self.seen = np.zeros(0, np.int64)

    def arrays(self) -> tuple[np.ndarray, ...]:
        """The per-flow state (last raw PSN, unwrapped PSN of the last packet, highest
        unwrapped PSN, gaps, missing, reordered, seen), int64 (flows,) each, for a compiled
        loop that follows PSNs with :func:`follow_psn`."""
        return (self._last, self._u, self._top, self.gaps, self.missing, self.reordered,
                self.seen)

    def grow(self, n: int) -> None:
        """Room for flow ids below ``n``."""
        old = self._last.size
        if n <= old:
            return
        extra = n - old
        self._last = np.concatenate([self._last, np.full(extra, -1, np.int64)])
        for name in ("_u", "_top", "gaps", "missing", "reordered", "seen"):
            setattr(self, name, np.concatenate([getattr(self, name), np.zeros(extra, np.int64)]))

    def update(self, flow: np.ndarray, psn: np.ndarray, compiled: bool = False) -> None:
        """Feed packets in capture order: ``flow`` int64 (n,) ids, ``psn`` (n,) 24-bit PSNs.
        ``compiled``: follow them packet by packet in one compiled loop (:func:`_follow`, the
        same counts; worth its one-off load on captures of millions of packets) instead of
        numpy passes over the batch sorted by flow."""
        if flow.size == 0:
            return
        top = int(flow.max()) + 1
        self.grow(top)
        if compiled:
            _follow(np.ascontiguousarray(flow, np.int64), np.ascontiguousarray(psn, np.int64),
                    self._last, self._u, self._top, self.gaps, self.missing, self.reordered,
                    self.seen)
            return
        small = flow.astype(np.uint16) if top <= 0xFFFF else flow
        order = np.argsort(small, kind="stable")       # radix sort for 16-bit keys
        f, p = flow[order], np.asarray(psn, np.int64)[order]
        first = np.r_[True, f[1:] != f[:-1]]
        starts = np.flatnonzero(first)
        fresh = self._last[f[starts]] < 0                     # flow seen for the first time
        prev = np.r_[0, p[:-1]]
        prev[starts] = np.where(fresh, p[starts], self._last[f[starts]])
        d = psn_step(p, prev)
        if self._in_order(f, p, first, starts, fresh, d):
            return
        seg = np.cumsum(first) - 1
        cs = np.cumsum(d)
        before = (cs[starts] - d[starts])[seg]
        base = np.where(fresh, p[starts], self._u[f[starts]])[seg]
        u = cs - before + base
        lo = np.minimum.reduceat(u, starts)[seg]
        big = np.int64(1) << np.int64(42)      # batches hold < 2**20 segments: no overflow
        rel = np.minimum(u - lo, big - 1)
        acc = np.maximum.accumulate(seg * big + rel) - seg * big + lo
        top_carried = np.where(fresh, np.iinfo(np.int64).min, self._top[f[starts]])[seg]
        prior = np.r_[0, acc[:-1]]
        prior[starts] = np.iinfo(np.int64).min
        prior = np.maximum(prior, top_carried)
        has = prior != np.iinfo(np.int64).min
        gap = has & (u > prior + 1)
        late = has & (u <= prior)
        ids = f[starts]
        self.gaps[ids] += np.add.reduceat(gap.astype(np.int64), starts)
        self.missing[ids] += np.add.reduceat(np.where(gap, u - prior - 1, 0), starts)
        self.reordered[ids] += np.add.reduceat(late.astype(np.int64), starts)
        self.seen[ids] += np.diff(np.r_[starts, f.size])
        ends = np.r_[starts[1:], f.size] - 1
        self._last[ids] = p[ends]
        self._u[ids] = u[ends]
        self._top[ids] = np.maximum(acc[ends], np.where(fresh, acc[ends], self._top[ids]))

    def _in_order(self, f, p, first, starts, fresh, d) -> bool:
        """The common batch, done in a few passes: inside every flow each PSN is the previous
        one plus one, and each flow's first packet of the batch is its first ever or lies past
        the flow's highest PSN so far. Then only those first packets can open a gap (a later
        packet's predecessor is the highest so far) and none is late. Returns False, touching
        nothing, for any other batch (``f``/``p`` sorted by flow, ``d`` the steps, ``first``
        bool (n,) and ``starts`` the rows where a flow begins, ``fresh`` per flow)."""
        if not (d[~first] == 1).all():
            return False
        ids = f[starts]
        u0 = self._u[ids] + d[starts]               # unwrapped PSN of the first packet
        top = self._top[ids]
        if not (fresh | (u0 > top)).all():
            return False
        u0 = np.where(fresh, p[starts], u0)
        gap = ~fresh & (u0 > top + 1)
        count = np.diff(np.r_[starts, f.size])
        self.gaps[ids] += gap
        self.missing[ids] += np.where(gap, u0 - top - 1, 0)
        self.seen[ids] += count
        self._last[ids] = p[starts + count - 1]
        self._u[ids] = self._top[ids] = u0 + count - 1
        return True


@njit(cache=True, nogil=True)
def _follow(flow, psn, last, unwrapped, top, gaps, missing, reordered, seen):
    """:meth:`PsnTracker.update` packet by packet in capture order (the module docstring's
    definitions): ``flow``/``psn`` int64 (n,), the tracker's per-flow int64 arrays in place."""
    for i in range(flow.size):
        f = flow[i]
        u, t, gap, gone, late = follow_psn(psn[i], last[f], unwrapped[f], top[f])
        seen[f] += 1
        gaps[f] += gap
        missing[f] += gone
        reordered[f] += late
        top[f], unwrapped[f], last[f] = t, u, psn[i]


@njit(cache=True, nogil=True, inline="always")
def follow_psn(p, last, unwrapped, top):
    """One packet with PSN ``p`` of a flow whose last raw PSN, unwrapped PSN and highest
    unwrapped PSN so far are ``last`` (-1 before its first packet), ``unwrapped`` and ``top``
    (the module docstring's definitions): ``(its unwrapped PSN, the new highest, gaps,
    missing, late)`` (scalars: the caller updates its arrays)."""
    if last < 0:                     # the flow's first packet
        return p, p, 0, 0, 0
    u = unwrapped + ((p - last + _HALF) & (PSN_MOD - 1)) - _HALF     # (% PSN_MOD)
    if u > top + 1:
        return u, u, 1, u - top - 1, 0
    if u <= top:
        return u, top, 0, 0, 1
    return u, u, 0, 0, 0


def is_rdma(kind: np.ndarray) -> np.ndarray:
    """bool (n,): rows that carry a BTH (RoCEv2, RoCEv1, native IB)."""
    return (kind == KIND_ROCEV2) | (kind == KIND_ROCEV1) | (kind == KIND_IB)
