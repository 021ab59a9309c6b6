"""``inspect REPLAY --against-timing SENT``: score a capture of a replay (taken where the device
under test forwarded it) against the capture that was sent, as a lab compares a tester's run.

**Which frame is which.** An RDMA packet (RoCEv2, RoCEv1, InfiniBand) is named by its BTH
destination QP, PSN and opcode, and by how many packets of the same name came before it in its
own capture (the k-th one sent is the k-th one received). Addresses, VLAN, DSCP, UDP source
port and ICRC are not part of the name: a lab rewrites them (``readdress``) and the device may
too. Packets of two QPs of the same number towards different NICs that share a PSN share a
name; they are then paired in order, so a count stays right while the example named may be the
other one.

**What is reported** (:func:`score_replay`):

* ``missing``: sent packets with no received packet of their name; ``extra``: received packets
  with none sent (duplicates among them: names received more often than sent); the first
  :data:`EXAMPLES` of each, with QP, PSN, opcode and index;
* ``reordered``: received packets that arrived after a packet sent later than they were, over
  the whole capture and within their QP (RDMA's receiver sees those as PSN errors);
* per-message start error: for every message's first packet (SEND/WRITE FIRST or ONLY, READ
  request) received, its arrival minus its sending time minus the median of that over all
  received packets (the two clocks' offset): mean, median, p99 and largest magnitude, ns;
* inter-packet gaps: the gaps between consecutive packets of each capture (sent: every RDMA
  packet; received: the matched ones), their median and p99, and the Wasserstein-1 distance
  between the two distributions (the mean absolute difference of their quantile functions,
  over 1,001 quantiles), ns;
* the counters a lab compares, in each capture: PFC pause frames (by class-enable bit), CNPs,
  packets marked CE (ECN 11) and ECN-capable packets.

Memory: two int64 and one uint64 column per RDMA packet of each capture (about 24 bytes a
packet, plus the sort's copy); the captures are read in batches.
"""
from __future__ import annotations

import os
from typing import Iterable

import numpy as np

from tokenpcap.analysis.decode import KIND_IB, KIND_PFC, KIND_ROCEV1, KIND_ROCEV2, decode_batch
from tokenpcap.config.flowfile import occurrence_index
from tokenpcap.errors import InputError
from tokenpcap.pcap.reader import open_capture

__all__ = ["EXAMPLES", "score_replay", "render_timing_text", "first_packet_opcodes"]

#: Examples of each kind of fault listed (counts are always whole).
EXAMPLES = 10
_CNP = 0x81
#: RC/UC/UD opcodes (low 5 bits, IBTA Vol. 1 Table 38) that start a message: SEND FIRST (0),
#: SEND ONLY (4), SEND ONLY with immediate (5), RDMA WRITE FIRST (6), WRITE ONLY (10), WRITE
#: ONLY with immediate (11), RDMA READ request (12).
_FIRST_LOW = (0, 4, 5, 6, 10, 11, 12)


def first_packet_opcodes() -> np.ndarray:
    """bool (256,): the opcodes that open a message (:data:`_FIRST_LOW` in the RC, UC and UD
    groups; CNP 0x81 and others excluded)."""
    out = np.zeros(256, bool)
    for group in (0x00, 0x20, 0x60):
        for low in _FIRST_LOW:
            if not (group == 0x60 and low != 4 and low != 5):    # UD: SEND ONLY (+imm) only
                out[group | low] = True
    return out


def _columns(paths: Iterable[str | os.PathLike]) -> dict:
    """The RDMA packets of ``paths`` read one after the other (time order within each as
    recorded): ``time_ns`` int64, ``name`` uint64 (QP << 32 | PSN << 8 | opcode), ``ecn`` uint8;
    and the capture's counters."""
    times, names = [], []
    counters = {"frames": 0, "rdma_packets": 0, "pfc_frames": 0, "pfc_by_class": [0] * 8,
                "cnps": 0, "ce_marked": 0, "ecn_capable": 0}
    for path in paths:
        cap = open_capture(path, on_truncation="stop")
        for rec in cap.batches():
            d = decode_batch(cap.data, rec, cap.views)
            counters["frames"] += rec.size
            pfc = d["kind"] == KIND_PFC
            counters["pfc_frames"] += int(pfc.sum())
            for c in range(8):
                counters["pfc_by_class"][c] += int(((d["pfc_cev"][pfc] >> c) & 1).sum())
            rdma = np.isin(d["kind"], (KIND_ROCEV2, KIND_ROCEV1, KIND_IB)) & (d["bth"] >= 0)
            op = d["opcode"][rdma]
            ecn = d["ecn"][rdma]
            counters["cnps"] += int((op == _CNP).sum())
            counters["ce_marked"] += int((ecn == 3).sum())
            counters["ecn_capable"] += int((ecn != 0).sum())
            times.append(d["time_ns"][rdma].astype(np.int64))
            names.append((d["destqp"][rdma].astype(np.uint64) << np.uint64(32))
                         | (d["psn"][rdma].astype(np.uint64) << np.uint64(8))
                         | op.astype(np.uint64))
        cap.close()
    t = np.concatenate(times) if times else np.zeros(0, np.int64)
    order = np.argsort(t, kind="stable")          # several files: one time line
    counters["rdma_packets"] = int(t.size)
    return {"time_ns": t[order],
            "name": (np.concatenate(names) if names else np.zeros(0, np.uint64))[order],
            "counters": counters}


