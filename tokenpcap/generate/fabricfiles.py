"""The side files of a queued-fabric run: the fabric log (:mod:`tokenpcap.records.fabric`) beside
the captures, one table per file, and the summary with the column docs as JSON.

Files, for a ``stem`` (the scenario name, as the captures' ``<stem>_...``):

* ``<stem>_fabric-pfc.csv``, ``-queues.csv``, ``-links.csv``, ``-nics.csv``, ``-drops.csv``
  (or ``.parquet``): one row per table row, a header row with the column names first. Columns
  are the table's dtype fields in order, with ``switch_name`` after ``switch`` and
  ``peer_switch_name`` after ``peer_switch`` (``""`` for -1): names beside the indices so
  that a spreadsheet reads ``leaf3`` instead of ``5``.
* ``<stem>_fabric.json``: ``{"format": "tokenpcap-fabric", "version": 1, "stem",
  "file_format" ("csv" | "parquet"), "summary": FabricSummary.to_json(), "tables": {name:
  {"file", "rows", "columns": [{"name", "type", "unit", "doc"}]}}}``, written last.

CSV is RFC 4180 through :mod:`csv` (UTF-8, ``\\r\\n`` line ends), integers in decimal, the
rate as Python's shortest round-trip float text. Parquet needs pyarrow (the ``parquet`` extra).

**Whole or nothing**: every file is first written to a hidden ``.NAME.part`` in ``directory``;
only when all are complete are they renamed to their names, the JSON last. Any exception
(KeyboardInterrupt too) removes every part and every file this call already renamed. A
generate run passes its stage directory (:class:`tokenpcap.pcap.outputset.OutputSet`), so the
side files land with the captures or not at all.
"""
from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np

from tokenpcap.errors import InputError, OutputError, one_line
from tokenpcap.generate.fabriccolumns import NAMED, Where, table_from_columns
from tokenpcap.pcap.filekind import refuse_special_output
from tokenpcap.records.fabric import COLUMN_DOCS, FABRIC_TABLES, FabricSummary, check_log

__all__ = ["FABRIC_FORMAT", "FABRIC_VERSION", "FILE_FORMATS", "summary_name", "table_name",
           "file_columns", "write_fabric_files", "read_fabric_files"]

FABRIC_FORMAT = "tokenpcap-fabric"
FABRIC_VERSION = 1
FILE_FORMATS = ("csv", "parquet")
#: rows written or checked at a time (memory of the CSV text bounded by it)
CHUNK_ROWS = 1 << 16


def summary_name(stem: str) -> str:
    """``<stem>_fabric.json``."""
    return f"{stem}_fabric.json"


def table_name(stem: str, table: str, fmt: str = "csv") -> str:
    """``<stem>_fabric-<table>.<fmt>``."""
    return f"{stem}_fabric-{table}.{fmt}"


def file_columns(table: str) -> list[str]:
    """The columns of ``table``'s file: its dtype fields with the name columns inserted."""
    out = []
    for name in FABRIC_TABLES[table].names:
        out.append(name)
        if name in NAMED:
            out.append(NAMED[name])
    return out


def write_fabric_files(directory: str | os.PathLike, stem: str, log: dict,
                       summary: FabricSummary, fmt: str = "csv") -> list[Path]:
    """Write the fabric log and its summary into ``directory`` (module docstring).

    Args:
        directory: an existing directory (a generate run's stage).
        stem: the name the files start with (the scenario name).
        log: ``{table: array}`` as :func:`tokenpcap.records.fabric.check_log` accepts.
        summary: the run's :class:`FabricSummary`.
        fmt: ``"csv"`` or ``"parquet"``.

    Returns:
        The paths written: the tables in :data:`FABRIC_TABLES` order, then the JSON.

    Raises:
        InputError: a bad ``fmt`` or ``stem``, a log that is not a fabric log, a switch index
            outside ``summary.switch_names``; Parquet without pyarrow. OutputError: a
            destination that is a device or FIFO, or the file system refuses. In every case
            (and on KeyboardInterrupt) no file of this call is left in ``directory``.
    """
    if fmt not in FILE_FORMATS:
        raise InputError(f"fabric files: format: got {fmt!r}, expected one of "
                         f"{', '.join(FILE_FORMATS)}")
    if not stem or "/" in stem or stem.startswith("."):
        raise InputError(f"fabric files: stem: got {stem!r}, expected a plain file name")
    if not isinstance(summary, FabricSummary):
        raise InputError(f"fabric files: summary: got {type(summary).__name__}, expected a "
                         "FabricSummary")
    check_log(log)
    pq = _pyarrow() if fmt == "parquet" else None
    d = Path(directory)
    names = [table_name(stem, t, fmt) for t in FABRIC_TABLES] + [summary_name(stem)]
    for n in names:
        refuse_special_output(d / n)
    for t in FABRIC_TABLES:
        _check_switches(t, log[t], summary.switch_names)
    sw_names = _names(summary.switch_names)
    doc = {"format": FABRIC_FORMAT, "version": FABRIC_VERSION, "stem": stem,
           "file_format": fmt, "summary": summary.to_json(),
           "tables": {t: {"file": n, "rows": int(log[t].size), "columns": _column_docs(t)}
                      for t, n in zip(FABRIC_TABLES, names)}}
    parts = [d / f".{n}.part" for n in names]
    placed: list[Path] = []
    current = names[0]
    try:
        for t, part, current in zip(FABRIC_TABLES, parts, names):
            if pq is None:
                _write_csv(part, t, log[t], sw_names)
            else:
                _write_parquet(pq, part, t, log[t], sw_names)
        current = names[-1]
        with open(parts[-1], "w", encoding="utf-8", errors="surrogateescape") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        for part, current in zip(parts, names):
            os.replace(part, d / current)
            placed.append(d / current)
    except BaseException as err:
        for p in parts + placed:
            _discard(p)
        if isinstance(err, OSError):
            raise OutputError(f"{d / current}: cannot write: {err.strerror or err}") from None
        raise
    return placed


