"""ICRC and VCRC verification of decoded packets, vectorized.

ICRC (IBTA vol.1 7.8.1, RoCEv2 Annex A17.4.1.3; cases C1-C4): zlib's CRC-32 over
``[8 x 0xFF] + masked packet`` (RoCE) or the masked packet (native IB), from the IP header/GRH
(RoCE) or the LRH (IB) up to the ICRC. VCRC (IBTA 7.8.2): CRC-16 (0x100B reflected, init and
xorout 0xFFFF) over LRH..ICRC. Which bits are masked is derived from the header declarations
(:meth:`tokenpcap.wire.stack.Stack.icrc_mask`): IPv4 DSCP, ECN, TTL, header checksum; IPv6/GRH traffic class, flow label, hop
limit; UDP checksum; BTH FECN, BECN, Resv6a; the LRH VL (local IB) or the whole LRH (IB with GRH).

How, without a Python call per packet where it matters:

* the CRC register is linear in the data (Koopman 2002; :mod:`tokenpcap.wire.linear`): the register
  after ``L`` more bytes ``d`` is ``A^L r ^ XOR_k C[k][d[L-1-k]]``, with ``C[k]`` a 256-entry table
  per distance ``k`` from the end. :func:`registers` applies that column by column to all packets
  at once (packets sorted by length, so the still-active rows are a prefix);
* the masked head (IP..BTH, 40-60 bytes) of every packet goes through :func:`registers` as one
  (n, K) array;
* the rest (extended headers, payload, pad) goes through :func:`registers` too when it is short
  (ACKs, CNPs, small SENDs: at most ``SHORT_REST`` bytes); longer rests (:func:`_long_rests`)
  are grouped by content: one ``zlib.crc32`` per distinct rest, a byte-for-byte comparison for
  the others and a table shift by linearity; rests that differ get their own ``zlib.crc32``.
  zlib's C CRC runs at ~2.5 GB/s; the numpy table CRC over equal-length columns measured 57.5 µs
  per 4 KiB frame against 3.2 µs this way, so no numpy formulation replaces it;
* VCRC has no C implementation in the standard library: it always goes through
  :func:`registers`.
"""
from __future__ import annotations

import zlib

import numpy as np

from tokenpcap.analysis.decode import KIND_IB, KIND_ROCEV1, KIND_ROCEV2
from tokenpcap.wire import headers as H
from tokenpcap.wire.linear import CRC16_VCRC, CRC32, ReflectedCRC
from tokenpcap.wire.stack import STACKS

__all__ = ["HEADS", "registers", "check_crcs", "SHORT_REST"]

#: Longest rest (bytes after the masked head) verified with table columns instead of zlib.
SHORT_REST = 256
#: Longest rest whose register is shifted by tables (``CRC32.contributions`` grows to this many
#: rows of 256 uint32: 16 KiB -> 16 MiB); longer rests go through zlib from their own register.
MAX_SHIFT_BYTES = 16384
_KEY_MIX = [np.uint64(c) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)]


#: masked head per layout: (OR mask from the start of the covered bytes through the BTH, prefix
#: register), from the wire contexts' one table (:mod:`tokenpcap.wire.stack`); an 802.1Q tag
#: changes nothing the ICRC covers.
HEADS = {
    key: (STACKS[name].icrc_mask(),
          CRC32.register(STACKS[name].icrc_prefix, 0xFFFFFFFF) if STACKS[name].icrc_prefix
          else 0xFFFFFFFF)
    for key, name in (("ipv4", "rocev2-ipv4"), ("ipv6", "rocev2-ipv6"), ("rocev1", "rocev1"),
                      ("ib_local", "ib-local"), ("ib_global", "ib-global"))
}


