"""Stage 8: read any capture back and say what is in it and whether it is right.

``inspect_capture(path) -> Report`` streams the records of a pcap, pcapng or ERF file
(:mod:`tokenpcap.pcap.reader`, memory-mapped, batch by batch, flat memory), decodes the headers of
every packet with numpy (:mod:`tokenpcap.analysis.decode`), verifies ICRC/VCRC
(:mod:`tokenpcap.analysis.crc`), follows PSNs per flow (:mod:`tokenpcap.analysis.flows`) and
aggregates:

* capinfos-like totals: packets, bytes on the wire (sum of original lengths), first/last time
  (integer ns), duration, layer-2 rate ``bytes * 8 / duration`` and layer-1 rate, where every
  Ethernet frame also occupies FCS 4 + preamble/SFD 8 + IFG 12 bytes and at least 60 bytes of
  frame (IEEE 802.3 4.2.3.3, case C12);
* RDMA (RoCEv2, RoCEv1, native IB): flows keyed by (source, destination, DestQP), opcodes, RDMA
  payload bytes (C7), ICRC/VCRC validity, PSN gaps/reordering with 24-bit wrap (C6), CNPs
  (opcode 0x81), ECN codepoints (CE marks), FECN/BECN bits;
* PFC pause frames (MAC control 0x8808, opcode 0x0101): XOFF/XON and priorities;
* per phase, when pcapng packet comments start with a :func:`tokenpcap.records.phase_label`
  (comments starting ``cts `` or ``ack `` mark control packets of that phase).

This module imports :mod:`tokenpcap.wire`, :mod:`tokenpcap.pcap`, ``messages``, ``provenance``
and ``errors`` only.
"""
from __future__ import annotations

import os
import re

import numpy as np

from tokenpcap.analysis.batch import CUT_AT_END, CUT_AT_START, Acc, add_batch
from tokenpcap.analysis.decode_rows import worth_compiling
from tokenpcap.analysis.pcap_fast import read_pcap_fast, takes
from tokenpcap.analysis.decode import KIND_IB, KIND_NAMES, LINKTYPE_ETHERNET, MALFORMED_REASONS
from tokenpcap.analysis.result import (
    L1_OVERHEAD_BYTES, MAX_LISTED_INDICES, NS_PER_S, FlowRows, Report, address_text)
from tokenpcap.errors import DecodeError
from tokenpcap.pcap.capture import CHUNK
from tokenpcap.pcap.reader import open_capture
from tokenpcap.pcap.timestamps import NO_TIME
from tokenpcap.records.provenance import is_provenance, parse_provenance
from tokenpcap.wire.rdma import ETH_MIN_FRAME_BYTES, OPCODES

__all__ = ["Report", "inspect_capture", "inspect_captures", "address_text",
           "L1_OVERHEAD_BYTES", "NS_PER_S", "MAX_FLOWS"]

#: Most flows one inspection follows one by one (per-flow totals, PSNs, rows of the report):
#: every flow costs about 1.1-1.4 KB while it is read (the flow table's key, its per-flow sums
#: and PSN state, its per-phase sums, its report row), so a capture of 2 M one-packet flows
#: peaks at 472 MB with this limit, 2.5 GB without (benchmarks/README.md). The packets of the
#: flows first seen after these are summed as one "other" flow (``roce.flows_other`` and a
#: note): counted in every total and phase, not in the flows, NICs or PSN check.
MAX_FLOWS = 1 << 18

def inspect_capture(path: str | os.PathLike, *, max_records: int = 1 << 20,
                    on_truncation: str = "stop", crc: bool = True,
                    max_flows: int = MAX_FLOWS) -> Report:
    """Read a capture and aggregate everything the module docstring lists.

    Args:
        path: a pcap (us/ns, either byte order), pcapng or ERF file.
        max_records: packets decoded at a time (bounds memory).
        on_truncation: ``"stop"`` (default: report the complete records and ``truncated_at``) or
            ``"error"`` (raise :class:`~tokenpcap.errors.TruncatedFile`).
        crc: verify ICRC/VCRC (default). Without it every packet counts as not checked; the
            CRC arithmetic over full-size frames dominates the run time (docs/analysis.md).
        max_flows: most flows followed one by one (:data:`MAX_FLOWS`); the flows first seen
            after them are summed as one "other" flow (``roce.flows_other``, and a note).

    Raises:
        CaptureError (BadMagic, TruncatedFile): the file is not a capture, or is corrupt; the
            message names the byte offset.
    """
    return inspect_captures([path], max_records=max_records, on_truncation=on_truncation,
                            crc=crc, max_flows=max_flows)