def _match(sent: np.ndarray, recv: np.ndarray) -> np.ndarray:
    """int64 (len(recv),): the sent row of each received row's (name, occurrence), -1 none."""
    key = np.dtype([("name", "<u8"), ("occ", "<i8")])
    both = np.empty(sent.size + recv.size, key)
    both["name"] = np.concatenate([sent, recv])
    both["occ"] = np.concatenate([occurrence_index(sent), occurrence_index(recv)])
    _, inv = np.unique(both, return_inverse=True)
    inv = inv.reshape(-1)
    where = np.full(inv.max() + 1 if inv.size else 0, -1, np.int64)
    where[inv[:sent.size]] = np.arange(sent.size)
    return where[inv[sent.size:]]


def _example(name: int, index: int, t: int) -> dict:
    return {"dest_qp": int(name >> 32), "psn": int((name >> 8) & 0xFFFFFF),
            "opcode": int(name & 0xFF), "index": int(index), "time_ns": int(t)}


def _later_than_a_later_one(s_idx: np.ndarray, group: np.ndarray | None) -> np.ndarray:
    """bool: rows (in arrival order) whose sent index is below the largest sent index of an
    earlier row (of the same group, when given)."""
    if s_idx.size == 0:
        return np.zeros(0, bool)
    if group is None:
        prev = np.maximum.accumulate(s_idx)
        return np.concatenate([[False], s_idx[1:] < prev[:-1]])
    order = np.lexsort((np.arange(s_idx.size), group))
    g, v = group[order], s_idx[order]
    span = int(v.max()) + 1
    _, gid = np.unique(g, return_inverse=True)
    shifted = v + gid.reshape(-1).astype(np.int64) * span      # each group above the last
    prev = np.maximum.accumulate(shifted)
    late = np.concatenate([[False], shifted[1:] < prev[:-1]])
    out = np.empty(s_idx.size, bool)
    out[order] = late
    return out


def _stats(x: np.ndarray) -> dict:
    if x.size == 0:
        return {"count": 0}
    a = np.abs(x)
    return {"count": int(x.size), "mean_ns": float(x.mean()), "median_ns": float(np.median(x)),
            "p99_abs_ns": float(np.percentile(a, 99)), "max_abs_ns": int(a.max())}


def _gaps(t: np.ndarray) -> np.ndarray:
    return np.diff(t) if t.size > 1 else np.zeros(0, np.int64)


def _wasserstein(a: np.ndarray, b: np.ndarray) -> float | None:
    if a.size == 0 or b.size == 0:
        return None
    q = np.linspace(0.0, 1.0, 1001)
    return float(np.abs(np.quantile(a, q) - np.quantile(b, q)).mean())