def read_fabric_files(directory: str | os.PathLike, stem: str) -> tuple[dict, FabricSummary]:
    """The fabric log and summary that :func:`write_fabric_files` wrote.

    Every column is checked: names and order of the header, integers in their dtype's range
    and in their column's (priorities 0..7, counts >= 0, indices >= -1 or >= 0), switch
    indices inside the summary's switch names and the name columns equal to them, XON frames
    with quanta 0 and XOFF frames with quanta > 0, queue samples > 0 bytes, link rates > 0.

    Returns:
        ``(log, summary)``: a fabric log (:func:`~tokenpcap.records.fabric.check_log` holds)
        and the :class:`FabricSummary`.

    Raises:
        InputError: one line naming the file, the line (CSV; ``row`` in Parquet), the column,
            what it holds and what was expected. A missing file names it; Parquet files
            without pyarrow.
    """
    d = Path(directory)
    jpath = d / summary_name(stem)
    doc = _read_json(jpath)
    for key, want in (("format", FABRIC_FORMAT), ("version", FABRIC_VERSION)):
        if doc.get(key) != want:
            raise InputError(f"{jpath}: {key}: got {doc.get(key, 'missing')!r}, expected {want!r}")
    fmt = doc.get("file_format")
    if fmt not in FILE_FORMATS:
        raise InputError(f"{jpath}: file_format: got {fmt!r}, expected one of "
                         f"{', '.join(FILE_FORMATS)}")
    summary = FabricSummary.from_json(doc.get("summary"), where=f"{jpath}: summary")
    tables = doc.get("tables")
    if not isinstance(tables, dict) or set(tables) != set(FABRIC_TABLES):
        got = sorted(tables) if isinstance(tables, dict) else tables
        raise InputError(f"{jpath}: tables: got {got!r}, expected {', '.join(FABRIC_TABLES)}")
    log = {}
    for t in FABRIC_TABLES:
        name = table_name(stem, t, fmt)
        entry = tables[t]
        if not isinstance(entry, dict) or entry.get("file") != name:
            raise InputError(f"{jpath}: tables.{t}.file: got "
                             f"{entry.get('file') if isinstance(entry, dict) else entry!r}, "
                             f"expected {name!r}")
        path = d / name
        if fmt == "csv":
            log[t] = _read_csv(path, t, summary.switch_names)
        else:
            raw, where = _read_parquet(path, t)
            log[t] = table_from_columns(path, t, raw, where, summary.switch_names)
        rows = entry.get("rows")
        if rows != log[t].size:
            raise InputError(f"{path}: got {log[t].size:,} rows, expected {rows!r} ({jpath})")
    return log, summary


# --- writing -----------------------------------------------------------------------------------

def _column_docs(table: str) -> list[dict]:
    dt = FABRIC_TABLES[table]
    out = []
    for name in file_columns(table):
        if name in dt.names:
            unit, doc = COLUMN_DOCS[table][name]
            out.append({"name": name, "type": dt[name].name, "unit": unit, "doc": doc})
        else:
            base = name.removesuffix("_name")
            out.append({"name": name, "type": "string", "unit": "",
                        "doc": f"Topology.switch_names[{base}]"
                               + (", empty when it is -1" if base == "peer_switch" else "")})
    return out


def _check_switches(table: str, a: np.ndarray, switch_names: tuple[str, ...]) -> None:
    """Refuse a switch index the names cannot name (before anything is written)."""
    for name in NAMED:
        if name in a.dtype.names:
            idx = a[name].astype(np.int64)
            lo = -1 if name == "peer_switch" else 0
            bad = np.flatnonzero((idx < lo) | (idx >= len(switch_names)))
            if bad.size:
                raise InputError(f"fabric log: {table}: row {int(bad[0])}: {name}: got "
                                 f"{int(idx[bad[0]])}, expected {lo}.."
                                 f"{len(switch_names) - 1} (summary.switch_names)")


def _names(switch_names: tuple[str, ...]) -> np.ndarray:
    """Object array of the names with ``""`` last, so that index -1 reads ``""``."""
    return np.array(list(switch_names) + [""], dtype=object)


