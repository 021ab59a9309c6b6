"""A batch's RDMA rows folded into the running aggregates by one compiled pass (the fast path of
:func:`tokenpcap.analysis.batch.add_batch`).

On a capture of millions of packets the numpy aggregation of a batch makes some thirty passes
over its rows (a weighted ``bincount`` per flow column, ``ufunc.at`` for the first and last
packet of every flow, masks for CNPs, ECN, FECN/BECN, opcodes ...), about 75 ns a row beside
~35 of the compiled decode (benchmarks/README.md). :func:`fold_rows` does the same sums in one
pass over the rows: the per-flow columns of :class:`~tokenpcap.analysis.batch.Acc`, the opcode
and ECN histograms, the packet totals, the (flow, phase label) sums and which rows the PSN
check follows; :func:`record_totals` the capinfos-like sums of a record batch. The definitions are
:mod:`tokenpcap.analysis.batch`'s, which stays the reference on small captures; the two give
the same aggregates row for row (tested with Hypothesis on random decoded batches).

Order rules kept from the numpy path: a flow's UDP source port is the one of its last row in
the batch; the opcode of its first (last) sequenced row is taken at the smallest (largest)
time, the earlier (later) row breaking ties, and the first one only once per flow.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tokenpcap.analysis.columns import Decoded

__all__ = ["fold_rows", "FOLD_TOTALS", "record_totals", "RECORD_TOTALS", "op_scratch",
           "note_sequenced", "settle_ops"]

#: the totals :func:`fold_rows` returns, in this order (int64 each)
FOLD_TOTALS = ("payload", "malformed", "fecn", "becn", "cnp")
_I64_MIN = np.iinfo(np.int64).min
_I64_MAX = np.iinfo(np.int64).max


@njit(cache=True, nogil=True)
def _fold(fid, tracked, opcode, malformed, payload, orig_len, ecn, ipver, fecn, becn, time_ns,
          sport, icrc, vcrc, code, width, sequenced, imm_end, cnp_op, packets, nbytes, paid,
          icrc_bad, icrc_ok, vcrc_bad, cnp, ce, bad, imm_last, first_ns, last_ns, sport_of,
          op_first, op_last, opcodes, ecn_counts, present, seq, cnt, pays, byts, totals):
    """:func:`fold_rows`' pass: every argument an array of the row or flow it names."""
    nf = packets.size
    seen, t_first, o_first, t_last, o_last = op_scratch(nf)
    crc = icrc.size > 0
    for i in range(fid.size):
        f = fid[i]
        op = np.int64(opcode[i])
        good = not malformed[i]
        pay = max(np.int64(payload[i]), 0)
        t = time_ns[i]
        ob = np.int64(orig_len[i])
        packets[f] += 1
        present[f] += 1
        nbytes[f] += ob
        paid[f] += pay
        totals[0] += pay
        if crc:
            icrc_bad[f] += icrc[i] == 0
            icrc_ok[f] += icrc[i] == 1
            vcrc_bad[f] += vcrc[i] == 0
        if t < first_ns[f]:
            first_ns[f] = t
        if t > last_ns[f]:
            last_ns[f] = t
        sport_of[f] = sport[i]
        s = False
        if good:
            opcodes[op] += 1
            if fecn[i]:
                totals[2] += 1
            if becn[i]:
                totals[3] += 1
            if op == cnp_op:
                cnp[f] += 1
                totals[4] += 1
            if ipver[i] > 0:
                e = ecn[i]
                ecn_counts[e] += 1
                if e == 3:
                    ce[f] += 1
            if imm_end[op]:
                imm_last[f] += 1
            if sequenced[op] and f < tracked:
                s = True
                seen[f] = True
                t_first[f], o_first[f], t_last[f], o_last[f] = note_sequenced(
                    t, op, t_first[f], o_first[f], t_last[f], o_last[f])
        else:
            bad[f] += 1
            totals[1] += 1
        seq[i] = s
        p = f * width + code[i] + 1
        cnt[p] += 1
        pays[p] += pay
        byts[p] += ob
    settle_ops(seen, o_first, o_last, op_first, op_last)


@njit(cache=True, nogil=True, inline="always")
def op_scratch(nf):
    """A batch's per-flow first and last sequenced row, none yet, for ``nf`` flows: (seen
    bool, first time, its opcode, last time, its opcode) (flows,) each."""
    return (np.zeros(nf, np.bool_), np.full(nf, _I64_MAX, np.int64), np.zeros(nf, np.int64),
            np.full(nf, _I64_MIN, np.int64), np.zeros(nf, np.int64))


@njit(cache=True, nogil=True, inline="always")
def note_sequenced(t, op, t_first, o_first, t_last, o_last):
    """A sequenced row at time ``t`` with opcode ``op`` into its flow's first and last (time,
    opcode) of the batch so far (the earlier row first, the later row last on ties): the new
    ``(t_first, o_first, t_last, o_last)`` (scalars: the caller updates its arrays)."""
    if t < t_first:
        t_first, o_first = t, op
    if t >= t_last:
        t_last, o_last = t, op
    return t_first, o_first, t_last, o_last


