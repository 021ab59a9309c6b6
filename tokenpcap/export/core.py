"""``tokenpcap export``: the timed RDMA messages of a scenario for simulators, testbeds and viewers.

The messages come from the schedule (stage 5, :class:`tokenpcap.schedule.runner.Schedule`): one row per
RDMA message with its provenance and the engine's times (``tokenpcap.schedule.engine.nic.MSG_STATE_DTYPE``).
Formats:

* ``hpcc``: the input files of the HPCC ns-3 simulator, ready to run
  (:mod:`tokenpcap.export.hpcc`: flows, topology, config, trace).
* ``csv`` / ``parquet``: the message table, one row per message, times in integer ns.
* ``chrome``: Trace Event Format JSON (Chrome ``about://tracing``, Perfetto): one process per
  rank with a compute thread (forward/backward/recompute/optimizer blocks) and a NIC thread (RDMA
  messages, first bit to last bit); ``ts``/``dur`` in µs written with three decimals (exact ns).

Clear-to-send control messages (``kind`` 1) are in the CSV/Parquet table (column ``kind``).
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np

from tokenpcap.errors import InputError, OutputError
from tokenpcap.export.hpcc import write_hpcc
from tokenpcap.pipeline import schedule_scenario
from tokenpcap.records import COLLECTIVES, DIMS, KIND_DATA, PHASES, phase_label

__all__ = ["FORMATS", "schedule_scenario", "write_hpcc", "write_table", "write_chrome",
           "export_scenario", "TABLE_COLUMNS"]

FORMATS = ("hpcc", "csv", "parquet", "chrome")
#: columns of the CSV/Parquet table, in order
TABLE_COLUMNS = ("msg_id", "start_ns", "first_tx_ns", "last_tx_end_ns", "end_ns", "src_nic",
                 "dst_nic", "qp", "size_bytes", "kind", "phase", "collective", "dim",
                 "iteration", "layer", "microbatch", "step", "call_id", "rank_src", "rank_dst",
                 "token_start", "token_end")


def _discard(tmp: Path) -> None:
    """Remove a temporary file if it exists; a file system that refuses (read-only) is left
    alone: the error that brought us here is the one to report."""
    try:
        tmp.unlink(missing_ok=True)
    except OSError:
        pass


def _atomic_text(path: Path, lines) -> None:
    tmp = path.with_name(f".{path.name}.part")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            f.writelines(lines)
        os.replace(tmp, path)
    except OSError as err:
        _discard(tmp)
        raise OutputError(f"{path}: cannot write: {err.strerror}") from err


def table_columns(messages: np.ndarray) -> dict[str, list]:
    """The CSV/Parquet columns (:data:`TABLE_COLUMNS`) of a message table as Python lists."""
    m = messages
    end = m["arrival_ns"] if "arrival_ns" in m.dtype.names else m["start_ns"]
    labels = [phase_label(int(d), int(p), int(c)) if d < len(DIMS) else ""
              for d, p, c in zip(m["dim"], m["phase"], m["collective"])]
    cols: dict[str, list] = {}
    for name in TABLE_COLUMNS:
        if name == "end_ns":
            cols[name] = end.tolist()
        elif name == "phase":
            cols[name] = labels
        elif name == "collective":
            cols[name] = [COLLECTIVES[c] for c in m["collective"].tolist()]
        elif name == "dim":
            cols[name] = [DIMS[d] for d in m["dim"].tolist()]
        elif name == "kind":
            cols[name] = ["data" if k == KIND_DATA else "cts" for k in m["kind"].tolist()]
        elif name in m.dtype.names:
            cols[name] = m[name].tolist()
        else:
            cols[name] = [-1] * m.size
    return cols


def write_table(messages: np.ndarray, out: str | os.PathLike, fmt: str = "csv") -> Path:
    """Write the message table as CSV or Parquet (pyarrow).

    Raises:
        InputError: Parquet without pyarrow installed. OutputError: cannot write.
    """
    out = Path(out)
    cols = table_columns(messages)
    if fmt == "parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise InputError("export --to parquet: got no pyarrow, expected it installed "
                             "(pip install 'tokenpcap[parquet]')") from None
        tmp = out.with_name(f".{out.name}.part")
        try:
            pq.write_table(pa.table(cols), tmp)
            os.replace(tmp, out)
        except OSError as err:
            _discard(tmp)
            raise OutputError(f"{out}: cannot write: {err}") from err
        return out
    tmp = out.with_name(f".{out.name}.part")
    try:
        with open(tmp, "w", encoding="utf-8", newline="") as f:
            w = csv.writer(f)
            w.writerow(TABLE_COLUMNS)
            w.writerows(zip(*(cols[c] for c in TABLE_COLUMNS)))
        os.replace(tmp, out)
    except OSError as err:
        _discard(tmp)
        raise OutputError(f"{out}: cannot write: {err.strerror}") from err
    return out


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
    _atomic_text(out, [json.dumps({"traceEvents": ev, "displayTimeUnit": "ns"})])
    return out


def export_scenario(scenario: str | os.PathLike, to: str, out: str | os.PathLike, *,
                    scale: int = 1, iterations: int = 1, hpcc_cc: str = "hpcc") -> list[Path]:
    """Schedule ``scenario`` and write it in format ``to`` (:data:`FORMATS`) at ``out``.

    ``hpcc_cc`` is the HPCC simulator's congestion control (``tokenpcap.export.hpcc.CC_MODES``)
    written into its config.

    Raises:
        InputError: an unknown format or ``hpcc_cc``. OutputError: the directory of ``out`` (created with its
            parents; removed again if nothing is written) cannot be made: a path component is a
            file, or the file system refuses. As :func:`schedule_scenario` otherwise.
    """
    from tokenpcap.pcap.output import make_directory

    if to not in FORMATS:
        raise InputError(f"export --to: got {to!r}, expected one of {', '.join(FORMATS)}")
    out = Path(out)
    with make_directory(out.parent):
        s, _, sched = schedule_scenario(scenario, scale=scale, iterations=iterations)
        m = sched.messages
        if to == "hpcc":
            return write_hpcc(m, s.cluster, out, cc=hpcc_cc)
        if to == "chrome":
            return [write_chrome(sched.timeline, m, out)]
        return [write_table(m, out, to)]
