"""SimAI's ``EndToEnd.csv`` (analytical backend) read back.

``SimAI_analytical -r PREFIX`` writes ``./results/PREFIX EndToEnd.csv`` (the prefix and the name
are joined as they are, so ``-r dante-`` gives ``results/dante-EndToEnd.csv``). The writer is
astra-sim-alibabacloud's ``Layer::report`` (``astra-sim/workload/Layer.cc``, the overload built with
``ANALYTI``), called by ``Workload::report`` once per layer record in workload order; the file
opened by ``Workload::Workload`` (``CSVWriter(path, "EndToEnd.csv")``). Its lines:

1. ``File name, Expose DP comm, Expose DP_EP comm, Expose TP comm, Expose_EP_comm,
   Expose_PP_comm, bubble time, total comp, total exposed comm, Total time`` (:data:`SUMMARY_KEYS`)
2. the values, joined with ``", "``: the ``-r`` argument after its last ``/``, then each quantity
   as ``N (P%)``: ``N`` in µs rounded to an integer (``std::fixed``, precision 0; ``NaN or Inf``
   when not finite), ``P`` its share of the total time with two decimals; the total time last,
   ``N`` alone. Both lines are written last and put at the top (``CSVWriter::write_res``).
3. ``layer_name,Analytical_test,fwd compute,wg compute,ig compute,fwd exposed comm,wg exposed
   comm,ig exposed comm,fwd total comm,algbw,busbw,wg total comm,algbw,busbw,ig total comm,algbw,
   busbw`` (17 columns; the second is the run name, ``Analytical_test`` in ``AnalyticalAstra.cc``)
4. one row per layer record: its id, the run name, then (:data:`ROW_COLUMNS`) the forward,
   weight-gradient and input-gradient compute, the exposed forward, weight-gradient and
   input-gradient communication (µs, integers as above), then per pass (forward, weight
   gradient, input gradient) the total communication time (µs, integer) and its algbw and busbw
   (GB/s of 2^30 bytes, two decimals; ``inf`` or ``nan`` when the time is 0).

Analytical semantics (same function): compute columns add up every pass SimAI ran (``ga``
microbatches for the forward and input-gradient columns); a communication column is the time of
one collective of the record's type, group and size (``Layer::compute_time``: the size over
``busbw`` from its ``cal_busbw`` model, times ``2(n-1)/n`` for AllReduce and ``(n-1)/n``
otherwise; a fixed 10-320 µs by group size for 1 B < size < 1 MiB); exposed = total × (1 − the
overlap ratio of its group, ``-dp_o``, ``-tp_o``, ``-ep_o``, default 0).
"""
from __future__ import annotations

import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from tokenpcap.errors import InputError

__all__ = ["SUMMARY_KEYS", "ROW_COLUMNS", "EndToEndRow", "EndToEnd", "read_end_to_end",
           "layer_header"]

#: Line 1 of the file, split at ``,`` and stripped.
SUMMARY_KEYS = ("File name", "Expose DP comm", "Expose DP_EP comm", "Expose TP comm",
                "Expose_EP_comm", "Expose_PP_comm", "bubble time", "total comp",
                "total exposed comm", "Total time")
#: The columns of a layer row after the layer id and the run name, as our attribute names.
ROW_COLUMNS = ("fwd_compute_ns", "wg_compute_ns", "ig_compute_ns", "fwd_exposed_ns",
               "wg_exposed_ns", "ig_exposed_ns", "fwd_comm_ns", "fwd_algbw", "fwd_busbw",
               "wg_comm_ns", "wg_algbw", "wg_busbw", "ig_comm_ns", "ig_algbw", "ig_busbw")
_HEADER_TAIL = ("fwd compute", "wg compute", "ig compute", "fwd exposed comm", "wg exposed comm",
                "ig exposed comm", "fwd total comm", "algbw", "busbw", "wg total comm", "algbw",
                "busbw", "ig total comm", "algbw", "busbw")
