"""Running aggregates of one inspection, batch by batch (for :mod:`tokenpcap.analysis.inspect`).

:class:`Acc` holds everything :func:`tokenpcap.analysis.inspect.inspect_captures` sums while it streams a
capture: totals per flow (arrays that grow as flows appear), opcodes, ECN, PFC, the PSN tracker,
per (flow, phase label) packet and payload sums, and per file the flows and labels it holds.
:func:`add_batch` folds one decoded record batch into it (numpy over the batch; a Python loop
per flow or per label only).

Malformed RDMA rows (:data:`tokenpcap.analysis.decode.MALFORMED_REASONS`) count as packets of
their flow and by reason, and nowhere else: not in opcodes, ECN, FECN/BECN, CNPs, payload or
ICRC counts; a flow that holds one is left out of the PSN check (its PSNs cannot be trusted, and
leaving only the bad packet out would invent a gap).

Two per-flow facts serve ``inspect --against``:

* the opcode of the first and last sequenced packet seen: a flow whose first packet is a
  MIDDLE/LAST or whose last is a FIRST/MIDDLE has a message cut at the capture's edge (a time
  slice, e.g. ``editcap -A/-B`` or ``generate --time-window``);
* WRITE ONLY (0x0A, no immediate) packets of at most :data:`SMALL_WRITE_BYTES` payload, by size
  and phase label, and WRITE LAST/ONLY with immediate packets (``imm_last``): with NCCL-like
  clear-to-send, every CTS is such a small write and every data message ends in a write with
  immediate, so a capture without comments can still
  leave control bytes out of the comparison, and pair data messages with their CTS.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.analysis.columns import Decoded
from tokenpcap.analysis.crc import check_crcs
from tokenpcap.errors import DecodeError
from tokenpcap.analysis.decode import KIND_NAMES, KIND_PFC, MALFORMED_REASONS, decode_batch, \
    reason_counts
from tokenpcap.analysis.decode_rows import worth_compiling
from tokenpcap.analysis.flows import SEQUENCED, FlowTable, PsnTracker, is_rdma
from tokenpcap.records.comments import CONTROL_PREFIXES
from tokenpcap.records import parse_phase_label
from tokenpcap.pcap.capture import REGION
from tokenpcap.wire.rdma import CNP

__all__ = ["Acc", "add_batch", "add_pfc", "SMALL_WRITE_BYTES", "WRITE_ONLY", "WRITE_IMM_END",
           "CUT_AT_START", "CUT_AT_END"]

#: WRITE ONLY without immediate (IBTA vol.1 9.2.1 opcode 0x0A).
WRITE_ONLY = 0x0A
#: WRITE LAST / ONLY with immediate (0x09, 0x0B): how every data message of a clear-to-send run
#: ends (counted per flow as ``imm_last``)
WRITE_IMM_END = np.zeros(256, bool)
WRITE_IMM_END[[0x09, 0x0B]] = True
#: WRITE ONLY packets up to this payload are tallied by size (control-sized writes).
SMALL_WRITE_BYTES = 256
#: opcodes that continue a message (MIDDLE/LAST of SEND, RDMA WRITE, READ response): a flow
#: starting with one lost the beginning of that message
CUT_AT_START = np.zeros(256, bool)
CUT_AT_START[[0x01, 0x02, 0x03, 0x16, 0x07, 0x08, 0x09, 0x0E, 0x0F]] = True
#: opcodes that a message continues after (FIRST/MIDDLE): a flow ending with one lost its end
CUT_AT_END = np.zeros(256, bool)
CUT_AT_END[[0x00, 0x01, 0x06, 0x07, 0x0D, 0x0E]] = True

_FLOW_COLS = ("packets", "bytes", "payload", "first_ns", "last_ns", "icrc_bad", "vcrc_bad",
              "icrc_ok", "cnp", "ce", "sport", "malformed", "op_first", "op_last", "imm_last")
_FILL = {"first_ns": np.iinfo(np.int64).max, "last_ns": np.iinfo(np.int64).min,
         "op_first": -1, "op_last": -1}


class Acc:
    """Running aggregates of one inspection (module docstring).

    Flows beyond ``max_flows`` (:class:`~tokenpcap.analysis.flows.FlowTable`) share the id
    ``max_flows`` ("other"): their packets are summed in that row of ``f`` and of
    ``flow_label``, and are left out of the PSN check, ``file_flows``, ``spanning`` and
    ``small_writes``.

    Attributes:
        f: per-flow int64 arrays (:data:`_FLOW_COLS`), index = flow id (plus the "other" row
            once the flow table overflowed).
        flow_label: ``{(flow id, label code): int64 [packets, payload, bytes]}`` (code -1: no
            phase label).
        small_writes: ``{(flow id, label code, payload bytes): packets}`` of WRITE ONLY packets
            of at most :data:`SMALL_WRITE_BYTES`.
        file_flows / file_labels: per file, the flow ids and label codes it holds.
    """

    def __init__(self, crc: bool = True, max_flows: int | None = None) -> None:
        self.crc = crc
        self.compiled = False                      # a big capture: compiled loops pay off
        self.file = 0
        self.flow_file = np.zeros(0, np.int64)     # file a flow was first seen in
        self.spanning: set[int] = set()            # flows seen in more than one file
        self.flows = FlowTable(max_flows)
        self.psn = PsnTracker()
        self.f = {k: np.zeros(0, np.int64) for k in _FLOW_COLS}
        self.opcodes = np.zeros(256, np.int64)
        self.ecn = np.zeros(4, np.int64)
        self.kinds = np.zeros(len(KIND_NAMES), np.int64)
        self.reasons = np.zeros(len(MALFORMED_REASONS), np.int64)
        self.labels: list[str] = []
        self.label_index: dict[str, int] = {}
        self._codes = np.full(1, -1, np.int64)     # label_codes of the current file's comments
        self.flow_label: dict[tuple[int, int], np.ndarray] = {}
        self.small_writes: dict[tuple[int, int, int], int] = {}
        self.file_flows: list[set[int]] = []
        self.file_labels: list[set[int]] = []
        self.n = dict(payload=0, icrc_ok=0, icrc_bad=0, icrc_unchecked=0, vcrc_ok=0, vcrc_bad=0,
                      malformed=0, fecn=0, becn=0, cnp=0, packets=0, pfc=0, pfc_xoff=0,
                      pfc_xon=0)
        self.pfc_prio = np.zeros(8, np.int64)

    def start_file(self, k: int) -> None:
        """The next batches come from file ``k`` (0, 1, ...)."""
        self.file = k
        self._codes = np.full(1, -1, np.int64)
        while len(self.file_flows) <= k:
            self.file_flows.append(set())
            self.file_labels.append(set())

    def grow(self, n: int) -> None:
        old = self.f["packets"].size
        if n > old:
            for k, a in self.f.items():
                self.f[k] = np.concatenate([a, np.full(n - old, _FILL.get(k, 0), np.int64)])

    def grow_flows(self) -> None:
        """Per-flow rows for every flow id the flow table gave out (new flows are of the
        current file)."""
        old = self.flow_file.size
        nf = len(self.flows) + self.flows.overflowed     # (the "other" row once overflowed)
        self.grow(nf)
        if nf > old:
            self.flow_file = np.concatenate([self.flow_file, np.full(nf - old, self.file)])

    def add_labelled(self, cnt: np.ndarray, pays: np.ndarray, byts: np.ndarray,
                     width: int) -> None:
        """A batch's packets, payload and bytes per (flow, label code + 1) (int64 (flows *
        width,) each) into :attr:`flow_label`, in ascending (flow, code) order."""
        for u in np.flatnonzero(cnt).tolist():
            key = (u // width, u % width - 1)
            self.flow_label[key] = self.flow_label.get(key, 0) + np.array(
                [cnt[u], pays[u], byts[u]], np.int64)

    def add_small_writes(self, pair: np.ndarray, payload: np.ndarray, width: int) -> None:
        """A batch's small WRITE ONLY packets (``pair`` = flow * width + label code + 1,
        ``payload`` bytes, int64 (m,) each, in capture order) into :attr:`small_writes`, in
        ascending (pair, size) order."""
        key = pair * (SMALL_WRITE_BYTES + 1) + np.maximum(payload, 0)
        uk, uc = np.unique(key, return_counts=True)
        for k, c in zip(uk.tolist(), uc.tolist()):
            p, size = divmod(k, SMALL_WRITE_BYTES + 1)
            sk = (p // width, p % width - 1, size)
            self.small_writes[sk] = self.small_writes.get(sk, 0) + c

    def forget_comments(self) -> None:
        """The capture's comment list starts afresh (:meth:`Capture.forget_comments`): the
        label codes cached for its comments are dropped with it (the labels stay)."""
        self._codes = np.full(1, -1, np.int64)

    def label_codes(self, comments: list[str]) -> np.ndarray:
        """Global label index for every comment code of the capture (-1: no phase label), int64
        ``(len(comments) + 1,)``, the last entry for code -1. The capture's comment list only
        grows as it is read: comments seen in an earlier batch of the file are not parsed
        again (a file of many sections or unique comments stays linear)."""
        done = self._codes.size - 1
        if len(comments) > done:
            new = np.full(len(comments) - done, -1, np.int64)
            for j, text in enumerate(comments[done:]):
                control = ""
                for prefix in CONTROL_PREFIXES:          # the generator's control packets
                    if text.startswith(prefix):
                        control, text = f" [{prefix.strip()}]", text[len(prefix):]
                try:
                    label = "/".join(parse_phase_label(text)) + control
                except DecodeError:
                    continue
                if label not in self.label_index:
                    self.label_index[label] = len(self.labels)
                    self.labels.append(label)
                new[j] = self.label_index[label]
            self._codes = np.concatenate([self._codes[:-1], new, [-1]])
        return self._codes


def add_pfc(acc: Acc, dec) -> None:
    """The PFC rows of decoded rows ``dec`` into ``acc``: frames, XOFF (a pause time > 0), XON
    and the priorities enabled."""
    is_pfc = dec["kind"] == KIND_PFC
    if not is_pfc.any():                 # (a RoCE capture: no row selection of every column)
        return
    pf = dec[is_pfc]
    if pf.size:
        acc.n["pfc"] += pf.size
        acc.n["pfc_xoff"] += int((pf["pfc_max"] > 0).sum())
        acc.n["pfc_xon"] += int((pf["pfc_max"] == 0).sum())
        bits = (pf["pfc_cev"][:, None].astype(np.int64) >> np.arange(8)) & 1
        acc.pfc_prio += bits.sum(axis=0)


def _first_last(fid: np.ndarray, nf: int, t: np.ndarray):
    """Per flow present in the batch: (flow ids, row of its first, row of its last packet by
    ``t``, capture order breaking ties)."""
    if t.size < 2 or bool((t[1:] >= t[:-1]).all()):     # capture order is time order
        lo = np.full(nf, t.size, np.int64)
        hi = np.full(nf, -1, np.int64)
        rows = np.arange(t.size, dtype=np.int64)
        np.minimum.at(lo, fid, rows)
        np.maximum.at(hi, fid, rows)
        ids = np.flatnonzero(hi >= 0)
        return ids, lo[ids], hi[ids]
    order = np.lexsort((t, fid))
    starts = np.flatnonzero(np.r_[True, np.diff(fid[order]) != 0])
    ends = np.r_[starts[1:], order.size] - 1
    return fid[order][starts], order[starts], order[ends]


def pieces(rec: np.ndarray, frame_bytes: int = REGION) -> list[tuple[int, int]]:
    """Row ranges ``[a, b)`` of ``rec`` (:data:`~tokenpcap.pcap.capture.RECORD_DTYPE`) in file
    order, each holding about ``frame_bytes`` captured bytes (at least one row)."""
    if rec.size == 0:
        return []
    if int(rec["caplen"].sum(dtype=np.int64)) < max(int(frame_bytes), 1):
        return [(0, rec.size)]           # (every row in the first piece: no running sum)
    step = np.cumsum(rec["caplen"], dtype=np.int64) // max(int(frame_bytes), 1)
    cuts = np.flatnonzero(step[1:] != step[:-1]) + 1
    edges = [0, *cuts.tolist(), rec.size]
    return list(zip(edges[:-1], edges[1:]))


def _release(cap, rec: np.ndarray) -> None:
    """Drop the pages of the frames of ``rec`` from resident memory (:meth:`Capture.release`)."""
    if rec.size:
        cap.release(int(rec["record"].min()), int((rec["offset"] + rec["caplen"]).max()))


def _decoded(cap, rec: np.ndarray) -> Decoded:
    """:func:`decode_batch` of ``rec`` piece by piece (:func:`pieces`), each piece's frames
    released once decoded: the pages mapped at once stay about one reader region, whatever
    the frame size and the batch's row count."""
    parts = []
    for a, b in pieces(rec):
        parts.append(decode_batch(cap.data, rec[a:b], cap.views))
        _release(cap, rec[a:b])
    return Decoded.concat(parts)


