"""The checks of a frame batch before it is built (:class:`tokenpcap.wire.builder.FrameBuilder`).

:func:`check_buffer` checks the batch's buffer once: dtypes, shapes, every frame's range inside
``out`` and no two ranges overlapping. :func:`check_rows` checks a chunk of rows (while the rows
are in the cache; a compiled pass over the rows first, the numpy checks only when it finds a row
in doubt): every field within its header width (:mod:`tokenpcap.wire.headers`), a known
BTH opcode or ``OPCODE_PFC``, ``pad`` equal to the BTH PadCnt ``(-payload_bytes) & 3``, NIC
indices inside the :class:`~tokenpcap.wire.context.WireContext` address arrays, each ``caplen``
at most its frame's length and each ``skip`` at most the payload ``caplen`` keeps. Each raises
:class:`~tokenpcap.errors.EncodeError` naming the first bad row, its field, value and range.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tokenpcap.errors import EncodeError
from tokenpcap.records import OPCODE_PFC, PACKET_DTYPE
from tokenpcap.wire import headers as H
from tokenpcap.wire.context import PAYLOAD_PATTERN_BYTES, WireContext
from tokenpcap.wire.ecn import check_ce
from tokenpcap.wire.pfc import PFC_FRAME_BYTES, check_pfc_rows
from tokenpcap.wire.rdma import ETH_MIN_FRAME_BYTES, EXT_BYTES, HAS_PAYLOAD

__all__ = ["check_buffer", "check_rows", "row_ok", "row_tables"]


def _bad(mask: np.ndarray, first: int, field: str, values: np.ndarray, expected: str) -> None:
    if mask.any():
        i = int(np.flatnonzero(mask)[0])
        raise EncodeError(f"packets[{first + i}].{field}: got {values[i]}, expected {expected}")


def check_buffer(p: np.ndarray, out: np.ndarray, offsets: np.ndarray, caplen: np.ndarray) -> None:
    """Types and shapes; every range inside ``out`` and no two ranges overlapping.

    Args:
        p: the batch, ``PACKET_DTYPE`` ``(n,)``.
        out: the buffer, uint8 ``(m,)`` with unit stride.
        offsets: int64 ``(n,)`` byte offsets into ``out``.
        caplen: int64 ``(n,)`` bytes written per frame.

    Raises:
        EncodeError: a wrong dtype or shape, a negative length, a range outside ``out`` or
            overlapping another (names the row, field, value and what was expected).
    """
    if not isinstance(p, np.ndarray) or p.dtype != PACKET_DTYPE:
        raise EncodeError(f"packets: got {getattr(p, 'dtype', type(p))}, expected a PACKET_DTYPE array")
    if out.dtype != np.uint8 or out.ndim != 1 or out.strides != (1,):
        raise EncodeError(f"out: got {out.dtype} {out.shape} strides {out.strides}, expected uint8 (m,) with unit stride")
    n = len(p)
    if offsets.shape != (n,) or caplen.shape != (n,):
        raise EncodeError(f"offsets/caplen: got shapes {offsets.shape}/{caplen.shape}, expected ({n},)")
    if n == 0:
        return
    bad = _bad
    if caplen.min() < 0:
        bad(caplen < 0, 0, "caplen", caplen, "0..frame_bytes of the packet")
    ends = offsets + caplen
    if offsets.min() < 0 or ends.max() > out.size:
        bad((offsets < 0) | (ends > out.size), 0, "offset", offsets, f"a range inside out (size {out.size})")
    if n > 1 and not (offsets[1:] >= ends[:-1]).all():
        order = np.argsort(offsets, kind="stable")
        overlap = np.zeros(n, bool)
        overlap[order[1:]] = (offsets[order[1:]] < np.maximum.accumulate(ends[order])[:-1]) \
            & (caplen[order[1:]] > 0)
        bad(overlap, 0, "offset", offsets, "a range that does not overlap another frame's")


def check_rows(ctx: WireContext, header_bytes_by_opcode: np.ndarray, p: np.ndarray,
               caplen: np.ndarray, first: int, skip: np.ndarray | None) -> None:
    """Every field within its width, known opcodes, PadCnt, NIC indices, caplen <= frame length,
    0 <= skip <= kept payload.

    Args:
        ctx: the builder's wire context (transport, CE marking, NIC count, PFC ports).
        header_bytes_by_opcode: int64 ``(256,)`` bytes before the payload per opcode (-1:
            unknown), :func:`tokenpcap.wire.rdma.header_bytes` per opcode and
            :data:`~tokenpcap.wire.pfc.PFC_FRAME_BYTES` for ``OPCODE_PFC``.
        p: a chunk of the batch, ``PACKET_DTYPE`` ``(k,)``.
        caplen: int64 ``(k,)`` bytes kept per frame.
        first: index of the chunk's first row in the batch (the row an error names).
        skip: None, or int64 ``(k,)`` payload bytes left to a gather writer.

    Raises:
        EncodeError: the first row out of range (names the row, field, value and range).
    """
    if skip is None and _rows_ok(p, caplen, row_tables(ctx, header_bytes_by_opcode)):
        return
    bad = _bad
    op = p["opcode"]
    pay = p["payload_bytes"]
    pfc = op == OPCODE_PFC
    ext = EXT_BYTES[op]
    if ext.min() < 0:
        bad((ext < 0) & ~pfc, first, "opcode", op,
            "a known BTH opcode (tokenpcap.wire.rdma.OPCODES) or OPCODE_PFC")
    any_pfc = bool(pfc.any())
    if any_pfc:
        check_pfc_rows(ctx, p, pfc, first)
    pay64 = pay.astype(np.int64)
    pad = (-pay64) & 3                      # BTH PadCnt, and the pad bytes of the frame
    if pay64.max() > PAYLOAD_PATTERN_BYTES or ((pay64 > 0) & ~HAS_PAYLOAD[op]).any() \
            or (p["pad"] != pad).any():
        bad(pay64 > PAYLOAD_PATTERN_BYTES, first, "payload_bytes", pay, f"0..{PAYLOAD_PATTERN_BYTES}")
        bad((pay64 > 0) & ~HAS_PAYLOAD[op], first, "payload_bytes", pay, "0 for an opcode without payload")
        bad(p["pad"] != pad, first, "pad", p["pad"], "(-payload_bytes) & 3 (BTH.PadCnt)")
    if ((p["psn"] | p["dest_qp"] | p["src_qp"]) >> 24).any() or ((p["ack_req"] | p["solicited"] | p["becn"]) > 1).any():
        for f, bits, hdr in (("psn", 24, "BTH.PSN"), ("dest_qp", 24, "BTH.DestQP"), ("src_qp", 24, "QPN"),
                             ("ack_req", 1, "BTH.AckReq"), ("solicited", 1, "BTH.SE"), ("becn", 1, "BTH.BECN")):
            bad(p[f] >= (1 << bits), first, f, p[f], f"0..{(1 << bits) - 1} ({hdr}, {bits} bits)")
    check_ce(ctx, p["ce"], first)
    nn = ctx.n_nics
    for f in ("nic", "peer_nic"):
        if p[f].view(np.uint32).max() >= nn:          # a negative index reads as >= 2**31
            out_of = (p[f] < 0) | (p[f] >= nn)
            bad(out_of & ~pfc, first, f, p[f], f"0..{nn - 1} (rows of the WireContext address arrays)")
    hb = header_bytes_by_opcode[op]                       # rdma.frame_bytes, from the per-opcode table
    flen = hb + pay64 + pad + H.ICRC.size
    flen = flen + H.VCRC.size if ctx.transport == "infiniband" else np.maximum(flen, ETH_MIN_FRAME_BYTES)
    if any_pfc:
        flen = np.where(pfc, PFC_FRAME_BYTES, flen)
    if (caplen > flen).any():
        bad(caplen > flen, first, "caplen", caplen, "0..frame_bytes of the packet")
    if skip is not None:
        kept = np.clip(caplen - hb, 0, pay64)
        bad((skip < 0) | (skip > kept), first, "skip", skip, "0..the payload bytes caplen keeps")


_EXT = EXT_BYTES.astype(np.int64)
_HAS_PAY = HAS_PAYLOAD.astype(np.uint8)


def row_tables(ctx: WireContext, header_bytes_by_opcode: np.ndarray) -> tuple:
    """What :func:`row_ok` reads besides the row: a tuple of the header bytes per opcode
    (:func:`check_rows`' table), the extension header bytes per opcode, whether an opcode
    carries payload, the largest payload, whether a CE mark is allowed (RoCEv2 with ECN), the
    NICs, InfiniBand or not, the ICRC's and VCRC's bytes and the Ethernet minimum frame."""
    return (header_bytes_by_opcode, _EXT, _HAS_PAY, PAYLOAD_PATTERN_BYTES,
            ctx.transport == "rocev2" and ctx.ecn != 0, ctx.n_nics,
            ctx.transport == "infiniband", H.ICRC.size, H.VCRC.size, ETH_MIN_FRAME_BYTES)


@njit(cache=True, inline="always")
def row_ok(x, c, tables):
    """True when row ``x`` (a ``PACKET_DTYPE`` record) kept to ``c`` bytes passes
    :func:`check_rows` without ``skip``; False when in doubt (a PFC row, or one that fails a
    check), for the numpy checks to name it. Accepts only rows the numpy checks accept.
    ``tables``: :func:`row_tables`."""
    hb_t, ext_t, has_pay, max_pay, ce_ok, n_nics, ib, icrc, vcrc, min_frame = tables
    op = np.int64(x.opcode)
    if ext_t[op] < 0:                   # unknown opcodes and OPCODE_PFC
        return False
    pay = np.int64(x.payload_bytes)
    if pay > max_pay or (pay > 0 and has_pay[op] == 0) or np.int64(x.pad) != ((-pay) & 3):
        return False
    if (np.int64(x.psn) | np.int64(x.dest_qp) | np.int64(x.src_qp)) >> 24:
        return False
    if x.ack_req > 1 or x.solicited > 1 or x.becn > 1:
        return False
    ce = np.int64(x.ce)
    if ce > 1 or (ce == 1 and not ce_ok):
        return False
    nic, peer = np.int64(x.nic), np.int64(x.peer_nic)
    if nic < 0 or nic >= n_nics or peer < 0 or peer >= n_nics:
        return False
    flen = hb_t[op] + pay + ((-pay) & 3) + icrc
    flen = flen + vcrc if ib else max(flen, min_frame)
    return c <= flen


@njit(cache=True)
def _rows_ok(p, caplen, tables):
    """True when every row passes :func:`row_ok` (one pass, compiled)."""
    for r in range(p.size):
        if not row_ok(p[r], caplen[r], tables):
            return False
    return True
