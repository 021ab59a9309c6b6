"""Fan-in per receiver (``tokenpcap plot --fan-in``): how many senders a NIC takes data from at
once, the incast an engineer looks for.

A sender counts for a receiver in a time bin when at least one of its RDMA frames to that
receiver carrying payload (a WRITE or SEND packet with payload bytes, BTH opcode and C7 payload
of :func:`tokenpcap.analysis.decode.decode_batch`) starts in the bin; ACKs carry none, and the
control packets (clear-to-send writes, named so in pcapng comments,
:data:`tokenpcap.records.comments.CONTROL_PREFIXES`) are no data and are left out. The count is
per bin, so a bin narrower than the gap between one sender's frames shows that sender on and
off; the default 200 bins over the span are far wider. Receivers and senders are the IP
addresses (LIDs on InfiniBand) of the frames; several files (a generate run's per-NIC
captures) are read on common bins (:func:`~tokenpcap.analysis.plot_series.capture_span`).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tokenpcap.analysis.decode import decode_batch
from tokenpcap.analysis.figure import address_key, pyplot, save_figure, time_axis
from tokenpcap.analysis.flows import is_rdma
from tokenpcap.analysis.inspect import address_text
from tokenpcap.analysis.plot_series import capture_span, in_window, time_bins, time_slot
from tokenpcap.errors import InputError
from tokenpcap.pcap.reader import open_capture
from tokenpcap.pcap.timestamps import NO_TIME
from tokenpcap.records.comments import CONTROL_PREFIXES

__all__ = ["fan_in_series", "fan_in_figure", "plot_fan_in"]


def _ids(d, side: str, index: dict, names: list) -> np.ndarray:  # type: ignore[no-untyped-def]
    """int64 (n,): the address id of each row's ``side`` (``src``/``dst``), new ones added."""
    hi, lo = d[f"{side}_hi"], d[f"{side}_lo"]
    key = np.stack([d["kind"].astype(np.uint64), hi, lo], axis=1)
    u, inv = np.unique(key, axis=0, return_inverse=True)
    table = np.empty(len(u), np.int64)
    for j, (k, h, l) in enumerate(u.tolist()):
        a = address_text(int(k), int(h), int(l))
        if a not in index:
            index[a] = len(names)
            names.append(a)
        table[j] = index[a]
    return table[inv.reshape(-1)]


def fan_in_series(paths, *, bins: int = 200, bin_ns: int | None = None,
                  window: tuple[int | None, int | None] | None = None) -> dict:
    """Distinct senders with data to each receiver per time bin (module docstring).

    Returns:
        dict: ``receivers``: addresses (text) in address order; ``fan_in``: int64
        ``(len(receivers), slots)`` distinct senders per bin; ``senders``: int64
        ``(len(receivers),)`` distinct senders over the whole span; ``t0_ns``, ``bin_ns``,
        ``bins`` (slots), ``start_ns`` as :func:`~tokenpcap.analysis.plot_series.
        capture_series`, times from the first frame of all the files.

    Raises:
        CaptureError: as :func:`tokenpcap.pcap.reader.open_capture`. InputError: as
            :func:`~tokenpcap.analysis.plot_series.time_bins`.
    """
    span = capture_span(paths)
    index: dict[str, int] = {}
    names: list[str] = []
    seen: list[np.ndarray] = []          # int64 keys (receiver, slot, sender), unique per file
    t0, width, nb, first = 0, 1, bins, 0
    for p in paths:
        cap = open_capture(p, on_truncation="stop")
        t0, width, nb, lo, hi, first = time_bins(cap, span=span, bins=bins, bin_ns=bin_ns,
                                                 window=window)
        for rec in cap.batches():
            d = decode_batch(cap.data, rec, cap.views)
            keep = is_rdma(d["kind"]) & (d["payload"] > 0) & (d["time_ns"] != NO_TIME)
            if window is not None:
                keep &= in_window(d["time_ns"], lo, hi)
            # comment code -> control packet; -1 (no comment) is the last entry, False
            control = np.array([c.startswith(CONTROL_PREFIXES) for c in cap.comments]
                               + [False])
            keep &= ~control[d["comment"]]
            d = d[np.flatnonzero(keep)]
            if d.size == 0:
                continue
            src, dst = _ids(d, "src", index, names), _ids(d, "dst", index, names)
            slot = time_slot(d["time_ns"], t0, width)
            seen.append(np.unique(np.stack([dst, slot, src], axis=1), axis=0))
    slots = nb + 1
    triples = np.unique(np.concatenate(seen), axis=0) if seen else np.zeros((0, 3), np.int64)
    recv_ids = sorted(set(triples[:, 0].tolist()), key=lambda i: address_key(names[i]))
    row = {r: k for k, r in enumerate(recv_ids)}
    out = np.zeros((len(recv_ids), slots), np.int64)
    senders = np.zeros(len(recv_ids), np.int64)
    if len(triples):
        rows = np.array([row[r] for r in triples[:, 0].tolist()], np.int64)
        np.add.at(out, (rows, triples[:, 1]), 1)
        pairs = np.unique(np.stack([rows, triples[:, 2]], axis=1), axis=0)
        senders = np.bincount(pairs[:, 0], minlength=len(recv_ids)).astype(np.int64)
    return {"receivers": [names[i] for i in recv_ids], "fan_in": out, "senders": senders,
            "t0_ns": t0, "bin_ns": width, "bins": slots, "start_ns": t0 - first}


