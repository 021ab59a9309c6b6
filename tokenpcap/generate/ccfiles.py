"""The congestion-control side files of a queued-fabric run that marks ECN or runs DCQCN: the
tables of :mod:`tokenpcap.records.cc` (``Schedule.cc_log()``) beside the captures and the fabric
files (:mod:`tokenpcap.generate.fabricfiles`), with the same stem and file format.

Files, for a ``stem``:

* ``<stem>_fabric-cnps.csv``, ``-rates.csv``, ``-ce_ports.csv``, ``-ce_qps.csv`` (or
  ``.parquet``): a header row with the column names, then one row per table row. Columns are
  the table's dtype fields in order (:data:`tokenpcap.records.cc.CC_TABLES`), with
  ``switch_name`` after ``switch`` in ``ce_ports``. Integers in decimal, ``alpha`` as Python's
  shortest round-trip float text.
* ``<stem>_fabric-cc.json``: ``{"format": "tokenpcap-cc", "version": 1, "stem", "file_format",
  "tables": {name: {"file", "rows", "columns": [{"name", "type", "unit", "doc"}]}}}``.

A run whose fabric neither marks ECN nor runs DCQCN writes none of them. The files are written
into the caller's stage directory (:class:`tokenpcap.pcap.outputset.OutputSet`), which places
them with the captures or not at all.
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np

from tokenpcap.errors import InputError, OutputError, one_line
from tokenpcap.generate.fabricfiles import FILE_FORMATS, table_name
from tokenpcap.records.cc import CC_COLUMN_DOCS, CC_TABLES

__all__ = ["CC_FORMAT", "CC_VERSION", "cc_summary_name", "cc_file_columns", "write_cc_files",
           "read_cc_files"]

CC_FORMAT = "tokenpcap-cc"
CC_VERSION = 1


def cc_summary_name(stem: str) -> str:
    """``<stem>_fabric-cc.json``."""
    return f"{stem}_fabric-cc.json"


def cc_file_columns(table: str) -> list[str]:
    """The columns of ``table``'s file: its dtype fields, ``switch_name`` after ``switch``."""
    out = []
    for name in CC_TABLES[table].names:
        out.append(name)
        if name == "switch":
            out.append("switch_name")
    return out


def _column_docs(table: str) -> list[dict]:
    dt = CC_TABLES[table]
    out = []
    for name in cc_file_columns(table):
        if name in dt.names:
            unit, doc = CC_COLUMN_DOCS[table][name]
            out.append({"name": name, "type": dt[name].name, "unit": unit, "doc": doc})
        else:
            out.append({"name": name, "type": "string", "unit": "",
                        "doc": "Topology.switch_names[switch]"})
    return out


def _columns(table: str, a: np.ndarray, switch_names: tuple[str, ...]) -> dict[str, list]:
    """``{file column: Python values}`` of ``a`` (the name column looked up)."""
    cols = {name: a[name].tolist() for name in a.dtype.names}
    if "switch" in cols:
        sw = cols["switch"]
        bad = [s for s in sw if not 0 <= s < len(switch_names)]
        if bad:
            raise InputError(f"cc log: {table}: switch: got {bad[0]}, expected 0.."
                             f"{len(switch_names) - 1} (summary.switch_names)")
        cols["switch_name"] = [switch_names[s] for s in sw]
    return cols


def write_cc_files(directory: str | os.PathLike, stem: str, log: dict,
                   switch_names: tuple[str, ...], fmt: str = "csv") -> list[Path]:
    """Write the congestion-control log ``log`` (``{table: array}`` with the keys and dtypes of
    :data:`CC_TABLES`) into ``directory`` (module docstring).

    Returns:
        The paths written: the tables in :data:`CC_TABLES` order, then the JSON.

    Raises:
        InputError: a bad ``fmt``, a log without the tables and dtypes of :data:`CC_TABLES`, a
            switch index outside ``switch_names``; Parquet without pyarrow. OutputError: the
            file system refuses (the files written so far are removed).
    """
    if fmt not in FILE_FORMATS:
        raise InputError(f"cc files: format: got {fmt!r}, expected one of "
                         f"{', '.join(FILE_FORMATS)}")
    if set(log) != set(CC_TABLES) or any(log[t].dtype != dt for t, dt in CC_TABLES.items()):
        raise InputError(f"cc files: log: got tables {sorted(log)}, expected "
                         f"{', '.join(CC_TABLES)} with the dtypes of tokenpcap.records.cc")
    d = Path(directory)
    cols = {t: _columns(t, log[t], switch_names) for t in CC_TABLES}
    names = [table_name(stem, t, fmt) for t in CC_TABLES] + [cc_summary_name(stem)]
    doc = {"format": CC_FORMAT, "version": CC_VERSION, "stem": stem, "file_format": fmt,
           "tables": {t: {"file": n, "rows": int(log[t].size), "columns": _column_docs(t)}
                      for t, n in zip(CC_TABLES, names)}}
    pq = None
    if fmt == "parquet":
        from tokenpcap.generate.fabricfiles import _pyarrow
        pq = _pyarrow()
    written: list[Path] = []
    try:
        for t, n in zip(CC_TABLES, names):
            path = d / n
            written.append(path)
            order = cc_file_columns(t)
            if pq is None:
                with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
                    w = csv.writer(f)
                    w.writerow(order)
                    w.writerows(zip(*(cols[t][c] for c in order)))
            else:
                pa, parquet = pq
                dt = CC_TABLES[t]
                arrays = [pa.array(cols[t][c], type=pa.from_numpy_dtype(dt[c]) if c in dt.names
                                   else pa.string()) for c in order]
                parquet.write_table(pa.Table.from_arrays(arrays, names=order), path)
        written.append(d / names[-1])
        with open(written[-1], "w", encoding="utf-8", errors="surrogateescape") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    except BaseException as err:
        for p in written:
            try:
                p.unlink(missing_ok=True)
            except OSError:
                pass
        if isinstance(err, OSError):
            raise OutputError(f"{written[-1]}: cannot write: {err.strerror or err}") from None
        raise
    return written


