"""``csv`` and ``parquet`` exports: the message table, one row per RDMA message, times in integer ns.

Columns (:data:`TABLE_COLUMNS`): the message id, its times (``start_ns`` posted, ``first_tx_ns``
first bit out, ``last_tx_end_ns`` last bit out, ``end_ns`` arrival), NICs, QP index, size, kind
(``data`` or ``cts``: clear-to-send control writes), phase label, collective, parallel dimension,
iteration, layer, microbatch, algorithm step, plan call id, ranks and the corpus token range.
"""
from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np

from tokenpcap.errors import InputError, OutputError
from tokenpcap.export.registry import discard, register_export
from tokenpcap.pcap.filekind import refuse_special_output
from tokenpcap.pipeline import Prepared
from tokenpcap.records import COLLECTIVES, DIMS, KIND_DATA, phase_label

__all__ = ["TABLE_COLUMNS", "table_columns", "write_table"]

#: columns of the CSV/Parquet table, in order
TABLE_COLUMNS = ("msg_id", "start_ns", "first_tx_ns", "last_tx_end_ns", "end_ns", "src_nic",
                 "dst_nic", "qp", "size_bytes", "kind", "phase", "collective", "dim",
                 "iteration", "layer", "microbatch", "step", "call_id", "rank_src", "rank_dst",
                 "token_start", "token_end")


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
        InputError: Parquet without pyarrow installed. OutputError: ``out`` is a device, a
            FIFO or a socket (never replaced), or cannot be written.
    """
    out = Path(out)
    refuse_special_output(out)
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
            discard(tmp)
            raise OutputError(f"{out}: cannot write: {err}") from err
        return out
    tmp = out.with_name(f".{out.name}.part")
    try:
        with open(tmp, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
            w = csv.writer(f)
            w.writerow(TABLE_COLUMNS)
            w.writerows(zip(*(cols[c] for c in TABLE_COLUMNS)))
        os.replace(tmp, out)
    except OSError as err:
        discard(tmp)
        raise OutputError(f"{out}: cannot write: {err.strerror}") from err
    return out


@register_export("csv", "the message table as CSV")
def _csv(done: Prepared, out: Path) -> list[Path]:
    return [write_table(done.schedule.messages, out, "csv")]


@register_export("parquet", "the message table as Parquet (needs pyarrow)")
def _parquet(done: Prepared, out: Path) -> list[Path]:
    return [write_table(done.schedule.messages, out, "parquet")]
