"""The packet rows of a chunk from its messages, by one compiled loop: a transmitted frame names
its message and its packet's index in it, and everything else a ``PACKET_DTYPE`` row says follows
from the message's per-QP values and that index (IBTA vol.1 9.5 segmentation, 9.7.1 PSNs,
9.3.3/9.3.4/9.3.5 RETH, ImmDt, AETH). :mod:`tokenpcap.lower` computes the per-message values
(QPNs, initial PSN, R_Key, buffer address, UDP port, NCCL line protocol) once per distinct
message of a chunk; :func:`expand_rows` spreads them over the chunk's frames, optionally writing
each row at a given position (the rows of one output file together, in their order: what
:func:`group_positions` gives), so that a file's share of a chunk is a slice of the result, not
a gather.

The rules per row (``i`` the packet's index in its message of ``n`` packets and ``S`` bytes,
``pmtu`` the path MTU; an ACK row's index is that of the packet it acknowledges):

* opcode: ``Acknowledge`` (0x11) for an ACK, else ``OPCODE_SEQUENCE[verb, position]`` with the
  position ONLY (``n == 1``), FIRST (``i == 0``), LAST (``i == n - 1``) or MIDDLE
  (:func:`tokenpcap.wire.rdma.packet_position`);
* PSN ``(psn0 + i) mod 2**24``, IPv4 Identification its low 16 bits;
* payload ``S - (n - 1) * pmtu`` on the last packet, ``pmtu`` before it, 0 on an ACK; PadCnt
  ``(-payload) & 3``; payload offset ``i * pmtu``;
* AckReq on the last packet and, with ``ack_every = N > 0``, on every packet with
  ``(i + 1) mod N == 0``; never on an ACK;
* RETH (VA, R_Key, DMA length ``S``) on the opcodes that carry it, ImmDt (the message's ``imm``)
  likewise; AETH on ACKs: syndrome 0x1F in the top byte and MSN ``(qp_seq + [i == n - 1]) mod
  2**24``;
* an ACK is sent by the QP that received the request: its source and destination QPNs are the
  data's swapped;
* NCCL lines on the data rows of a message whose line code is not 0: ``line_protocol`` the code,
  ``line_flag = (qp_seq + 1) mod 2**32``;
* ``ce`` from bit ``ce_bit`` of ``flags`` (when given).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tokenpcap.records import PACKET_DTYPE
from tokenpcap.wire import rdma

__all__ = ["expand_rows", "group_positions", "MessageValues"]

_PSN_MASK = (1 << 24) - 1
_HAS_RETH = rdma.HAS_RETH.astype(np.uint8)
_HAS_IMMDT = rdma.HAS_IMMDT.astype(np.uint8)
_SEQ = np.ascontiguousarray(rdma.OPCODE_SEQUENCE, np.uint8)
_POS = np.array([rdma.FIRST, rdma.MIDDLE, rdma.LAST, rdma.ONLY], np.int64)
_NO_PAY = np.zeros(0, np.int64)         # pay_out not asked for


class MessageValues:
    """The per-message values :func:`expand_rows` spreads over rows, each ``(u,)`` for the ``u``
    distinct messages of a chunk: ``qpn_src``, ``qpn_dst`` (the QPNs of the data's sender and
    receiver), ``sport`` (UDP source port), ``psn0`` (the PSN of the message's packet 0,
    before the 24-bit wrap), ``n_packets``, ``size_bytes``, ``verb``, ``va`` (RETH virtual
    address), ``rkey``, ``imm``, ``qp_seq`` (messages before it on its QP), ``line`` (NCCL line
    protocol code, 0: none); all int64 but ``va`` (uint64)."""

    __slots__ = ("qpn_src", "qpn_dst", "sport", "psn0", "n_packets", "size_bytes", "verb", "va",
                 "rkey", "imm", "qp_seq", "line")

    def __init__(self, **cols: np.ndarray):
        for k in self.__slots__:
            setattr(self, k, np.ascontiguousarray(cols[k], np.uint64 if k == "va" else np.int64))


def expand_rows(tx: np.ndarray, inv: np.ndarray, mv: MessageValues, pmtu: int, ack_every: int,
                ack_kind: int, flags: np.ndarray | None = None, ce_bit: int = 0,
                time_add_ns: int = 0, pos: np.ndarray | None = None,
                out: np.ndarray | None = None, pay_out: np.ndarray | None = None) -> np.ndarray:
    """``PACKET_DTYPE (n,)`` rows of the transmitted frames ``tx`` (module docstring).

    Args:
        tx: structured ``(n,)`` with ``time_ns``, ``nic``, ``peer_nic``, ``msg``, ``index``,
            ``kind``, ``frame_bytes`` (``TX_DTYPE`` of the engine), kinds data, CTS or ACK.
        inv: int ``(n,)``: row ``i`` is a frame of message ``inv[i]`` of ``mv``.
        mv: :class:`MessageValues` of the chunk's distinct messages.
        pmtu: path MTU in bytes; ack_every: the AckReq period (0: last packet only);
        ack_kind: the ``kind`` value of ACK rows.
        flags: None or uint8 ``(n,)``; ``ce`` is ``(flags >> ce_bit) & 1``.
        time_add_ns: added to every ``time_ns``.
        pos: None (rows in the order of ``tx``) or int64 ``(n,)``, the output row of each
            input row (a permutation of ``0..n-1``, :func:`group_positions`).
        out: None (a new array), or ``PACKET_DTYPE (n,)`` to write the rows into (every field
            of every row is written), e.g. a buffer shared with the writer processes.
        pay_out: None, or int64 ``(n,)``: each row's ``payload_bytes`` in the order of ``tx``
            as well (what the run's totals read, without reading the rows back).

    Returns:
        ``PACKET_DTYPE (n,)``: ``out`` when given.
    """
    n = tx.size
    if out is None:
        out = np.empty(n, PACKET_DTYPE)
    elif out.dtype != PACKET_DTYPE or out.shape != (n,):
        raise ValueError(f"out: got {out.dtype} {out.shape}, expected PACKET_DTYPE ({n},)")
    if n == 0:
        return out
    if pos is None:
        pos = np.arange(n, dtype=np.int64)
    fl = np.zeros(0, np.uint8) if flags is None else np.ascontiguousarray(flags, np.uint8)
    if pay_out is None:
        pay_out = _NO_PAY
    elif pay_out.dtype != np.int64 or pay_out.shape != (n,):
        raise ValueError(f"pay_out: got {pay_out.dtype} {pay_out.shape}, expected int64 ({n},)")
    _expand(out, pay_out, tx["time_ns"], tx["nic"], tx["peer_nic"], tx["msg"], tx["index"], tx["kind"],
            tx["frame_bytes"], np.ascontiguousarray(inv, np.int64), np.ascontiguousarray(pos, np.int64),
            fl, np.int64(ce_bit), mv.qpn_src, mv.qpn_dst, mv.sport, mv.psn0, mv.n_packets,
            mv.size_bytes, mv.verb, mv.va, mv.rkey, mv.imm, mv.qp_seq, mv.line, np.int64(pmtu),
            np.int64(ack_every), np.int64(ack_kind), np.int64(time_add_ns), _SEQ, _POS,
            _HAS_RETH, _HAS_IMMDT, np.int64(rdma.ACKNOWLEDGE))
    return out


@njit(cache=True)
def _expand(out, pay_out, t_ns, nic, peer, msg, index, kind, fbytes, inv, pos, flags, ce_bit, qs_m, qd_m,
            sport_m, psn0_m, n_m, size_m, verb_m, va_m, rkey_m, imm_m, qpseq_m, line_m, pmtu,
            ack_every, ack_kind, time_add, seq, posv, has_reth, has_imm, ack_op):
    for r in range(t_ns.size):
        k = inv[r]
        o = out[pos[r]]
        i = np.int64(index[r])
        n = n_m[k]
        size = size_m[k]
        ack = np.int64(kind[r]) == ack_kind
        last = i == n - 1
        o.time_ns = t_ns[r] + time_add
        o.nic = nic[r]
        o.peer_nic = peer[r]
        o.msg = msg[r]
        o.frame_bytes = fbytes[r]
        qs, qd = qs_m[k], qd_m[k]
        psn = (psn0_m[k] + i) & _PSN_MASK
        o.psn = psn
        o.ip_id = psn & 0xFFFF
        o.udp_sport = sport_m[k]
        o.solicited = 0
        o.becn = 0
        o.ce = ((np.int64(flags[r]) >> ce_bit) & 1) if flags.size else 0
        if ack:
            op = ack_op
            o.src_qp, o.dest_qp = qd, qs
            o.payload_bytes = 0
            if pay_out.size:
                pay_out[r] = 0
            o.pad = 0
            o.payload_offset = 0
            o.ack_req = 0
            o.aeth = (0x1F << 24) | ((qpseq_m[k] + (1 if last else 0)) & _PSN_MASK)
            o.line_protocol = 0
            o.line_flag = 0
        else:
            p = 3 if n == 1 else (0 if i == 0 else (2 if last else 1))
            op = np.int64(seq[verb_m[k], posv[p]])
            o.src_qp, o.dest_qp = qs, qd
            pay = size - (n - 1) * pmtu if last else pmtu
            o.payload_bytes = pay
            if pay_out.size:
                pay_out[r] = pay
            o.pad = (-pay) & 3
            o.payload_offset = i * pmtu
            req = last or (ack_every > 0 and (i + 1) % ack_every == 0)
            o.ack_req = 1 if req else 0
            o.aeth = 0
            code = line_m[k]
            o.line_protocol = code
            o.line_flag = ((qpseq_m[k] + 1) & 0xFFFFFFFF) if code != 0 else 0
        o.opcode = op
        if has_reth[op]:
            o.reth_va = va_m[k]
            o.reth_rkey = rkey_m[k]
            o.reth_len = size
        else:
            o.reth_va = 0
            o.reth_rkey = 0
            o.reth_len = 0
        o.imm = imm_m[k] if has_imm[op] else 0


def group_positions(group: np.ndarray, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """A stable counting sort of rows by group: ``(pos, starts)``, ``pos`` int64 ``(n,)`` the
    place of row ``i`` when rows are ordered by ``group`` (ties in row order), ``starts`` int64
    ``(n_groups + 2,)``: group ``g``'s rows are ``starts[g]:starts[g + 1]``; rows of group -1
    (none) come last, ``starts[n_groups]:``.

    Args:
        group: int ``(n,)`` in ``-1..n_groups - 1``.
    """
    g = np.ascontiguousarray(group, np.int64)
    pos = np.empty(g.size, np.int64)
    starts = np.zeros(n_groups + 2, np.int64)
    _group(g, n_groups, pos, starts)
    return pos, starts


@njit(cache=True)
def _group(g, n_groups, pos, starts):
    for r in range(g.size):
        k = g[r] if g[r] >= 0 else n_groups
        starts[k + 1] += 1
    for k in range(n_groups + 1):
        starts[k + 1] += starts[k]
    at = starts[:-1].copy()
    for r in range(g.size):
        k = g[r] if g[r] >= 0 else n_groups
        pos[r] = at[k]
        at[k] += 1