#: Largest time cell read, in µs: ×1000 must fit int64 ns, what every time of ours is (SimAI's
#: own ``Tick`` is a uint64 of ns, so a run longer than 292 years of simulated time, which it
#: could write, is refused here rather than wrapped).
MAX_TIME_US = (2**63 - 1) // 1000
#: Largest algbw/busbw read, in GB/s: a uint64 byte count moved in 1 ns (2^64 / 2^30 * 1e9),
#: more than any collective SimAI can model; a longer number is not one SimAI wrote.
MAX_BW_GBPS = 2.0**64 / 2.0**30 * 1e9
_TIME_DIGITS = len(str(MAX_TIME_US))
_BW_DIGITS = len(str(int(MAX_BW_GBPS)))
_US = re.compile(r"-?[0-9]{1,%d}" % _TIME_DIGITS)
_BW = re.compile(r"-?(?:[0-9]{1,%d}\.[0-9]{2}|nan|inf)" % _BW_DIGITS)
#: Integer digits of a share: SimAI prints ``time / total * 100`` of doubles with ``%.2f``, and a
#: finite double has at most 309 (DBL_MAX = 1.8e308); a total near 0 gives such shares.
_SHARE_DIGITS = len(str(int(sys.float_info.max)))
_SHARE = re.compile(r"(-?[0-9]{1,%d}|NaN or Inf) \((-?[0-9]{1,%d}\.[0-9]{2}|-?nan|-?inf)%%\)"
                    % (_TIME_DIGITS, _SHARE_DIGITS))
_TIME_EXPECTED = f"an integer (µs) within ±{MAX_TIME_US} (×1000 ns must fit int64)"
_BW_EXPECTED = (f"GB/s with 2 decimals within ±{MAX_BW_GBPS:.3g} (2^64 bytes in 1 ns), inf or "
                "nan")
_NOT_FINITE = "NaN or Inf"


def layer_header(run_name: str = "Analytical_test") -> str:
    """Line 3 of the file (the layer rows' header) as ``Layer::report`` writes it."""
    return ",".join(("layer_name", run_name) + _HEADER_TAIL)


@dataclass(frozen=True)
class EndToEndRow:
    """One layer row. Times in ns (SimAI's integer µs × 1000; None where SimAI wrote
    ``NaN or Inf``); algbw/busbw float GB/s as written (2^30 bytes; may be inf or nan).
    ``line``: 1-based line in the file."""

    line: int
    layer: str
    fwd_compute_ns: int | None
    wg_compute_ns: int | None
    ig_compute_ns: int | None
    fwd_exposed_ns: int | None
    wg_exposed_ns: int | None
    ig_exposed_ns: int | None
    fwd_comm_ns: int | None
    fwd_algbw: float
    fwd_busbw: float
    wg_comm_ns: int | None
    wg_algbw: float
    wg_busbw: float
    ig_comm_ns: int | None
    ig_algbw: float
    ig_busbw: float


@dataclass(frozen=True)
class EndToEnd:
    """The whole file. ``summary``: ``{key: ns or None}`` for :data:`SUMMARY_KEYS` [1:] (µs ×
    1000; None: ``NaN or Inf``); ``shares``: ``{key: percent as written (str)}`` for all but
    ``Total time``; ``file_name``: the first value of line 2; ``run_name``: line 3's second
    column; ``rows`` in file order."""

    path: Path
    file_name: str
    summary: dict
    shares: dict
    run_name: str
    rows: tuple


def _us_ns(tok: str) -> int | None:
    return None if tok == _NOT_FINITE else int(tok) * 1000


def _time_ok(tok: str) -> bool:
    """``tok`` is ``NaN or Inf`` or an integer µs within :data:`MAX_TIME_US` (the regex bounds
    the digits first: ``int`` of a huge string is refused by Python's int-string limit)."""
    return tok == _NOT_FINITE or (_US.fullmatch(tok) is not None
                                  and abs(int(tok)) <= MAX_TIME_US)


