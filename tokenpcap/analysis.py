"""Stage 8: read any capture back and say what is in it and whether it is right.

``inspect_capture(path) -> Report`` streams the records of a pcap, pcapng or ERF file
(:mod:`tokenpcap.pcap.reader`, memory-mapped, batch by batch, flat memory), decodes the headers of
every packet with numpy (:mod:`tokenpcap.analysis_decode`), verifies ICRC/VCRC
(:mod:`tokenpcap.analysis_crc`), follows PSNs per flow (:mod:`tokenpcap.analysis_flows`) and
aggregates:

* capinfos-like totals: packets, bytes on the wire (sum of original lengths), first/last time
  (integer ns), duration, layer-2 rate ``bytes * 8 / duration`` and layer-1 rate, where every
  Ethernet frame also occupies FCS 4 + preamble/SFD 8 + IFG 12 bytes and at least 60 bytes of
  frame (IEEE 802.3 4.2.3.3, case C12);
* RDMA (RoCEv2, RoCEv1, native IB): flows keyed by (source, destination, DestQP), opcodes, RDMA
  payload bytes (C7), ICRC/VCRC validity, PSN gaps/reordering with 24-bit wrap (C6), CNPs
  (opcode 0x81), ECN codepoints (CE marks), FECN/BECN bits;
* PFC pause frames (MAC control 0x8808, opcode 0x0101): XOFF/XON and priorities;
* per phase, when pcapng packet comments start with a :func:`tokenpcap.messages.phase_label`
  (comments starting ``cts `` or ``ack `` mark control packets of that phase).

This module imports :mod:`tokenpcap.wire`, :mod:`tokenpcap.pcap`, ``messages`` and ``errors`` only.
"""
from __future__ import annotations

import os

import numpy as np

from tokenpcap.analysis_crc import check_crcs
from tokenpcap.analysis_decode import (
    KIND_IB, KIND_NAMES, KIND_PFC, LINKTYPE_ETHERNET, decode_batch)
from tokenpcap.analysis_result import (
    CONTROL_PREFIXES, L1_OVERHEAD_BYTES, NS_PER_S, Report, address_text)
from tokenpcap.analysis_flows import SEQUENCED, FlowTable, PsnTracker, is_rdma
from tokenpcap.messages import parse_phase_label
from tokenpcap.pcap.reader import open_capture
from tokenpcap.pcap.timestamps import NO_TIME
from tokenpcap.wire.rdma import CNP, ETH_MIN_FRAME_BYTES, OPCODES

__all__ = ["Report", "inspect_capture", "inspect_captures", "address_text",
           "L1_OVERHEAD_BYTES", "NS_PER_S", "CONTROL_PREFIXES"]

_FLOW_COLS = ("packets", "bytes", "payload", "first_ns", "last_ns", "icrc_bad", "vcrc_bad",
              "icrc_ok", "cnp", "ce", "sport")


class _Acc:
    """Running aggregates of one inspection (per flow arrays grow as flows appear)."""

    def __init__(self, crc: bool = True) -> None:
        self.crc = crc
        self.file = 0
        self.flow_file = np.zeros(0, np.int64)     # file a flow was first seen in
        self.spanning: set[int] = set()            # flows seen in more than one file
        self.flows = FlowTable()
        self.psn = PsnTracker()
        self.f = {k: np.zeros(0, np.int64) for k in _FLOW_COLS}
        self.opcodes = np.zeros(256, np.int64)
        self.ecn = np.zeros(4, np.int64)
        self.kinds = np.zeros(len(KIND_NAMES), np.int64)
        self.labels: list[str] = []
        self.label_index: dict[str, int] = {}
        self.flow_label: dict[tuple[int, int], np.ndarray] = {}
        self.n = dict(payload=0, icrc_ok=0, icrc_bad=0, icrc_unchecked=0, vcrc_ok=0, vcrc_bad=0,
                      malformed=0, fecn=0, becn=0, cnp=0, packets=0, pfc=0, pfc_xoff=0,
                      pfc_xon=0)
        self.pfc_prio = np.zeros(8, np.int64)

    def grow(self, n: int) -> None:
        old = self.f["packets"].size
        if n > old:
            for k, a in self.f.items():
                fill = np.iinfo(np.int64).max if k == "first_ns" else \
                    (np.iinfo(np.int64).min if k == "last_ns" else 0)
                self.f[k] = np.concatenate([a, np.full(n - old, fill, np.int64)])

    def label_codes(self, comments: list[str]) -> np.ndarray:
        """Global label index for every comment code of the capture (-1: no phase label)."""
        out = np.full(len(comments) + 1, -1, np.int64)    # last entry: code -1
        for i, text in enumerate(comments):
            control = ""
            for prefix in CONTROL_PREFIXES:          # the generator's control packets
                if text.startswith(prefix):
                    control, text = f" [{prefix.strip()}]", text[len(prefix):]
            try:
                label = "/".join(parse_phase_label(text)) + control
            except ValueError:
                continue
            if label not in self.label_index:
                self.label_index[label] = len(self.labels)
                self.labels.append(label)
            out[i] = self.label_index[label]
        return out


