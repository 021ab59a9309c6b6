"""The frames of traced messages: a Wireshark display filter per NIC, frame numbers in a capture.

A data packet of a message is known by three header fields the lowering gives it
(:mod:`tokenpcap.lower`, from the run's seed): the sender's address, the BTH DestQP (the
receiver's QPN of the connection, :func:`tokenpcap.lower.qpn` with role 1) and the BTH PSN
(the QP's initial PSN, :func:`tokenpcap.lower.initial_psn`, plus the packets posted on the QP
before the message, plus the packet's index, modulo 2**24; IBTA vol.1 9.7.1). ACKs and
clear-to-send writes leave the receiver and never match. So the display filter of a sending NIC
is ``ip.src == A && ((infiniband.bth.destqp == Q && infiniband.bth.psn >= P && infiniband.bth.psn
<= P') || ...)`` (``ipv6.src`` with IPv6, ``infiniband.lrh.slid`` on InfiniBand): it holds for
pcap, pcapng and ERF alike, and its ``token`` variant keeps only the packets whose payload holds
bytes of the traced tokens.

In a capture (``--capture``) the frames are found by those fields (decoded with
:func:`tokenpcap.analysis.decode.decode_batch`), and checked against the packet comment
(:mod:`tokenpcap.records.comments`, when the file has one) and the message's time window (frame
time minus the capture's epoch, :data:`tokenpcap.generate.run.EPOCH_NS`); the run's seed and
scale come from the provenance comment (:mod:`tokenpcap.records.provenance`). Frame numbers
count packet records from 1, as Wireshark's ``frame.number``.
"""
from __future__ import annotations

import ipaddress
import os
from pathlib import Path

import numpy as np

from tokenpcap.config.addresses import nic_addresses
from tokenpcap.config.types import Scenario
from tokenpcap.records.provenance import is_provenance, parse_provenance

__all__ = ["nic_names", "set_packet_ids", "nic_filters", "capture_files", "capture_provenance",
           "find_frames"]

_PSN_MOD = 1 << 24


def nic_names(s: Scenario, nics) -> dict[int, str]:  # type: ignore[no-untyped-def]
    """``node<NN>/nic<I>`` of each global NIC index (as the pcapng interface names)."""
    per = int(s.cluster.nics_per_node)
    return {int(n): f"node{int(n) // per:02d}/nic{int(n) % per}" for n in nics}


def set_packet_ids(carriers, seed: int) -> None:  # type: ignore[no-untyped-def]
    """Set ``dest_qp`` and ``psn_first`` of every NIC carrier matched to a message, as the
    lowering with ``seed`` writes them (module docstring)."""
    from tokenpcap.lower import initial_psn, qpn

    for k in carriers:
        if k.on_nic and k.qp >= 0:
            k.dest_qp = int(qpn(seed, k.dst_nic, k.src_nic, k.qp, 1))
            k.psn_first = int((int(initial_psn(seed, k.src_nic, k.dst_nic, k.qp, 0))
                               + k.psn_offset) % _PSN_MOD)


def _addr(s: Scenario, addrs, nic: int) -> str:
    if s.cluster.transport == "infiniband":
        return f"infiniband.lrh.slid == {int(addrs.lid[nic])}"
    if int(s.cluster.network.ip_version) == 6:
        return f"ipv6.src == {ipaddress.IPv6Address(bytes(addrs.ipv6[nic]))}"
    return f"ip.src == {ipaddress.IPv4Address(bytes(addrs.ipv4[nic]))}"


def _psn_terms(first: int, n: int) -> list[str]:
    out, p = [], first
    while n > 0:
        m = min(n, _PSN_MOD - p)
        out.append(f"infiniband.bth.psn == {p}" if m == 1 else
                   f"infiniband.bth.psn >= {p} && infiniband.bth.psn <= {p + m - 1}")
        p, n = 0, n - m
    return out


def nic_filters(s: Scenario, carriers, tokens_only: bool = False) -> dict[int, str]:  # type: ignore[no-untyped-def]
    """A display filter per sending NIC showing exactly the data frames of the NIC ``carriers``
    (with ``tokens_only``: only their packets ``Carrier.packets``); module docstring."""
    addrs = nic_addresses(s.cluster)
    terms: dict[int, list[str]] = {}
    for k in carriers:
        if not (k.on_nic and k.psn_first >= 0):
            continue
        a, n = (k.packets[0], k.packets[1] - k.packets[0]) if tokens_only else (0, k.n_packets)
        if n <= 0:
            continue
        for t in _psn_terms((k.psn_first + a) % _PSN_MOD, n):
            terms.setdefault(k.src_nic, []).append(f"(infiniband.bth.destqp == {k.dest_qp:#x} && "
                                                   f"{t})")
    return {nic: f"{_addr(s, addrs, nic)} && ({' || '.join(terms[nic])})" for nic in sorted(terms)}