def read_end_to_end(path: str | os.PathLike) -> EndToEnd:
    """Read a ``SimAI_analytical`` ``EndToEnd.csv`` (module docstring for the format).

    Raises:
        InputError: the file cannot be read, or a line is not as ``Layer::report`` writes it:
            one line naming the file, the line, the column and what was got and expected.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{path}: got no such file, expected SimAI_analytical's "
                         "results/PREFIX-EndToEnd.csv") from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    lines = [(n, line.rstrip("\r")) for n, line in enumerate(text.split("\n"), 1)]
    lines = [(n, line) for n, line in lines if line.strip()]

    def fail(n: int, column: str, got: str, expected: str) -> InputError:
        if len(got) > 60:           # a cell of a thousand digits: its head and its length
            got = f"{got[:40]}... ({len(got)} characters)"
        return InputError(f"{path}: line {n}: {column}: got {got!r}, expected {expected}")

    if len(lines) < 3:
        n = lines[-1][0] + 1 if lines else 1
        raise fail(n, "file", "end of file", "the summary keys, their values and the layer "
                   "header of SimAI_analytical's EndToEnd.csv")
    (n1, keys), (n2, values), (n3, head) = lines[:3]
    got_keys = tuple(k.strip() for k in keys.split(","))
    if got_keys != SUMMARY_KEYS:
        raise fail(n1, "summary keys", keys[:120], ", ".join(SUMMARY_KEYS))
    vals = values.rsplit(",", len(SUMMARY_KEYS) - 1)
    if len(vals) != len(SUMMARY_KEYS):
        raise fail(n2, "summary values", values[:120], f"{len(SUMMARY_KEYS)} comma-separated values")
    summary, shares = {}, {}
    for key, v in zip(SUMMARY_KEYS[1:-1], vals[1:-1]):
        m = _SHARE.fullmatch(v.strip())
        if m is None or not _time_ok(m.group(1)):
            raise fail(n2, key, v.strip(), "'N (P%)': N " + _TIME_EXPECTED +
                       ", P a percent with 2 decimals")
        summary[key], shares[key] = _us_ns(m.group(1)), m.group(2)
    total = vals[-1].strip()
    if not _time_ok(total):
        raise fail(n2, "Total time", total, _TIME_EXPECTED)
    summary["Total time"] = _us_ns(total)
    cols = head.split(",")
    if len(cols) != 2 + len(_HEADER_TAIL) or cols[0] != "layer_name" or \
            tuple(cols[2:]) != _HEADER_TAIL:
        raise fail(n3, "layer header", head[:120], repr(layer_header(cols[1] if len(cols) > 1
                                                                       else "RUN")) +
                   " (the analytical backend's 17 columns)")
    run_name = cols[1]
    rows = []
    for n, line in lines[3:]:
        f = line.split(",")
        if len(f) != 2 + len(ROW_COLUMNS):
            raise fail(n, "row", line[:120], f"{2 + len(ROW_COLUMNS)} comma-separated columns "
                       "(layer id, run name, " + ", ".join(_HEADER_TAIL) + ")")
        if not f[0] or any(c.isspace() for c in f[0]):
            raise fail(n, "layer_name", f[0], "a layer id of the workload (one word)")
        if f[1] != run_name:
            raise fail(n, "run name", f[1], f"the header's, {run_name!r}")
        vals_row: list = []
        for name, tok in zip(ROW_COLUMNS, f[2:]):
            if name.endswith("_ns"):
                if not _time_ok(tok):
                    raise fail(n, _column_name(name), tok, _TIME_EXPECTED)
                vals_row.append(_us_ns(tok))
            else:
                if not _BW.fullmatch(tok) or (tok[-1].isdigit() and abs(float(tok)) > MAX_BW_GBPS):
                    raise fail(n, _column_name(name), tok, _BW_EXPECTED)
                vals_row.append(math.nan if tok.endswith("nan") else float(tok))
        rows.append(EndToEndRow(n, f[0], *vals_row))
    return EndToEnd(path, vals[0].strip(), summary, shares, run_name, tuple(rows))


def _column_name(attr: str) -> str:
    """The file's header text of a row attribute (``fwd_comm_ns`` -> ``fwd total comm``)."""
    return _HEADER_TAIL[ROW_COLUMNS.index(attr)] if not attr.endswith(("algbw", "busbw")) \
        else attr.replace("_", " ")
