"""The column checks of the fabric side files' reader
(:func:`tokenpcap.generate.fabricfiles.read_fabric_files`): a table's columns as read (CSV
texts or Parquet arrays) turned into the structured array of
:data:`tokenpcap.records.fabric.FABRIC_TABLES`, refusing the first bad value in one line
(file, line or row, column, got, expected)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from tokenpcap.errors import InputError, one_line
from tokenpcap.records.fabric import FABRIC_TABLES

__all__ = ["NAMED", "Where", "table_from_columns"]

#: the name columns of the files: index column → its name column (``""`` for -1)
NAMED = {"switch": "switch_name", "peer_switch": "peer_switch_name"}
#: bounds of integer columns beyond their dtype: column → (lowest, highest or None)
_BOUNDS = {"time_ns": (0, None), "switch": (0, None), "port": (0, None), "priority": (0, 7),
           "xoff": (0, 1), "max_bytes": (1, None), "peer_nic": (-1, None),
           "peer_switch": (-1, None), "peer_port": (-1, None), "nic": (0, None)}
_COUNT = (0, None)       # every other integer column is a count, ns or bytes
Where = Callable[[int], str]     # data row index → "line N" (CSV) / "row N" (Parquet)


def _ints(path: Path, where: Where, name: str, values, dt: np.dtype) -> np.ndarray:
    """``values`` (texts from CSV, or an array from Parquet) as ``dt``, checked against the
    dtype's range and the column's bounds."""
    if isinstance(values, np.ndarray):
        v = values.astype(np.int64) if dt != np.uint64 else values
    else:
        try:
            ints = list(map(int, values))
            # the canonical decimal only ('+5', ' 5', '05', '1_0' are not written by us)
            v = np.array(ints, np.int64) if list(map(str, ints)) == values else None
        except (ValueError, OverflowError):
            v = None
        if v is None:
            for i, s in enumerate(values):
                try:
                    ok = str(int(s)) == s and -(1 << 63) <= int(s) < (1 << 63)
                except ValueError:
                    ok = False
                if not ok:
                    raise InputError(f"{path}: {where(i)}: column {name}: got "
                                     f"{one_line(repr(s))}, expected an integer")
            v = np.array([int(s) for s in values], np.int64)
    info = np.iinfo(dt)
    lo, hi = _BOUNDS.get(name, _COUNT)
    lo = max(lo, int(info.min))
    hi = int(info.max) if hi is None else min(hi, int(info.max))
    bad = np.flatnonzero((v < lo) | (v > hi))
    if bad.size:
        raise InputError(f"{path}: {where(int(bad[0]))}: column {name}: got {int(v[bad[0]])}, "
                         f"expected an integer in {lo:,}..{hi:,}")
    return v


def table_from_columns(path: Path, table: str, raw: dict, where: Where,
                       switch_names: tuple[str, ...]) -> np.ndarray:
    """The structured array of ``table`` (dtype ``FABRIC_TABLES[table]``) from ``raw``
    (``{file column: values}``, every column of the file). Checks: integers in their dtype's
    range and their column's (priorities 0..7, counts >= 0, indices >= -1 or >= 0), switch
    indices inside ``switch_names`` and the name columns equal to them, XON with quanta 0 and
    XOFF with quanta > 0, rates finite and > 0.

    Raises:
        InputError: ``PATH: WHERE: column NAME: got X, expected Y`` (``where(i)`` names data
            row ``i``: ``line N`` in CSV, ``row N`` in Parquet).
    """
    dt = FABRIC_TABLES[table]
    n = len(raw[dt.names[0]])
    out = np.zeros(n, dt)
    n_sw = len(switch_names)
    for name in dt.names:
        if dt[name].kind == "f":
            v = _floats(path, where, name, raw[name])
        else:
            v = _ints(path, where, name, raw[name], dt[name])
            if name in NAMED:
                lo = -1 if name == "peer_switch" else 0
                bad = np.flatnonzero(v >= n_sw)
                if bad.size:
                    raise InputError(f"{path}: {where(int(bad[0]))}: column {name}: got "
                                     f"{int(v[bad[0]])}, expected {lo}..{n_sw - 1} (the "
                                     f"{n_sw} switches of the summary)")
                names = np.array(list(switch_names) + [""], dtype=object)
                got = np.empty(n, dtype=object)
                got[:] = list(raw[NAMED[name]])
                wrong = np.flatnonzero(got != names[v])
                if wrong.size:
                    i = int(wrong[0])
                    k = int(v[i])
                    raise InputError(f"{path}: {where(i)}: column {NAMED[name]}: got "
                                     f"{one_line(repr(got[i]))}, expected {names[k]!r} "
                                     f"(switch {k})")
        out[name] = v
    if table == "pfc":
        bad = np.flatnonzero((out["xoff"] == 1) != (out["quanta"] > 0))
        if bad.size:
            i = int(bad[0])
            raise InputError(f"{path}: {where(i)}: column quanta: got {int(out['quanta'][i])} "
                             f"with xoff {int(out['xoff'][i])}, expected "
                             f"{'> 0 (XOFF)' if out['xoff'][i] else '0 (XON)'}")
    return out


def _floats(path: Path, where: Where, name: str, values) -> np.ndarray:
    out = np.zeros(len(values), np.float64)
    for i, s in enumerate(values):
        try:
            x = float(s)
        except (TypeError, ValueError):
            x = float("nan")
        if not (np.isfinite(x) and x > 0):
            raise InputError(f"{path}: {where(i)}: column {name}: got {one_line(repr(s))}, "
                             "expected a number > 0")
        out[i] = x
    return out