def capture_files(path: str | Path) -> list[Path]:
    """The capture files of ``path``: itself, or a directory's ``*.pcapng`` files (sorted).

    Raises:
        TraceError: no such file, a directory without pcapng files, or one where a run was
            stopped while moving its files into place
            (:func:`tokenpcap.pcap.outputset.stopped_commit_text`).
    """
    from tokenpcap.analysis.trace_text import TraceError

    from tokenpcap.pcap.filekind import special_kind
    from tokenpcap.pcap.outputset import stopped_commit_text
    from tokenpcap.pcap.pathlimits import shown

    p = Path(path)
    if p.is_dir():
        stopped = stopped_commit_text(p)
        if stopped:
            raise TraceError(f"--capture: {stopped}")
        files = sorted(p.glob("*.pcapng"))
        if not files:
            raise TraceError(f"{p}: --capture: got a directory without *.pcapng files, expected "
                             "the output of tokenpcap generate")
        return files
    if not p.is_file():
        kind = special_kind(p) if os.path.lexists(p) else None
        got = kind or "a path that does not exist"
        raise TraceError(f"{shown(p)}: --capture: got {got}, expected a pcapng file or a "
                         "directory of them")
    return [p]


def capture_provenance(files: list[Path]) -> dict:
    """The provenance comment (:mod:`tokenpcap.records.provenance`) the files share.

    Raises:
        TraceError: a file without a provenance comment (not pcapng, or not written by
            ``tokenpcap generate``), or files of runs with different scenario, scale,
            iterations or seed.
        CaptureError, DecodeError: a file that cannot be read; a malformed provenance comment.
    """
    from tokenpcap.analysis.trace_text import TraceError
    from tokenpcap.pcap.reader import open_capture

    seen: dict | None = None
    for f in files:
        with open_capture(f) as cap:
            texts = [str(sec["options"].get("opt_comment", ""))
                     for sec in getattr(cap, "sections", [])]
        texts = [t for t in texts if is_provenance(t)]
        if not texts:
            raise TraceError(f"{f}: provenance comment: got none, expected a pcapng file written "
                             "by tokenpcap generate (it names the run's scale and seed)")
        prov = parse_provenance(texts[0])
        if seen is not None:
            for key in ("scenario", "scale", "iterations", "seed"):
                if prov[key] != seen[key]:
                    raise TraceError(f"{f}: provenance {key}: got {prov[key]}, expected "
                                     f"{seen[key]} as in {files[0]} (files of one run)")
        seen = prov
    assert seen is not None
    return seen


def _src_key(s: Scenario, addrs, nic: int) -> tuple[int, int]:
    """The decoder's (src_hi, src_lo) of a NIC (:data:`tokenpcap.analysis.columns.DECODED_DTYPE`)."""
    if s.cluster.transport == "infiniband":
        return 0, int(addrs.lid[nic])
    if int(s.cluster.network.ip_version) == 6:
        b = bytes(addrs.ipv6[nic])
        return int.from_bytes(b[:8], "big"), int.from_bytes(b[8:], "big")
    return 0, int.from_bytes(bytes(addrs.ipv4[nic]), "big")


def find_frames(s: Scenario, files: list[Path], carriers, epoch_ns: int) -> list[dict]:  # type: ignore[no-untyped-def]
    """Frame numbers of the data frames of the NIC ``carriers`` in each file (module docstring):
    ``[{"file", "frames", "token_frames", "comment_mismatches"}]`` for the files that hold some;
    ``token_frames`` are the frames whose payload holds bytes of the traced tokens. Each
    carrier's ``frames`` lists its own in packet order (-1 for a packet not in the files)."""
    from tokenpcap.analysis.decode import decode_batch
    from tokenpcap.pcap.reader import open_capture

    addrs = nic_addresses(s.cluster)
    want: dict[tuple, tuple] = {}
    for k in carriers:
        if k.on_nic and k.psn_first >= 0:
            k.frames = [-1] * k.n_packets
            hi, lo = _src_key(s, addrs, k.src_nic)
            for j in range(k.n_packets):
                want[(hi, lo, k.dest_qp, (k.psn_first + j) % _PSN_MOD)] = (k, j)
    qps = np.fromiter({key[2] for key in want}, np.int64) if want else np.zeros(0, np.int64)
    out = []
    for f in files:
        frames, token_frames, mismatches, base = [], [], 0, 0
        with open_capture(f) as cap:
            for batch in cap.batches():
                dec = decode_batch(cap.data, batch)
                for i in np.flatnonzero(np.isin(dec["destqp"], qps) & (dec["bth"] >= 0)).tolist():
                    hit = want.get((int(dec["src_hi"][i]), int(dec["src_lo"][i]),
                                    int(dec["destqp"][i]), int(dec["psn"][i])))
                    if hit is None:
                        continue
                    k, j = hit
                    t = int(batch["time_ns"][i]) - epoch_ns
                    if not k.start_ns <= t <= k.end_ns:
                        continue
                    code = int(batch["comment"][i])
                    if code >= 0 and cap.comments[code] != k.comment:
                        mismatches += 1
                        continue
                    n = base + i + 1
                    k.frames[j] = n
                    frames.append(n)
                    if k.packets[0] <= j < k.packets[1]:
                        token_frames.append(n)
                base += len(batch)
        if frames:
            out.append({"file": str(f), "frames": frames, "token_frames": token_frames,
                        "comment_mismatches": mismatches})
    return out
