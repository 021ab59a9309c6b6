"""Where a run's frames go: the files of a split (:func:`file_specs`: names, the NICs each holds,
and a map from routing key to file), the bytes of each file's header, the interface description
of each NIC, and :func:`route_chunk`, which filters one chunk of transmitted frames by the
selection, lowers the kept ones to packets, adds them to the run's totals and sends each file's
share, with its packet comments, to the writers.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from tokenpcap.config.profiles import Scenario
from tokenpcap.generate.options import EPOCH_NS, GenerateOptions, GenerateResult
from tokenpcap.generate.output import FileSpec, WriterConfig, interfaces
from tokenpcap.generate.select import Selection
from tokenpcap.pcap import PcapngWriter
from tokenpcap.pcap.outputset import OutputSet
from tokenpcap.pcap.registry import capture_format
from tokenpcap.records import LABELS, PKT_ACK, PKT_CTS, PKT_DATA, label_codes
from tokenpcap.records.comments import comment_text

__all__ = ["file_specs", "route_chunk", "file_header_bytes", "describe_nic"]


def file_specs(s: Scenario, opt: GenerateOptions, pred_keys: np.ndarray, n_nics: int,
                ext: str, outset: OutputSet) -> tuple[list[FileSpec], np.ndarray]:
    """Output files (staged in ``outset``) and a map from routing key (NIC, label or 0) to
    file index (-1: none)."""
    name = s.name
    per = s.cluster.nics_per_node
    sel_nics = sorted(set(pred_keys.tolist())) if opt.split == "nic" else None
    all_nics = tuple(sorted(opt.selection.nics)) if opt.selection.nics else tuple(range(n_nics))
    if opt.split == "nic":
        keys = sel_nics
        specs = [FileSpec(outset.path(f"{name}_node{k // per:02d}_nic{k % per}.{ext}"), (k,))
                 for k in keys]
        size = n_nics
    elif opt.split == "phase":
        keys = sorted(set(pred_keys.tolist()))
        specs = [FileSpec(outset.path(f"{name}_{LABELS[k].replace('/', '-')}.{ext}"), all_nics)
                 for k in keys]
        size = len(LABELS)
    else:
        keys = [0]
        specs = [FileSpec(outset.path(f"{name}.{ext}"), all_nics)]
        size = 1
    route = np.full(size, -1, np.int64)
    route[list(keys)] = np.arange(len(keys))
    return specs, route


def route_chunk(tx, sched, lower, sel: Selection, lab_ok, opt: GenerateOptions, route, disp,
           res: GenerateResult) -> int:
    msgs = sched.message_index
    m = msgs[tx["msg"]]
    kind = tx["kind"]
    kc = kind.astype(np.int64)                      # PKT_DATA, PKT_CTS or PKT_ACK
    label = label_codes(m)
    keep = lab_ok[label]
    if sel.iterations is not None:
        keep &= np.isin(m["iteration"], np.asarray(sel.iterations))
    if sel.nics is not None:
        keep &= np.isin(tx["nic"], np.asarray(sorted(sel.nics)))
    if sel.ranks is not None:
        who = np.where(kc == PKT_ACK, m["rank_dst"], m["rank_src"])
        keep &= np.isin(who, np.asarray(sorted(sel.ranks)))
    if sel.window_ns is not None:
        keep &= (tx["time_ns"] >= sel.window_ns[0]) & (tx["time_ns"] < sel.window_ns[1])
    idx = np.flatnonzero(keep)
    if idx.size == 0:
        return 0
    tx, m, kc, label = tx[idx], m[idx], kc[idx], label[idx]
    pk = lower(tx, msgs)
    pk["time_ns"] += EPOCH_NS
    _account(res, tx, pk, kc, label)
    key = tx["nic"] if opt.split == "nic" else label if opt.split == "phase" else np.zeros(len(tx), np.int64)
    fid = route[key]
    labels_all, codes_all = None, None
    if capture_format(opt.fmt).comments:
        pair = tx["msg"].astype(np.int64) * 3 + kc
        _, first, inv = np.unique(pair, return_index=True, return_inverse=True)
        mu, ku = m[first], kc[first]
        cols = [ku.tolist(), label_codes(mu).tolist()] + [
            mu[f].tolist() for f in ("iteration", "call_id", "step", "layer", "microbatch",
                                     "token_start", "token_end")]
        sc = sched.scenario
        samples, seq_length = sc.token_layout
        lay = dict(samples=samples, seq_length=seq_length)
        labels_all = [comment_text(*args, **lay) for args in zip(*cols)]
        codes_all = inv.reshape(-1)
    order = np.argsort(fid, kind="stable")
    bounds = np.flatnonzero(np.diff(fid[order])) + 1
    for part in np.split(order, bounds):
        f = int(fid[part[0]])
        if f < 0:
            continue
        if labels_all is not None:
            used, local = np.unique(codes_all[part], return_inverse=True)
            disp.send(f, pk[part], [labels_all[u] for u in used.tolist()], local.reshape(-1))
        else:
            disp.send(f, pk[part], None, None)
    return int(idx.size)


def _account(res: GenerateResult, tx, pk, kc, label) -> None:
    data = kc == PKT_DATA
    pay = pk["payload_bytes"].astype(np.int64)
    if data.any():
        per = np.bincount(label[data], weights=pay[data], minlength=len(LABELS))
        cnt = np.bincount(label[data], minlength=len(LABELS))
        for i in np.flatnonzero(cnt).tolist():
            res.phase_payload[LABELS[i]] = res.phase_payload.get(LABELS[i], 0) + int(per[i])
            res.phase_packets[LABELS[i]] = res.phase_packets.get(LABELS[i], 0) + int(cnt[i])
        np.add.at(res.nic_payload, tx["nic"][data], pay[data])
    cts = kc == PKT_CTS
    res.cts_packets += int(cts.sum())
    res.cts_payload += int(pay[cts].sum())
    res.ack_packets += int((kc == PKT_ACK).sum())
    t = tx["time_ns"]
    res.first_ns = int(t[0]) if res.first_ns < 0 else min(res.first_ns, int(t[0]))
    res.last_ns = max(res.last_ns, int(t[-1]))


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
