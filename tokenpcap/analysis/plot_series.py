"""The numbers behind a capture's pictures, aggregated while the capture streams by (memory flat
in the file size): bytes per time bin, sending NIC and phase, and the frame- and message-size
distributions. Pure numpy, no matplotlib: :mod:`tokenpcap.analysis.plot` draws them.
"""
from __future__ import annotations

import os

import numpy as np

from tokenpcap.analysis.decode import decode_batch
from tokenpcap.analysis.flows import is_rdma
from tokenpcap.analysis.inspect import address_text, coalesced
from tokenpcap.errors import DecodeError, InputError
from tokenpcap.pcap.capture import CHUNK
from tokenpcap.pcap.reader import open_capture
from tokenpcap.pcap.timestamps import NO_TIME
from tokenpcap.records import parse_phase_label
from tokenpcap.records.comments import CONTROL_PREFIXES

__all__ = ["CONTROL_LABEL", "MAX_BINS", "capture_series", "time_bins", "in_window",
           "time_slot", "capture_span", "phase_throughput",
           "count_values", "parse_time_window"]

#: Most time bins a capture picture holds (``--bin`` finer than span / MAX_BINS is refused):
#: each NIC and phase drawn keeps one int64 per bin, and a figure cannot show more.
MAX_BINS = 1_000_000

#: the phase category of the control packets (clear-to-send writes and ACKs)
CONTROL_LABEL = "control (CTS, ACK)"


def parse_time_window(text: str) -> tuple[int | None, int | None]:
    """``START:END`` -> ``(start_ns, end_ns)``, times from the capture's first frame as
    Wireshark's ``frame.time_relative`` shows them: seconds (``0.0015``), or with a unit
    ``ns``, ``us``, ``ms``, ``s`` (``1500us``); either side may be empty (from the first / to
    the last frame).

    Raises:
        ValueError: not ``START:END`` of such times, or END before START (the message says
            what was got and expected).
    """
    from decimal import Decimal, InvalidOperation

    units = (("ns", 1), ("us", 1000), ("ms", 10 ** 6), ("s", 10 ** 9))
    want = "START:END in seconds from the first frame (or with ns/us/ms/s), e.g. 0.5:0.75"
    parts = text.split(":")
    if len(parts) != 2 or not any(p.strip() for p in parts):
        raise ValueError(f"got {text!r}, expected {want}")
    out: list[int | None] = []
    for part in parts:
        part = part.strip()
        if not part:
            out.append(None)
            continue
        mult = 10 ** 9
        for suffix, m in units:
            if part.endswith(suffix):
                part, mult = part[:-len(suffix)], m
                break
        try:
            value = Decimal(part) * mult
        except InvalidOperation:
            raise ValueError(f"got {text!r}, expected {want}") from None
        if not value.is_finite() or value < 0:
            raise ValueError(f"got {text!r}, expected {want}")
        out.append(int(value.to_integral_value()))
    if out[0] is not None and out[1] is not None and out[1] < out[0]:
        raise ValueError(f"got {text!r}, expected END at or after START")
    return out[0], out[1]