@njit(cache=True, nogil=True, inline="always")
def settle_ops(seen, o_first, o_last, op_first, op_last):
    """The batch's first and last sequenced opcode of each flow ``seen`` (bool (flows,)) into
    the flow's: the first only once, the last from the latest batch."""
    for f in range(seen.size):
        if seen[f]:
            if op_first[f] < 0:
                op_first[f] = o_first[f]
            op_last[f] = o_last[f]


def fold_rows(f: dict[str, np.ndarray], d: Decoded, fid: np.ndarray, tracked: int,
              icrc: np.ndarray | None, vcrc: np.ndarray | None, codes: np.ndarray, width: int,
              opcodes: np.ndarray, ecn_counts: np.ndarray, sequenced: np.ndarray,
              imm_end: np.ndarray, cnp_op: int):
    """Fold the RDMA rows ``d`` (n,) of one batch into the per-flow columns ``f``.

    Args:
        f: :class:`~tokenpcap.analysis.batch.Acc`'s per-flow int64 columns, grown to every flow
            id in ``fid`` (updated in place).
        d: the decoded RDMA rows. fid: int64 (n,) their flow ids; ids from ``tracked`` on are
            the "other" flow (no PSN check).
        icrc, vcrc: int8 (n,) CRC verdicts (1 good, 0 bad, -1 unchecked), or None (not checked).
        codes: int64 (n,) phase label code of each row, -1 none; width: label codes + 1.
        opcodes: int64 (256,), ecn_counts: int64 (4,): histograms of the well-formed rows
            (updated in place).
        sequenced, imm_end: bool (256,) opcode tables; cnp_op: the CNP opcode.

    Returns:
        (present int64 (flows,) rows per flow, seq bool (n,) rows the PSN check follows,
        cnt/pays/byts int64 (flows * width,) packets, payload and bytes per (flow, label + 1),
        totals int64 (5,) in :data:`FOLD_TOTALS` order). Raises nothing.
    """
    nf = f["packets"].size
    n = fid.size
    present = np.zeros(nf, np.int64)
    seq = np.empty(n, np.bool_)
    span = nf * width
    cnt, pays, byts = np.zeros(span, np.int64), np.zeros(span, np.int64), np.zeros(span, np.int64)
    totals = np.zeros(len(FOLD_TOTALS), np.int64)
    none = np.zeros(0, np.int8)
    _fold(np.ascontiguousarray(fid, np.int64), tracked, d["opcode"], d["malformed"],
          d["payload"], d["orig_len"], d["ecn"], d["ipver"], d["fecn"], d["becn"], d["time_ns"],
          d["sport"], none if icrc is None else icrc, none if vcrc is None else vcrc,
          np.ascontiguousarray(codes, np.int64), width, sequenced, imm_end, cnp_op,
          f["packets"], f["bytes"], f["payload"], f["icrc_bad"], f["icrc_ok"], f["vcrc_bad"],
          f["cnp"], f["ce"], f["malformed"], f["imm_last"], f["first_ns"], f["last_ns"],
          f["sport"], f["op_first"], f["op_last"], opcodes, ecn_counts, present, seq, cnt, pays,
          byts, totals)
    return present, seq, cnt, pays, byts, totals


#: what :func:`record_totals` returns, in this order
RECORD_TOTALS = ("bytes", "captured_bytes", "frame_bytes_min", "frame_bytes_max", "l1_bytes",
                 "ethernet_frames", "eth_frame_bytes_max", "first_ns", "last_ns")


@njit(cache=True, nogil=True)
def _record_totals(time_ns, orig_len, caplen, linktype, ethernet, min_frame, l1_extra, no_time,
                   out):
    out[2], out[3], out[6] = _I64_MAX, 0, 0
    out[7], out[8] = _I64_MAX, _I64_MIN
    for i in range(time_ns.size):
        o = np.int64(orig_len[i])
        out[0] += o
        out[1] += np.int64(caplen[i])
        out[2] = min(out[2], o)
        out[3] = max(out[3], o)
        if linktype[i] == ethernet:
            out[4] += max(o, min_frame) + l1_extra
            out[5] += 1
            out[6] = max(out[6], o)
        else:
            out[4] += o
        t = time_ns[i]
        if t != no_time:
            out[7] = min(out[7], t)
            out[8] = max(out[8], t)


def record_totals(rec: np.ndarray, ethernet: int, min_frame: int, l1_extra: int,
                  no_time: int) -> np.ndarray:
    """The capinfos-like sums of a record batch in one compiled pass: int64 (9,) in
    :data:`RECORD_TOTALS` order over ``rec`` (:data:`~tokenpcap.pcap.capture.RECORD_DTYPE`
    (n,), n >= 1): sums of ``orig_len`` and ``caplen``, smallest and largest ``orig_len``,
    layer-1 bytes (an Ethernet frame, linktype ``ethernet``, counts ``max(orig_len,
    min_frame) + l1_extra``, any other its ``orig_len``), Ethernet frames and their largest
    ``orig_len`` (0 if none), smallest and largest time other than ``no_time`` (int64 max and
    min if none). The definitions are :func:`tokenpcap.analysis.inspect.inspect_captures`'s.
    Raises nothing."""
    out = np.zeros(len(RECORD_TOTALS), np.int64)
    _record_totals(rec["time_ns"], rec["orig_len"], rec["caplen"], rec["linktype"], ethernet,
                   min_frame, l1_extra, no_time, out)
    return out