def fan_in_figure(series: dict, *, title: str = ""):
    """The figure of :func:`plot_fan_in`, not saved: one row per receiver, colour = distinct
    senders in the bin (integer steps), and beneath it the largest fan-in of any receiver.

    Raises:
        InputError: no RDMA frame with payload in the captures.
    """
    plt = pyplot()
    m, recv = series["fan_in"], series["receivers"]
    if not recv:
        raise InputError("plot --fan-in: got no RoCE/InfiniBand data packets, expected at "
                         "least one")
    width, slots = series["bin_ns"], series["bins"]
    start = series.get("start_ns", 0)
    unit, div = time_axis(start + width * slots)
    top = max(int(m.max()), 1)
    # a narrow column for the colour bar, so that both time axes keep the same width
    fig, grid = plt.subplots(2, 2, figsize=(12, min(4 + 0.22 * len(recv), 15)),
                             gridspec_kw={"height_ratios": [3, 1], "width_ratios": [40, 1]})
    (ax, cax), (low, spare) = grid
    spare.set_axis_off()
    low.sharex(ax)
    edges = (start + np.arange(slots + 1) * width) / div
    cmap = plt.get_cmap("magma_r", top + 1)
    img = ax.pcolormesh(edges, np.arange(len(recv) + 1) - 0.5, m, cmap=cmap, vmin=-0.5,
                        vmax=top + 0.5, shading="flat")
    step = max(1, -(-len(recv) // 48))
    ax.set_yticks(np.arange(0, len(recv), step))
    ax.set_yticklabels([f"{recv[i]} ({int(series['senders'][i])})"
                        for i in range(0, len(recv), step)], fontsize=7)
    ax.set_ylim(len(recv) - 0.5, -0.5)
    ax.set_ylabel("receiving NIC (distinct senders overall)")
    ax.tick_params(labelbottom=False)
    bar = fig.colorbar(img, cax=cax, label="distinct senders in the bin")
    bar.set_ticks(np.unique(np.linspace(0, top, min(top, 10) + 1).round().astype(int)))
    low.step(edges[:-1], m.max(axis=0), where="post", color="black", lw=1)
    low.set_ylabel("largest fan-in")
    low.set_ylim(0, top + 0.5)
    from matplotlib.ticker import MaxNLocator
    low.yaxis.set_major_locator(MaxNLocator(integer=True))
    low.grid(alpha=0.3)
    low.set_xlabel(f"time since first frame ({unit}); bins of {width:,} ns")
    fig.suptitle(title or "Fan-in: distinct senders with data to each receiver")
    return fig


def plot_fan_in(series: dict, out: str | os.PathLike, *, title: str = "") -> Path:
    """The fan-in of :func:`fan_in_series` as a PNG at ``out``.

    Raises:
        InputError: no RDMA data frame. OutputError: the PNG cannot be written.
    """
    return save_figure(fan_in_figure(series, title=title), out)