def registers(crc: ReflectedCRC, buf: np.ndarray, end: np.ndarray, length: np.ndarray,
              reg: np.ndarray | int) -> np.ndarray:
    """Raw CRC registers after processing ``buf[end[i]-length[i]:end[i]]`` from ``reg[i]``.

    Linear-algebra form (module docstring): ``A^L reg ^ XOR_k C[k][byte at end-1-k]``; one numpy
    gather and XOR per byte column, over all rows at once. Rows shorter than the register width
    (1..3 bytes for CRC-32) are stepped byte by byte (``A^L`` by tables needs ``L >= width/8``).

    Args:
        crc: the CRC (``CRC32`` or ``CRC16_VCRC``).
        buf: uint8 (m,) bytes.
        end: int64 (n,) one past the last byte of each row's data.
        length: int64 (n,) bytes per row (0 allowed).
        reg: uint32 (n,) or a scalar: the register before the data.

    Returns:
        uint32 (n,).
    """
    end = np.asarray(end, np.int64)
    length = np.asarray(length, np.int64)
    n = end.size
    reg = np.broadcast_to(np.asarray(reg, np.uint32), (n,)).copy()
    out = np.empty(n, np.uint32)
    short = (length > 0) & (length < crc.nbytes)
    if short.any():
        s = np.flatnonzero(short)
        out[s] = _step_bytes(crc, reg[s], buf, end[s] - length[s], length[s])
    lin = np.flatnonzero(~short)
    if lin.size:
        out[lin] = _linear(crc, buf, end[lin], length[lin], reg[lin])
    return out


def _linear(crc: ReflectedCRC, buf, end, length, reg) -> np.ndarray:
    order = np.argsort(-length, kind="stable")
    ln, last = length[order], end[order] - 1
    lmax = int(ln[0])
    acc = np.zeros(ln.size, np.uint32)
    if lmax:
        table = crc.contributions(lmax)
        count = np.searchsorted(-ln, -np.arange(lmax), side="left")   # rows with length > k
        for k in range(lmax):
            m = int(count[k])
            acc[:m] ^= table[k][buf[last[:m] - k]]
    out = np.empty(ln.size, np.uint32)
    out[order] = crc.shift(reg[order], ln) ^ acc
    return out


def _step_bytes(crc: ReflectedCRC, reg: np.ndarray, buf: np.ndarray, start: np.ndarray,
                length: np.ndarray) -> np.ndarray:
    """Byte-at-a-time register update, ``r = (r >> 8) ^ T[(r ^ b) & 0xFF]`` (short rows only)."""
    t = crc.table
    r = reg.astype(np.uint32)
    for k in range(int(length.max(initial=0))):
        live = length > k
        b = buf[np.where(live, start + k, 0)].astype(np.uint32)
        r = np.where(live, (r >> np.uint32(8)) ^ t[(r ^ b) & np.uint32(0xFF)], r)
    return r


