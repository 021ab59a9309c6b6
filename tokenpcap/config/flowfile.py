"""The ``flows`` workload: transfers read from a flow file, each started at its own time
(open loop).

``workload: {kind: flows, file: PATH}`` replays every line of ``PATH``, a flow file in the
format HPCC ns-3's ``scratch/third.cc`` reads (``FLOW_FILE``: first line the number of flows,
then ``src dst pg dport size_bytes start_seconds`` per flow; what ``tokenpcap export --to
hpcc`` writes, :mod:`tokenpcap.export.hpcc`), as one point-to-point transfer of ``size_bytes``
from rank ``src`` to rank ``dst`` that starts at its start time and waits for nothing else: the
flows are *open loop*, as the simulator runs them, where a training scenario's transfers start
when the transfers they depend on arrive (closed loop). ``src``/``dst`` are the simulator's
host node ids, the global NIC indices; the plan requires ranks and NICs to coincide (one GPU per
NIC, as every bundled H100 cluster has), so that rank ``r`` sends from NIC ``r``.

Times: ``start_seconds`` is read as decimal text and truncated to whole ns (ns-3.17's
``Seconds(double)`` truncates too; the export writes each start as its ns plus half a ns so that
both readings agree, :func:`tokenpcap.export.hpcc.start_seconds_text`). The earliest start of the
file is our time 0; every flow starts ``start - earliest`` ns after it.

Queue pairs: third.cc gives every flow its own QP (a source port counted per pair from 10000),
so concurrent flows of one pair share the sender's NIC round-robin. Our engine has up to
``QP_STRIDE`` connections per pair (:mod:`tokenpcap.schedule.engine.state`); flow ``k`` of a
pair (in file order) goes on connection lane ``k mod FLOW_LANES``, so flows of a pair that
overlap in time are on different QPs unless more than :data:`FLOW_LANES` of them are in flight
at once. ``pg`` and ``dport`` are not used (every flow is on the scenario's data priority).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from tokenpcap.errors import ProfileError

__all__ = ["FLOW_DTYPE", "FLOW_LANES", "read_flow_file", "flow_lanes", "occurrence_index"]

#: One row per flow of the file, in file order: ranks, bytes, start (ns after the earliest),
#: the connection lane (:func:`flow_lanes`) and the 1-based line of the file.
FLOW_DTYPE = np.dtype([("src", "<i8"), ("dst", "<i8"), ("size_bytes", "<i8"),
                       ("start_ns", "<i8"), ("lane", "<i8"), ("line", "<i8")])
#: Connection lanes per (src, dst) pair (module docstring); with ``collectives.channels: 1``
#: the lanes' connection indices ``7 + lane`` (dim ``wl``) stay below ``QP_STRIDE`` (256).
FLOW_LANES = 128
_NS_PER_S = 1_000_000_000


def _seconds_ns(text: str) -> int:
    """``S[.F...]`` (decimal, no sign or exponent) truncated to integer ns; ValueError else."""
    whole, dot, frac = text.partition(".")
    digits = lambda t: t.isascii() and t.isdigit()    # noqa: E731
    if not digits(whole) or (dot and not digits(frac)):
        raise ValueError(text)
    return int(whole) * _NS_PER_S + int((frac + "000000000")[:9])


def occurrence_index(key: np.ndarray) -> np.ndarray:
    """int64 ``(n,)``: how many earlier rows (in array order) carry the same ``key``."""
    order = np.argsort(key, kind="stable")
    k = key[order]
    first = np.ones(k.size, bool)
    first[1:] = k[1:] != k[:-1]
    start = np.maximum.accumulate(np.where(first, np.arange(k.size), 0))
    out = np.empty(k.size, np.int64)
    out[order] = np.arange(k.size) - start
    return out


def flow_lanes(src: np.ndarray, dst: np.ndarray, lanes: int = FLOW_LANES) -> np.ndarray:
    """int64 ``(n,)``: flow ``k`` of its ``(src, dst)`` pair in array order gets ``k % lanes``."""
    key = np.asarray(src, np.int64) * (1 << 32) + np.asarray(dst, np.int64)
    return occurrence_index(key) % lanes


def read_flow_file(file: Path | None, key: str, value: Any, world: int) -> np.ndarray:
    """The flows of the file ``value`` (relative to the scenario ``file``'s folder):
    ``FLOW_DTYPE (n,)`` in file order (module docstring).

    Raises:
        ProfileError: ``value`` not a string, the file unreadable, a count line that is not the
            number of flow lines, a line without 6 fields, a rank outside ``[0, world)``,
            ``src == dst``, a size below 1 or a start that is not a decimal number of seconds
            (one line: scenario, key, file and line, got, expected).
    """
    if not isinstance(value, str) or not value:
        raise ProfileError(file, key, value, "the path of a flow file (HPCC ns-3 FLOW_FILE format)")
    path = Path(value) if file is None else Path(file).parent / value
    try:
        lines = path.read_text(encoding="ascii").split("\n")
    except (OSError, UnicodeDecodeError) as err:
        raise ProfileError(file, key, value, f"a readable flow file ({path}: "
                           f"{getattr(err, 'strerror', None) or err})") from None
    rows = [(n, ln.split()) for n, ln in enumerate(lines, 1) if ln.strip()]
    if not rows or len(rows[0][1]) != 1 or not rows[0][1][0].isdigit() \
            or int(rows[0][1][0]) != len(rows) - 1 or len(rows) < 2:
        got = " ".join(rows[0][1]) if rows else "an empty file"
        raise ProfileError(file, f"{key} ({path}: line 1)", got,
                           f"the number of flow lines after it ({max(len(rows) - 1, 1)} or more)")
    out = np.zeros(len(rows) - 1, FLOW_DTYPE)
    for i, (n, tok) in enumerate(rows[1:]):
        where = f"{key} ({path}: line {n})"
        if len(tok) != 6:
            raise ProfileError(file, where, " ".join(tok), "6 fields: src dst pg dport size_bytes "
                               "start_seconds")
        try:
            src, dst, size = int(tok[0]), int(tok[1]), int(tok[4])
            start = _seconds_ns(tok[5])
        except ValueError:
            raise ProfileError(file, where, " ".join(tok), "integer ranks and size, a decimal "
                               "start in seconds") from None
        if not (0 <= src < world and 0 <= dst < world) or src == dst:
            raise ProfileError(file, where, f"{src} -> {dst}", f"two different ranks in [0, "
                               f"{world - 1}]")
        if size < 1:
            raise ProfileError(file, where, size, "size_bytes >= 1")
        out[i] = (src, dst, size, start, 0, n)
    out["start_ns"] -= out["start_ns"].min()
    out["lane"] = flow_lanes(out["src"], out["dst"])
    return out