def _add_batch(acc: _Acc, cap, rec: np.ndarray) -> None:
    dec = decode_batch(cap.data, rec, cap.views)
    acc.kinds += np.bincount(dec["kind"], minlength=len(KIND_NAMES))
    rd = np.flatnonzero(is_rdma(dec["kind"]))
    pf = dec[dec["kind"] == KIND_PFC]
    if pf.size:
        acc.n["pfc"] += pf.size
        acc.n["pfc_xoff"] += int((pf["pfc_max"] > 0).sum())
        acc.n["pfc_xon"] += int((pf["pfc_max"] == 0).sum())
        bits = (pf["pfc_cev"][:, None].astype(np.int64) >> np.arange(8)) & 1
        acc.pfc_prio += bits.sum(axis=0)
    if rd.size == 0:
        return
    d = dec if rd.size == dec.size else dec[rd]
    if acc.crc:
        icrc, vcrc = check_crcs(cap.data, rec["offset"][rd], d)
    else:
        icrc = vcrc = np.full(rd.size, -1, np.int8)
    n = acc.n
    n["packets"] += rd.size
    n["payload"] += int(d["payload"][d["payload"] > 0].sum())
    n["icrc_ok"] += int((icrc == 1).sum())
    n["icrc_bad"] += int((icrc == 0).sum())
    n["icrc_unchecked"] += int((icrc < 0).sum())
    n["vcrc_ok"] += int((vcrc == 1).sum())
    n["vcrc_bad"] += int((vcrc == 0).sum())
    n["malformed"] += int(d["malformed"].sum())
    n["fecn"] += int(d["fecn"].sum())
    n["becn"] += int(d["becn"].sum())
    cnp = d["opcode"] == CNP
    n["cnp"] += int(cnp.sum())
    acc.opcodes += np.bincount(d["opcode"], minlength=256)
    ip = d["ipver"] > 0
    acc.ecn += np.bincount(d["ecn"][ip], minlength=4)
    fid = acc.flows.ids(d)
    old = acc.flow_file.size
    acc.grow(len(acc.flows))
    if len(acc.flows) > old:
        acc.flow_file = np.concatenate([acc.flow_file, np.full(len(acc.flows) - old, acc.file)])
    if acc.file and (acc.flow_file[fid] != acc.file).any():
        acc.spanning.update(np.unique(fid[acc.flow_file[fid] != acc.file]).tolist())
    f = acc.f
    nf = len(acc.flows)
    pay = np.maximum(d["payload"].astype(np.int64), 0)

    def total(w=None):      # exact: a batch's sums stay far below 2**53
        return np.rint(np.bincount(fid, w, minlength=nf)).astype(np.int64)

    f["packets"] += total()
    f["bytes"] += total(d["orig_len"])
    f["payload"] += total(pay)
    f["icrc_bad"] += total(icrc == 0)
    f["icrc_ok"] += total(icrc == 1)
    f["vcrc_bad"] += total(vcrc == 0)
    f["cnp"] += total(cnp)
    f["ce"] += total(ip & (d["ecn"] == 3))
    t = d["time_ns"]
    if t.size < 2 or bool((t[1:] >= t[:-1]).all()):     # capture order is time order: the
        lo = np.full(nf, rd.size, np.int64)              # first/last row of a flow has its
        hi = np.full(nf, -1, np.int64)                   # first/last time
        rows = np.arange(rd.size, dtype=np.int64)
        np.minimum.at(lo, fid, rows)
        np.maximum.at(hi, fid, rows)
        ids = np.flatnonzero(hi >= 0)
        first, last = t[lo[ids]], t[hi[ids]]
    else:
        order = np.argsort(fid, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(fid[order]) != 0])
        ids = fid[order][starts]
        first = np.minimum.reduceat(t[order], starts)
        last = np.maximum.reduceat(t[order], starts)
    f["first_ns"][ids] = np.minimum(f["first_ns"][ids], first)
    f["last_ns"][ids] = np.maximum(f["last_ns"][ids], last)
    f["sport"][fid] = d["sport"]
    seq = SEQUENCED[d["opcode"]] & ~d["malformed"]
    acc.psn.update(fid[seq], d["psn"][seq])
    codes = acc.label_codes(cap.comments)[d["comment"]]
    width = len(acc.labels) + 1
    pair = fid * width + (codes + 1)        # small dense codes: bincount, no sort
    span = nf * width
    cnt = np.bincount(pair, minlength=span)
    pays = np.rint(np.bincount(pair, pay, minlength=span)).astype(np.int64)
    byts = np.rint(np.bincount(pair, d["orig_len"], minlength=span)).astype(np.int64)
    for u in np.flatnonzero(cnt).tolist():
        key = (u // width, u % width - 1)
        acc.flow_label[key] = acc.flow_label.get(key, 0) + np.array(
            [cnt[u], pays[u], byts[u]], np.int64)


def inspect_capture(path: str | os.PathLike, *, max_records: int = 1 << 20,
                    on_truncation: str = "stop", crc: bool = True) -> Report:
    """Read a capture and aggregate everything the module docstring lists.

    Args:
        path: a pcap (us/ns, either byte order), pcapng or ERF file.
        max_records: packets decoded at a time (bounds memory).
        on_truncation: ``"stop"`` (default: report the complete records and ``truncated_at``) or
            ``"error"`` (raise :class:`~tokenpcap.errors.TruncatedFile`).
        crc: verify ICRC/VCRC (default). Without it every packet counts as not checked; the
            CRC arithmetic over full-size frames dominates the run time (docs/analysis.md).

    Raises:
        CaptureError (BadMagic, TruncatedFile): the file is not a capture, or is corrupt; the
            message names the byte offset.
    """
    return inspect_captures([path], max_records=max_records, on_truncation=on_truncation,
                            crc=crc)


def inspect_captures(paths, *, max_records: int = 1 << 20, on_truncation: str = "stop",
                     crc: bool = True) -> Report:
    """:func:`inspect_capture` over several files as one capture (e.g. the per-NIC files of
    ``tokenpcap generate``): totals, flows, phases and NICs add up across the files.

    Files are read one after the other, so PSN order is only followed within a file: a flow
    whose packets are in several files (``generate --split phase``) is counted in
    ``roce.psn_flows_unchecked`` and left out of the PSN gaps.

    Raises:
        CaptureError: as :func:`inspect_capture`, naming the file.
    """
    paths = [str(p) for p in paths]
    rep = Report(", ".join(paths), "")
    acc = _Acc(crc)
    first, last = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    formats, truncated = [], []
    for k, path in enumerate(paths):
        cap = open_capture(path, on_truncation=on_truncation)
        formats.append(cap.format)
        acc.file = k
        for rec in cap.batches(max_records):
            rep.packets += rec.size
            orig = rec["orig_len"].astype(np.int64)
            rep.bytes += int(orig.sum())
            rep.captured_bytes += int(rec["caplen"].sum(dtype=np.int64))
            if orig.size:
                lo, hi = int(orig.min()), int(orig.max())
                rep.frame_bytes_min = lo if rep.frame_bytes_min is None else \
                    min(rep.frame_bytes_min, lo)
                rep.frame_bytes_max = max(rep.frame_bytes_max or 0, hi)
            eth = rec["linktype"] == LINKTYPE_ETHERNET
            rep.l1_bytes += int(np.where(eth, np.maximum(orig, ETH_MIN_FRAME_BYTES)
                                         + L1_OVERHEAD_BYTES, orig).sum())
            t = rec["time_ns"][rec["time_ns"] != NO_TIME]
            if t.size:
                first, last = min(first, int(t.min())), max(last, int(t.max()))
            _add_batch(acc, cap, rec)
        if cap.truncated_at is not None:
            truncated.append(cap.truncated_at)
        rep.interfaces += [{"index": len(rep.interfaces), "linktype": i.linktype,
                            "name": i.name, "speed_bps": i.speed_bps, "tsresol": i.tsresol,
                            **({"file": path} if len(paths) > 1 else {})}
                           for i in cap.interfaces]
    if rep.packets and last >= first:
        rep.first_ns, rep.last_ns = first, last
    rep.format = formats[0] if len(set(formats)) == 1 else ",".join(formats)
    rep.truncated_at = truncated[0] if truncated else None
    _finish(rep, acc)
    return rep


def _finish(rep: Report, acc: _Acc) -> None:
    n = acc.n
    rep.kinds = {name: int(c) for name, c in zip(KIND_NAMES, acc.kinds) if c}
    ps = acc.psn
    span = np.array(sorted(acc.spanning), np.int64)
    for name in ("gaps", "missing", "reordered"):
        arr = getattr(ps, name)
        arr[span[span < arr.size]] = 0
    rep.roce = {
        "packets": n["packets"], "payload_bytes": n["payload"], "icrc_ok": n["icrc_ok"],
        "icrc_bad": n["icrc_bad"], "icrc_checked": n["icrc_ok"] + n["icrc_bad"],
        "icrc_unchecked": n["icrc_unchecked"], "vcrc_ok": n["vcrc_ok"], "vcrc_bad": n["vcrc_bad"],
        "psn_gaps": int(ps.gaps.sum()), "psn_missing": int(ps.missing.sum()),
        "psn_reordered": int(ps.reordered.sum()), "psn_flows_unchecked": len(acc.spanning),
        "cnp": n["cnp"], "fecn": n["fecn"],
        "becn": n["becn"], "malformed": n["malformed"], "flows": len(acc.flows),
        "ecn": {k: int(v) for k, v in zip(("not_ect", "ect1", "ect0", "ce"), acc.ecn)},
        "opcodes": {OPCODES[c].name if c in OPCODES else f"0x{c:02x}": int(acc.opcodes[c])
                    for c in np.flatnonzero(acc.opcodes).tolist()},
    }
    rep.pfc = {"frames": n["pfc"], "xoff": n["pfc_xoff"], "xon": n["pfc_xon"],
               "priorities": {str(k): int(v) for k, v in enumerate(acc.pfc_prio) if v}}
    f = acc.f
    gaps = np.zeros(len(acc.flows), np.int64)
    gaps[:ps.gaps.size] = ps.gaps
    missing = np.zeros_like(gaps)
    missing[:ps.missing.size] = ps.missing
    late = np.zeros_like(gaps)
    late[:ps.reordered.size] = ps.reordered
    src_of = []
    for i, (kind, sh, sl, dh, dl, qp) in enumerate(acc.flows.keys):
        src, dst = address_text(kind, sh, sl), address_text(kind, dh, dl)
        src_of.append(src)
        rep.flows.append({
            "transport": KIND_NAMES[kind], "src": src, "dst": dst, "dest_qp": qp,
            "udp_sport": int(f["sport"][i]) if kind != KIND_IB else None,
            "packets": int(f["packets"][i]), "bytes": int(f["bytes"][i]),
            "payload_bytes": int(f["payload"][i]), "first_ns": int(f["first_ns"][i]),
            "last_ns": int(f["last_ns"][i]), "icrc_bad": int(f["icrc_bad"][i]),
            "vcrc_bad": int(f["vcrc_bad"][i]), "psn_gaps": int(gaps[i]),
            "psn_missing": int(missing[i]), "psn_reordered": int(late[i]),
            "cnp": int(f["cnp"][i]), "ce": int(f["ce"][i])})
    nics: dict[str, dict] = {}
    for fl in rep.flows:
        e = nics.setdefault(fl["src"], {"address": fl["src"], "packets": 0, "bytes": 0,
                                        "payload_bytes": 0, "flows": 0})
        e["packets"] += fl["packets"]
        e["bytes"] += fl["bytes"]
        e["payload_bytes"] += fl["payload_bytes"]
        e["flows"] += 1
    rep.nics = sorted(nics.values(), key=lambda e: e["address"])
    phases: dict[str, dict] = {}
    for (fid, code), (pk, pay, by) in acc.flow_label.items():
        label = acc.labels[code] if code >= 0 else "(no phase)"
        e = phases.setdefault(label, {"name": label, "packets": 0, "payload_bytes": 0,
                                      "bytes": 0})
        e["packets"] += int(pk)
        e["payload_bytes"] += int(pay)
        e["bytes"] += int(by)
        key = (label, src_of[fid])
        rep.phase_nic[key] = rep.phase_nic.get(key, 0) + int(pay)
    rep.phases = sorted(phases.values(), key=lambda e: e["name"])
