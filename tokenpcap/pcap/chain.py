"""Finding where every record of a capture file starts, fast, without trusting the file.

Records chain: record i+1 starts where record i ends (pcap: 16 + caplen, pcapng: block_length,
ERF: rlen), so the offsets are a sequential dependency. Two walkers, with the same answer:

* :meth:`Chain.scalar` follows the chain in a tight Python loop (``struct.unpack_from``;
  about 0.2 µs per record), validating every length. It is the reference and names the byte
  offset of any bad record in a :class:`~tokenpcap.errors.CaptureError`.
* :func:`walk` (lockstep) cuts the region into C segments, finds a plausible record start near
  the beginning of each (a record whose next two successors are plausible too), then advances
  all C chains one record per numpy step. A chain that starts on a true record start is correct
  from there on (the chain is deterministic), so the segments are joined in order: segment s is
  accepted from the true position ``p`` onwards iff ``p`` is on chain s; otherwise (no start
  found, a false start that never met the true chain, a step budget exceeded, a bad length) the
  scalar walker covers that segment. The result is therefore always exactly the scalar result;
  speculation only decides how fast it is found. Cost: ~steps x numpy call overhead + a few
  gathers per record, so tens of millions of small records per second.

Hostile lengths cannot loop (every length is at least the header size) or allocate: arrays are
bounded by the region size divided by the minimum record length.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.errors import CaptureError, TruncatedFile

__all__ = ["Chain", "walk", "fixed_run", "ByteViews", "MIN_FIXED_RUN"]

class ByteViews:
    """Unaligned stride-1 integer views over a uint8 buffer: ``views("<u4")[p]`` is the 32-bit
    little-endian value at byte offset ``p`` (gather with an int64 array of offsets)."""

    def __init__(self, data: np.ndarray):
        self.data = data
        self._cache: dict[str, np.ndarray] = {}

    def __call__(self, dtype: str) -> np.ndarray:
        v = self._cache.get(dtype)
        if v is None:
            size = np.dtype(dtype).itemsize
            count = max(self.data.size - size + 1, 0)
            v = np.ndarray((count,), dtype=dtype, buffer=self.data, strides=(1,)) if count else \
                np.zeros(0, dtype)
            self._cache[dtype] = v
        return v


class Chain:
    """How records of one format chain. Subclasses set ``header``, ``align`` and implement
    :meth:`step`, :meth:`plausible` and :meth:`scalar`.

    Attributes:
        header: bytes needed at a record start to know its length.
        align: every record start is a multiple of ``align`` (pcapng: 4).
        end: end of the valid data (file size).
    """

    header = 16
    align = 1

    def __init__(self, data: np.ndarray, end: int, name: str = "capture"):
        self.data = data
        self.views = ByteViews(data)
        self.end = end
        self.name = name

    def step(self, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Vectorized: (next int64, ok bool, stop bool) for record starts ``pos`` (n,).

        ``ok`` is False where the record would be invalid (the scalar walker raises there);
        ``stop`` marks records that end the walk (a pcapng Section Header Block).
        """
        raise NotImplementedError

    def advance(self, cur: np.ndarray, out: np.ndarray, at=None) -> None:
        """Vectorized, unchecked: write into ``out`` the start of the record after each ``cur``
        (0 <= cur <= end - header). Stop records and bad lengths are not judged here
        (:meth:`bad` is, on the accepted starts). ``at``: the same positions as a slice
        (evenly spaced records: the length fields read through a strided view, no gather)."""
        raise NotImplementedError

    def bad(self, pos: np.ndarray, at=None) -> np.ndarray:
        """Vectorized: bool (n,) for records at true starts ``pos`` whose length fields are
        invalid in a way :meth:`advance` does not show (default: the full :meth:`step`).
        ``at``: as :meth:`advance`."""
        nxt, ok, stop = self.step(pos)
        return ~ok | stop

    def fixed_ok(self, pos: np.ndarray, at: slice, size: int) -> np.ndarray:
        """Vectorized: bool (n,) for records at true starts ``pos`` (evenly spaced by
        ``size``, ``at`` the same positions as a slice): whether each is followed by the next
        slot (:meth:`advance`) and not :meth:`bad`. Formats whose length is one field may
        answer with one compare of that field."""
        nxt = np.empty(pos.size, np.int64)
        self.advance(pos, nxt, at)
        ok = nxt == pos + size
        ok &= ~self.bad(pos, at)
        return ok

    def plausible(self, pos: np.ndarray) -> np.ndarray:
        """Vectorized: bool (n,) whether a record could start at ``pos`` (a loose test that every
        valid record passes; only used to choose where to speculate)."""
        raise NotImplementedError

    def scalar(self, p: int, limit: int, max_count: int) -> tuple[list[int], int, bool]:
        """Follow the chain from the true record start ``p`` while ``p < limit``.

        Returns:
            (record starts, next position, stopped at a stop record).

        Raises:
            TruncatedFile, CaptureError: naming the byte offset of the bad record.
        """
        raise NotImplementedError

    def truncated(self, p: int, need: int, what: str) -> TruncatedFile:
        err = TruncatedFile(f"{self.name}: {what} at byte offset {p}: needs {need} bytes, "
                            f"got {self.end - p} (the file ends)")
        err.offset = p
        return err

    def corrupt(self, p: int, message: str) -> CaptureError:
        err = CaptureError(f"{self.name}: {message} (record at byte offset {p})")
        err.offset = p
        return err