def time_bins(cap, *, span: tuple[int, int] | None = None, bins: int = 200,
              bin_ns: int | None = None, window: tuple[int | None, int | None] | None = None
              ) -> tuple[int, int, int, int | None, int | None, int]:
    """The time bins of :func:`capture_series` for the open capture ``cap`` (its record headers
    read when ``span`` is None): ``(t0_ns, bin_ns, bins, lo, hi, first)``, the first bin's
    start, the bin width, the bins minus one (slots = bins + 1), the window's bounds in capture
    time (None: open) and the first frame's time in file order (``span[0]`` when given).

    Raises:
        InputError: as :func:`capture_series` (too fine a ``bin_ns``, a window after the last
            frame).
    """
    if span is not None:
        t0, t1 = span
        first = t0
    else:
        t0, t1, first = _span(cap)
    t0 = t0 or 0
    first = t0 if first is None else first
    lo = hi = None
    if window is not None:
        lo = first + window[0] if window[0] is not None else None
        hi = first + window[1] if window[1] is not None else None
        # the window against the capture's last frame, before its end stands for the last
        if lo is not None and (t1 is None or lo > t1):
            last = f" ({(t1 - first) / 1e9:.9f} s)" if t1 is not None else ""
            raise InputError(f"--time-window: got a window after the last frame{last}, "
                             "expected one that holds frames")
        t0 = lo if lo is not None else t0
        t1 = hi if hi is not None else t1
    if bin_ns is not None:
        n = ((t1 or 0) - t0) // bin_ns + 1 if t1 is not None else 1
        if n > MAX_BINS:
            least = -(-((t1 or 0) - t0 + 1) // MAX_BINS)
            raise InputError(f"--bin: got {bin_ns:,} ns, expected at least {least:,} ns for "
                             f"{(t1 or 0) - t0:,} ns of capture (at most {MAX_BINS:,} bins)")
        width, bins = bin_ns, max(int(n) - 1, 0)
    else:
        width = max(((t1 or 0) - t0) // bins + 1, 1)
    return t0, width, bins, lo, hi, first


def in_window(time_ns: np.ndarray, lo: int | None, hi: int | None) -> np.ndarray:
    """bool (n,): the timed frames of int64 ``time_ns`` (n,) with ``lo <= t <= hi`` (None:
    open), the window of :func:`time_bins`."""
    keep = time_ns != NO_TIME
    if lo is not None:
        keep &= time_ns >= lo
    if hi is not None:
        keep &= time_ns <= hi
    return keep


def time_slot(time_ns: np.ndarray, t0: int, width: int) -> np.ndarray:
    """int64 (n,): the bin of each timed frame of int64 ``time_ns`` (n,), bins of ``width`` ns
    from ``t0`` (:func:`time_bins`)."""
    # in uint64: the span of arbitrary int64 times may exceed int64 (wraps right here)
    return ((time_ns.astype(np.uint64) - np.uint64(t0 % (1 << 64)))
            // np.uint64(width)).astype(np.int64)


def capture_series(path: str | os.PathLike, *, bins: int = 200,
                   span: tuple[int, int] | None = None, bin_ns: int | None = None,
                   window: tuple[int | None, int | None] | None = None) -> dict:
    """What the capture pictures need, aggregated while streaming (memory flat in the file size).

    Two passes over the records: the first finds the time span (record headers only), the
    second decodes every batch and adds it up. With ``span = (first_ns, last_ns)`` (e.g.
    :func:`capture_span` of several files, so that their bins coincide) the first pass is
    skipped and the bins cover that span; times outside it must not occur.

    Returns:
        dict: ``t0_ns`` (first time), ``bin_ns`` (bin width, ns), ``bins`` (bins + 1 slots);
        ``nics`` (sending addresses) and ``phases`` (labels, plus control packets as one
        category); ``throughput``: ``{(nic index, phase index or -1): int64 (bins + 1,)}`` wire
        bytes of the RDMA frames starting in each bin; ``frame_sizes`` and ``message_sizes``:
        ``{bytes: count}`` of every frame's wire length and of every RETH DMA length;
        ``untimed``: RDMA frames without a time (pcapng Simple Packet Blocks carry none), counted
        in the size distributions but in no bin; ``start_ns``: the first bin's start after the
        first frame (file order, Wireshark's ``frame.time_relative`` 0).

    ``bin_ns``: the bin width (ns) instead of ``bins`` bins over the span. ``window``:
    ``(start_ns, end_ns)`` after the first frame (None: the first / last frame): only the
    frames with ``start_ns <= frame.time_relative <= end_ns`` count, in the bins and in the
    size distributions (untimed frames in none), the bins start at ``start_ns``.

    Raises:
        CaptureError: as :func:`tokenpcap.pcap.reader.open_capture`.
        InputError: ``bin_ns`` would make more than :data:`MAX_BINS` bins, or the window
            starts after the last frame (of ``span`` when given), or (``span`` None) holds no
            frame of the capture.
    """
    cap = open_capture(path, on_truncation="stop")
    t0, width, bins, lo, hi, first = time_bins(cap, span=span, bins=bins, bin_ns=bin_ns,
                                               window=window)
    nic_index: dict[tuple, int] = {}
    nics: list[str] = []
    labels: list[str] = []
    label_index: dict[str, int] = {}
    thr: dict[tuple[int, int], np.ndarray] = {}
    frame_sizes: dict[int, int] = {}
    message_sizes: dict[int, int] = {}
    untimed = 0
    phase_of = _PhaseCodes(labels, label_index)
    used_labels = 0                       # labels known at the last batch with RDMA rows
    # sections end reader batches: joined, a file of many one-packet sections costs one
    # decode per CHUNK rows, not one per section
    for rec in coalesced(cap.batches(), CHUNK):
        d = decode_batch(cap.data, rec, cap.views)
        # a joined batch is read after the reader released its first rows' pages: drop them
        cap.release(int(rec["record"].min()), int((rec["offset"] + rec["caplen"]).max()))
        codes = phase_of.codes(cap.comments)
        cap.forget_comments()             # the comments of rows already coded
        phase_of.forget()
        if window is not None:
            d = d[in_window(d["time_ns"], lo, hi)]
        count_values(frame_sizes, d["orig_len"])
        rd = np.flatnonzero(is_rdma(d["kind"]))
        if rd.size == 0:
            continue
        d = d[rd]
        used_labels = len(labels)
        count_values(message_sizes, d["dmalen"][d["dmalen"] >= 0])
        key = (d["kind"].astype(np.uint64) << np.uint64(60)) ^ d["src_hi"] * np.uint64(
            0x9E3779B97F4A7C15) ^ d["src_lo"]
        u, rep, inv = np.unique(key, return_index=True, return_inverse=True)
        table = np.empty(u.size, np.int64)
        for j, r in enumerate(rep.tolist()):
            k = (int(d["kind"][r]), int(d["src_hi"][r]), int(d["src_lo"][r]))
            if k not in nic_index:
                nic_index[k] = len(nics)
                nics.append(address_text(*k))
            table[j] = nic_index[k]
        nic = table[inv.ravel()]
        phase = codes[d["comment"]]
        timed = d["time_ns"] != NO_TIME
        if not timed.all():
            untimed += int((~timed).sum())
            d, nic, phase = d[timed], nic[timed], phase[timed]
            if d.size == 0:
                continue
        slot = time_slot(d["time_ns"], t0, width)
        pair = (nic * (len(labels) + 1) + phase + 1)
        uniq, pinv = np.unique(pair, return_inverse=True)
        sums = np.bincount(pinv.ravel() * (bins + 1) + slot, d["orig_len"],
                           minlength=uniq.size * (bins + 1)).reshape(uniq.size, bins + 1)
        for p, row in zip(uniq.tolist(), np.rint(sums).astype(np.int64)):
            k = (p // (len(labels) + 1), p % (len(labels) + 1) - 1)
            thr[k] = thr[k] + row if k in thr else row
    del labels[used_labels:]              # named only after the last RDMA row: unused
    if window is not None and span is None and not frame_sizes:   # a window in a silence
        shown = ":".join("" if w is None else f"{w:,}" for w in window)
        raise InputError(f"--time-window: got {shown} ns after the first frame, which holds "
                         f"no frame of {path}, expected one that holds frames")
    return {"t0_ns": t0, "bin_ns": width, "bins": bins + 1, "nics": nics, "phases": labels,
            "throughput": thr, "frame_sizes": frame_sizes, "message_sizes": message_sizes,
            "untimed": untimed, "start_ns": t0 - first}


class _PhaseCodes:
    """Phase index (into ``labels``, shared with the caller) of each comment of a capture's
    comment list, parsed once per comment: the list only grows while a file is read, and is
    started afresh (``Capture.forget_comments``) after every batch, so a file of many sections
    or distinct comments costs one parse per comment, not the whole list per batch."""

    def __init__(self, labels: list[str], label_index: dict[str, int]) -> None:
        self.labels, self.label_index = labels, label_index
        self._codes = np.full(1, -1, np.int64)

    def forget(self) -> None:
        """The capture's comment list starts afresh: drop the codes cached for it."""
        self._codes = np.full(1, -1, np.int64)

    def codes(self, comments: list[str]) -> np.ndarray:
        """int64 ``(len(comments) + 1,)``: the phase index of every comment, -1 for none (the
        last entry, for comment code -1)."""
        done = self._codes.size - 1
        new = np.full(len(comments) - done, -1, np.int64)
        for j, text in enumerate(comments[done:]):
            if text.startswith(CONTROL_PREFIXES):
                label = CONTROL_LABEL                   # clear-to-send writes and ACKs
            else:
                try:
                    label = "/".join(parse_phase_label(text))
                except DecodeError:
                    continue
            if label not in self.label_index:
                self.label_index[label] = len(self.labels)
                self.labels.append(label)
            new[j] = self.label_index[label]
        if new.size:
            self._codes = np.concatenate([self._codes[:-1], new, [-1]])
        return self._codes


def _span(cap) -> tuple[int | None, int | None, int | None]:
    """``(first, last, first in file order)`` times of the timed records (None: no time)."""
    t0, t1, head = None, None, None
    for rec in cap.batches():
        t = rec["time_ns"][rec["time_ns"] != NO_TIME]
        if t.size:
            head = int(t[0]) if head is None else head
            t0 = int(t.min()) if t0 is None else min(t0, int(t.min()))
            t1 = int(t.max()) if t1 is None else max(t1, int(t.max()))
    return t0, t1, head


def capture_span(paths) -> tuple[int | None, int | None]:
    """``(first_ns, last_ns)`` of the timed records of the captures ``paths`` together
    (record headers only), ``(None, None)`` when none has a time.

    Raises:
        CaptureError: as :func:`tokenpcap.pcap.reader.open_capture`.
    """
    lo, hi = None, None
    for p in paths:
        a, b, _ = _span(open_capture(p, on_truncation="stop"))
        if a is not None:
            lo, hi = (a, b) if lo is None else (min(lo, a), max(hi, b))
    return lo, hi


def phase_throughput(paths, *, bins: int = 200) -> dict:
    """Wire bytes of the RDMA frames of the captures ``paths`` (several files add up, e.g. a
    generate run's per-NIC files) per time bin and phase, all NICs together.

    Returns:
        dict: ``t0_ns``, ``bin_ns``, ``bins`` as :func:`capture_series`; ``phases``: labels
        (control packets as :data:`CONTROL_LABEL`, ``"(no phase)"`` last when present);
        ``bytes``: ``{label: int64 (bins + 1,)}``.

    Raises:
        CaptureError: as :func:`tokenpcap.pcap.reader.open_capture`.
    """
    span = capture_span(paths)
    out: dict[str, np.ndarray] = {}
    t0, width, slots = 0, 1, bins + 1
    for p in paths:
        s = capture_series(p, bins=bins, span=span)
        t0, width, slots = s["t0_ns"], s["bin_ns"], s["bins"]
        names = s["phases"] + ["(no phase)"]
        for (_, ph), row in s["throughput"].items():
            key = names[ph]
            out[key] = out[key] + row if key in out else row.copy()
    order = sorted(out, key=lambda k: (k == "(no phase)", k == CONTROL_LABEL, k))
    return {"t0_ns": t0, "bin_ns": width, "bins": slots, "phases": order,
            "bytes": {k: out[k] for k in order}}


def count_values(into: dict[int, int], values: np.ndarray) -> None:
    """Add the occurrences of each value of ``values`` (an integer array of any shape) to
    ``into`` (``{value: count}``), in place."""
    u, c = np.unique(values, return_counts=True)
    for v, k in zip(u.tolist(), c.tolist()):
        into[v] = into.get(v, 0) + k
