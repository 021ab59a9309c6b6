"""One QP's congestion-control loop over time, from a run's side files: its DCQCN rate, the
queue of the switch port that feeds its receiver, and the CNPs that reached it
(``tokenpcap plot --fabric DIR --qp N``).

* **Rate** (top panel, Gb/s): a step line from the ``rates`` table
  (:data:`tokenpcap.records.cc.RATE_DTYPE`): the rate before the QP's first change (its first
  row's ``old_bps``; a QP that never changed sends at its NIC's line rate, the ``gbps`` of the
  switch port cabled to it in the ``links`` table), then each ``new_bps`` from its ``time_ns``
  to the next change.
* **CNPs**: a marker on the rate line at every row of the ``cnps`` table for the QP (the time
  the CNP reached its NIC, at the rate just before it), and a tick at the top of the queue
  panel at the same time.
* **Queue** (bottom panel): the egress queue of the last switch port before the QP's receiver
  (the ``links`` row whose ``peer_nic`` is the QP's ``dst_nic``: the port an incast fills),
  per priority, as steps of the sampled maxima (``queues`` table; intervals without a row are
  0, :func:`tokenpcap.analysis.plot_fabric.queue_steps`).

Times are ns since the start of the run on both panels (µs or ms on the axis).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tokenpcap.analysis.figure import COLORS, pyplot, save_figure, time_axis
from tokenpcap.analysis.plot_fabric import queue_steps, sample_width
from tokenpcap.errors import InputError
from tokenpcap.records.fabric import FabricSummary, check_log

__all__ = ["qp_row", "qp_port", "rate_steps", "qp_figure", "plot_qp_files"]

_CNP = "#C44E52"


def qp_row(cc: dict, qp: int) -> np.void:
    """The ``ce_qps`` row of ``qp`` (every QP that was marked or got a CNP has one).

    Raises:
        InputError: no such QP, naming the QPs there are.
    """
    rows = cc["ce_qps"][cc["ce_qps"]["qp"] == qp]
    if rows.size == 0:
        have = sorted(cc["ce_qps"]["qp"].tolist())
        shown = ", ".join(map(str, have[:10])) + (", ..." if len(have) > 10 else "")
        raise InputError(f"plot --qp: got {qp}, expected a QP of the ce_qps table "
                         f"({len(have):,} QPs: {shown or 'none'})")
    return rows[0]


def _link_to(log: dict, nic: int, expected: str) -> np.ndarray:
    """The ``links`` row of the switch port cabled to NIC ``nic`` (the first, if several).

    Raises:
        InputError: no switch port is cabled to that NIC (``expected`` says which was wanted).
    """
    links = log["links"]
    r = links[links["peer_nic"] == nic]
    if r.size == 0:
        raise InputError(f"plot --qp: links: got no switch port cabled to nic {nic}, "
                         f"expected {expected}")
    return r[0]


def qp_port(log: dict, dst_nic: int) -> tuple[int, int]:
    """``(switch, port)`` of the egress port cabled to NIC ``dst_nic``.

    Raises:
        InputError: no switch port is cabled to that NIC.
    """
    r = _link_to(log, dst_nic, "the port before the QP's receiver")
    return int(r["switch"]), int(r["port"])


def line_bps(log: dict, nic: int) -> int:
    """Line rate (bit/s) of NIC ``nic``: the ``gbps`` of the switch port cabled to it.

    Raises:
        InputError: no switch port is cabled to that NIC.
    """
    return int(round(float(_link_to(log, nic, "the QP's own NIC")["gbps"]) * 1e9))


def rate_steps(rates: np.ndarray, start_bps: int, end_ns: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """``(time_ns, bps)`` of one QP's rate for ``step(where="post")``: ``start_bps`` from 0,
    then each row's ``new_bps`` from its ``time_ns``, the last value repeated at ``end_ns``
    (at least the last change). ``rates``: that QP's rows of the ``rates`` table, by time.
    int64 ``(n + 2,)`` each."""
    t = rates["time_ns"].astype(np.int64)
    order = np.argsort(t, kind="stable")
    t, v = t[order], rates["new_bps"].astype(np.int64)[order]
    first = int(rates["old_bps"][order[0]]) if t.size else start_bps
    end = max(end_ns, int(t[-1]) if t.size else 0)
    return (np.concatenate([[0], t, [end]]).astype(np.int64),
            np.concatenate([[first], v, [v[-1] if v.size else first]]).astype(np.int64))


def rate_at(times_ns: np.ndarray, steps: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The rate just before each of ``times_ns`` (a change at the same ns not yet applied)."""
    t, v = steps
    i = np.searchsorted(t, times_ns, side="left") - 1
    return v[np.clip(i, 0, v.size - 1)]


