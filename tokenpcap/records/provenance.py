"""Capture provenance: the one-line section comment every pcapng file tokenpcap writes carries.

The generator (``tokenpcap generate`` / ``run``) puts it in the ``opt_comment`` of the Section
Header Block (pcapng, draft-ietf-opsawg-pcapng Sec. 4.1); ``inspect --against`` reads it back to
know at which scale, over which iterations and with which selection the capture was made. One
definition for both sides, so writer and reader cannot drift apart::

    tokenpcap scenario=<name> scale=<K> iterations=<A>:<B> split=<nic|phase|none> nics=<list|all>
    ranks=<list|all> phases=<list|all> time_window=<a:b ns|all> snaplen=<N> seed=<S>
    clear_to_send=<0|1> [point=<nic-rx|switch:NAME:PORT>]

(on one line; keys in this order, separated by one space). Values never contain spaces:

* ``iterations=A:B``: the capture keeps iterations ``A`` … ``B−1`` (``--iterations N`` is
  ``0:N``, ``--iterations A:B`` is ``A:B``);
* ``nics``, ``ranks``: comma-separated global indices in increasing order, or ``all``;
* ``phases``: the comma-separated phase patterns of ``--phases`` as given, or ``all``;
* ``time_window``: ``START:END`` in integer ns of simulated time (``END`` empty when the window
  is open-ended), or ``all``;
* ``point``: the capture point (:mod:`tokenpcap.records.points`), written only when it is not
  the default ``nic-tx`` (a ``nic-tx`` capture's line is the same as before points existed);
  a line without it reads back as ``nic-tx``;
* ``scenario`` and ``phases`` are percent-encoded (RFC 3986 Sec. 2.1) where they hold a space,
  ``%``, ``=`` or ``,`` inside one value (a scenario name ``my run`` is written ``my%20run``).

A capture is a *selection* (``parse_provenance(...)["selection"]``) when ``phases``, ``ranks``
or ``time_window`` is not ``all`` or the kept iterations do not start at 0: it then lacks some
packets of the QPs it shows, so PSN gaps are expected. ``nics`` alone is not a selection in that
sense (every QP direction is sent by one NIC, and a NIC's file holds all it sends), nor is
``point=nic-rx`` (every QP direction is received by one NIC); a ``switch:`` point is (a switch
port carries only the frames routed through it).
"""
from __future__ import annotations

import re
from urllib.parse import quote, unquote

import numpy as np

from tokenpcap.errors import InputError, DecodeError
from tokenpcap.records.points import NIC_TX, CapturePoint, parse_point

__all__ = ["PREFIX", "KEYS", "OPTIONAL_KEYS", "SPLITS", "MAX_INDEX", "MAX_SCALE", "provenance_comment",
           "parse_provenance", "is_provenance", "index_ranges"]

#: First word of the comment.
PREFIX = "tokenpcap"
#: The keys, in the order they are written.
KEYS = ("scenario", "scale", "iterations", "split", "nics", "ranks", "phases", "time_window",
        "snaplen", "seed", "clear_to_send")
#: Keys written only when their value is not the default, after :data:`KEYS`.
OPTIONAL_KEYS = ("point",)
#: Values of ``split``.
SPLITS = ("nic", "phase", "none")
_SAFE = "/:-_.~+*()!$&';@"        # kept as is by quote() besides letters and digits
#: Largest NIC or rank index read back: far above any cluster a scenario can describe, so that a
#: hostile ``nics=0-99999999999`` is refused instead of expanded into memory.
MAX_INDEX = 1 << 20
#: Largest ``--scale``: a non-negative int64 (as the seed), which a comment's 19-digit number
#: carries back; a larger one was written and then refused by every reader of the capture.
#: Beyond the largest message a larger scale changes nothing (each call at its floor).
MAX_SCALE = (1 << 63) - 1
#: A number in a provenance comment: at most 19 digits (every value fits a signed 64-bit
#: integer or is refused; Python refuses to convert more than 4,300 digits at all).
_NUM = r"\d{1,19}"


def _enc(text: str) -> str:
    return quote(str(text), safe=_SAFE)


def _index_list(values) -> str:  # type: ignore[no-untyped-def]
    if values is None:
        return "all"
    out = sorted({int(v) for v in values})
    if not out or out[0] < 0:
        raise InputError(f"index list: got {values!r}, expected non-negative integers")
    return ",".join(map(str, out))