def _provenance(cap) -> tuple[dict | None, list[str]]:
    """The parsed provenance comment of a pcapng file (its first section that has one) and
    notes: a section's comment looks like one but does not parse, sections differ, or it names
    more NICs or ranks than the report lists (:data:`MAX_LISTED_INDICES`)."""
    texts = [str(sec["options"].get("opt_comment", "")) for sec in getattr(cap, "sections", [])]
    texts = [t for t in texts if is_provenance(t)]
    if not texts:
        return None, []
    try:
        prov = parse_provenance(texts[0])
    except DecodeError as err:
        return None, [f"{cap.path}: provenance comment ignored: {err}"]
    notes = [f"{cap.path}: provenance {key}: {len(prov[key]):,} indices, given as ranges "
             f"({MAX_LISTED_INDICES:,} at most are listed)"
             for key in ("nics", "ranks") if prov[key] is not None
             and len(prov[key]) > MAX_LISTED_INDICES]
    if len(set(texts)) > 1:
        notes.append(f"{cap.path}: {len(set(texts))} different provenance comments; the first "
                     "used")
    return prov, notes


def inspect_captures(paths, *, max_records: int = 1 << 20, on_truncation: str = "stop",
                     crc: bool = True, max_flows: int = MAX_FLOWS) -> Report:
    """:func:`inspect_capture` over several files as one capture (e.g. the per-NIC files of
    ``tokenpcap generate``): totals, flows, phases and NICs add up across the files.

    Files are read one after the other, so PSN order is only followed within a file: a flow
    whose packets are in several files (``generate --split phase``) is counted in
    ``roce.psn_flows_unchecked`` and left out of the PSN gaps. Each file's provenance comment
    (:mod:`tokenpcap.records.provenance`, pcapng SHB) is kept in ``Report.files``.

    Raises:
        CaptureError: as :func:`inspect_capture`, naming the file.
    """
    paths = [str(p) for p in paths]
    rep = Report(", ".join(paths), "")
    acc = Acc(crc, max_flows)
    span = [np.iinfo(np.int64).max, np.iinfo(np.int64).min]      # first, last time
    formats, truncated = [], []
    declared: list[tuple[str, str]] = []     # (if_name, if_description) of pcapng interfaces
    for k, path in enumerate(paths):
        cap = open_capture(path, on_truncation=on_truncation)
        formats.append(cap.format)
        acc.start_file(k)
        prov, notes = _provenance(cap)
        rep.files.append({"path": path, "format": cap.format, "provenance": prov})
        rep.notes += notes
        def records(rec: np.ndarray) -> None:        # one batch, by the reference
            acc.compiled = acc.compiled or worth_compiling(cap.data, rec)
            if rec.size:
                _add_totals(rep, span, (_totals_compiled if acc.compiled else _totals)(rec),
                            rec.size)
            add_batch(acc, cap, rec)          # releases the batch's frames when done
            cap.forget_comments()             # the comments of rows already folded in
            acc.forget_comments()

        if takes(cap):                        # a big Ethernet pcap: from its bytes to the sums
            read_pcap_fast(cap, acc, max_records, lambda got, n: _add_totals(
                rep, span, got.tolist(), n), records)
        else:
            for rec in coalesced(cap.batches(max_records), min(max_records, CHUNK)):
                records(rec)
        if cap.truncated_at is not None:
            truncated.append(cap.truncated_at)
        declared += [(i.name, i.description) for i in cap.interfaces if i.name and i.description]
        base = len(rep.interfaces)
        rep.interfaces += [{"index": base + j, "linktype": i.linktype, "name": i.name,
                            "speed_bps": i.speed_bps, "tsresol": i.tsresol,
                            **({"port": i.index} if cap.format == "erf" else {}),
                            **({"file": path} if len(paths) > 1 else {})}
                           for j, i in enumerate(cap.interfaces)]
    if rep.packets and span[1] >= span[0]:
        rep.first_ns, rep.last_ns = span
    rep.format = formats[0] if len(set(formats)) == 1 else ",".join(formats)
    rep.truncated_at = truncated[0] if truncated else None
    _finish(rep, acc)
    rep.notes += _idle_nics(rep, acc, declared)
    return rep


