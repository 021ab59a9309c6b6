"""The NICs x time heat map of captures (``tokenpcap plot --heatmap``): which NIC sends when.

Numbers (:func:`heatmap_series`) from :func:`tokenpcap.analysis.plot_series.capture_series` of
each file on the bins of the files together (:func:`~tokenpcap.analysis.plot_series.
capture_span`), so several files (a generate run's per-NIC captures) and one file holding many
NICs (``--split one``) give the same matrix; the picture (:func:`plot_heatmap`): one row per
sending NIC, colour = layer-2 throughput in the bin, and beside it the NIC's bytes per phase
family in the colours of :data:`tokenpcap.analysis.figure.FAMILY_COLORS`.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tokenpcap.analysis.figure import (FAMILY_COLORS, address_key, family_of, pyplot,
                                       save_figure, time_axis)
from tokenpcap.analysis.plot_series import capture_series, capture_span
from tokenpcap.errors import InputError

__all__ = ["heatmap_series", "heatmap_figure", "plot_heatmap", "MAX_LABELLED_ROWS"]

#: most NIC rows labelled by address on the y axis (more rows: every k-th labelled)
MAX_LABELLED_ROWS = 48


def heatmap_series(paths, *, bins: int = 200, bin_ns: int | None = None,
                   window: tuple[int | None, int | None] | None = None) -> dict:
    """Wire bytes of the RDMA frames of the captures ``paths`` per sending NIC and time bin.

    Returns:
        dict: ``nics``: the sending addresses (text), in address order; ``bytes``: int64
        ``(len(nics), slots)`` wire bytes of the frames each NIC sends starting in each bin
        (a row sums to the NIC's RDMA frame bytes in the files, within ``window``);
        ``families``: the phase families present (:func:`~tokenpcap.analysis.figure.family_of`,
        in the order of :data:`~tokenpcap.analysis.figure.FAMILY_COLORS`); ``family_bytes``:
        int64 ``(len(nics), len(families))``; ``t0_ns``, ``bin_ns``, ``bins`` (slots),
        ``start_ns`` as :func:`~tokenpcap.analysis.plot_series.capture_series`, times from the
        first frame of all the files.

    Raises:
        CaptureError: as :func:`tokenpcap.pcap.reader.open_capture`. InputError: as
            ``capture_series`` (too fine a ``bin_ns``, an empty window).
    """
    span = capture_span(paths)
    rows: dict[str, np.ndarray] = {}
    fam: dict[tuple[str, str], int] = {}
    t0, width, slots, start = 0, 1, bins + 1, 0
    for p in paths:
        s = capture_series(p, bins=bins, span=span, bin_ns=bin_ns, window=window)
        t0, width, slots, start = s["t0_ns"], s["bin_ns"], s["bins"], s["start_ns"]
        labels = s["phases"] + ["(no phase)"]
        for (n, ph), row in s["throughput"].items():
            nic = s["nics"][n]
            rows[nic] = rows[nic] + row if nic in rows else row.copy()
            key = (nic, family_of(labels[ph]))
            fam[key] = fam.get(key, 0) + int(row.sum())
    nics = sorted(rows, key=address_key)
    families = [f for f in FAMILY_COLORS if any(k[1] == f for k in fam)]
    matrix = (np.stack([rows[n] for n in nics]) if nics
              else np.zeros((0, slots), np.int64)).astype(np.int64)
    fb = np.array([[fam.get((n, f), 0) for f in families] for n in nics],
                  np.int64).reshape(len(nics), len(families))
    return {"nics": nics, "bytes": matrix, "families": families, "family_bytes": fb,
            "t0_ns": t0, "bin_ns": width, "bins": slots, "start_ns": start}


def heatmap_figure(series: dict, *, title: str = ""):
    """The figure of :func:`plot_heatmap`, not saved.

    Raises:
        InputError: no RDMA frame in the captures.
    """
    plt = pyplot()
    m, nics = series["bytes"], series["nics"]
    if not nics:
        raise InputError("plot --heatmap: got no RoCE/InfiniBand packets, expected at least one")
    width, slots = series["bin_ns"], series["bins"]
    start = series.get("start_ns", 0)
    unit, div = time_axis(start + width * slots)
    fig, (ax, side) = plt.subplots(1, 2, figsize=(12, min(2.5 + 0.22 * len(nics), 14)),
                                   gridspec_kw={"width_ratios": [5, 1]}, sharey=True,
                                   squeeze=True)
    gbps = m * 8 / width                                     # bytes/ns * 8 = Gb/s
    edges = (start + np.arange(slots + 1) * width) / div
    img = ax.pcolormesh(edges, np.arange(len(nics) + 1) - 0.5, gbps, cmap="viridis",
                        shading="flat")
    step = max(1, -(-len(nics) // MAX_LABELLED_ROWS))
    ax.set_yticks(np.arange(0, len(nics), step))
    ax.set_yticklabels([nics[i] for i in range(0, len(nics), step)], fontsize=7)
    ax.set_ylim(len(nics) - 0.5, -0.5)                       # first NIC on top
    ax.set_ylabel("sending NIC (source address)")
    ax.set_xlabel(f"time since first frame ({unit}); bins of {width:,} ns")
    fig.colorbar(img, ax=ax, pad=0.01, label="Gb/s in the bin")
    left = np.zeros(len(nics))
    for j, f in enumerate(series["families"]):
        v = series["family_bytes"][:, j] / 1e6
        side.barh(np.arange(len(nics)), v, left=left, color=FAMILY_COLORS[f], label=f,
                  height=0.8)
        left += v
    side.set_xlabel("MB sent")
    side.set_title("per phase family", fontsize=9)
    side.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=7, title="family",
                title_fontsize=7)
    side.grid(alpha=0.3, axis="x")
    fig.suptitle(title or "Layer-2 throughput per sending NIC over time")
    fig.tight_layout()
    return fig


def plot_heatmap(series: dict, out: str | os.PathLike, *, title: str = "") -> Path:
    """NICs x time heat map of :func:`heatmap_series` as a PNG at ``out``.

    Raises:
        InputError: no RDMA frame. OutputError: the PNG cannot be written.
    """
    return save_figure(heatmap_figure(series, title=title), out)