def provenance_comment(*, scenario: str, scale: int, iterations: tuple[int, int], split: str,
                       nics=None, ranks=None, phases=None,  # type: ignore[no-untyped-def]
                       time_window: tuple[int, int | None] | None = None, snaplen: int,
                       seed: int, clear_to_send: bool, point: CapturePoint = NIC_TX) -> str:
    """The provenance line (module docstring).

    Args:
        scenario: the scenario name; scale: ``--scale`` (>= 1); iterations: ``(A, B)`` kept
            iterations ``[A, B)``; split: ``nic``, ``phase`` or ``none``; nics, ranks: iterables
            of global indices or ``None`` (all); phases: the phase patterns or ``None``;
            time_window: ``(start_ns, end_ns)`` (``end_ns`` None: open-ended) or ``None``;
            snaplen: bytes kept per frame; seed: the run's seed; clear_to_send: the scenario's
            ``generation.clear_to_send``; point: the capture point (``point=`` is written only
            when it is not ``nic-tx``).

    Raises:
        InputError: a value out of range (scale outside 1..MAX_SCALE, B <= A, unknown split, negative index ...).
    """
    a, b = (int(x) for x in iterations)
    if not 1 <= int(scale) <= MAX_SCALE or a < 0 or b <= a or split not in SPLITS or int(snaplen) < 1 \
            or int(seed) < 0:
        raise InputError(f"provenance: scale {scale}, iterations {a}:{b}, split {split!r}, "
                         f"snaplen {snaplen}, seed {seed}: out of range")
    if time_window is None:
        tw = "all"
    else:
        t0, t1 = time_window
        if int(t0) < 0 or (t1 is not None and int(t1) <= int(t0)):
            raise InputError(f"provenance: time_window {time_window!r}: expected 0 <= start < end")
        tw = f"{int(t0)}:{'' if t1 is None else int(t1)}"
    ph = "all" if not phases else ",".join(_enc(p) for p in phases)
    vals = (_enc(scenario), str(int(scale)), f"{a}:{b}", split, _index_list(nics),
            _index_list(ranks), ph, tw, str(int(snaplen)), str(int(seed)),
            "1" if clear_to_send else "0")
    words = [PREFIX] + [f"{k}={v}" for k, v in zip(KEYS, vals)]
    if point != NIC_TX:
        words.append(f"point={_enc(str(point))}")
    return " ".join(words)


def index_ranges(values) -> str:  # type: ignore[no-untyped-def]
    """Sorted distinct non-negative indices as the ``nics``/``ranks`` text with runs as
    ranges, ``0-3,8,16-19`` (``parse_provenance`` reads it back to the same tuple); its length
    grows with the number of runs, not of indices (numpy, no loop per index)."""
    v = np.unique(np.asarray(values, np.int64))
    if v.size == 0:
        return ""
    cut = np.flatnonzero(np.diff(v) != 1)
    lo, hi = v[np.r_[0, cut + 1]].tolist(), v[np.r_[cut, v.size - 1]].tolist()
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in zip(lo, hi))


def is_provenance(text: str | None) -> bool:
    """True when ``text`` is (or looks like) a provenance line: it starts with ``tokenpcap ``
    and names ``scenario=`` next."""
    return bool(text) and str(text).startswith(f"{PREFIX} scenario=")


def _int(key: str, value: str, text: str, minimum: int = 0) -> int:
    if not re.fullmatch(_NUM, value) or int(value) < minimum:
        raise DecodeError(f"provenance comment: {key}: got {value!r}, expected an integer >= "
                          f"{minimum} (in {text!r})")
    return int(value)


def _indices(key: str, value: str, text: str) -> tuple[int, ...] | None:
    if value == "all":
        return None
    out: set[int] = set()
    for part in value.split(","):
        m = re.fullmatch(rf"({_NUM})(?:-({_NUM}))?", part)
        if not m or (m.group(2) and int(m.group(2)) < int(m.group(1))):
            raise DecodeError(f"provenance comment: {key}: got {value[:80]!r}, expected 'all' or "
                              f"comma-separated indices (in {text[:200]!r})")
        last = int(m.group(2) or m.group(1))
        if last > MAX_INDEX:
            raise DecodeError(f"provenance comment: {key}: got index {last:,}, expected at most "
                              f"{MAX_INDEX:,} (in {text[:200]!r})")
        out.update(range(int(m.group(1)), last + 1))
    return tuple(sorted(out))