def _add_totals(rep: Report, span: list[int], got: list[int], n: int) -> None:
    """A batch of ``n`` records with capinfos-like sums ``got`` (:func:`_totals`) into ``rep``
    and ``span`` (first and last time so far)."""
    rep.packets += n
    rep.bytes += got[0]
    rep.captured_bytes += got[1]
    rep.frame_bytes_min = got[2] if rep.frame_bytes_min is None else \
        min(rep.frame_bytes_min, got[2])
    rep.frame_bytes_max = max(rep.frame_bytes_max or 0, got[3])
    rep.l1_bytes += got[4]
    rep.ethernet_frames += got[5]
    rep.eth_frame_bytes_max = max(rep.eth_frame_bytes_max, got[6])
    span[:] = min(span[0], got[7]), max(span[1], got[8])


def _totals(rec: np.ndarray) -> list[int]:
    """The capinfos-like sums of a record batch (n >= 1 rows) by numpy passes, in
    :data:`~tokenpcap.analysis.fold.RECORD_TOTALS` order: sums of the original and captured
    lengths, smallest and largest frame, layer-1 bytes (module docstring), Ethernet frames and
    their largest, first and last time (int64 max and min when no record has one)."""
    orig = rec["orig_len"].astype(np.int64)
    eth = rec["linktype"] == LINKTYPE_ETHERNET
    l1 = np.where(eth, np.maximum(orig, ETH_MIN_FRAME_BYTES) + L1_OVERHEAD_BYTES, orig)
    t = rec["time_ns"][rec["time_ns"] != NO_TIME]
    return [int(orig.sum()), int(rec["caplen"].sum(dtype=np.int64)), int(orig.min()),
            int(orig.max()), int(l1.sum()), int(eth.sum()), int(orig[eth].max(initial=0)),
            int(t.min(initial=np.iinfo(np.int64).max)), int(t.max(initial=np.iinfo(np.int64).min))]


def _totals_compiled(rec: np.ndarray) -> list[int]:
    """:func:`_totals` by one compiled pass (:func:`~tokenpcap.analysis.fold.record_totals`)."""
    from tokenpcap.analysis.fold import record_totals     # numba: big captures only

    return record_totals(rec, LINKTYPE_ETHERNET, ETH_MIN_FRAME_BYTES, L1_OVERHEAD_BYTES,
                         NO_TIME).tolist()


def coalesced(batches, rows: int):
    """The record batches of ``batches`` joined into batches of at least ``rows`` rows (the
    last may be shorter), in file order. A reader ends a batch at every pcapng section; a file
    of thousands of one-packet sections would otherwise pay the per-batch cost of the analysis
    for every packet. Rows carry global interface and comment indices, so joining is exact."""
    held: list[np.ndarray] = []
    n = 0
    for rec in batches:
        if not held and rec.size >= rows:
            yield rec
            continue
        held.append(rec)
        n += rec.size
        if n >= rows:
            yield np.concatenate(held)
            held, n = [], 0
    if held:
        yield held[0] if len(held) == 1 else np.concatenate(held)


