"""``chrome`` export: Trace Event Format JSON (Chrome ``about://tracing``, Perfetto).

One process per rank with a compute thread (forward/backward/recompute/optimizer blocks) and a NIC
thread (RDMA messages, first bit to last bit); ``ts``/``dur`` in µs written with three decimals
(exact ns).
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from tokenpcap.export.registry import atomic_text, register_export
from tokenpcap.pipeline import Prepared
from tokenpcap.records import DIMS, KIND_DATA, PHASES, phase_label

__all__ = ["write_chrome"]


def _us(t: int) -> float:
    return round(t / 1000, 3)


def write_chrome(timeline: np.ndarray, messages: np.ndarray, out: str | os.PathLike) -> Path:
    """Trace Event Format JSON: ``X`` (complete) events, one process per rank, thread 0 compute,
    thread 1 its NIC's RDMA messages; ``M`` metadata names them."""
    names = {b"F": "forward", b"B": "backward", b"R": "recompute", b"O": "optimizer"}
    ev: list[dict] = []
    ranks = sorted(set(timeline["rank"].tolist()) | set(messages["rank_src"].tolist()))
    for r in ranks:
        ev.append({"ph": "M", "name": "process_name", "pid": r, "args": {"name": f"rank {r}"}})
        ev.append({"ph": "M", "name": "thread_name", "pid": r, "tid": 0,
                   "args": {"name": "compute"}})
        ev.append({"ph": "M", "name": "thread_name", "pid": r, "tid": 1,
                   "args": {"name": "NIC sends (RDMA)"}})
    for b in timeline:
        ev.append({"ph": "X", "pid": int(b["rank"]), "tid": 0, "cat": "compute",
                   "name": f"{names.get(bytes(b['what']), '?')} mb={int(b['microbatch'])}",
                   "ts": _us(int(b["start_ns"])), "dur": _us(int(b["end_ns"] - b["start_ns"]))})
    sent = messages[messages["first_tx_ns"] >= 0] if "first_tx_ns" in messages.dtype.names \
        else messages[:0]
    for m in sent:
        label = phase_label(int(m["dim"]), int(m["phase"]), int(m["collective"]))
        ev.append({"ph": "X", "pid": int(m["rank_src"]), "tid": 1, "cat": DIMS[int(m["dim"])],
                   "name": f"{label} step {int(m['step'])}", "ts": _us(int(m["first_tx_ns"])),
                   "dur": _us(max(int(m["last_tx_end_ns"] - m["first_tx_ns"]), 1)),
                   "args": {"bytes": int(m["size_bytes"]), "dst_rank": int(m["rank_dst"]),
                            "src_nic": int(m["src_nic"]), "dst_nic": int(m["dst_nic"]),
                            "qp": int(m["qp"]), "kind": "data" if m["kind"] == KIND_DATA
                            else "cts", "phase": PHASES[int(m["phase"])]}})
    out = Path(out)
    atomic_text(out, [json.dumps({"traceEvents": ev, "displayTimeUnit": "ns"})])
    return out


@register_export("chrome", "Trace Event JSON for Perfetto / about://tracing")
def _chrome(done: Prepared, out: Path) -> list[Path]:
    return [write_chrome(done.schedule.timeline, done.schedule.messages, out)]