def parse_provenance(text: str) -> dict:
    """Parse a provenance line (module docstring) into plain values.

    Returns:
        ``{"scenario": str, "scale": int, "iterations": (A, B), "split": str,
        "nics": tuple[int, ...] | None, "ranks": tuple[int, ...] | None,
        "phases": tuple[str, ...] | None, "time_window": (start_ns, end_ns | None) | None,
        "snaplen": int, "seed": int, "clear_to_send": bool, "point": str,
        "selection": bool}``; ``None`` stands for ``all``; ``point`` the capture point's text
        (:func:`tokenpcap.records.points.parse_point` reads it), ``"nic-tx"`` when the line
        has none; ``selection`` as the module docstring defines it. Unknown extra keys
        (written by a later version) are kept as strings under ``"extra"``.

    Raises:
        DecodeError: ``text`` is not a provenance line, or a key is missing or malformed (the
            message names the key, the value got and what was expected).
    """
    line = str(text).strip()
    words = line.split(" ")
    if not words or words[0] != PREFIX:
        raise DecodeError(f"provenance comment: got {line[:80]!r}, expected a line starting "
                          f"with {PREFIX!r}")
    raw: dict[str, str] = {}
    for w in words[1:]:
        if not w:
            continue
        k, eq, v = w.partition("=")
        if not eq or not k:
            raise DecodeError(f"provenance comment: got {w!r}, expected key=value (in {line!r})")
        raw[k] = v
    missing = [k for k in KEYS if k not in raw]
    if missing:
        raise DecodeError(f"provenance comment: {missing[0]}: got missing, expected "
                          f"{missing[0]}=<value> (in {line!r})")
    m = re.fullmatch(rf"({_NUM}):({_NUM})", raw["iterations"])
    if not m or int(m.group(2)) <= int(m.group(1)):
        raise DecodeError(f"provenance comment: iterations: got {raw['iterations']!r}, expected "
                          f"A:B with B > A (in {line!r})")
    if raw["split"] not in SPLITS:
        raise DecodeError(f"provenance comment: split: got {raw['split']!r}, expected one of "
                          f"{', '.join(SPLITS)} (in {line!r})")
    tw_text = raw["time_window"]
    tw: tuple[int, int | None] | None = None
    if tw_text != "all":
        w = re.fullmatch(rf"({_NUM}):({_NUM})?", tw_text)
        if not w or (w.group(2) and int(w.group(2)) <= int(w.group(1))):
            raise DecodeError(f"provenance comment: time_window: got {tw_text!r}, expected "
                              f"'all' or START:END in ns with END > START (in {line!r})")
        tw = (int(w.group(1)), int(w.group(2)) if w.group(2) else None)
    if raw["clear_to_send"] not in ("0", "1"):
        raise DecodeError(f"provenance comment: clear_to_send: got {raw['clear_to_send']!r}, "
                          f"expected 0 or 1 (in {line!r})")
    phases = None if raw["phases"] == "all" else tuple(
        unquote(p) for p in raw["phases"].split(",") if p)
    iterations = (int(m.group(1)), int(m.group(2)))
    try:
        point = parse_point(unquote(raw["point"])) if "point" in raw else NIC_TX
    except InputError:
        raise DecodeError(f"provenance comment: point: got {raw['point']!r}, expected nic-tx, "
                          f"nic-rx or switch:NAME:PORT (in {line!r})") from None
    out = {
        "scenario": unquote(raw["scenario"]),
        "scale": _int("scale", raw["scale"], line, 1),
        "iterations": iterations,
        "split": raw["split"],
        "nics": _indices("nics", raw["nics"], line),
        "ranks": _indices("ranks", raw["ranks"], line),
        "phases": phases,
        "time_window": tw,
        "snaplen": _int("snaplen", raw["snaplen"], line, 1),
        "seed": _int("seed", raw["seed"], line),
        "clear_to_send": raw["clear_to_send"] == "1",
        "point": str(point),
    }
    out["selection"] = (phases is not None or out["ranks"] is not None or tw is not None
                        or iterations[0] > 0 or point.at_switch)
    extra = {k: v for k, v in raw.items() if k not in KEYS + OPTIONAL_KEYS}
    if extra:
        out["extra"] = extra
    return out
