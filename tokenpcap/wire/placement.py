"""Placing frame pieces into the writer's buffer without a loop per packet (used by
:mod:`tokenpcap.wire.builder`).

* :func:`copy_pieces`: ``out[dst[i]:dst[i]+length[i]] = src[...]`` for every i, by row copies
  through sliding-window views (one numpy call per set of equal lengths, else one per binary
  digit of the length).
* :func:`xor_contributions`: the CRC register of each packet from per-byte contribution tables
  of its varying header bytes (CRC linearity, :mod:`tokenpcap.wire.linear`).
* :func:`store_words`: whole records of big-endian 64-bit words stored at 8-byte-aligned
  offsets, one fancy store per word: the headers-only path, where every frame of a group is cut
  at the same multiple of 8 bytes (``--snaplen 64``) and no CRC byte is kept.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

__all__ = ["copy_pieces", "rows_source", "store_words", "aligned", "or_field16", "xor_contributions"]


def rows_source(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(flat, starts)`` of the rows of a C-contiguous 2-D uint8 array or of a column slice of
    one: the whole buffer as a flat view and int64 ``(k,)`` offsets of each row in it."""
    k, step = rows.shape[0], rows.strides[0]
    flat = as_strided(rows, shape=(k * step,), strides=(1,))
    return flat, np.arange(0, k * step, step, dtype=np.int64)


def copy_pieces(out: np.ndarray, dst: np.ndarray, length: np.ndarray, src: np.ndarray,
                 src_start: np.ndarray | None, rows: np.ndarray | None = None) -> None:
    """``out[dst[i] : dst[i]+length[i]] = src[src_start[i] : ...]`` for every i, without a loop.

    ``src_start`` None means 0 for all (the payload pattern); ``src`` None means the rows of
    ``rows`` (a C-contiguous 2-D array or a column slice of one). When every length is equal
    this is one fancy-indexed row copy into a sliding-window view of ``out`` (from ``rows`` or
    the broadcast pattern). Otherwise each piece is split by the binary digits of its length
    (4096 + 64 + 8 + 2 ...) and all pieces of one size are copied by one such call: at most
    ``bit_length(max length)`` numpy calls whatever the number of rows.
    """
    if len(length) == 0:
        return
    lo, hi = int(length.min()), int(length.max())
    if hi <= 0:
        return
    if lo == hi:
        view = as_strided(out, shape=(out.size - lo + 1, lo), strides=(1, 1))
        if rows is not None:
            view[dst] = rows[:, :lo]
        elif src_start is None:
            view[dst] = src[:lo]
        else:
            view[dst] = as_strided(src, shape=(src.size - lo + 1, lo), strides=(1, 1))[src_start]
        return
    if src is None:
        src, src_start = rows_source(rows)
    for b in range(hi.bit_length() - 1, -1, -1):
        size = 1 << b
        sel = np.flatnonzero(length & size)
        if sel.size == 0:
            continue
        pre = length[sel] & ~((size << 1) - 1)
        view = as_strided(out, shape=(out.size - size + 1, size), strides=(1, 1))
        if src_start is None and size >= 64 and (pre.max() - pre.min()) <= 8 * (size << 1):
            # the pattern: few distinct offsets for large pieces; broadcast, no temporary rows
            for q in np.unique(pre).tolist():
                view[dst[sel[pre == q]] + q] = src[q:q + size]
            continue
        win = as_strided(src, shape=(src.size - size + 1, size), strides=(1, 1))
        view[dst[sel] + pre] = win[pre if src_start is None else src_start[sel] + pre]


def store_words(out: np.ndarray, offsets: np.ndarray, words: list) -> None:
    """``out[offsets[i] + 8 j : + 8]`` = big-endian ``words[j][i]`` (uint64 ``(k,)`` or a scalar
    broadcast to every row) for every row ``i`` and word ``j``.

    ``out``'s data and every offset must be multiples of 8 (:func:`aligned` says whether they are).
    """
    o64 = np.ndarray((out.size // 8,), ">u8", buffer=out)
    idx = offsets >> 3
    for j, w in enumerate(words):
        o64[idx + j if j else idx] = w


def aligned(out: np.ndarray, offsets: np.ndarray) -> bool:
    """Whether :func:`store_words` may store at ``offsets`` of ``out``."""
    return out.ctypes.data % 8 == 0 and not (offsets & 7).any()


def or_field16(words: np.ndarray, col: int, value: np.ndarray) -> None:
    """OR a 16-bit big-endian ``value`` (int ``(k,)``) into header bytes ``col``, ``col + 1`` of
    ``words`` (uint64 ``(n_words, k)``, word j = header bytes 8j..8j+7, first byte most significant)."""
    v = value.astype(np.uint64)
    j, b = divmod(col, 8)
    if b <= 6:
        words[j] |= v << np.uint64(8 * (6 - b))
    else:                                     # the field straddles two words
        words[j] |= v >> np.uint64(8)
        words[j + 1] |= (v & np.uint64(0xFF)) << np.uint64(56)


def xor_contributions(table: np.ndarray, words: np.ndarray, cols: np.ndarray, ormask: np.ndarray | None,
                       idx: np.ndarray, base: np.uint32) -> np.ndarray:
    """CRC register of each packet: ``base ^ XOR_c table[idx_c + (byte_c | or_c)]`` over the varying
    header bytes ``c``, each read out of its big-endian 64-bit header word (contiguous operations).

    Returns:
        uint32 ``(k,)``.
    """
    reg = np.full(words.shape[1], base, dtype=np.uint32)
    ors = ormask.tolist() if ormask is not None else [0] * len(cols)
    for c, orv, off in zip(cols.tolist(), ors, idx.tolist()):
        b = (words[c >> 3] >> np.uint64(56 - 8 * (c & 7))) & np.uint64(0xFF)
        if orv:
            b |= np.uint64(orv)
        reg ^= table.take(b.astype(np.intp) + off)
    return reg
