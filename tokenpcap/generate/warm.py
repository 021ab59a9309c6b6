"""The writers' compiled functions loaded once, in the parent, before the writer processes are
forked: :func:`load_writer_functions`.

numba loads a compiled function from its cache the first time the function is called with a
new argument type, and the frame loop, the row checks and the record layout of a headers-only
batch (:mod:`tokenpcap.wire.direct`, :mod:`tokenpcap.wire.checks`,
:mod:`tokenpcap.pcap.layout`, and a headers-only pcap's records built in place,
:mod:`tokenpcap.generate.inplace`) take about 0.05 CPU-s to load in a fresh process
(benchmarks/README.md, packet_path.py). A forked writer inherits every function its parent
has loaded, so writing one small batch of made-up rows through a throwaway file of the run's
format and snap length in the parent loads them once, instead of once in every writer. The
batch is three frames of one NIC: a one-packet RDMA WRITE with a short payload (built whole
with its CRCs when kept whole), a middle packet of a long one (the vectorized path of full
frames) and an ACK.
"""
from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

from tokenpcap.generate.inplace import InPlaceRecords
from tokenpcap.generate.pending import captured_bytes
from tokenpcap.pcap import Comments
from tokenpcap.pcap.registry import capture_format
from tokenpcap.records import PACKET_DTYPE
from tokenpcap.wire import rdma
from tokenpcap.wire.gather import BatchFill

__all__ = ["load_writer_functions", "sample_rows"]


def sample_rows(builder, nic: int) -> np.ndarray:
    """``PACKET_DTYPE (3,)``: a WRITE Only of 64 bytes, a WRITE Middle of 1,024 and an ACK, sent
    by NIC ``nic`` to itself, their ``frame_bytes`` from ``builder``
    (:meth:`tokenpcap.wire.builder.FrameBuilder.frame_bytes`)."""
    p = np.zeros(3, PACKET_DTYPE)
    p["opcode"] = [rdma.WRITE_ONLY, rdma.WRITE_MIDDLE, rdma.ACKNOWLEDGE]
    p["payload_bytes"] = [64, 1024, 0]
    p["reth_len"] = [64, 0, 0]
    p["aeth"] = [0, 0, 0x1F << 24]
    p["ack_req"] = [1, 0, 0]
    p["nic"] = p["peer_nic"] = nic
    p["psn"] = p["ip_id"] = [1, 2, 1]
    p["src_qp"], p["dest_qp"], p["udp_sport"] = 0x11, 0x12, 0xC000
    p["time_ns"] = [1000, 2000, 3000]
    p["frame_bytes"] = builder.frame_bytes(p)
    return p


def load_writer_functions(spec, cfg, builder, open_writer) -> None:
    """Write :func:`sample_rows` of ``spec``'s first NIC through a throwaway file of ``cfg``'s
    format and snap length (``open_writer(spec)``: a capture writer, unthreaded: no thread may
    run when the writers are forked), as a writer process writes a batch, then drop it: the
    compiled functions a batch of that file calls are loaded in this process.

    Raises:
        OutputError: the temporary file cannot be written.
    """
    with tempfile.TemporaryDirectory() as tmp:
        w = open_writer(replace(spec, path=Path(tmp) / f"warm{spec.path.suffix}"))
        try:
            p = sample_rows(builder, spec.nics[0])
            captured_bytes(p["frame_bytes"], cfg.snaplen)
            comments = Comments(["warm"], np.zeros(p.size, np.int64)) if capture_format(cfg.fmt).comments else None
            w.write_batch(p["time_ns"], p["frame_bytes"].astype(np.int64), BatchFill(builder, p),
                          0, comments)
            if InPlaceRecords.serves(w):        # a headers-only pcap's parts: built in place
                rec = InPlaceRecords(builder, w, cfg.snaplen, 1 << 12)
                rec.may_serve(p)
                rec.add(p)
        finally:
            w.abort()