def read_cc_files(directory: str | os.PathLike, stem: str) -> dict[str, np.ndarray] | None:
    """The congestion-control log :func:`write_cc_files` wrote, or None when ``directory`` holds
    no ``<stem>_fabric-cc.json`` (a run without ECN or DCQCN).

    Raises:
        InputError: one line naming the file (and line or row), the column, what it holds and
            what was expected: a bad JSON, a missing table file, a header other than
            :func:`cc_file_columns`, a value that is not of its column's type, a row count other
            than the JSON's.
    """
    d = Path(directory)
    jpath = d / cc_summary_name(stem)
    if not jpath.is_file():
        return None
    try:
        doc = json.loads(jpath.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"{jpath}: got {one_line(str(err))}, expected the cc files' "
                         "JSON") from None
    if not isinstance(doc, dict) or doc.get("format") != CC_FORMAT \
            or doc.get("version") != CC_VERSION or doc.get("file_format") not in FILE_FORMATS:
        got = {k: doc.get(k) for k in ("format", "version", "file_format")} \
            if isinstance(doc, dict) else doc
        raise InputError(f"{jpath}: got {got!r}, expected format {CC_FORMAT!r}, version "
                         f"{CC_VERSION}, file_format one of {', '.join(FILE_FORMATS)}")
    fmt = doc["file_format"]
    tables = doc.get("tables") if isinstance(doc.get("tables"), dict) else {}
    log = {}
    for t, dt in CC_TABLES.items():
        path = d / table_name(stem, t, fmt)
        raw, where = _read_table(path, t, fmt)
        a = np.zeros(len(raw[dt.names[0]]), dt)
        for c in dt.names:
            a[c] = _typed(path, where, c, raw[c], dt[c])
        rows = tables.get(t, {}).get("rows") if isinstance(tables.get(t), dict) else None
        if rows != a.size:
            raise InputError(f"{path}: got {a.size:,} rows, expected {rows!r} ({jpath})")
        log[t] = a
    return log


def _read_table(path: Path, table: str, fmt: str):
    want = cc_file_columns(table)
    if not path.is_file():
        raise InputError(f"{path}: got no such file, expected the {table} table")
    if fmt == "parquet":
        from tokenpcap.generate.fabricfiles import _pyarrow
        _, parquet = _pyarrow()
        t = parquet.read_table(path)
        if t.column_names != want:
            raise InputError(f"{path}: schema: got {t.column_names}, expected {want}")
        return {c: t.column(c).to_pylist() for c in want}, (lambda i: f"row {i + 1}")
    try:
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise InputError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    if not rows or rows[0] != want:
        raise InputError(f"{path}: line 1: got {one_line(repr(rows[0] if rows else ''))}, "
                         f"expected the header {','.join(want)}")
    for i, r in enumerate(rows[1:]):
        if len(r) != len(want):
            raise InputError(f"{path}: line {i + 2}: got {len(r)} fields, expected {len(want)}")
    return ({c: [r[k] for r in rows[1:]] for k, c in enumerate(want)},
            (lambda i: f"line {i + 2}"))


def _typed(path: Path, where, column: str, values: list, dt: np.dtype) -> np.ndarray:
    """``values`` (a column's strings from CSV, or its values from Parquet) as ``dt`` (shape
    ``(len(values),)``): integers in the dtype's range (counts and times >= 0; a ``*_nic``
    column may be negative), floats.

    The column is converted by numpy at once; a column it cannot convert, or one with a value
    out of range, is read again value by value to name the first bad one.

    Raises:
        InputError: the file, the line (CSV) or row (Parquet), the column, the value got and
            what was expected.
    """
    raw = np.asarray(values)
    if raw.dtype.kind == "O":       # a null or a mixed column: numpy would make None a NaN
        return _typed_each(path, where, column, values, dt)
    try:
        out = raw.astype(np.float64 if dt.kind == "f" else np.int64)
    except (TypeError, ValueError, OverflowError):
        return _typed_each(path, where, column, values, dt)
    if dt.kind != "f":
        info = np.iinfo(dt)
        low = info.min if column.endswith("_nic") else 0
        if out.size and (out.min() < low or out.max() > min(info.max, np.iinfo(np.int64).max)):
            return _typed_each(path, where, column, values, dt)
    return out.astype(dt, copy=False)


def _typed_each(path: Path, where, column: str, values: list, dt: np.dtype) -> np.ndarray:
    """:func:`_typed` value by value: the first value that is not a number in range raises."""
    out = np.zeros(len(values), dt)
    for i, v in enumerate(values):
        try:
            x = float(v) if dt.kind == "f" else int(v)
            ok = dt.kind == "f" or (np.iinfo(dt).min <= x <= np.iinfo(dt).max
                                    and (x >= 0 or column.endswith("_nic")))
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise InputError(f"{path}: {where(i)}: column {column}: got {one_line(repr(v))}, "
                             f"expected {'a number' if dt.kind == 'f' else 'an integer'} "
                             f"in the range of {dt.name}")
        out[i] = x
    return out