def _idle_nics(rep: Report, acc: Acc, declared: list[tuple[str, str]]) -> list[str]:
    """Notes naming the NICs of the capture that carry no data, and why.

    A NIC (source address) carries no data when all its packets are control packets of a phase
    (pcapng comments starting ``cts``/``ack``: clear-to-send writes and the ACKs it returns for
    data it receives); a pcapng interface (``node<N>/nic<I>``, its description starting with its
    address) carries none when no packet leaves it (interfaces of other capture points,
    ``node<N>/nic<I>/rx`` and ``<switch>/port<P>``, are not egress captures and are skipped). Both are listed in ``rep.idle_nics``.
    Each ``nics`` entry gets
    ``data_payload_bytes`` (payload of packets whose comment names a data phase) when comments
    are present.
    """
    by_src: dict[str, int] = {}
    labelled = False
    for (label, src), pay in rep.phase_nic.items():
        by_src.setdefault(src, 0)
        if label != "(no phase)":
            labelled = True
            if " [" not in label:
                by_src[src] += pay
    control_only: list[str] = []
    if labelled:
        for e in rep.nics:
            e["data_payload_bytes"] = by_src.get(e["address"], 0)
            if e["data_payload_bytes"] == 0:
                control_only.append(e["address"])
                rep.idle_nics.append({"nic": None, "address": e["address"],
                                      "packets": e["packets"], "reason": "control_only"})
    seen = {e["address"] for e in rep.nics}
    silent = []
    for name, desc in dict(declared).items():
        if not re.fullmatch(r"node\d+/nic\d+", name):    # a NIC's egress only: not the
            continue                  # interfaces of generate --point nic-rx or switch:...
        addr = desc.split(" ", 1)[0]
        if desc.startswith("LID "):
            addr = "lid " + desc.split(" ")[1].lower()
        if addr not in seen:
            silent.append(f"{name} ({addr})")
            rep.idle_nics.append({"nic": name, "address": addr, "packets": 0,
                                  "reason": "no_packet"})
    out = []
    if control_only:
        out.append(f"{len(control_only)} NIC(s) send no data, only clear-to-send writes and ACKs "
                   f"for data they receive: {_some(control_only)}")
    if silent:
        out.append(f"{len(silent)} NIC(s) of the capture send no packet: {_some(silent)}")
    if out:
        out.append("why a NIC carries no data: no collective of the captured phases and ranks "
                   "leaves its node through it (rings and trees cross nodes on the NICs of the "
                   "group's GPUs, channel c on the (c mod g)-th of g; fewer channels than NICs, "
                   "groups inside one node, point-to-point and hierarchical calls use fewer NICs)")
    return out


