"""The picture of what the fabric did: queue depth over time at the busiest switch ports, with
their PFC frames, and the capture's throughput per phase on the same time axis
(``tokenpcap plot --fabric DIR [CAPTURES]``).

* **Ports**: the :data:`TOP_PORTS` (switch, egress port) pairs with the largest queue sample
  (``queues.max_bytes``; ties by switch and port), one panel each, busiest first. Each panel
  draws, per priority, the largest queue of every sampling interval as a step (intervals without
  a row had an empty queue: drawn as 0).
* **PFC ticks**: at the top of a panel the PFC frames its *switch* sent, out of any port (XOFF
  red, XON green): with ingress accounting a switch pauses the ingress ports whose packets fill
  its egress queues (HPCC ns-3 ``switch-mmu.cc`` ``CheckShouldPause`` counts bytes per ingress
  (port, priority)), so a queue's growth shows as XOFFs on the ports feeding it, not on its own.
  At the bottom (dotted) the frames its egress port *received* (the peer switch's frames on
  the peer port, from the link table: the peer paused this queue). PFC frames a NIC sends are
  not in the log.
* **Throughput** (with captures): layer-2 throughput of every RDMA frame of the captures,
  stacked by phase, in Gb/s (:func:`tokenpcap.analysis.plot_series.phase_throughput`). A
  generate run's captures carry ``time_ns + EPOCH_NS``
  (:data:`tokenpcap.generate.options.EPOCH_NS`) and the fabric log simulation time, so the
  capture is shifted by ``EPOCH_NS``; a capture earlier than the epoch (not on the generator's
  clock) is aligned at its first packet instead, and the axis label says so.

Times are ns since the start of the run (µs or ms on the axis, :func:`~tokenpcap.analysis.figure.
time_axis`).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tokenpcap.analysis.figure import COLORS, phase_colors, pyplot, save_figure, time_axis
from tokenpcap.errors import InputError
from tokenpcap.generate.options import EPOCH_NS
from tokenpcap.records.fabric import FabricSummary, check_log

__all__ = ["TOP_PORTS", "busiest_ports", "queue_steps", "fabric_figure", "plot_fabric",
           "plot_fabric_files"]

#: most port panels of the figure
TOP_PORTS = 8
_XOFF, _XON = "#C44E52", "#55A868"


def busiest_ports(log: dict, n: int = TOP_PORTS) -> list[tuple[int, int]]:
    """The ``n`` (switch, port) pairs with the largest queue sample, largest first (ties:
    lower switch, then lower port); ``[]`` when the queue table is empty."""
    q = log["queues"]
    if q.size == 0:
        return []
    key = q["switch"].astype(np.int64) << 32 | q["port"].astype(np.int64)
    u, inv = np.unique(key, return_inverse=True)
    peak = np.zeros(u.size, np.int64)
    np.maximum.at(peak, inv.ravel(), q["max_bytes"])
    order = np.lexsort((u, -peak))[:n]
    return [(int(u[i] >> 32), int(u[i] & 0xFFFFFFFF)) for i in order]


def sample_width(log: dict, summary: FabricSummary) -> int:
    """Width of a queue sampling interval: ``summary.qlen_sample_ns``, else the smallest gap
    between two sample times of the log, else 1 ns."""
    if summary.qlen_sample_ns > 0:
        return summary.qlen_sample_ns
    t = np.unique(log["queues"]["time_ns"])
    return int(np.diff(t).min()) if t.size > 1 else 1


def queue_steps(time_ns: np.ndarray, max_bytes: np.ndarray, width_ns: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """``(edges, values)`` for ``Axes.stairs`` of one queue: ``values[i]`` holds from
    ``edges[i]`` to ``edges[i + 1]``; a sample covers ``[t, t + width_ns)`` (cut at the next
    sample), the gaps between samples are 0. Edges int64 ``(2n,)``, values int64 ``(2n - 1,)``
    (``([], [])`` for no sample). Input sorted or not."""
    order = np.argsort(time_ns, kind="stable")
    t, v = time_ns[order].astype(np.int64), max_bytes[order].astype(np.int64)
    if t.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    end = t + width_ns
    end[:-1] = np.minimum(end[:-1], t[1:])
    edges = np.empty(2 * t.size, np.int64)
    edges[0::2], edges[1::2] = t, end
    values = np.zeros(2 * t.size - 1, np.int64)
    values[0::2] = v
    return edges, values


def _received(log: dict) -> dict[tuple[int, int], tuple[int, int]]:
    """``{(switch, port): (peer switch, peer port)}`` for the ports whose peer is a switch."""
    links = log["links"]
    sw = links[links["peer_switch"] >= 0]
    return {(int(r["switch"]), int(r["port"])): (int(r["peer_switch"]), int(r["peer_port"]))
            for r in sw}


def _peer_text(log: dict, names: tuple[str, ...], key: tuple[int, int]) -> str:
    links = log["links"]
    r = links[(links["switch"] == key[0]) & (links["port"] == key[1])]
    if r.size == 0:
        return ""
    r = r[0]
    if r["peer_nic"] >= 0:
        return f" → nic {int(r['peer_nic'])}"
    if r["peer_switch"] >= 0:
        return f" → {_name(names, int(r['peer_switch']))}:{int(r['peer_port'])}"
    return ""


def _name(names: tuple[str, ...], i: int) -> str:
    return names[i] if 0 <= i < len(names) else f"switch{i}"


def _bytes_unit(peak: int) -> tuple[str, int]:
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if peak >= 4 * k:
            return unit, k
    return "bytes", 1


def fabric_figure(log: dict, summary: FabricSummary, *, throughput: dict | None = None,
                  title: str = ""):
    """The figure of the module docstring, laid out, not saved.

    Args:
        log, summary: the fabric log and its summary (:mod:`tokenpcap.records.fabric`).
        throughput: :func:`~tokenpcap.analysis.plot_series.phase_throughput` of the run's
            captures, or ``None``.

    Raises:
        InputError: no queue sample and no throughput to draw.
    """
    check_log(log)
    ports = busiest_ports(log)
    if not ports and not (throughput and throughput["bytes"]):
        raise InputError("plot --fabric: got no queue sample (every egress queue stayed empty) "
                         "and no capture throughput, expected something to draw")
    plt = pyplot()
    names = summary.switch_names
    q, pfc = log["queues"], log["pfc"]
    width = sample_width(log, summary)
    shift, aligned = 0, False
    if throughput is not None and throughput["bytes"]:
        shift = EPOCH_NS
        if throughput["t0_ns"] < EPOCH_NS:
            shift, aligned = throughput["t0_ns"], True
    ends = [int(q["time_ns"].max()) + width if q.size else 0,
            int(pfc["time_ns"].max()) if pfc.size else 0]
    if throughput is not None and throughput["bytes"]:
        ends.append(throughput["t0_ns"] - shift + throughput["bin_ns"] * throughput["bins"])
    unit, div = time_axis(max(ends))
    rows = len(ports) + (1 if throughput is not None and throughput["bytes"] else 0)
    fig, axes = plt.subplots(rows, 1, figsize=(11, 1.55 * rows + 1.4), sharex=True,
                             squeeze=False)
    peers = _received(log)
    prios = sorted({int(p) for p in q["priority"]})
    for ax, key in zip(axes[:, 0], ports):
        sel = q[(q["switch"] == key[0]) & (q["port"] == key[1])]
        ymax = int(sel["max_bytes"].max())
        yunit, ydiv = _bytes_unit(ymax)
        for p in sorted({int(x) for x in sel["priority"]}):
            s = sel[sel["priority"] == p]
            edges, values = queue_steps(s["time_ns"], s["max_bytes"], width)
            ax.stairs(values / ydiv, edges / div, fill=True, alpha=0.55,
                      color=COLORS[prios.index(p) % len(COLORS)], label=f"queue, priority {p}")
        _ticks(ax, pfc[pfc["switch"] == key[0]], div, top=True)
        if key in peers:
            ps, pp = peers[key]
            _ticks(ax, pfc[(pfc["switch"] == ps) & (pfc["port"] == pp)], div, top=False)
        ax.set_ylim(0, ymax / ydiv * 1.18)
        ax.set_ylabel(yunit)
        ax.set_title(f"{_name(names, key[0])} port {key[1]}{_peer_text(log, names, key)}: "
                     f"egress queue, max {ymax:,} bytes", fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    if ports:
        _legend(axes[0, 0], plt)
    if rows > len(ports):
        _throughput(axes[-1, 0], throughput, shift, div)
    tail = ("; capture aligned at its first packet (not on the generator's clock)"
            if aligned else "")
    axes[-1, 0].set_xlabel(f"time since the start of the run ({unit}); queue samples of "
                           f"{width:,} ns{tail}")
    queued = np.unique(q["switch"].astype(np.int64) << 32 | q["port"].astype(np.int64)).size
    busiest = (f"the {len(ports)} busiest of {queued:,} queued ports" if ports
               else "no queued port")
    fig.suptitle((title or "Switch egress queues and PFC") + f" ({busiest})")
    fig.tight_layout()
    return fig


def _ticks(ax, ev: np.ndarray, div: int, *, top: bool) -> None:
    """PFC frames as short vertical ticks at the top (sent by the switch) or bottom (received
    by the port) of ``ax``."""
    lo, hi = (0.86, 1.0) if top else (0.0, 0.14)
    for xoff, color in ((1, _XOFF), (0, _XON)):
        t = ev["time_ns"][ev["xoff"] == xoff]
        if t.size:
            ax.vlines(t / div, lo, hi, transform=ax.get_xaxis_transform(), colors=color,
                      linewidth=1.2 if top else 1.0, linestyles="solid" if top else "dotted")


def _legend(ax, plt) -> None:
    from matplotlib.lines import Line2D

    handles, labels = ax.get_legend_handles_labels()
    extra = [(Line2D([], [], color=_XOFF, lw=1.2), "XOFF sent by the switch (top)"),
             (Line2D([], [], color=_XON, lw=1.2), "XON sent by the switch (top)"),
             (Line2D([], [], color=_XOFF, lw=1.0, ls="dotted"), "XOFF received by the port"),
             (Line2D([], [], color=_XON, lw=1.0, ls="dotted"), "XON received by the port")]
    ax.legend(handles + [h for h, _ in extra], labels + [t for _, t in extra],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)


def _throughput(ax, thr: dict, shift: int, div: int) -> None:
    width, slots = thr["bin_ns"], thr["bins"]
    x = (thr["t0_ns"] - shift + np.arange(slots) * width) / div
    labels = thr["phases"]
    ax.stackplot(x, [thr["bytes"][k] * 8 / width for k in labels], labels=labels,
                 colors=phase_colors(labels), step="post")
    ax.set_ylabel("Gb/s")
    ax.set_title(f"capture: layer-2 throughput of every RDMA frame, by phase; bins of "
                 f"{width:,} ns", fontsize=9, loc="left")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, title="phase",
              title_fontsize=7)
    ax.grid(alpha=0.3)


def plot_fabric(log: dict, summary: FabricSummary, out: str | os.PathLike, *,
                throughput: dict | None = None, title: str = "") -> Path:
    """:func:`fabric_figure` saved as the PNG ``out``.

    Raises:
        InputError: nothing to draw. OutputError: the PNG cannot be written.
    """
    return save_figure(fabric_figure(log, summary, throughput=throughput, title=title), out)


def plot_fabric_files(directory: str | os.PathLike, stem: str, outdir: str | os.PathLike, *,
                      captures: list[str] | None = None) -> list[Path]:
    """Read the side files ``stem`` in ``directory``
    (:func:`tokenpcap.generate.fabricfiles.read_fabric_files`) and draw
    ``outdir/<stem>-fabric-queues.png``, with the throughput of ``captures`` when given.
    ``outdir`` is created with its parents; the PNG lands whole or not at all
    (:class:`tokenpcap.pcap.outputset.OutputSet`). Returns ``[path]``.

    Raises:
        InputError: bad side files (one line), nothing to draw. CaptureError from a capture.
        OutputError: ``outdir`` cannot be made or written, another run writes into it.
    """
    from tokenpcap.analysis.plot_series import phase_throughput
    from tokenpcap.generate.fabricfiles import read_fabric_files
    from tokenpcap.pcap.output import make_directory
    from tokenpcap.pcap.outputset import OutputSet
    from tokenpcap.pcap.pathlimits import shown    # a title a font can draw: bytes as \xff

    log, summary = read_fabric_files(directory, stem)
    thr = phase_throughput(captures) if captures else None
    with make_directory(outdir) as outdir, OutputSet(outdir, what="plot") as outset:
        what = (f", with the throughput of {len(captures)} capture"
                f"{'s' if len(captures) > 1 else ''}") if captures else ""
        path = plot_fabric(log, summary, outset.path(f"{stem}-fabric-queues.png"),
                           throughput=thr, title=f"{shown(stem)}: egress queues and PFC{what}")
        outset.commit()
        return [outset.final(path)]