def _long_rests(data: np.ndarray, mv: memoryview, a: np.ndarray, b: np.ndarray,
                reg: np.ndarray) -> np.ndarray:
    """Registers after the long rests ``data[a[i]:b[i]]`` (extended headers, payload, pad),
    continuing from ``reg``.

    Distinct rests are few in a generated trace (a payload's bytes depend on its position):
    rests are grouped by (length, three 8-byte words); each group's first rest gets
    ``R0 = zlib.crc32`` from a zero register, every other member is compared with it byte for
    byte (``memcmp``) and, when equal, its register is ``A^L reg ^ R0`` by linearity, one
    vectorized table shift (:meth:`ReflectedCRC.shift`). Members that differ (a key collision,
    or foreign payloads where every rest is its own group) go through ``zlib.crc32`` from their
    own register. Exact either way.
    """
    length = b - a
    out = np.empty(a.size, np.uint32)
    crc32, ones = zlib.crc32, 0xFFFFFFFF
    if int(length.max()) > MAX_SHIFT_BYTES:        # giant frames: no shift tables that large
        vals = (reg ^ np.uint32(ones)).tolist()
        return np.array([crc32(mv[x:y], v) for x, y, v in zip(a.tolist(), b.tolist(), vals)],
                        np.uint32) ^ np.uint32(ones)
    words = np.ndarray((data.size - 7,), "<u8", buffer=data, strides=(1,))
    key = length.astype(np.uint64)
    for w, m in zip((words[a], words[(a + b) // 2 - 4], words[b - 8]), _KEY_MIX):
        key = (key ^ w) * m
        key ^= key >> np.uint64(31)
    _, ref, group = np.unique(key, return_index=True, return_inverse=True)
    group = group.ravel()
    refs = [mv[x:y].tobytes() for x, y in zip(a[ref].tolist(), b[ref].tolist())]
    r0 = np.array([crc32(r, ones) ^ ones for r in refs], np.uint32)   # raw register from 0
    # bytes == bytes is one memcmp (a memoryview compares item by item, 10x slower)
    same = np.array([mv[x:y].tobytes() == refs[g] for x, y, g in
                     zip(a.tolist(), b.tolist(), group.tolist())], bool)
    s = np.flatnonzero(same)
    out[s] = CRC32.shift(reg[s], length[s]) ^ r0[group[s]]
    d = np.flatnonzero(~same)
    if d.size:
        vals = (reg[d] ^ np.uint32(ones)).tolist()
        out[d] = np.array([crc32(mv[x:y], v) for x, y, v in
                           zip(a[d].tolist(), b[d].tolist(), vals)], np.uint32) ^ np.uint32(ones)
    return out


def _layouts(dec: np.ndarray) -> dict[str, np.ndarray]:
    kind, ipver = dec["kind"], dec["ipver"]
    ok = dec["complete"]
    return {
        "ipv4": np.flatnonzero(ok & (kind == KIND_ROCEV2) & (ipver == 4)),
        "ipv6": np.flatnonzero(ok & (kind == KIND_ROCEV2) & (ipver == 6)),
        "rocev1": np.flatnonzero(ok & (kind == KIND_ROCEV1)),
        "ib_local": np.flatnonzero(ok & (kind == KIND_IB) & (ipver == 0)),
        "ib_global": np.flatnonzero(ok & (kind == KIND_IB) & (ipver == 6)),
    }


def check_crcs(data: np.ndarray, rec_offset: np.ndarray, dec: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """Verify the ICRC (and VCRC for native IB) of every decoded packet.

    Args:
        data: uint8 (file size,) capture bytes.
        rec_offset: int64 (n,) offset of each frame in ``data`` (``RECORD_DTYPE["offset"]``).
        dec: :data:`~tokenpcap.analysis.decode.DECODED_DTYPE` (n,).

    Returns:
        (icrc, vcrc) int8 (n,) each: 1 correct, 0 wrong, -1 not checkable (not RDMA, IPv4 with
        options, or the captured bytes stop before the CRC, e.g. ``--snaplen``); ``vcrc`` is -1
        except for native IB.
    """
    n = dec.size
    icrc = np.full(n, -1, np.int8)
    vcrc = np.full(n, -1, np.int8)
    off = np.asarray(rec_offset, np.int64)
    mv = memoryview(data)
    for name, rows in _layouts(dec).items():
        mask, prefix = HEADS[name]
        head = mask.size
        if name == "ipv4":      # ICRC is defined for option-less IPv4 only (A17.4.1.3)
            rows = rows[dec["bth"][rows] == dec["l3"][rows] + H.IPV4.size + H.UDP.size]
        if rows.size == 0:
            continue
        start = off[rows] + dec["l3"][rows].astype(np.int64)
        end = off[rows] + dec["end"][rows].astype(np.int64)          # one past the ICRC
        body = end - H.ICRC.size
        rows = rows[body - start >= head]
        start, end, body = (a[body - start >= head] for a in (start, end, body))
        heads = data[start[:, None] + np.arange(head)] | mask[None, :]
        reg = registers(CRC32, heads.ravel(), (np.arange(rows.size) + 1) * head,
                        np.full(rows.size, head), prefix)
        rest = body - start - head
        small = rest <= SHORT_REST
        s = np.flatnonzero(small)
        reg[s] = registers(CRC32, data, body[s], rest[s], reg[s])
        big = np.flatnonzero(~small)
        if big.size:
            reg[big] = _long_rests(data, mv, start[big] + head, body[big], reg[big])
        wire = data[body[:, None] + np.arange(4)].astype(np.uint32) << np.array(
            [0, 8, 16, 24], np.uint32)
        wire = np.bitwise_or.reduce(wire, axis=1)
        icrc[rows] = (wire == (reg ^ np.uint32(0xFFFFFFFF))).astype(np.int8)
        if name.startswith("ib"):
            lrh = off[rows]
            v = registers(CRC16_VCRC, data, end, end - lrh, 0xFFFF) ^ np.uint32(0xFFFF)
            vwire = data[end].astype(np.uint32) | (data[end + 1].astype(np.uint32) << np.uint32(8))
            vcrc[rows] = (vwire == v).astype(np.int8)
    return icrc, vcrc