def _write_csv(path: Path, table: str, a: np.ndarray, names: np.ndarray) -> None:
    """The table as CSV, :data:`CHUNK_ROWS` rows at a time (memory bounded by the chunk)."""
    cols = file_columns(table)
    with open(path, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for start in range(0, a.size, CHUNK_ROWS):
            c = a[start:start + CHUNK_ROWS]
            out = {}
            for name in c.dtype.names:
                out[name] = c[name].tolist()
                if name in NAMED:
                    out[NAMED[name]] = names[c[name]].tolist()
            w.writerows(zip(*(out[k] for k in cols)))


def _arrow_type(pa, table: str, name: str):
    dt = FABRIC_TABLES[table]
    if name not in dt.names:
        return pa.string()
    return pa.from_numpy_dtype(dt[name])


def _write_parquet(pq, path: Path, table: str, a: np.ndarray, names: np.ndarray) -> None:
    pa, parquet = pq
    cols = file_columns(table)
    arrays = []
    for c in cols:
        base = c.removesuffix("_name") if c not in a.dtype.names else None
        values = names[a[base]] if base else np.ascontiguousarray(a[c])
        arrays.append(pa.array(values, type=_arrow_type(pa, table, c)))
    parquet.write_table(pa.Table.from_arrays(arrays, names=cols), path)


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as parquet
    except ImportError:
        raise InputError("fabric files: format parquet: got no pyarrow, expected it installed "
                         "(pip install 'tokenpcap[parquet]')") from None
    return pa, parquet


def _discard(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


# --- reading -----------------------------------------------------------------------------------

def _read_json(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: got no such file, expected the fabric summary of a "
                         "queued-fabric run") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: line {err.lineno}: got invalid JSON ({err.msg}), expected "
                         "the fabric summary") from None
    if not isinstance(doc, dict):
        raise InputError(f"{path}: got a JSON {type(doc).__name__}, expected an object")
    return doc


def _header(path: Path, where: str, got: list[str], want: list[str]) -> None:
    for k in range(max(len(got), len(want))):
        g = got[k] if k < len(got) else "nothing"
        w = want[k] if k < len(want) else "no more columns"
        if g != w:
            raise InputError(f"{path}: {where}: column {k + 1}: got {one_line(repr(g))}, "
                             f"expected {w!r}")


def _read_csv(path: Path, table: str, switch_names: tuple[str, ...]) -> np.ndarray:
    """The table of a CSV file, checked :data:`CHUNK_ROWS` rows at a time."""
    want = file_columns(table)
    parts = [np.zeros(0, FABRIC_TABLES[table])]
    try:
        with open(path, encoding="utf-8", newline="") as f:
            rows = csv.reader(f)
            head = next(rows, None)
            if head is None:
                raise InputError(f"{path}: line 1: got an empty file, expected the header "
                                 f"{','.join(want)}")
            _header(path, "line 1", head, want)
            chunk: list[list[str]] = []
            line = 1                                    # of the last row read
            for r in rows:
                line += 1
                if len(r) != len(want):
                    raise InputError(f"{path}: line {line}: got {len(r)} fields, expected "
                                     f"{len(want)} ({','.join(want)})")
                chunk.append(r)
                if len(chunk) == CHUNK_ROWS:
                    parts.append(_csv_chunk(path, table, chunk, line, switch_names))
                    chunk = []
            if chunk:
                parts.append(_csv_chunk(path, table, chunk, line, switch_names))
    except FileNotFoundError:
        raise InputError(f"{path}: got no such file, expected the {table} table") from None
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise InputError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    return np.concatenate(parts)


def _csv_chunk(path: Path, table: str, chunk: list[list[str]], last_line: int,
               switch_names: tuple[str, ...]) -> np.ndarray:
    first = last_line - len(chunk) + 1
    raw = {c: [r[k] for r in chunk] for k, c in enumerate(file_columns(table))}
    return table_from_columns(path, table, raw, lambda i: f"line {first + i}", switch_names)


def _read_parquet(path: Path, table: str) -> tuple[dict[str, list], Where]:
    pa, parquet = _pyarrow()
    want = file_columns(table)
    if not path.is_file():
        raise InputError(f"{path}: got no such file, expected the {table} table")
    try:
        t = parquet.read_table(path)
    except (OSError, pa.ArrowException) as err:
        raise InputError(f"{path}: got {one_line(str(err))}, expected a Parquet file") from None
    _header(path, "schema", t.column_names, want)
    out = {}
    for c in want:
        typ = _arrow_type(pa, table, c)
        col = t.column(c)
        if col.type != typ:
            raise InputError(f"{path}: column {c}: got type {col.type}, expected {typ}")
        if col.null_count:
            i = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise InputError(f"{path}: row {i + 1}: column {c}: got null, expected a value")
        out[c] = col.to_pylist() if typ == pa.string() else col.to_numpy()
    return out, lambda i: f"row {i + 1}"
