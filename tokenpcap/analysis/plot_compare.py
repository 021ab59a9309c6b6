"""Pictures of a simulator's run beside our schedule (matplotlib, Agg backend, PNG).

* :func:`plot_slowdown_cdf`: per phase label, the CDF of the per-flow slowdown (the simulator's
  completion time over ours on the ideal or queued fabric, ``comparison.fabric``);
* :func:`plot_nic_completion`: per sending NIC, bytes completed over time, ours and the
  simulator's side by side on the same axes.

They take a comparison by its attributes (``flows`` with ``src``, ``size_bytes``, ``start_ns``;
``labels``; ``ours_fct_ns``; ``sim_fct_ns`` with -1 for flows the simulator did not complete;
``slowdown``), e.g. :class:`tokenpcap.export.hpcc_fct.Comparison`. Times are integer ns until the
axis, where they become µs from the first flow's start.

For a SimAI run (:class:`tokenpcap.export.simai_compare.SimaiComparison`: ``groups()`` with
``group``, ``ours_ns``, ``sim_ns``, ``exposed_ns``; ``entries`` with ``label``, ``ours_ns``,
``sim_total_ns``, None where missing):

* :func:`plot_simai_phases`: per phase label, our summed call spans beside SimAI's total and
  exposed communication (bars);
* :func:`plot_simai_calls`: every collective of the workload in order, ours beside SimAI's.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tokenpcap.analysis.plot import _COLORS, _pyplot, _save

__all__ = ["plot_slowdown_cdf", "plot_nic_completion", "plot_comparison", "plot_simai_phases",
           "plot_simai_calls", "plot_simai_comparison"]


def plot_slowdown_cdf(comparison, out: str | os.PathLike, *, title: str | None = None) -> Path:
    """CDF of ``comparison.slowdown`` per phase label (flows not completed left out; their
    count is in the legend). Returns ``out``.

    Raises:
        OutputError: ``out`` cannot be written.
    """
    plt = _pyplot()
    sd = np.asarray(comparison.slowdown, np.float64)
    labels = list(comparison.labels)
    fig, ax = plt.subplots(figsize=(9, 5))
    for k, lab in enumerate(dict.fromkeys(labels)):
        ix = np.array([i for i, x in enumerate(labels) if x == lab], np.int64)
        v = np.sort(sd[ix][~np.isnan(sd[ix])])
        missing = int(np.isnan(sd[ix]).sum())
        name = f"{lab} ({v.size} flows" + (f", {missing} not completed)" if missing else ")")
        if v.size:
            y = np.arange(1, v.size + 1) / v.size
            ax.step(np.r_[v[0], v], np.r_[0, y], where="post", color=_COLORS[k % len(_COLORS)],
                    label=name)
    ax.axvline(1.0, color="#444444", lw=0.8, ls=":")
    fabric = getattr(comparison, "fabric", "ideal")
    ax.set_xlabel(f"slowdown: simulator's completion time / ours on the {fabric} fabric")
    ax.set_ylabel("fraction of flows")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title or "Slowdown per flow, CDF per phase")
    return _save(fig, out)


def plot_nic_completion(comparison, out: str | os.PathLike, *, title: str | None = None) -> Path:
    """Cumulative bytes completed per sending NIC over time: ours (left) and the simulator's
    (right), one step line per NIC, same axes. Returns ``out``.

    Raises:
        OutputError: ``out`` cannot be written.
    """
    plt = _pyplot()
    f = comparison.flows
    start = f["start_ns"].astype(np.int64)
    t0 = int(start.min()) if start.size else 0
    sim = np.asarray(comparison.sim_fct_ns, np.int64)
    fabric = getattr(comparison, "fabric", "ideal")
    ends = {f"ours ({fabric} fabric)": (start + comparison.ours_fct_ns, np.ones(f.size, bool)),
            "simulator": (start + sim, sim >= 0)}
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), sharex=True, sharey=True)
    nics = np.unique(f["src"])
    lw = 1.2 if nics.size <= 16 else 0.6
    cmap = plt.get_cmap("viridis")
    for ax, (name, (end, ok)) in zip(axes, ends.items()):
        for k, nic in enumerate(nics.tolist()):
            sel = (f["src"] == nic) & ok
            order = np.argsort(end[sel], kind="stable")
            t = (end[sel][order] - t0) / 1e3
            b = np.cumsum(f["size_bytes"][sel][order]) / 1e6
            ax.step(np.r_[0, t], np.r_[0, b], where="post", lw=lw,
                    color=cmap(k / max(1, nics.size - 1)), alpha=0.8)
        done = int(ok.sum())
        ax.set_title(f"{name}: {done} of {f.size} flows completed", fontsize=10)
        ax.set_xlabel("time since the first flow's start (µs)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"bytes completed per sending NIC (MB; {nics.size} NICs)")
    if nics.size:
        norm = plt.Normalize(int(nics[0]), int(nics[-1]))
        fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=axes[1], label="sending NIC",
                     fraction=0.03, pad=0.02)
    fig.suptitle(title or "Per-NIC completion over time")
    return _save(fig, out)


def _pictures_as_one_set(outdir, drawers, comparison) -> list[Path]:  # type: ignore[no-untyped-def]
    """Each ``(draw, name)`` of ``drawers`` drawn as ``draw(comparison, path)`` into ``outdir``
    (created with its parents; removed again if nothing is written) as one
    :class:`~tokenpcap.pcap.outputset.OutputSet`: all land together or none (a stop between them
    keeps the earlier set). Returns the final paths, in order."""
    from tokenpcap.pcap.output import make_directory
    from tokenpcap.pcap.outputset import OutputSet

    with make_directory(outdir) as d, OutputSet(d, what="compare") as outset:
        drawn = [draw(comparison, outset.path(name)) for draw, name in drawers]
        outset.commit()
        return [outset.final(p) for p in drawn]


def plot_comparison(comparison, outdir: str | os.PathLike, *, stem: str = "compare") -> list[Path]:
    """Both pictures in ``outdir`` (created with its parents; removed again if nothing is
    written): ``<stem>-slowdown-cdf.png`` and ``<stem>-nic-completion.png``, as one
    :class:`~tokenpcap.pcap.outputset.OutputSet` (both or neither).

    Raises:
        OutputError: the directory or a file cannot be written, another run writes into it.
    """
    return _pictures_as_one_set(outdir, [(plot_slowdown_cdf, f"{stem}-slowdown-cdf.png"),
                                         (plot_nic_completion, f"{stem}-nic-completion.png")],
                                comparison)


def plot_simai_phases(comparison, out: str | os.PathLike, *, title: str | None = None) -> Path:
    """Per phase label (and all), bars of our summed call spans, SimAI's total and its exposed
    communication, µs. Returns ``out``.

    Raises:
        OutputError: ``out`` cannot be written.
    """
    plt = _pyplot()
    groups = comparison.groups()
    names = [g["group"] for g in groups]
    series = (("ours (ideal fabric)", "ours_ns"), ("SimAI total", "sim_ns"),
              ("SimAI exposed", "exposed_ns"))
    y = np.arange(len(groups), dtype=np.float64)
    h = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(10, 1.2 + 0.55 * len(groups)))
    for k, (name, key) in enumerate(series):
        v = np.array([np.nan if g[key] is None else g[key] / 1e3 for g in groups])
        ax.barh(y + (k - 1) * h, v, height=h, color=_COLORS[k % len(_COLORS)], label=name)
    ax.set_yticks(y, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("communication time, sum over the workload's calls (µs)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title(title or "Per phase: our ideal fabric beside SimAI")
    return _save(fig, out)


def plot_simai_calls(comparison, out: str | os.PathLike, *, title: str | None = None) -> Path:
    """Every collective of the workload in workload order: our span and SimAI's total time
    (µs, log scale), one marker colour per side; calls SimAI did not report are left out of
    its series. Returns ``out``.

    Raises:
        OutputError: ``out`` cannot be written.
    """
    plt = _pyplot()
    es = list(comparison.entries)
    x = np.arange(len(es))
    ours = np.array([np.nan if e.ours_ns is None else e.ours_ns / 1e3 for e in es])
    sim = np.array([np.nan if e.sim_total_ns is None else e.sim_total_ns / 1e3 for e in es])
    fig, ax = plt.subplots(figsize=(12, 5))
    ax.plot(x, ours, "o", ms=3, color=_COLORS[0], label="ours (ideal fabric): call span")
    ax.plot(x, sim, "x", ms=4, color=_COLORS[1], label="SimAI: total communication")
    if np.isfinite(np.r_[ours, sim]).any() and np.nanmin(np.r_[ours, sim]) > 0:
        ax.set_yscale("log")
    ax.set_xlabel(f"collective of the workload, in workload order ({len(es)})")
    ax.set_ylabel("time (µs)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title(title or "Per collective: our ideal fabric beside SimAI")
    return _save(fig, out)


def plot_simai_comparison(comparison, outdir: str | os.PathLike, *,
                          stem: str = "compare") -> list[Path]:
    """Both SimAI pictures in ``outdir`` (created with its parents; removed again if nothing is
    written): ``<stem>-simai-phases.png`` and ``<stem>-simai-calls.png``, as one
    :class:`~tokenpcap.pcap.outputset.OutputSet` (both or neither).

    Raises:
        OutputError: the directory or a file cannot be written, another run writes into it.
    """
    return _pictures_as_one_set(outdir, [(plot_simai_phases, f"{stem}-simai-phases.png"),
                                         (plot_simai_calls, f"{stem}-simai-calls.png")],
                                comparison)
