"""A classic pcap's RoCEv2 records summed straight from the file's bytes, by two compiled loops
per batch (the fast path of :func:`tokenpcap.analysis.pcap_fast.read_pcap_fast`).

The reference reads a batch in five steps that each pass over it: the reader's walk and record
rows (:mod:`tokenpcap.pcap.reader`), the decode of 36 columns a row
(:mod:`tokenpcap.analysis.decode_rows`), the flow numbering (:mod:`tokenpcap.analysis.flows`),
the fold (:mod:`tokenpcap.analysis.fold`) and the record sums. Here:

* :func:`scan` walks the records (pcap record header: caplen, orig_len, in the file's byte
  order; 16 + caplen to the next record, the reader's rule) from a byte offset, finds each
  row's headers (:func:`~tokenpcap.analysis.decode_rows.locate`, the compiled decode's own
  function) and looks its flow key up in a hash table of the flows already numbered, adding
  the keys it has not seen as provisional flows (numbered later in the order the reference
  numbers them); it stops at a record the reader would refuse (past the file's end, caplen
  above the maximum) and notes the rows it does not take (anything but RoCEv2);
* :func:`fold` takes what the scan read of each row (its time, lengths, opcode, flags, PSN,
  UDP source port and payload, a few int64 a row: the frames are not read twice) and adds
  every taken row to the per-flow sums, PSN state,
  histograms and totals, with :mod:`tokenpcap.analysis.fold`'s definitions and order rules,
  and the capinfos-like sums of every record (:func:`tokenpcap.analysis.fold.record_totals`'s).

No decoded column is written: a row is read, its fields go into the sums. The batch boundaries,
the numbering of new flows and everything that depends on them are the reference's (the driver
module's docstring).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tokenpcap.analysis.decode import KIND_ROCEV2, LINKTYPE_ETHERNET
from tokenpcap.analysis.decode_rows import bth_marks, dest_qp, locate, transport
from tokenpcap.analysis.flows import follow_psn
from tokenpcap.analysis.fold import note_sequenced, op_scratch, settle_ops
from tokenpcap.pcap.formats import PCAP_RECORD

__all__ = ["scan", "fold", "insert_keys", "SCAN_STATE", "MARKS", "PASS_TOTALS"]

#: what :func:`scan` keeps in its ``st`` array (int64), in this order: rows of the batch,
#: rows not taken, provisional (new) flows, flows already numbered that the batch holds, bit j
#: set when key column j varies over the taken rows, whether a taken row was seen, taken rows
#: whose ICRC could be checked (complete and well formed), the batch's number
SCAN_STATE = ("rows", "untaken", "new", "present", "varies", "keyed", "checkable", "batch")
#: a taken row's header fields in one int64 of :func:`scan`'s ``marks`` (name, first bit, bits)
MARKS = (("opcode", 0, 8), ("why", 8, 8), ("fecn", 16, 1), ("becn", 17, 1), ("ecn", 18, 2),
         ("psn", 20, 24), ("sport", 44, 16))
#: the totals :func:`fold` adds to, in this order
PASS_TOTALS = ("payload", "malformed", "fecn", "becn", "cnp", "taken")
_HEADER = PCAP_RECORD.size
_SEC, _FRAC, _CAP, _ORIG = (PCAP_RECORD.offset(k) for k in ("ts_sec", "ts_frac", "caplen",
                                                             "orig_len"))
_NS = 1_000_000_000
_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9))
_I64_MIN = np.iinfo(np.int64).min
_I64_MAX = np.iinfo(np.int64).max


@njit(cache=True, nogil=True, inline="always")
def _u32(data, p, big):
    """The 32-bit unsigned integer at byte ``p``, big- or little-endian."""
    q = np.uint64(p)                  # (an unsigned index: no wraparound test per byte)
    b0, b1 = np.int64(data[q]), np.int64(data[q + np.uint64(1)])
    b2, b3 = np.int64(data[q + np.uint64(2)]), np.int64(data[q + np.uint64(3)])
    if big:
        return (b0 << 24) | (b1 << 16) | (b2 << 8) | b3
    return (b3 << 24) | (b2 << 16) | (b1 << 8) | b0


@njit(cache=True, nogil=True, inline="always")
def _slot(k0, k1, k2, k3, k4, k5, mask):
    """The first slot of a flow key (six uint64) in a table of ``mask + 1`` slots."""
    h = np.uint64(0)
    for v in (k0, k1, k2, k3, k4, k5):
        h = (h ^ v) * _MIX[0]
        h ^= h >> np.uint64(31)
    h *= _MIX[1]
    return np.int64((h >> np.uint64(20)) & np.uint64(mask))


@njit(cache=True, nogil=True, inline="always")
def _find(table, keys, k0, k1, k2, k3, k4, k5):
    """(row of ``keys`` holding the key or -1, the slot where it is or would go)."""
    mask = table.size - 1
    s = _slot(k0, k1, k2, k3, k4, k5, mask)
    while True:
        r = table[s]
        if r < 0:
            return -1, s
        if keys[r, 5] == k5 and keys[r, 2] == k2 and keys[r, 4] == k4 and \
                keys[r, 1] == k1 and keys[r, 3] == k3 and keys[r, 0] == k0:
            return r, s
        s = (s + 1) & mask


@njit(cache=True, nogil=True)
def insert_keys(table, keys, lo, hi):
    """Put the keys ``keys[lo:hi]`` (uint64 (flows, 6), rows = flow ids) into ``table``
    (int64 slots, a power of two, -1 empty, linear probing)."""
    for r in range(lo, hi):
        _, s = _find(table, keys, keys[r, 0], keys[r, 1], keys[r, 2], keys[r, 3], keys[r, 4],
                     keys[r, 5])
        table[s] = r


@njit(cache=True, nogil=True)
def scan(data, p, want, limit, end, big, nanosecond, max_caplen, ext_bytes, has_payload, table,
         keys, known, first, st, starts, fids, times, lens, marks, pays, untaken, news, seen_at,
         present):
    """Walk at most ``want`` records from the record start ``p`` while they start before
    ``limit`` (module docstring), appending to the batch in ``st`` (:data:`SCAN_STATE`).

    Per row ``st[0]`` on: ``starts`` its record's byte offset, ``fids`` its flow (a row of
    ``keys``: below ``known`` a numbered flow, from ``known`` on a provisional one; -1 not
    taken, its row number then in ``untaken``), ``times`` its time (ns), ``lens`` its
    orig_len and caplen (bits 0-31, 32-63) and, of a taken row, what :func:`fold` needs of its
    headers: ``marks`` (:data:`MARKS`) and ``pays`` its payload (C7). A provisional flow's key
    goes into ``keys`` and its slot into ``table`` and ``news``; a numbered flow seen first in
    the batch (``seen_at`` per flow holds the batch number) into ``present``. ``first``
    (uint64 (6,)) holds the batch's first taken key, to tell which key columns vary.

    Returns:
        (records walked, next record start, 1 when it stopped at a record the reader refuses
        (``p`` is then that record's start) else 0).
    """
    rows = 0
    refused = 0
    n, n_untaken, n_new, n_present, varies, keyed, checkable, batch = st
    f1, f2, f3, f4, f5 = first[1], first[2], first[3], first[4], first[5]   # (in registers)
    k0 = np.uint64(KIND_ROCEV2)
    frac_ns = 1 if nanosecond else 1000
    while rows < want and p < limit:
        cap = _u32(data, p + _CAP, big) if p + _HEADER <= end else 0
        if p + _HEADER > end or cap > max_caplen or p + _HEADER + cap > end:
            refused = 1
            break
        starts[n] = p
        ob = _u32(data, p + _ORIG, big)
        times[n] = _u32(data, p + _SEC, big) * _NS + _u32(data, p + _FRAC, big) * frac_ns
        lens[n] = ob | (cap << 32)
        off = p + _HEADER
        (ok, l3, udp, ip_end, version, ds, ec, s_hi, s_lo, d_hi, d_lo, vid,
         prio) = locate(data, off, cap, LINKTYPE_ETHERNET)
        if not ok:
            fids[n] = -1
            untaken[n_untaken] = n
            n_untaken += 1
        else:
            k5 = np.uint64(dest_qp(data, off, udp))
            if keyed == 0:
                f1, f2, f3, f4, f5 = s_hi, s_lo, d_hi, d_lo, k5
                first[0], first[1], first[2], first[3], first[4], first[5] = \
                    k0, f1, f2, f3, f4, f5
                keyed = 1
            varies |= (np.int64(s_hi != f1) << 1) | (np.int64(s_lo != f2) << 2) | \
                (np.int64(d_hi != f3) << 3) | (np.int64(d_lo != f4) << 4) | \
                (np.int64(k5 != f5) << 5)
            r, s = _find(table, keys, k0, s_hi, s_lo, d_hi, d_lo, k5)
            if r < 0:
                r = known + n_new
                keys[r, 0], keys[r, 1], keys[r, 2], keys[r, 3], keys[r, 4], keys[r, 5] = \
                    k0, s_hi, s_lo, d_hi, d_lo, k5
                table[s] = r
                news[n_new] = s
                n_new += 1
            elif r < known and seen_at[r] != batch:
                seen_at[r] = batch
                present[n_present] = r
                n_present += 1
            fids[n] = r
            stop, op, pad, pay, w = transport(data, off, udp, ip_end, ob, ext_bytes,
                                              has_payload)
            sport, fe, be, psn = bth_marks(data, off, udp)
            marks[n] = op | (w << 8) | (fe << 16) | (be << 17) | (ec << 18) | (psn << 20) | \
                (sport << 44)
            pays[n] = pay
            if w == 0 and stop <= cap:
                checkable += 1
        n += 1
        rows += 1
        p = off + cap
    st[0], st[1], st[2], st[3], st[4], st[5], st[6] = \
        n, n_untaken, n_new, n_present, varies, keyed, checkable
    return rows, p, refused


@njit(cache=True, nogil=True)
def fold(fids, times, lens, marks, row_pays, n, known, rank, sequenced, imm_end, cnp_op,
         write_only, small_max, l1_min, l1_extra, packets, nbytes, paid, cnp, ce, bad, imm_last,
         first_ns, last_ns, sport_of, op_first, op_last, last, unwrapped, top, gaps, missing,
         reordered, seen, opcodes, ecn_counts, reasons, present, pays, byts, small_fid, small_pay,
         totals, rec):
    """Add the ``n`` rows :func:`scan` walked (``fids`` ... ``row_pays``; provisional flow
    ``known + j`` is flow ``known + rank[j]``) to the per-flow columns (``packets`` ...
    ``op_last``, :class:`~tokenpcap.analysis.batch.Acc`'s ``f``), the PSN state (``last`` ...
    ``seen``, :meth:`~tokenpcap.analysis.flows.PsnTracker.arrays`), the opcode, ECN and
    malformed-reason histograms, the batch's per-flow packets, payload and bytes (``present``,
    ``pays``, ``byts``) and ``totals`` (:data:`PASS_TOTALS`); its small WRITE ONLY rows (``write_only``,
    payload at most ``small_max``) into ``small_fid``/``small_pay``; the record sums of every
    row into ``rec`` (int64 (9,), :data:`~tokenpcap.analysis.fold.RECORD_TOTALS` order; layer
    1: ``max(orig_len, l1_min) + l1_extra``).
    Returns the number of small WRITE ONLY rows."""
    seen_b, t_first, o_first, t_last, o_last = op_scratch(packets.size)
    # the record sums and totals in locals (registers), written back at the end
    wire, captured, smallest, largest, l1, t_min, t_max = 0, 0, _I64_MAX, 0, 0, _I64_MAX, _I64_MIN
    payload, malformed, fecn, becn, cnps, taken = 0, 0, 0, 0, 0, 0
    m = 0
    for i in range(n):
        t = times[i]
        ob = lens[i] & 0xFFFFFFFF
        cap = (lens[i] >> 32) & 0xFFFFFFFF
        wire += ob
        captured += cap
        smallest = min(smallest, ob)
        largest = max(largest, ob)
        l1 += max(ob, l1_min) + l1_extra
        t_min = min(t_min, t)
        t_max = max(t_max, t)
        f = fids[i]
        if f < 0:
            continue
        if f >= known:
            f = known + rank[f - known]
        k = marks[i]
        op, w, fe, be = k & 0xFF, (k >> 8) & 0xFF, (k >> 16) & 1, (k >> 17) & 1
        ec, psn, sport = (k >> 18) & 3, (k >> 20) & 0xFFFFFF, k >> 44
        pay = row_pays[i]
        good = w == 0
        pay = pay if good else 0
        pay = max(pay, 0)
        taken += 1
        packets[f] += 1
        present[f] += 1
        nbytes[f] += ob
        byts[f] += ob
        paid[f] += pay
        pays[f] += pay
        payload += pay
        if t < first_ns[f]:
            first_ns[f] = t
        if t > last_ns[f]:
            last_ns[f] = t
        sport_of[f] = sport
        if good:
            opcodes[op] += 1
            if fe:
                fecn += 1
            if be:
                becn += 1
            if op == cnp_op:
                cnp[f] += 1
                cnps += 1
            ecn_counts[ec] += 1
            if ec == 3:
                ce[f] += 1
            if imm_end[op]:
                imm_last[f] += 1
            if sequenced[op]:
                u, tp, gap, gone, late = follow_psn(psn, last[f], unwrapped[f], top[f])
                seen[f] += 1
                gaps[f] += gap
                missing[f] += gone
                reordered[f] += late
                top[f], unwrapped[f], last[f] = tp, u, psn
                seen_b[f] = True
                t_first[f], o_first[f], t_last[f], o_last[f] = note_sequenced(
                    t, op, t_first[f], o_first[f], t_last[f], o_last[f])
            if op == write_only and pay <= small_max:
                small_fid[m] = f
                small_pay[m] = pay
                m += 1
        else:
            bad[f] += 1
            malformed += 1
            for j in range(reasons.size):
                reasons[j] += (w >> j) & 1
    settle_ops(seen_b, o_first, o_last, op_first, op_last)
    rec[:] = wire, captured, smallest, largest, l1, n, largest, t_min, t_max
    totals[:] = payload, malformed, fecn, becn, cnps, taken
    return m
