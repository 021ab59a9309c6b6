"""Selections of :func:`tokenpcap.generate.run.generate` and the parsers of their command-line text.

A selection filters the output of the full simulation (so a slice keeps the exact timing of the
whole trace): NICs (frames they send), ranks (frames their NICs send for them: data and CTS they
send, ACKs for data they receive), phase patterns (a whole label, a prefix ending at ``/``, or
one component such as ``backward``), iterations, and a time window ``[start, end)`` in ns from
the start of the run.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tokenpcap.errors import InputError
from tokenpcap.records import LABELS

__all__ = ["Selection", "OPEN_END_NS", "parse_index_set", "parse_time_ns", "parse_window",
           "parse_iterations", "phase_matches", "unknown_phase_patterns", "window_text"]

#: the end of an open time window (``"1ms:"``): later than any simulated time
OPEN_END_NS = 1 << 62

_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_index_set(text: str, what: str, limit: int) -> frozenset[int]:
    """``"0-3,8,12"`` → {0, 1, 2, 3, 8, 12}. Raises: InputError (naming ``what``) on bad text or
    an index outside ``[0, limit)``."""
    out: set[int] = set()
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", part)
        if not m:
            raise InputError(f"{what}: got {text!r}, expected indices like '0-3,8'")
        a, b = int(m.group(1)), int(m.group(2) or m.group(1))
        if b < a:
            raise InputError(f"{what}: got {part.strip()!r}, expected a range A-B with A <= B")
        if b >= limit:
            raise InputError(f"{what}: got {part.strip()!r}, expected indices in 0..{limit - 1}")
        out.update(range(a, b + 1))
    return frozenset(out)


def parse_time_ns(text: str, what: str) -> int:
    """``"250us"``, ``"3ms"``, ``"1500"`` (ns) → integer ns. Raises: InputError."""
    m = re.fullmatch(r"\s*(\d+)(?:\.(\d+))?\s*(ns|us|µs|ms|s)?\s*", text)
    if not m:
        raise InputError(f"{what}: got {text!r}, expected a time like 1500, 250us, 3ms or 0.5s")
    unit = _UNITS[m.group(3) or "ns"]
    frac = m.group(2) or ""
    value = int(m.group(1)) * unit + (int(frac) * unit // 10 ** len(frac) if frac else 0)
    return value


def parse_window(text: str) -> tuple[int, int]:
    """``"START:END"`` (either side may be empty) → ``(start_ns, end_ns)``. Raises: InputError."""
    if ":" not in text:
        raise InputError(f"--time-window: got {text!r}, expected START:END such as 0:2ms")
    a, b = text.split(":", 1)
    start = parse_time_ns(a, "--time-window start") if a.strip() else 0
    end = parse_time_ns(b, "--time-window end") if b.strip() else OPEN_END_NS
    if end <= start:
        raise InputError(f"--time-window: got {text!r}, expected END > START")
    return start, end


def window_text(window_ns: tuple[int, int]) -> str:
    """A time window for messages: ``"1,000..2,000 ns"``, ``"1,000 ns.. (open end)"``."""
    a, b = window_ns
    return f"{a:,} ns.. (open end)" if b >= OPEN_END_NS else f"{a:,}..{b:,} ns"


def phase_matches(pattern: str, label: str) -> bool:
    """Whether a ``--phases`` pattern selects ``label`` (``"dim/pass/collective"``): the whole
    label, a prefix ending at ``/`` (``"dp/"``, ``"pp/forward"``) or one component
    (``"backward"``, ``"AllToAll"``)."""
    return (pattern == label or label.startswith(pattern.removesuffix("/") + "/")
            or pattern in label.split("/"))


def unknown_phase_patterns(patterns) -> list[str]:
    """The patterns of ``patterns`` that select no phase label of any scenario
    (:data:`tokenpcap.records.LABELS`): typos, knowable before anything is planned."""
    return [p for p in patterns if not any(phase_matches(p, lab) for lab in LABELS)]


def parse_iterations(text: str) -> tuple[int, range | None]:
    """``"N"`` → run N iterations, keep all; ``"A:B"`` → run B, keep ``[A, B)``; ``"0:B"`` is ``"B"``
    (keeps all: no selection, so the PFC frames a selection of messages drops stay, as with ``"B"``).
    Raises: InputError."""
    m = re.fullmatch(r"\s*(\d+)\s*(?::\s*(\d+)\s*)?", text)
    if not m:
        raise InputError(f"--iterations: got {text!r}, expected N or A:B (e.g. 2 or 1:3)")
    if m.group(2) is None:
        n = int(m.group(1))
        if n < 1:
            raise InputError(f"--iterations: got {n}, expected >= 1")
        return n, None
    a, b = int(m.group(1)), int(m.group(2))
    if b <= a:
        raise InputError(f"--iterations: got {text!r}, expected A:B with B > A")
    return b, (range(a, b) if a > 0 else None)


@dataclass(frozen=True)
class Selection:
    """What to keep of the full simulation (module docstring). ``None`` keeps everything."""

    nics: frozenset[int] | None = None
    ranks: frozenset[int] | None = None
    phases: tuple[str, ...] | None = None
    iterations: range | None = None
    window_ns: tuple[int, int] | None = None

    def labels(self) -> np.ndarray:
        """bool ``(len(LABELS),)``: labels the phase patterns select."""
        if not self.phases:
            return np.ones(len(LABELS), bool)
        keep = np.zeros(len(LABELS), bool)
        for i, lab in enumerate(LABELS):
            keep[i] = any(phase_matches(p, lab) for p in self.phases)
        return keep