def walk(chain: Chain, p: int, limit: int, *, steps: int = 256, avg: int | None = None
         ) -> tuple[np.ndarray, int, bool]:
    """All record starts in ``[p, limit)`` beginning at the true record start ``p``.

    Args:
        avg: average record length seen so far (skips most of the scalar warm-up).

    Returns:
        (starts int64 (k,), next position (>= limit unless stopped), stopped at a stop record).

    Raises:
        TruncatedFile, CaptureError: from :meth:`Chain.scalar` at the first bad record.
    """
    head, p, stopped = chain.scalar(p, limit, 2048 if avg is None else 16)
    pieces = [np.asarray(head, np.int64)]
    if stopped or p >= limit:
        return pieces[0], p, stopped
    avg = max(avg or (p - head[0]) // len(head), chain.header)
    run = fixed_run(chain, pieces[0], p, limit)
    if run.size:
        pieces.append(run)
        p += run.size * (p - int(head[-1]))       # the run's records are of the size before p
        if p >= limit:
            return np.concatenate(pieces), p, False
    if (limit - p) // avg < 8 * steps or avg > 2048:
        rest, p, stopped = chain.scalar(p, limit, 1 << 62)
        pieces.append(np.asarray(rest, np.int64))
        return np.concatenate(pieces), p, stopped
    seg = max(chain.align, (steps * avg) // chain.align * chain.align)
    bounds = np.arange(p, limit, seg, dtype=np.int64)
    seg_end = np.append(bounds[1:], limit)
    sync = _sync(chain, bounds[1:], seg_end[1:], avg + avg // 4 + chain.align)
    miss = np.flatnonzero(sync < 0)
    if miss.size:                                  # a second, wider look where the first missed
        sync[miss] = _sync(chain, bounds[1:][miss], seg_end[1:][miss], 4 * avg)
    starts = np.concatenate([[p], sync])
    pos, used = _lockstep(chain, starts, seg_end, 2 * steps + 32)  # (T, C) positions per step
    c = pos.shape[1]
    pos = pos[:used]
    j = (pos < seg_end).sum(axis=0)                               # steps inside each segment
    exit_pos = pos[np.minimum(j, used - 1), np.arange(c)]
    # an exit at the clamp value may be a clamped read, not a record start: let the scalar decide
    exited = (j < used) & (starts >= 0) & (exit_pos != max(chain.end - chain.header, 0))
    near = min(8, used)                    # a chain meets its predecessor's exit within a few records
    hit = pos[:near, 1:] == exit_pos[:-1]
    k = np.concatenate([[0], np.argmax(hit, axis=0)])
    joins = exited.copy()
    joins[1:] &= hit.any(axis=0) & (k[1:] < j[1:])
    breaks = np.flatnonzero(~joins)
    flat = pos.reshape(-1)
    s = 0
    while s < c:
        end_s = int(seg_end[s])
        if p >= end_s:
            s += 1
            continue
        row = pos[:j[s], s]
        at = int(np.searchsorted(row, p))
        if exited[s] and at < row.size and int(row[at]) == p:
            r = int(breaks[np.searchsorted(breaks, s + 1)]) if breaks.size and breaks[-1] > s else c
            kk = k[s:r].copy()
            kk[0] = at
            lens = j[s:r] - kk
            # element (t, chain) sits at t * c + chain: walk each chain's steps kk..j-1 in order
            step_no = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens - kk, lens)
            chain_no = np.repeat(np.arange(s, r, dtype=np.int64), lens)
            pieces.append(flat[step_no * c + chain_no])
            p = int(exit_pos[r - 1])
            s = r
            continue
        rest, p, stopped = chain.scalar(p, end_s, 1 << 62)         # raises on a true bad record
        pieces.append(np.asarray(rest, np.int64))
        if stopped:
            return np.concatenate(pieces), p, True
        s += 1
    return _verify(chain, np.concatenate(pieces), p, limit)


#: fewest records a fixed-size run is tried for (below, the walk's own cost is small)
MIN_FIXED_RUN = 64


def fixed_run(chain: Chain, head: np.ndarray, p: int, limit: int) -> np.ndarray:
    """Record starts of a run of records of one size from the true start ``p`` on: when the
    last records of ``head`` (true starts, back to back, up to ``p``) are all of one size S, the
    records at ``p + i * S`` are checked all at once (:meth:`Chain.advance` must give the next
    slot and :meth:`Chain.bad` nothing) and the leading ones that pass are returned, int64
    (j,), up to ``limit``. A headers-only capture (every frame cut at the snaplen) is found in
    one pass this way, with no step per record; a record of another size ends the run, and
    :func:`walk` goes on from there. Empty when the last records of ``head`` differ in size."""
    tail = head[-16:]                    # (the first records may differ: pcapng IDBs)
    if tail.size < 2:
        return head[:0]
    size = p - int(tail[-1])
    if size <= 0 or int(tail[-1] - tail[0]) != size * (tail.size - 1) or \
            np.any(np.diff(tail) != size):
        return head[:0]
    k = min(-(-(limit - p) // size), (chain.end - p) // size)
    if k < MIN_FIXED_RUN:
        return head[:0]
    pos = np.arange(p, p + k * size, size, dtype=np.int64)
    at = slice(p, p + (k - 1) * size + 1, size)       # pos, as a strided view's slice
    ok = chain.fixed_ok(pos, at, size)
    j = k if ok.all() else int(np.argmin(ok))
    return pos[:j]


def _verify(chain: Chain, starts: np.ndarray, p: int, limit: int) -> tuple[np.ndarray, int, bool]:
    """Check the speculated starts. A joined chain follows :meth:`Chain.advance` from a true
    start, so consecutive starts are consistent by construction except where a read was clamped
    at the end of the file (only the last record) and for lengths :meth:`Chain.advance` does not
    judge: :meth:`Chain.bad` checks those for all, the scalar walker re-checks the last record.
    At the first bad record the scalar walker takes over and raises."""
    bad = chain.bad(starts)
    i = int(np.argmax(bad)) if bad.any() else starts.size - 1
    rest, q, stopped = chain.scalar(int(starts[i]), limit, 1 if i == starts.size - 1 else 1 << 62)
    if i == starts.size - 1 and q == p and not stopped:
        return starts, p, False
    if i == starts.size - 1:
        rest, q, stopped = chain.scalar(int(starts[i]), limit, 1 << 62)
    return np.concatenate([starts[:i], np.asarray(rest, np.int64)]), q, stopped


def _sync(chain: Chain, lo: np.ndarray, hi: np.ndarray, window: int) -> np.ndarray:
    """For each segment [lo, hi): the first offset in its first ``window`` bytes where a record
    and its next two successors are plausible; -1 where there is none."""
    if lo.size == 0:
        return lo
    width = max(window // chain.align, 1)
    first = lo[:, None] + chain.align * np.arange(width, dtype=np.int64)[None, :]
    valid = (first < hi[:, None]) & (first + chain.header <= chain.end)
    idx = np.flatnonzero(valid.ravel())
    p = first.ravel()[idx]
    for depth in range(3):
        ok = chain.plausible(p)
        idx, p = idx[ok], p[ok]
        if depth == 2:
            break
        nxt, ok, stop = chain.step(p)
        follow = ok & ~stop & (nxt + chain.header <= chain.end)
        idx, p = idx[follow], nxt[follow]
    good = np.zeros(first.size, bool)
    good[idx] = True
    good = good.reshape(first.shape)
    col = np.argmax(good, axis=1)
    return np.where(good.any(axis=1), first[np.arange(lo.size), col], -1)


def _lockstep(chain: Chain, starts: np.ndarray, seg_end: np.ndarray, budget: int
              ) -> tuple[np.ndarray, int]:
    """Advance every chain one record per step (no validation; reads are clamped to the file).

    Returns (positions (budget + 1, C), rows used): row 0 the starts (chains without a start
    sit at ``end - header``), row t the t-th successor clamped to ``end - header`` (so that
    :meth:`Chain.advance` never reads outside the file; a clamped step can only be the true
    chain's last record, which :func:`_verify` re-checks with the scalar walker). Stops when every
    chain that still moves has left its segment, or after ``budget`` steps. The buffer is kept
    on the chain and reused (fresh pages are expensive)."""
    c = starts.size
    buf = getattr(chain, "_lockstep_buf", None)
    if buf is None or buf.size < c * (budget + 1):
        buf = chain._lockstep_buf = np.empty(c * (budget + 1), np.int64)
    pos = buf[:c * (budget + 1)].reshape(budget + 1, c)
    last = max(chain.end - chain.header, 0)
    cur = pos[0]
    np.copyto(cur, np.where(starts >= 0, starts, last))
    used = budget + 1
    for t in range(budget):
        out = pos[t + 1]
        chain.advance(cur, out)
        np.minimum(out, last, out=out)          # every read stays inside the file
        if t % 16 == 15 and not np.any((out < seg_end) & (out != cur)):
            used = t + 2
            break
        cur = out
    return pos, used
