"""Where a run's frames go: the files of a split (:func:`file_specs`: names, the NICs each holds,
and a map from routing key to file), the bytes of each file's header, the interface description
of each NIC, and :func:`route_chunk`, which filters one chunk of frames at the capture point by
the selection, lowers the kept ones to packets, adds them to the run's totals and sends each
file's share, with its packet comments, to the writers.

Capture points (``GenerateOptions.point``, :mod:`tokenpcap.records.points`) decide the files:

============ ========================================= =========================================
split        nic-tx / nic-rx                            switch:NAME:PORT
============ ========================================= =========================================
``nic``      ``<s>_node<NN>_nic<I>.<ext>`` per sending  ``<s>_<NAME>_port<P>.<ext>``, one file
             NIC; ``..._nic<I>_rx.<ext>`` per receiving
             NIC (routing key: ``peer_nic``)
``phase``    ``<s>_<label>.<ext>`` (``_rx`` before the  ``<s>_<NAME>_port<P>_<label>.<ext>``
             extension at nic-rx)
``none``     ``<s>.<ext>`` / ``<s>_rx.<ext>``            ``<s>_<NAME>_port<P>.<ext>``
============ ========================================= =========================================

PFC frames (``kind == PKT_PFC``, sent by switch ports) belong to no message: with
``split="phase"`` at a point other than nic-tx they go to one more file whose label is ``pfc``
(``<s>_pfc_rx.<ext>``, ``<s>_<NAME>_port<P>_pfc.<ext>``), written even when empty. The
selections that pick messages (``--phases``, ``--ranks``, ``--iterations``) keep no PFC frame;
the time window keeps those inside it, and ``--nics`` at nic-rx those sent to the named NICs (at
a switch point ``--nics`` names the NICs whose RoCE frames are kept and PFC frames stay). A NIC's
egress (nic-tx) carries no switch PFC frame: such rows are dropped there.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from tokenpcap.config.profiles import Scenario
from tokenpcap.generate.options import EPOCH_NS, GenerateOptions, GenerateResult
from tokenpcap.generate.output import FileSpec, WriterConfig, interfaces
from tokenpcap.generate.select import Selection
from tokenpcap.generate.tally import tally
from tokenpcap.lower import distinct_ids
from tokenpcap.pcap import PcapngWriter
from tokenpcap.pcap.outputset import OutputSet
from tokenpcap.pcap.registry import capture_format
from tokenpcap.records import LABELS, PKT_ACK, PKT_CNP, PKT_PFC, label_codes
from tokenpcap.records.comments import comment_text, pfc_comment_text
from tokenpcap.records.points import CapturePoint
from tokenpcap.records.rows import take_rows
from tokenpcap.wire.expand import group_positions

__all__ = ["file_specs", "route_chunk", "file_header_bytes", "describe_nic", "PFC_KEY",
           "file_base"]

#: Routing key of PFC frames under ``split="phase"``: the index after the phase labels.
PFC_KEY = len(LABELS)


def file_base(name: str, point: CapturePoint) -> tuple[str, str]:
    """``(stem, suffix)`` of a run's file names at ``point`` (module docstring): the stem
    starts every name, the suffix comes before the extension."""
    if point.at_switch:
        return f"{name}_{point.switch}_port{point.port}", ""
    return name, "_rx" if point.receive else ""


def file_specs(s: Scenario, opt: GenerateOptions, pred_keys: np.ndarray, n_nics: int,
                ext: str, outset: OutputSet) -> tuple[list[FileSpec], np.ndarray]:
    """Output files (staged in ``outset``) and a map from routing key (NIC, label or 0) to
    file index (-1: none)."""
    point = opt.point
    name, sfx = file_base(s.name, point)
    per = s.cluster.nics_per_node
    all_nics = tuple(sorted(opt.selection.nics)) if opt.selection.nics else tuple(range(n_nics))
    if opt.split == "nic" and not point.at_switch:
        keys = sorted(set(pred_keys.tolist()))
        specs = [FileSpec(outset.path(f"{name}_node{k // per:02d}_nic{k % per}{sfx}.{ext}"), (k,),
                          point) for k in keys]
        size = n_nics
    elif opt.split == "phase":
        keys = sorted(set(pred_keys.tolist()))
        if point.kind != "nic-tx":
            keys.append(PFC_KEY)
        specs = [FileSpec(outset.path(f"{name}_{_label_name(k)}{sfx}.{ext}"), all_nics, point)
                 for k in keys]
        size = len(LABELS) + (point.kind != "nic-tx")       # + PFC_KEY
    else:
        keys = [0]
        specs = [FileSpec(outset.path(f"{name}{sfx}.{ext}"), all_nics, point)]
        size = 1
    route = np.full(size, -1, np.int64)
    route[list(keys)] = np.arange(len(keys))
    return specs, route


def _label_name(key: int) -> str:
    return "pfc" if key == PFC_KEY else LABELS[key].replace("/", "-")


def _keep_rdma(tx, m, inv, label, sel: Selection, lab_ok, point: CapturePoint) -> np.ndarray:
    """bool ``(n,)``: the RDMA rows (data, CTS, ACK, CNP) the selection keeps; row ``i`` names
    message ``m[inv[i]]`` of label ``label[inv[i]]``. What depends on the message alone (phase,
    iteration, ranks) is decided once per message, then spread over its rows. Under ``--ranks``
    an ACK or a CNP belongs to the rank it is sent for: both go from the data's receiver (the
    notification point, for a CNP) back to its sender."""
    keep_m = lab_ok[label]
    if sel.iterations is not None:
        keep_m = keep_m & np.isin(m["iteration"], np.asarray(sel.iterations))
    keep = keep_m[inv]
    if sel.nics is not None:
        keep &= _member(tx["peer_nic"] if point.receive else tx["nic"], sel.nics)
    if sel.ranks is not None:
        kc = tx["kind"]
        ack = (kc == PKT_ACK) | (kc == PKT_CNP)   # from the data's receiver to its sender
        ranks = np.asarray(sorted(sel.ranks))
        src_ok, dst_ok = np.isin(m["rank_src"], ranks)[inv], np.isin(m["rank_dst"], ranks)[inv]
        keep &= (np.where(ack, src_ok, dst_ok) if point.receive
                 else np.where(ack, dst_ok, src_ok))
    if sel.window_ns is not None:
        keep &= (tx["time_ns"] >= sel.window_ns[0]) & (tx["time_ns"] < sel.window_ns[1])
    return keep


def _member(values: np.ndarray, members: frozenset[int]) -> np.ndarray:
    """bool ``(n,)``: ``values[i] in members`` for non-negative ints, by a lookup table (one
    pass over ``values``, where ``np.isin`` makes one per member)."""
    top = max(int(values.max(initial=0)), max(members, default=0)) + 1
    table = np.zeros(top, bool)
    table[list(members)] = True
    return table[values]


def _keep_pfc(tx, sel: Selection, point: CapturePoint) -> np.ndarray:
    """bool ``(n,)``: the PFC rows the selection keeps (module docstring)."""
    if point.kind == "nic-tx" or sel.phases or sel.iterations is not None or sel.ranks is not None:
        return np.zeros(tx.size, bool)
    keep = np.ones(tx.size, bool)
    if point.receive:
        keep &= tx["peer_nic"] >= 0
        if sel.nics is not None:
            keep &= np.isin(tx["peer_nic"], np.asarray(sorted(sel.nics)))
    if sel.window_ns is not None:
        keep &= (tx["time_ns"] >= sel.window_ns[0]) & (tx["time_ns"] < sel.window_ns[1])
    return keep


def route_chunk(tx, sched, lower, sel: Selection, lab_ok, opt: GenerateOptions, route, disp,
           res: GenerateResult) -> int:
    """Filter, lower, account and route one chunk of frames at the capture point (``TX_DTYPE``,
    time-ordered; module docstring); returns the rows kept. PFC rows keep their place in time
    among the RoCE rows.

    Each distinct message of the chunk is read from the schedule once (a chunk of full-size
    messages names a few hundred messages for tens of thousands of rows): its label, the
    selection's verdict on it, its part of the lowering and its packet comments are computed per
    message and spread over its rows by index."""
    point = opt.point
    pfc = tx["kind"] == PKT_PFC
    has_pfc = bool(pfc.any())
    rd = np.flatnonzero(~pfc) if has_pfc else None
    trd = take_rows(tx, rd) if has_pfc else tx
    u, inv = distinct_ids(trd["msg"])       # PFC rows name no message: never looked up
    m = sched.message_index[u]
    label_m = label_codes(m)
    keep = _keep_rdma(trd, m, inv, label_m, sel, lab_ok, point)
    if has_pfc:
        full = np.zeros(tx.size, bool)
        full[rd] = keep
        full[pfc] = _keep_pfc(take_rows(tx, pfc), sel, point)
        idx = np.flatnonzero(full)
    else:
        idx = np.flatnonzero(keep)
    if idx.size == 0:
        return 0
    if idx.size < tx.size:
        tx = take_rows(tx, idx)
        inv = inv[keep]
    kc = tx["kind"].astype(np.int64)                # PKT_DATA, PKT_CTS, PKT_ACK, PKT_CNP or PKT_PFC
    pfc = kc == PKT_PFC if has_pfc else None
    label = label_m[inv]
    if has_pfc:                 # label per row: the message's; PFC rows none (PFC_KEY)
        lab = np.full(len(tx), PFC_KEY, np.int64)
        lab[~pfc] = label
        label = lab
    if opt.split == "nic":
        key = (np.zeros(len(tx), np.int64) if point.at_switch
               else tx["peer_nic"] if point.receive else tx["nic"])
    else:
        key = label if opt.split == "phase" else np.zeros(len(tx), np.int64)
    fid = route[key] if not has_pfc else np.where(key >= 0, route[np.maximum(key, 0)], -1)
    if has_pfc or (kc == PKT_CNP).any():
        pk = lower(tx, sched.message_index)         # the fabric's rows: PFC, CNP
        pk["time_ns"] += EPOCH_NS
        order = slot = None
        pay = pk["payload_bytes"]
        parts = list(_parts(fid))
    else:   # each file's rows together, in their order: a file's share is a slice of pk
        order, starts = group_positions(fid, int(route.max(initial=-1)) + 1)
        shared = disp.chunk_rows(len(tx))   # the writers' shared buffer, or None: a new array
        slot = None if shared is None else shared[0]
        pay = np.empty(len(tx), np.int64)
        pk = lower.rdma_rows(tx, m, inv, time_add_ns=EPOCH_NS, pos=order,
                             out=None if shared is None else shared[1], pay_out=pay)
        parts = [(f, slice(a, b)) for f, (a, b) in enumerate(zip(starts[:-2].tolist(),
                                                              starts[1:-1].tolist())) if b > a]
    tally(res, tx, pay, kc, label)
    labels_all, codes_all = None, None
    if capture_format(opt.fmt).comments:
        trows = np.flatnonzero(~pfc) if has_pfc else slice(None)
        # one comment per (message, kind); inv is ordered as the message ids, so the pairs
        # sort as (message id, kind) do
        pairs, codes_all = distinct_ids(inv * 8 + kc[trows])
        mu, ku = m[pairs >> 3], pairs & 7
        cols = [ku.tolist(), label_codes(mu).tolist()] + [
            mu[f].tolist() for f in ("iteration", "call_id", "step", "layer", "microbatch",
                                     "token_start", "token_end")]
        sc = sched.scenario
        samples, seq_length = sc.token_layout
        lay = dict(samples=samples, seq_length=seq_length)
        labels_all = [comment_text(*args, **lay) for args in zip(*cols)]
        if has_pfc:
            codes_all = _pfc_comments(tx, pfc, codes_all, labels_all)
        else:                   # in pk's order
            grouped = np.empty_like(codes_all)
            grouped[order] = codes_all
            codes_all = grouped
    out = []
    for f, part in parts:
        rows = pk[part] if isinstance(part, slice) else take_rows(pk, part)
        if labels_all is not None:
            used, local = distinct_ids(codes_all[part])
            out.append((f, rows, [labels_all[u] for u in used.tolist()], local.reshape(-1)))
        else:
            out.append((f, rows, None, None))
    disp.send_chunk(out, slot)
    return int(idx.size)


def _parts(fid: np.ndarray):
    """``(file, rows)`` for each file index ``f >= 0`` of ``fid`` (int ``(n,)``), rows in their
    order: a chunk that goes to one file whole is one part without a copy of the indices."""
    if fid.size and int(fid.min()) == int(fid.max()):
        if int(fid[0]) >= 0:
            yield int(fid[0]), slice(None)
        return
    # numpy sorts 16-bit keys stably by radix, O(n) (a file index is at most the NICs, < 2**15)
    order = np.argsort(fid.astype(np.int16 if int(fid.max(initial=0)) < 1 << 15 else np.int64),
                       kind="stable")
    bounds = np.flatnonzero(np.diff(fid[order])) + 1
    for part in np.split(order, bounds):
        if int(fid[part[0]]) >= 0:
            yield int(fid[part[0]]), part


def _pfc_comments(tx, pfc: np.ndarray, codes_rd: np.ndarray, labels: list[str]) -> np.ndarray:
    """Comment codes of every row: the RDMA rows' ``codes_rd``, then one comment per distinct
    (vector, quanta) of the PFC rows appended to ``labels`` (:func:`pfc_comment_text`)."""
    codes = np.empty(len(tx), np.int64)
    codes[~pfc] = codes_rd
    pair = tx["index"][pfc].astype(np.int64) * 0x10000 + tx["msg"][pfc]
    u, inv = np.unique(pair, return_inverse=True)
    codes[pfc] = len(labels) + inv.reshape(-1)
    labels.extend(pfc_comment_text(int(p) >> 16, int(p) & 0xFFFF) for p in u.tolist())
    return codes


def file_header_bytes(opt: GenerateOptions, cfg: WriterConfig, spec: FileSpec) -> int:
    """Bytes of one file's header: the format's fixed header (pcap 24, raw ERF 0) or, for a format
    with interfaces (pcapng), its section header and interface blocks, measured by opening a
    throwaway writer with the same interfaces."""
    fmt = capture_format(opt.fmt)
    if not fmt.comments:
        return fmt.file_header
    with tempfile.TemporaryDirectory() as tmp:
        w = PcapngWriter(Path(tmp) / "header.pcapng", interfaces(spec, cfg), snaplen=opt.snaplen,
                         threaded=False, section_comment=cfg.section_comment)
        n = w.bytes_written
        w.abort()
    return n


def describe_nic(addr, n: int, ib: bool) -> str:
    import ipaddress

    mac = ":".join(f"{b:02x}" for b in addr.mac[n].tolist())
    if ib:
        return f"LID 0x{int(addr.lid[n]):04x} GID {ipaddress.IPv6Address(bytes(addr.gid[n]))}"
    return f"{ipaddress.IPv4Address(bytes(addr.ipv4[n]))} {mac}"