def qp_figure(log: dict, summary: FabricSummary, cc: dict, qp: int, *, title: str = ""):
    """The figure of the module docstring, laid out, not saved.

    Args:
        log, summary: the fabric log and its summary (:mod:`tokenpcap.records.fabric`).
        cc: the congestion-control log (:mod:`tokenpcap.records.cc`).
        qp: the engine's QP index (``inspect --fabric`` lists them).

    Raises:
        InputError: ``qp`` not in ``ce_qps``; no switch port cabled to its NICs.
    """
    check_log(log)
    row = qp_row(cc, qp)
    src, dst = int(row["src_nic"]), int(row["dst_nic"])
    key = qp_port(log, dst)
    q = log["queues"]
    q = q[(q["switch"] == key[0]) & (q["port"] == key[1])]
    rates = cc["rates"][cc["rates"]["qp"] == qp]
    cnps = np.sort(cc["cnps"]["time_ns"][cc["cnps"]["qp"] == qp].astype(np.int64))
    width = sample_width(log, summary) if log["queues"].size else 1
    ends = [int(q["time_ns"].max()) + width if q.size else 0,
            int(rates["time_ns"].max()) if rates.size else 0,
            int(cnps.max()) if cnps.size else 0]
    end = max(ends) or 1
    unit, div = time_axis(end)
    steps = rate_steps(rates, line_bps(log, src), end)
    plt = pyplot()
    fig, (ax_r, ax_q) = plt.subplots(2, 1, figsize=(11, 5.6), sharex=True)
    ax_r.step(steps[0] / div, steps[1] / 1e9, where="post", color=COLORS[0], lw=1.4,
              label="rate")
    ax_r.plot(cnps / div, rate_at(cnps, steps) / 1e9, linestyle="none", marker="v",
              markersize=5, color=_CNP, label=f"CNP ({cnps.size:,})")
    ax_r.set_ylim(0, steps[1].max() / 1e9 * 1.1)
    ax_r.set_ylabel("Gb/s")
    ax_r.set_title(f"qp {qp}: nic {src} → nic {dst}, DCQCN rate ({rates.size:,} changes) and "
                   "the CNPs that reached it", fontsize=9, loc="left")
    peak = int(q["max_bytes"].max()) if q.size else 0
    ydiv, yunit = (1 << 20, "MiB") if peak >= 4 << 20 else (1 << 10, "KiB") \
        if peak >= 4 << 10 else (1, "bytes")
    for i, p in enumerate(sorted({int(x) for x in q["priority"]})):
        s = q[q["priority"] == p]
        edges, values = queue_steps(s["time_ns"], s["max_bytes"], width)
        ax_q.stairs(values / ydiv, edges / div, color=COLORS[(i + 1) % len(COLORS)], lw=1.2,
                    label=f"queue, priority {p}")
    if cnps.size:
        ax_q.vlines(cnps / div, 0.9, 1.0, transform=ax_q.get_xaxis_transform(), colors=_CNP,
                    linewidth=0.8, label="CNP")
    ax_q.set_ylim(0, max(peak / ydiv, 1) * 1.15)
    ax_q.set_ylabel(yunit)
    names = summary.switch_names
    sw = names[key[0]] if 0 <= key[0] < len(names) else f"switch{key[0]}"
    ax_q.set_title(f"{sw} port {key[1]} → nic {dst}: egress queue, max {peak:,} bytes",
                   fontsize=9, loc="left")
    ax_q.set_xlabel(f"time since the start of the run ({unit}); queue samples of {width:,} ns")
    for ax in (ax_r, ax_q):
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7)
    fig.suptitle(title or f"qp {qp}: rate, queue and CNPs")
    fig.tight_layout()
    return fig


def plot_qp_files(directory: str | os.PathLike, stem: str, outdir: str | os.PathLike,
                  qp: int) -> list[Path]:
    """Read the fabric and congestion-control side files ``stem`` in ``directory`` and draw
    ``outdir/<stem>-qp<qp>.png``; ``outdir`` is created with its parents, the PNG lands whole
    or not at all. Returns ``[path]``.

    Raises:
        InputError: bad side files (one line); no congestion-control files (a run that neither
            marks ECN nor runs DCQCN); as :func:`qp_figure`. OutputError: ``outdir`` cannot be
            made or written.
    """
    from tokenpcap.generate.ccfiles import cc_summary_name, read_cc_files
    from tokenpcap.generate.fabricfiles import read_fabric_files
    from tokenpcap.pcap.output import make_directory
    from tokenpcap.pcap.outputset import OutputSet

    log, summary = read_fabric_files(directory, stem)
    cc = read_cc_files(directory, stem)
    if cc is None:
        raise InputError(f"{Path(directory) / cc_summary_name(stem)}: got no such file, "
                         "expected the congestion-control side files (plot --qp needs a run "
                         "that marks ECN or runs DCQCN)")
    qp_row(cc, qp)                                   # a bad --qp before any directory is made
    with make_directory(outdir) as outdir, OutputSet(outdir, what="plot") as outset:
        fig = qp_figure(log, summary, cc, qp, title=f"{stem}: qp {qp}, rate, queue and CNPs")
        path = save_figure(fig, outset.path(f"{stem}-qp{qp}.png"))
        outset.commit()
        return [outset.final(path)]