def score_replay(received: Iterable[str | os.PathLike],
                 sent: Iterable[str | os.PathLike]) -> dict:
    """Score the capture ``received`` (files read as one) against ``sent`` (module docstring).

    Returns:
        dict: ``sent`` and ``received`` (their counters), ``matched``, ``missing``, ``extra``,
        ``duplicates``, ``reordered``, ``reordered_in_qp`` (counts), ``examples`` (lists of
        dicts per kind), ``start_error`` and ``gaps`` (statistics in ns), ``ok`` (nothing
        missing, extra or reordered).

    Raises:
        InputError: ``sent`` holds no RDMA packet.
        CaptureError, BadMagic, TruncatedFile: a file cannot be read (from the reader).
    """
    s, r = _columns(sent), _columns(received)
    if s["name"].size == 0:
        raise InputError("--against-timing: got a sent capture without RDMA packets, expected "
                         "the capture the replay sent (tokenpcap generate's files)")
    hit = _match(s["name"], r["name"])
    got = hit >= 0
    seen = np.zeros(s["name"].size, bool)
    seen[hit[got]] = True
    miss = np.flatnonzero(~seen)
    extra = np.flatnonzero(~got)
    sent_names, sent_counts = np.unique(s["name"], return_counts=True)
    recv_names, recv_counts = np.unique(r["name"], return_counts=True)
    pos = np.searchsorted(sent_names, recv_names)
    pos = np.minimum(pos, max(sent_names.size - 1, 0))
    known = sent_names[pos] == recv_names
    dup = int(np.maximum(recv_counts[known] - sent_counts[pos[known]], 0).sum())
    s_idx = hit[got]
    qp = (r["name"][got] >> np.uint64(32)).astype(np.int64)
    late = _later_than_a_later_one(s_idx, None)
    late_qp = _later_than_a_later_one(s_idx, qp)
    delay = r["time_ns"][got] - s["time_ns"][s_idx]
    offset = int(np.median(delay)) if delay.size else 0
    firsts = first_packet_opcodes()[(r["name"][got] & np.uint64(0xFF)).astype(np.int64)]
    err = delay[firsts] - offset
    g_sent, g_recv = _gaps(s["time_ns"]), _gaps(r["time_ns"][got])
    ex = {
        "missing": [_example(int(s["name"][i]), i, s["time_ns"][i]) for i in miss[:EXAMPLES]],
        "extra": [_example(int(r["name"][i]), i, r["time_ns"][i]) for i in extra[:EXAMPLES]],
        "reordered": [_example(int(r["name"][got][i]), np.flatnonzero(got)[i],
                               r["time_ns"][got][i]) for i in np.flatnonzero(late)[:EXAMPLES]],
    }
    return {
        "sent": s["counters"], "received": r["counters"], "matched": int(got.sum()),
        "missing": int(miss.size), "extra": int(extra.size), "duplicates": dup,
        "reordered": int(late.sum()), "reordered_in_qp": int(late_qp.sum()), "examples": ex,
        "clock_offset_ns": offset, "start_error": _stats(err),
        "gaps": {"sent_median_ns": float(np.median(g_sent)) if g_sent.size else None,
                 "sent_p99_ns": float(np.percentile(g_sent, 99)) if g_sent.size else None,
                 "received_median_ns": float(np.median(g_recv)) if g_recv.size else None,
                 "received_p99_ns": float(np.percentile(g_recv, 99)) if g_recv.size else None,
                 "wasserstein_ns": _wasserstein(g_sent, g_recv)},
        "ok": bool(miss.size == 0 and extra.size == 0 and late.sum() == 0),
    }


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:,.0f}"


def render_timing_text(doc: dict) -> str:
    """The text report of :func:`score_replay`'s result."""
    s, r = doc["sent"], doc["received"]
    se, g = doc["start_error"], doc["gaps"]
    lines = ["Replay against the sent capture (--against-timing):",
             f"  RDMA packets:        sent {s['rdma_packets']:,}, received "
             f"{r['rdma_packets']:,}, matched {doc['matched']:,}",
             f"  missing:             {doc['missing']:,}",
             f"  extra:               {doc['extra']:,} (duplicates {doc['duplicates']:,})",
             f"  reordered:           {doc['reordered']:,} (within their QP "
             f"{doc['reordered_in_qp']:,})"]
    for kind in ("missing", "extra", "reordered"):
        for e in doc["examples"][kind]:
            lines.append(f"    {kind}: QP 0x{e['dest_qp']:06x} PSN {e['psn']} opcode "
                         f"0x{e['opcode']:02x} (packet #{e['index']:,} of its capture, "
                         f"{e['time_ns']:,} ns)")
    if se["count"]:
        lines.append(f"  message start error: {se['count']:,} messages, mean "
                     f"{se['mean_ns']:,.0f} ns, median {se['median_ns']:,.0f} ns, p99 |e| "
                     f"{se['p99_abs_ns']:,.0f} ns, max |e| {se['max_abs_ns']:,} ns (clock "
                     f"offset {doc['clock_offset_ns']:,} ns)")
    lines.append(f"  inter-packet gaps:   sent median {_fmt(g['sent_median_ns'])} ns, p99 "
                 f"{_fmt(g['sent_p99_ns'])} ns; received median {_fmt(g['received_median_ns'])}"
                 f" ns, p99 {_fmt(g['received_p99_ns'])} ns; distance (W1) "
                 f"{_fmt(g['wasserstein_ns'])} ns")
    for side, c in (("sent", s), ("received", r)):
        lines.append(f"  {side + ':':21s}PFC frames {c['pfc_frames']:,} (per class "
                     f"{c['pfc_by_class']}), CNPs {c['cnps']:,}, CE-marked {c['ce_marked']:,}"
                     f", ECN-capable {c['ecn_capable']:,}")
    lines.append(f"  verdict:             {'ok' if doc['ok'] else 'FAULTS'}")
    return "\n".join(lines)