def _psn(rep: Report, acc: Acc) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-flow PSN gaps, missing and late counts, zero for the flows not followed (spread over
    files, or holding malformed packets)."""
    ps = acc.psn
    nf = len(acc.flows)
    malformed = np.flatnonzero(acc.f["malformed"][:nf] > 0)
    skip = np.union1d(np.array(sorted(acc.spanning), np.int64), malformed)
    out = []
    for name in ("gaps", "missing", "reordered"):
        arr = np.zeros(nf, np.int64)
        got = getattr(ps, name)
        arr[:got.size] = got
        arr[skip] = 0
        out.append(arr)
    rep.roce["psn_flows_malformed"] = int(malformed.size)
    return out[0], out[1], out[2]


def _finish(rep: Report, acc: Acc) -> None:
    n = acc.n
    rep.kinds = {name: int(c) for name, c in zip(KIND_NAMES, acc.kinds) if c}
    gaps, missing, late = _psn(rep, acc)
    f = acc.f
    nf = len(acc.flows)
    cut = (CUT_AT_START[np.maximum(f["op_first"][:nf], 0)] & (f["op_first"][:nf] >= 0)) | \
        (CUT_AT_END[np.maximum(f["op_last"][:nf], 0)] & (f["op_last"][:nf] >= 0))
    rep.roce.update({
        "packets": n["packets"], "payload_bytes": n["payload"], "icrc_ok": n["icrc_ok"],
        "icrc_bad": n["icrc_bad"], "icrc_checked": n["icrc_ok"] + n["icrc_bad"],
        "icrc_unchecked": n["icrc_unchecked"], "vcrc_ok": n["vcrc_ok"], "vcrc_bad": n["vcrc_bad"],
        "psn_gaps": int(gaps.sum()), "psn_missing": int(missing.sum()),
        "psn_reordered": int(late.sum()), "psn_flows_unchecked": len(acc.spanning),
        "cnp": n["cnp"], "fecn": n["fecn"],
        "becn": n["becn"], "malformed": n["malformed"],
        "malformed_reasons": {name: int(c) for (name, _), c in zip(MALFORMED_REASONS, acc.reasons)
                              if c},
        "flows": len(acc.flows), "flows_cut": int(cut.sum()), "icrc_skipped": not acc.crc,
        "ecn": {k: int(v) for k, v in zip(("not_ect", "ect1", "ect0", "ce"), acc.ecn)},
        "opcodes": {OPCODES[c].name if c in OPCODES else f"0x{c:02x}": int(acc.opcodes[c])
                    for c in np.flatnonzero(acc.opcodes).tolist()},
    })
    rep.pfc = {"frames": n["pfc"], "xoff": n["pfc_xoff"], "xon": n["pfc_xon"],
               "priorities": {str(k): int(v) for k, v in enumerate(acc.pfc_prio) if v}}
    keys = np.array(acc.flows.keys, dtype=np.uint64).reshape(-1, 6)
    texts: dict[tuple[int, int, int], str] = {}          # each address formatted once

    def text(kind: int, hi: int, lo: int) -> str:
        k = (kind, hi, lo)
        if k not in texts:
            texts[k] = address_text(kind, hi, lo)
        return texts[k]

    src_of = [text(k, sh, sl) for k, sh, sl, *_ in acc.flows.keys]
    dst_of = [text(k, dh, dl) for k, _, _, dh, dl, _ in acc.flows.keys]
    kind = keys[:, 0].astype(np.int64)
    ints = {"dest_qp": keys[:, 5].astype(np.int64)}
    for name, col in (("packets", "packets"), ("bytes", "bytes"), ("payload_bytes", "payload"),
                      ("first_ns", "first_ns"), ("last_ns", "last_ns"),
                      ("icrc_bad", "icrc_bad"), ("vcrc_bad", "vcrc_bad")):
        ints[name] = f[col][:nf].copy()
    ints.update({"psn_gaps": gaps[:nf], "psn_missing": missing[:nf],
                 "psn_reordered": late[:nf]})
    for name, col in (("cnp", "cnp"), ("ce", "ce"), ("malformed", "malformed"),
                      ("imm_messages", "imm_last")):
        ints[name] = f[col][:nf].copy()
    names = np.array(KIND_NAMES, dtype=object)
    rep.flows = FlowRows({"transport": names[kind].tolist() if nf else [], "src": src_of,
                          "dst": dst_of, "cut": cut[:nf],
                          "udp_sport": np.where(kind != KIND_IB, f["sport"][:nf], -1)},
                         {k: np.asarray(v, np.int64) for k, v in ints.items()})
    for i in np.flatnonzero(cut[:nf]).tolist():
        rep.cut_sources[src_of[i]] = rep.cut_sources.get(src_of[i], 0) + 1
    nics: dict[str, dict] = {}
    pk, by, pay = ints["packets"], ints["bytes"], ints["payload_bytes"]
    for i, src in enumerate(src_of):
        e = nics.get(src)
        if e is None:
            e = nics[src] = {"address": src, "packets": 0, "bytes": 0, "payload_bytes": 0,
                             "flows": 0}
        e["packets"] += int(pk[i])
        e["bytes"] += int(by[i])
        e["payload_bytes"] += int(pay[i])
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
        if fid >= nf:                    # the "other" flow: no source address
            continue
        key = (label, src_of[fid])
        rep.phase_nic[key] = rep.phase_nic.get(key, 0) + int(pay)
    rep.phases = sorted(phases.values(), key=lambda e: e["name"])
    for (fid, code, size), count in acc.small_writes.items():
        key = (acc.labels[code] if code >= 0 else "(no phase)", src_of[fid],
               dst_of[fid], size)
        rep.small_writes[key] = rep.small_writes.get(key, 0) + count
    for k, e in enumerate(rep.files):
        e["sources"] = sorted({src_of[i] for i in acc.file_flows[k]})
        e["labels"] = sorted({_base(acc.labels[c]) for c in acc.file_labels[k]})
    if acc.flows.overflowed:
        o = acc.flows.limit
        other = {"limit": o, "packets": int(f["packets"][o]), "bytes": int(f["bytes"][o]),
                 "payload_bytes": int(f["payload"][o])}
        rep.roce["flows_other"] = other
        rep.notes.append(f"flows beyond {o:,} summarised as 'other': {other['packets']:,} "
                         f"packets, {other['payload_bytes']:,} payload bytes counted in the "
                         "totals and phases, not in the flows, NICs or PSN check")


def _some(names: list[str], most: int = 8) -> str:
    """``a, b, c`` or ``a, b, ... (N more)``."""
    more = f", ... ({len(names) - most:,} more)" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def _base(label: str) -> str:
    """``"pp/forward/SendRecv [cts]"`` → ``"pp/forward/SendRecv"``."""
    return label.split(" [", 1)[0]
