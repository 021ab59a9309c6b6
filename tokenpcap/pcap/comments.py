"""pcapng EPB comments, vectorized: find each block's first ``opt_comment`` (draft-ietf-opsawg-
pcapng §3.5, §4.3) and factorize the texts without a Python object per packet.

Texts of one length are gathered from the mapped file in one pass, compared as 64-bit words,
hashed, grouped, and then verified word by word against their group's first member, so a hash
collision cannot merge two different texts (it falls back to an exact sort).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.errors import CaptureError
from tokenpcap.pcap.formats import pad4

__all__ = ["comment_spans", "distinct_texts"]

_MULT = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                  0x27D4EB2F165667C5], np.uint64)


def comment_spans(views, order: str, start: np.ndarray, end: np.ndarray, path
                  ) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    """Locate the first ``opt_comment`` in each options area ``[start, end)``.

    Args:
        views: the file's :class:`~tokenpcap.pcap.chain.ByteViews`; order: the section's.
        start, end: int64 (n,) byte offsets of each block's options and its trailing length.

    Returns:
        (n, rows int64 (k,), text offset int64 (k,), text length int64 (k,)) for the k blocks
        that have a comment.

    Raises:
        CaptureError: an option runs past its block (the message names its offset).
    """
    cur = start.copy()
    todo = np.flatnonzero(cur + 4 <= end)
    rows, at, size = [], [], []
    while todo.size:                               # one pass per option position, not per packet
        c = cur[todo]
        word = views(order + "u4")[c]               # code and length in one gather
        code, ln = (word & 0xFFFF, word >> 16) if order == "<" else (word >> 16, word & 0xFFFF)
        ln = ln.astype(np.int64)
        over = (code != 0) & (c + 4 + ln > end[todo])
        if over.any():
            p = int(c[np.flatnonzero(over)[0]])
            err = CaptureError(f"{path}: pcapng option runs past its block (byte offset {p})")
            err.offset = p
            raise err
        com = code == 1
        rows.append(todo[com])
        at.append(c[com] + 4)
        size.append(ln[com])
        rest = (code != 0) & ~com
        todo, nxt = todo[rest], c[rest] + 4 + pad4(ln[rest])
        cur[todo] = nxt
        todo = todo[nxt + 4 <= end[todo]]
    if not rows:
        e = np.zeros(0, np.int64)
        return start.size, e, e, e
    return start.size, np.concatenate(rows), np.concatenate(at), np.concatenate(size)


def distinct_texts(views, at: np.ndarray, size: np.ndarray, dense: bool = False):
    """Group texts by content. Yields (texts list[str], rows int64 (m,), inverse int64 (m,)):
    ``texts[inverse[i]]`` is the text at ``at[rows[i]]``. One group of yields per length.

    ``dense``: the texts are close together in the file (small records): gather 64-bit words
    (fast numeric gathers; the last word ends at the text's end, and for texts under 8 bytes it
    starts in the option header, which is equal for equal lengths). Otherwise gather each text
    whole in one pass (one cache/TLB miss per far-apart record)."""
    order = np.argsort(size, kind="stable")
    counts = np.bincount(size[order] - size[order[0]]) if size.size else np.zeros(0, np.int64)
    bounds = np.concatenate([[0], np.cumsum(counts)])
    for k in np.flatnonzero(counts):
        rows = order[bounds[k]:bounds[k + 1]]
        length = int(size[order[0]]) + int(k)
        p = at[rows]
        if length == 0:
            yield [""], rows, np.zeros(rows.size, np.int64)
            continue
        if dense:
            u8 = views("<u8")
            words = [u8[p + 8 * j] for j in range(length // 8)] + [u8[p + (length - 8)]]
        else:
            padded = np.zeros((p.size, (length + 7) // 8 * 8), np.uint8)
            padded[:, :length] = views(f"V{length}")[p].view(np.uint8).reshape(p.size, length)
            words = list(padded.view("<u8").T)
        h = np.zeros(rows.size, np.uint64)
        for j, w in enumerate(words):
            h = (h ^ w) * _MULT[j % 4] + np.uint64(j + 1)
        rep, inv = _first_of_each(h)
        same = np.ones(rows.size, bool)
        for w in words:
            same &= w == w[rep][inv]
        if not same.all():                         # a hash collision: group exactly
            mat = np.stack(words, axis=1)
            _, rep, inv = np.unique(mat, axis=0, return_index=True, return_inverse=True)
            inv = inv.ravel()
        data = views.data
        texts = [data[int(q):int(q) + length].tobytes().decode("utf-8", errors="replace")
                 for q in p[rep]]
        yield texts, rows, inv


def _first_of_each(h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index of the first occurrence of each distinct value, inverse codes) for uint64 (n,).
    Peels distinct values one at a time while there are few (no sort), else sorts."""
    inv = np.empty(h.size, np.int64)
    rep = []
    left = np.arange(h.size)
    while left.size and len(rep) < 32:
        first = int(left[0])
        hit = h[left] == h[first]
        inv[left[hit]] = len(rep)
        rep.append(first)
        left = left[~hit]
    if left.size:
        _, r, i = np.unique(h[left], return_index=True, return_inverse=True)
        inv[left] = i.ravel() + len(rep)
        rep.extend(left[r].tolist())
    return np.asarray(rep, np.int64), inv