def _crcs(cap, rec: np.ndarray, d: Decoded) -> tuple[np.ndarray, np.ndarray]:
    """:func:`check_crcs` of the rows ``rec``/``d`` piece by piece, each piece's frames released
    once checked (as :func:`_decoded`)."""
    icrc, vcrc = np.empty(rec.size, np.int8), np.empty(rec.size, np.int8)
    for a, b in pieces(rec):
        icrc[a:b], vcrc[a:b] = check_crcs(cap.data, rec["offset"][a:b], d[a:b])
        _release(cap, rec[a:b])
    return icrc, vcrc


def add_batch(acc: Acc, cap, rec: np.ndarray) -> None:
    """Fold one record batch of ``cap`` (:data:`~tokenpcap.pcap.capture.RECORD_DTYPE` rows)
    into ``acc``. The batch's frames are read (headers, ICRC) piece by piece and released from
    resident memory as they are done with: a batch joined from several reader regions is read
    after the reader released them, and would otherwise stay mapped whole."""
    acc.compiled = acc.compiled or worth_compiling(cap.data, rec)
    dec = _decoded(cap, rec)
    acc.kinds += np.bincount(dec["kind"], minlength=len(KIND_NAMES))
    add_pfc(acc, dec)
    rd = np.flatnonzero(is_rdma(dec["kind"]))
    if rd.size == 0:
        return
    d = dec if rd.size == dec.size else dec[rd]
    n = acc.n
    n["packets"] += rd.size
    icrc = vcrc = None
    if acc.crc:
        icrc, vcrc = _crcs(cap, rec[rd], d)
    fid = acc.flows.ids(d, compiled=acc.compiled)
    tracked = len(acc.flows)
    own = fid < tracked                  # False: a flow beyond the table's limit ("other")
    acc.grow_flows()
    if acc.file and (own & (acc.flow_file[fid] != acc.file)).any():
        acc.spanning.update(np.unique(fid[own & (acc.flow_file[fid] != acc.file)]).tolist())
    codes = acc.label_codes(cap.comments)[d["comment"]]
    width = len(acc.labels) + 1
    sums = _folded if acc.compiled else _summed
    present, seq, cnt, pays, byts, n_bad = sums(acc, d, fid, tracked, icrc, vcrc, codes, width)
    if acc.crc:
        good = ~d["malformed"]
        n["icrc_ok"] += int((icrc == 1).sum())
        n["icrc_bad"] += int((icrc == 0).sum())
        n["icrc_unchecked"] += int(((icrc < 0) & good).sum())
        n["vcrc_ok"] += int((vcrc == 1).sum())
        n["vcrc_bad"] += int((vcrc == 0).sum())
    else:                                # nothing checked: every well-formed row unchecked
        n["icrc_unchecked"] += rd.size - n_bad
    if n_bad:
        acc.reasons += reason_counts(d["why"][d["malformed"]])
    acc.psn.update(fid[seq], d["psn"][seq], compiled=acc.compiled)
    acc.add_labelled(cnt, pays, byts, width)
    acc.file_flows[acc.file].update(np.flatnonzero(present[:tracked]).tolist())
    acc.file_labels[acc.file].update(np.unique(codes[codes >= 0]).tolist())
    small = np.flatnonzero((d["opcode"] == WRITE_ONLY) & (d["payload"] <= SMALL_WRITE_BYTES)
                           & own & ~d["malformed"])
    if small.size:
        acc.add_small_writes(fid[small] * width + (codes[small] + 1),
                             d["payload"][small].astype(np.int64), width)


