"""A big classic pcap of Ethernet frames read from its bytes to the sums in one compiled pass per
batch (:mod:`tokenpcap.analysis.pcap_pass`), every batch it cannot take by the reference.

:func:`read_pcap_fast` stands in for :func:`tokenpcap.analysis.inspect.inspect_captures`' loop
over ``coalesced(capture.batches())`` for one file, and gives the same report:

* **the same batches.** The reader walks a file region by region (records starting within
  :data:`~tokenpcap.pcap.capture.REGION` bytes of the region's first), cuts each region's
  records into chunks of ``min(max_records, CHUNK)`` and the inspection joins short chunks
  with the next ones until a batch holds that many rows. The pass walks the records itself
  (16 + caplen to the next, refusing what the reader refuses: :meth:`PcapCapture.end_at`
  raises its error there or notes the truncation) and ends its chunks and batches at the same
  records. What a batch decides is then decided the same way: the flow ids of its new flows,
  the first and last sequenced opcode of a flow (per batch), the order of the per-flow phase
  sums and small-write tallies.
* **the same flow ids.** :meth:`~tokenpcap.analysis.flows.FlowTable.ids` numbers a batch's new
  flows in ascending order of a hash of the key columns that vary over the batch
  (:func:`~tokenpcap.analysis.flows.batch_hash`). The scan gives new keys provisional ids and
  notes which columns vary; they are numbered by that hash before the fold, through the same
  flow table.
* **the reference for the rest.** A batch is handed to the reference (the record rows of its
  records, :meth:`PcapCapture.records`, into ``on_records``) when a row the scan did not take
  is RDMA by the numpy decode (RoCEv1, or a RoCEv2 row the compiled decode leaves to numpy),
  when the flow table would overflow (``max_flows``), when two of the batch's keys share the
  hash (the reference then orders them otherwise), or with the ICRC check on, when a row is
  complete (its ICRC checkable). Its provisional flows are dropped first. Rows not taken that
  are not RDMA (PFC, ARP, ...) only count by kind and as PFC, from the numpy decode.

Only pcap files of link type Ethernet (1) with about :data:`~tokenpcap.analysis.decode_rows.
COMPILED_MIN_RECORDS` records or more take this path (the compiled loops' one-off load); every
other file is read by the reference. Equal reports are tested with Hypothesis
(``tests/analysis/test_pcap_fast.py``).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.analysis import decode_rows
from tokenpcap.analysis.batch import SMALL_WRITE_BYTES, WRITE_IMM_END, WRITE_ONLY, add_pfc
from tokenpcap.analysis.decode import KIND_NAMES, KIND_ROCEV2, LINKTYPE_ETHERNET, decode_batch
from tokenpcap.analysis.flows import SEQUENCED, batch_hash, is_rdma
from tokenpcap.analysis.fold import RECORD_TOTALS
from tokenpcap.analysis.result import L1_OVERHEAD_BYTES
from tokenpcap.pcap import capture
from tokenpcap.pcap.formats import PCAP_FILE_HEADER, PCAP_RECORD
from tokenpcap.wire.rdma import CNP, ETH_MIN_FRAME_BYTES, EXT_BYTES, HAS_PAYLOAD

__all__ = ["read_pcap_fast", "takes"]

_TABLES = (EXT_BYTES.astype(np.int64), HAS_PAYLOAD.astype(np.bool_))


def takes(cap) -> bool:
    """Whether :func:`read_pcap_fast` reads ``cap``: a classic pcap of Ethernet frames holding
    about :data:`~tokenpcap.analysis.decode_rows.COMPILED_MIN_RECORDS` records or more (its
    size over its first record's)."""
    if cap.format != "pcap" or cap.linktype != LINKTYPE_ETHERNET:
        return False
    first = PCAP_FILE_HEADER.size
    if cap.size < first + PCAP_RECORD.size:
        return False
    caplen = int(cap.views(cap.byte_order + "u4")[first + PCAP_RECORD.offset("caplen")])
    return cap.size >= decode_rows.COMPILED_MIN_RECORDS * (caplen + PCAP_RECORD.size)


class _Flows:
    """The flow table of the inspection (:class:`~tokenpcap.analysis.flows.FlowTable`) as the
    compiled pass sees it: the keys (uint64 (rows, 6)) by flow id and a hash table over them,
    kept in step with the flow table (flows the reference numbered are added first)."""

    def __init__(self, room: int) -> None:
        self.keys = np.zeros((0, 6), np.uint64)
        self.table = np.full(1, -1, np.int64)
        self.seen_at = np.zeros(0, np.int64)
        self.known = 0
        self.room = room                  # provisional flows one batch may add

    def sync(self, flows) -> None:
        """Add the flows numbered since the last call (``flows`` the FlowTable), with room for
        a batch's provisional ones."""
        from tokenpcap.analysis.pcap_pass import insert_keys

        n = len(flows)
        need = n + self.room
        if self.keys.shape[0] < need:
            grown = np.zeros((2 * need, 6), np.uint64)
            grown[:self.known] = self.keys[:self.known]
            self.keys = grown
            self.seen_at = np.concatenate([self.seen_at, np.full(2 * need - self.seen_at.size,
                                                                 -1, np.int64)])
        if self.table.size < 4 * need:
            self.table = np.full(1 << (8 * need - 1).bit_length(), -1, np.int64)
            self.known = 0
        if n > self.known:
            self.keys[self.known:n] = np.array(flows.keys[self.known:n], np.uint64)
            insert_keys(self.table, self.keys, self.known, n)
            self.known = n


def read_pcap_fast(cap, acc, max_records: int, on_totals, on_records) -> None:
    """Read the pcap ``cap`` (:func:`takes`) into ``acc`` (:class:`~tokenpcap.analysis.batch.
    Acc`) batch by batch (module docstring): ``on_totals(sums, rows)`` gets each batch's record
    sums (int64 (9,), :data:`~tokenpcap.analysis.fold.RECORD_TOTALS` order) and its row count,
    ``on_records(rec)`` the
    record rows of each batch left to the reference (which sums them itself).

    Raises:
        CaptureError: as the reader, at the same record.
    """
    from tokenpcap.analysis.pcap_pass import scan

    acc.compiled = True
    rows = min(max_records, capture.CHUNK)
    chunk = max(1, rows)
    size = 2 * chunk + 1
    b = _Batch(cap, acc, size, on_totals, on_records)
    p, end = PCAP_FILE_HEADER.size, cap.size
    limit = min(p + capture.REGION, end)
    big = cap.byte_order == ">"
    while p < end:
        held = int(b.st[0])
        got, p, refused = scan(cap.data, p, chunk, limit, end, big, cap.nanosecond,
                               cap.max_caplen, *_TABLES, b.flows.table, b.flows.keys,
                               b.flows.known, b.first, b.st, b.starts, b.fids, *b.rows,
                               b.untaken, b.news, b.flows.seen_at, b.present)
        if got and (held + got >= rows):
            b.finish(p)
        if refused:
            cap.end_at(p)             # raises, or notes where the file is cut short
            break
        if p >= limit:
            limit = min(p + capture.REGION, end)
    if b.st[0]:
        b.finish(p)


class _Batch:
    """The scratch of one batch and what is done with it once its records are walked."""

    def __init__(self, cap, acc, size: int, on_totals, on_records) -> None:
        self.cap, self.acc = cap, acc
        self.on_totals, self.on_records = on_totals, on_records
        self.flows = _Flows(size)
        self.st = np.zeros(8, np.int64)
        self.first = np.zeros(6, np.uint64)
        self.starts = np.empty(size, np.int64)
        self.fids = np.empty(size, np.int64)
        self.rows = tuple(np.empty(size, np.int64) for _ in range(4))   # times ... pays
        self.untaken = np.empty(size, np.int64)
        self.news = np.empty(size, np.int64)
        self.present = np.empty(size, np.int64)
        self.small = (np.empty(size, np.int64), np.empty(size, np.int64))
        self.flows.sync(acc.flows)

    def finish(self, stop: int) -> None:
        """Number the batch's new flows and fold it, or hand it to the reference; then release
        its bytes (up to ``stop``, the end of its last record) and start the next batch."""
        st, cap = self.st, self.cap
        n = int(st[0])
        rank = self._numbered()
        if rank is None:
            self.flows.table[self.news[:st[2]]] = -1       # the provisional flows, dropped
            self.on_records(cap.records(self.starts[:n].copy()))
        else:
            self._fold(n, rank)
        cap.release(int(self.starts[0]), stop)
        self.flows.sync(self.acc.flows)
        st[:7] = 0
        st[7] += 1

    def _numbered(self) -> np.ndarray | None:
        """The final place of each provisional flow (int64 (new,): flow ``known + rank[j]``),
        numbered through the flow table; None when the batch goes to the reference."""
        st, acc, f = self.st, self.acc, self.flows
        if st[6] and acc.crc:
            return None
        if st[1]:
            dec = decode_batch(self.cap.data, self.cap.records(self.starts[self.untaken[:st[1]]]))
            if is_rdma(dec["kind"]).any():
                return None
            self._other = dec
        else:
            self._other = None
        new = int(st[2])
        if new == 0:
            return np.zeros(0, np.int64)
        if len(acc.flows) + new > acc.flows.limit:
            return None
        known = f.known
        rows = np.concatenate([self.present[:st[3]], np.arange(known, known + new)])
        varies = [bool((int(st[4]) >> j) & 1) for j in range(6)]
        h = batch_hash([f.keys[rows, j] for j in range(6)], varies)
        if np.unique(h).size != h.size:
            return None
        order = np.argsort(h[-new:])
        rank = np.empty(new, np.int64)
        rank[order] = np.arange(new)
        keys = f.keys[known:known + new].copy()
        ids = acc.flows.number([tuple(int(v) for v in keys[j]) for j in order.tolist()])
        assert (ids == np.arange(known, known + new)).all()
        f.keys[known + rank] = keys
        f.table[self.news[:new]] = known + rank
        f.known += new
        return rank

    def _fold(self, n: int, rank: np.ndarray) -> None:
        """Fold the batch's rows into the inspection (:func:`~tokenpcap.analysis.pcap_pass.
        fold`) and what the reference does per batch beside (kinds, PFC, file flows, spanning
        flows, phase sums, small writes, counters)."""
        from tokenpcap.analysis.pcap_pass import PASS_TOTALS, fold

        acc = self.acc
        known = self.flows.known - rank.size
        acc.grow_flows()
        nf = acc.f["packets"].size
        acc.psn.grow(len(acc.flows))          # (own flows only: not the "other" row)
        present, pays, byts = (np.zeros(nf, np.int64) for _ in range(3))
        small_fid, small_pay = self.small
        totals = np.zeros(len(PASS_TOTALS), np.int64)
        rec = np.zeros(len(RECORD_TOTALS), np.int64)
        f = acc.f
        m = fold(self.fids, *self.rows, n, known, rank, SEQUENCED, WRITE_IMM_END, CNP,
                 WRITE_ONLY, SMALL_WRITE_BYTES, ETH_MIN_FRAME_BYTES, L1_OVERHEAD_BYTES,
                 f["packets"], f["bytes"], f["payload"], f["cnp"], f["ce"], f["malformed"],
                 f["imm_last"], f["first_ns"], f["last_ns"], f["sport"], f["op_first"],
                 f["op_last"],
                 *acc.psn.arrays(), acc.opcodes, acc.ecn, acc.reasons, present, pays, byts,
                 small_fid, small_pay, totals, rec)
        self.on_totals(rec, n)
        taken = int(totals[5])
        acc.kinds[KIND_ROCEV2] += taken
        if self._other is not None:
            acc.kinds += np.bincount(self._other["kind"], minlength=len(KIND_NAMES))
            add_pfc(acc, self._other)
        if not taken:
            return
        c = acc.n
        c["packets"] += taken
        for k, v in zip(("payload", "malformed", "fecn", "becn", "cnp"), totals[:5].tolist()):
            c[k] += v
        c["icrc_unchecked"] += taken - int(totals[1])     # (no row here is ICRC-checkable)
        ids = np.flatnonzero(present)
        if acc.file:
            acc.spanning.update(ids[acc.flow_file[ids] != acc.file].tolist())
        acc.add_labelled(present, pays, byts, 1)
        acc.file_flows[acc.file].update(ids.tolist())
        if m:
            acc.add_small_writes(small_fid[:m], small_pay[:m], 1)
