"""The header of a QP's previous packet, reused: what :func:`tokenpcap.wire.direct.fill_rows`
reads before assembling a header word by word.

Consecutive packets of one message differ, in their headers, only in the BTH PSN and the IPv4
Identification (IBTA vol. 1 9.7.1; the lowering sets the IP ID to the PSN's low 16 bits) and
so in the IPv4 header checksum (RFC 791, RFC 1071): every other header field follows from row
fields that stay the same from packet to packet (opcode, QPNs, UDP source port, payload length
and pad, AckReq, SE, BECN, RETH, ImmDt, AETH, the NICs, the CE mark). A
:class:`HeaderCache` keeps, per slot chosen by the row's QPNs, the header words
:func:`~tokenpcap.wire.direct.fill_rows` assembled for a row without its per-packet parts
(PSN, IP ID), the row's key (every row byte that may reach the header but the PSN and the IP
ID: :func:`key_plan`) and the IPv4 checksum's sum without the IP ID. A row whose key and opcode
equal its slot's takes those words and sum and has only its per-packet parts written; any
other row is assembled whole and takes the slot. The bytes are the same either way (tested
against :func:`tokenpcap.wire.frame.build_frame`).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tokenpcap.records import PACKET_DTYPE

__all__ = ["HeaderCache", "key_plan", "row_key", "slot_of", "same_key", "PER_PACKET_FIELDS",
           "OUTSIDE_HEADER_FIELDS", "SLOTS"]

#: Row fields that change from packet to packet of one QP's message and reach the header.
PER_PACKET_FIELDS = ("psn", "ip_id")
#: Row fields no header byte depends on: the time, the message, where the payload starts in it,
#: the frame's length (a function of opcode and payload length, both in the key) and the NCCL
#: line fields (the payload's bytes only).
OUTSIDE_HEADER_FIELDS = ("time_ns", "msg", "payload_offset", "frame_bytes", "line_protocol",
                         "line_flag")
_BITS = 6
#: Slots: (QP, opcode) pairs whose packets interleave in one file's batch.
SLOTS = 1 << _BITS


def key_plan() -> tuple[np.ndarray, np.ndarray]:
    """Where a row's key lies: ``(at, mask)``, int64 and uint64 ``(k,)``: the key is the
    little-endian 8-byte words of the row at ``at``, each ANDed with ``mask``, together covering
    every byte of a ``PACKET_DTYPE`` row but those of :data:`PER_PACKET_FIELDS` and
    :data:`OUTSIDE_HEADER_FIELDS`."""
    size = PACKET_DTYPE.itemsize
    keep = np.ones(size, bool)
    for f in PER_PACKET_FIELDS + OUTSIDE_HEADER_FIELDS:
        dt, off = PACKET_DTYPE.fields[f][:2]
        keep[off:off + dt.itemsize] = False
    at, mask, p = [], [], 0
    while p < size:
        if not keep[p]:
            p += 1
            continue
        a = min(p, size - 8)
        bits = sum(0xFF << (8 * (b - a)) for b in range(p, a + 8) if keep[b])
        at.append(a)
        mask.append(bits)
        p = a + 8
    return np.array(at, np.int64), np.array(mask, np.uint64)


class HeaderCache:
    """The slots (module docstring) for headers of at most ``width`` 64-bit words: ``op`` int64
    ``(SLOTS,)`` (-1: empty), ``key`` uint64 ``(SLOTS, k)``, ``words`` uint64 ``(SLOTS, width)``
    (before the byte swap), ``sum`` int64 ``(SLOTS,)``; ``at``/``mask`` the :func:`key_plan`
    and ``row`` uint64 ``(k,)`` the current row's key (scratch)."""

    def __init__(self, width: int):
        self.at, self.mask = key_plan()
        self.op = np.full(SLOTS, -1, np.int64)
        self.key = np.zeros((SLOTS, self.at.size), np.uint64)
        self.words = np.zeros((SLOTS, width), np.uint64)
        self.sum = np.zeros(SLOTS, np.int64)
        self.row = np.zeros(self.at.size, np.uint64)


@njit(cache=True, _nrt=False)
def row_key(rec, r, at, mask, out):
    """The key of row ``r`` of ``rec`` (uint8 ``(n, itemsize)``) into ``out`` (:func:`key_plan`)."""
    base = r * rec.shape[1]
    for i in range(at.size):
        a = base + at[i]
        v = np.uint64(0)
        for b in range(8):          # little-endian; LLVM makes it one load
            v |= np.uint64(rec.flat[a + b]) << np.uint64(8 * b)
        out[i] = v & mask[i]


@njit(cache=True, _nrt=False)
def slot_of(key):
    """The slot of a row's key: its second and third words (the opcode and the QPNs' bytes)
    hashed (Fibonacci hashing, Knuth TAOCP vol. 3 6.4) to ``_BITS`` bits."""
    h = (key[1] + key[2] * np.uint64(31)) * np.uint64(0x9E3779B97F4A7C15)
    return np.int64(h >> np.uint64(64 - _BITS))


@njit(cache=True, _nrt=False)
def same_key(keys, slot, key):
    """``keys[slot] == key``, word by word."""
    for i in range(key.size):
        if keys[slot, i] != key[i]:
            return False
    return True