def _folded(acc: Acc, d: Decoded, fid, tracked, icrc, vcrc, codes, width):
    """:func:`_summed` by one compiled pass (:func:`~tokenpcap.analysis.fold.fold_rows`)."""
    from tokenpcap.analysis.fold import fold_rows      # numba: loaded for big captures only

    present, seq, cnt, pays, byts, totals = fold_rows(
        acc.f, d, fid, tracked, icrc, vcrc, codes, width, acc.opcodes, acc.ecn, SEQUENCED,
        WRITE_IMM_END, CNP)
    n = acc.n
    for k, v in zip(("payload", "malformed", "fecn", "becn", "cnp"), totals.tolist()):
        n[k] += v
    return present, seq, cnt, pays, byts, int(totals[1])


def _summed(acc: Acc, d: Decoded, fid, tracked, icrc, vcrc, codes, width):
    """Fold the RDMA rows ``d`` of a batch (flow ids ``fid``, int64 (n,); ids from ``tracked``
    on are the "other" flow) into ``acc``'s per-flow columns, histograms and totals (payload,
    malformed, FECN, BECN, CNPs) by numpy passes: the reference. ``icrc``/``vcrc`` int8 (n,)
    or None; ``codes`` int64 (n,) phase label codes (-1 none), ``width`` codes + 1.

    Returns:
        (present int64 (flows,) rows per flow, seq bool (n,) rows the PSN check follows,
        cnt/pays/byts int64 (flows * width,) per (flow, code + 1), malformed rows).
    """
    bad = d["malformed"]
    good = ~bad
    n = acc.n
    n["payload"] += int(d["payload"][d["payload"] > 0].sum())
    n_bad = int(bad.sum())
    n["malformed"] += n_bad
    n["fecn"] += int((d["fecn"].astype(bool) & good).sum())
    n["becn"] += int((d["becn"].astype(bool) & good).sum())
    cnp = (d["opcode"] == CNP) & good
    n["cnp"] += int(cnp.sum())
    acc.opcodes += np.bincount(d["opcode"][good], minlength=256)
    ip = (d["ipver"] > 0) & good
    acc.ecn += np.bincount(d["ecn"][ip], minlength=4)
    own = fid < tracked
    nf = acc.f["packets"].size
    f = acc.f
    pay = np.maximum(d["payload"].astype(np.int64), 0)

    def total(w=None):      # exact: a batch's sums stay far below 2**53
        return np.rint(np.bincount(fid, w, minlength=nf)).astype(np.int64)

    present = np.bincount(fid, minlength=nf)
    f["packets"] += present
    f["bytes"] += total(d["orig_len"])
    f["payload"] += total(pay)
    if icrc is not None:                 # (else every count is 0)
        f["icrc_bad"] += total(icrc == 0)
        f["icrc_ok"] += total(icrc == 1)
        f["vcrc_bad"] += total(vcrc == 0)
    f["cnp"] += total(cnp)
    f["ce"] += total(ip & (d["ecn"] == 3))
    f["malformed"] += total(bad)
    f["imm_last"] += total(WRITE_IMM_END[d["opcode"]] & good)
    t = d["time_ns"]
    ids, lo, hi = _first_last(fid, nf, t)
    f["first_ns"][ids] = np.minimum(f["first_ns"][ids], t[lo])
    f["last_ns"][ids] = np.maximum(f["last_ns"][ids], t[hi])
    f["sport"][fid] = d["sport"]
    seq = SEQUENCED[d["opcode"]] & good & own
    if seq.any():                    # first/last sequenced opcode per flow (cut messages)
        s = np.flatnonzero(seq)
        sids, slo, shi = _first_last(fid[s], nf, t[s])
        op = d["opcode"][s].astype(np.int64)
        fresh = f["op_first"][sids] < 0
        f["op_first"][sids[fresh]] = op[slo[fresh]]
        f["op_last"][sids] = op[shi]
    pair = fid * width + (codes + 1)        # small dense codes: bincount, no sort
    span = nf * width
    cnt = np.bincount(pair, minlength=span)
    pays = np.rint(np.bincount(pair, pay, minlength=span)).astype(np.int64)
    byts = np.rint(np.bincount(pair, d["orig_len"], minlength=span)).astype(np.int64)
    return present, seq, cnt, pays, byts, n_bad
