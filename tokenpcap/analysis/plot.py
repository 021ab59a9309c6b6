"""Pictures of a trace (matplotlib, Agg backend, PNG): what a person would rather look at.

From a capture alone (any pcap/pcapng/ERF, ours or foreign), from the numbers of
:func:`~tokenpcap.analysis.plot_series.capture_series`:

* :func:`plot_throughput`: layer-2 throughput over time per sending NIC (source address), stacked
  by phase when pcapng comments name it (``dp/backward/AllReduce`` ...), in Gb/s;
* :func:`plot_sizes`: the frame-size distribution and the RDMA message-size distribution (message
  sizes from the RETH DMA length of WRITE FIRST/ONLY packets, so no generator is needed).

From a scenario (runs the schedule, stage 5): the per-rank Gantt chart of
:mod:`tokenpcap.analysis.plot_gantt` and the message sizes.

:func:`plot_all` draws every picture a source allows. Every figure has a title and units on both
axes. Times are integer ns until the last moment, when they become µs or ms for the axis.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tokenpcap.analysis.figure import COLORS, phase_colors, pyplot, save_figure, time_axis
from tokenpcap.analysis.figure import address_key as _address_key
from tokenpcap.analysis.plot_gantt import default_timeline_ranks, plot_timeline
from tokenpcap.analysis.plot_series import capture_series, count_values
from tokenpcap.errors import InputError
from tokenpcap.stages import stage
from tokenpcap.pcap.pathlimits import shown       # titles a font can draw: bytes as \xff

__all__ = ["capture_series", "plot_throughput", "plot_sizes", "plot_timeline", "plot_all"]

#: most NIC panels of the throughput figure
MAX_NICS = 8
#: the shared figure helpers under the names plot_compare.py imports from here
_COLORS, _pyplot, _save = COLORS, pyplot, save_figure


def plot_throughput(series: dict, out: str | os.PathLike, *, title: str = "") -> Path:
    """Stacked throughput per sending NIC by phase: one panel per NIC, at most ``MAX_NICS``
    spread evenly over the NICs in address order (so that every node/pipeline stage shows).

    Throughput in a bin = 8 · (wire bytes of the frames that start in it) / bin width, Gb/s.

    Raises:
        InputError: the capture has no RDMA packets to plot.
        OutputError: the PNG cannot be written.
    """
    return save_figure(throughput_figure(series, title=title), out)


def throughput_figure(series: dict, *, title: str = ""):
    """The figure of :func:`plot_throughput`, laid out (``tight_layout``), not saved. The
    phase legend sits outside the panels, right of the top one, so it never covers a bar.

    Raises:
        InputError: the capture has no RDMA packets to plot.
    """
    plt = pyplot()
    thr, names = series["throughput"], series["nics"]
    if not thr:
        raise InputError("plot throughput: got no RoCE/InfiniBand packets, expected at least one")
    width, slots = series["bin_ns"], series["bins"]
    unit, div = time_axis(series.get("start_ns", 0) + width * (slots - 1))
    present = sorted({n for n, _ in thr}, key=lambda k: _address_key(names[k]))
    shown = [present[i] for i in np.unique(np.linspace(0, len(present) - 1, MAX_NICS)
                                           .round().astype(int))]
    labels = series["phases"] + ["(no phase)"]
    used = sorted({p for _, p in thr}, key=lambda p: (p < 0, p))
    fig, axes = plt.subplots(len(shown), 1, figsize=(11, 1.9 * len(shown) + 1.2),
                             sharex=True, squeeze=False)
    # bin starts after the first frame; steps hold for a bin
    x = (series.get("start_ns", 0) + np.arange(slots) * width) / div
    zero = np.zeros(slots, np.int64)
    for ax, n in zip(axes[:, 0], shown):
        stack = [thr.get((n, p), zero) * 8 / width for p in used]   # bytes/ns * 8 = Gb/s
        ax.stackplot(x, stack, labels=[labels[p] for p in used],
                     colors=phase_colors([labels[p] for p in used]), step="post")
        ax.set_ylabel("Gb/s")
        ax.set_title(f"NIC {names[n]}", fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7,
                      title="phase", title_fontsize=7)
    axes[-1, 0].set_xlabel(f"time since first frame ({unit}); bins of {width:,} ns")
    some = f" ({len(shown)} of {len(present)} NICs)" if len(shown) < len(present) else ""
    fig.suptitle((title or "Layer-2 throughput per sending NIC, stacked by phase") + some)
    fig.tight_layout()
    return fig


def _size_text(n: int) -> str:
    for unit, k in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k and n % k == 0:
            return f"{n // k} {unit}"
    return f"{n:,}"


def _distribution(ax, counts: dict[int, int], color: str, what: str) -> None:
    """Bars per distinct value when there are few (exact sizes readable), otherwise a histogram
    with logarithmic bins; counts on a log scale."""
    u = np.array(sorted(counts), np.int64)
    c = np.array([counts[v] for v in u.tolist()], np.int64)
    if u.size == 0:
        ax.text(0.5, 0.5, f"no {what}", ha="center", va="center", transform=ax.transAxes)
    elif u.size <= 24:
        ax.bar(np.arange(u.size), c, color=color)
        ax.set_xticks(np.arange(u.size))
        ax.set_xticklabels([_size_text(int(v)) for v in u], rotation=45 if u.size > 6 else 0,
                           fontsize=8, ha="right" if u.size > 6 else "center")
        ax.set_yscale("log")
        from matplotlib.ticker import FuncFormatter, LogLocator
        ax.yaxis.set_major_locator(LogLocator(base=10))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: ""))
        for i, n in enumerate(c):
            ax.annotate(f"{n:,}", (i, n), ha="center", va="bottom", fontsize=7)
    else:
        lo, hi = max(int(u[0]), 1), int(u[-1]) + 1
        ax.hist(u, bins=np.geomspace(lo, max(hi, lo + 1), 48), weights=c, color=color, log=True)
        ax.set_xscale("log")
    ax.grid(alpha=0.3, axis="y")


def plot_sizes(series: dict, out: str | os.PathLike, *, title: str = "") -> Path:
    """Distributions of frame sizes (bytes on the wire, per packet) and of RDMA message sizes
    (RETH DMA length, per message), counts on a log scale."""
    plt = pyplot()
    frames, msgs = series["frame_sizes"], series["message_sizes"]
    if frames:
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
        _distribution(a, frames, COLORS[0], "frames")
        a.set_xlabel("frame size (bytes, without FCS)")
        a.set_ylabel("frames (log scale)")
        a.set_title(f"frame sizes, {sum(frames.values()):,} frames", fontsize=10)
    else:                                            # a scenario: messages only
        fig, b = plt.subplots(1, 1, figsize=(7, 4.2))
    _distribution(b, msgs, COLORS[1], "messages")
    b.set_xlabel("RDMA message size (bytes; RETH DMA length)")
    b.set_ylabel("messages (log scale)")
    b.set_title(f"message sizes, {sum(msgs.values()):,} messages", fontsize=10)
    fig.suptitle(title or "Frame and message size distributions")
    return save_figure(fig, out)


def _run_name(s) -> str:  # type: ignore[no-untyped-def]
    """What the timeline shows: the pipeline schedule, or a workload's kind (no compute)."""
    if s.workload is not None:
        return f"workload {s.workload.kind}, no compute"
    return _schedule_name(s.parallelism.vpp)


def _schedule_name(vpp: int) -> str:
    """The pipeline schedule's name: Megatron-LM's 1F1B, or with ``vpp`` > 1 model chunks per
    stage its interleaved 1F1B (megatron/core/pipeline_parallel/schedules.py)."""
    return "1F1B" if vpp <= 1 else f"interleaved 1F1B, {vpp} model chunks per stage"


def plot_all(source: str | os.PathLike, outdir: str | os.PathLike, *, scale: int = 1,
             iterations: int = 1, ranks: list[int] | None = None, bin_ns: int | None = None,
             window: tuple[int | None, int | None] | None = None) -> list[Path]:
    """Every picture ``source`` allows: a capture → throughput + sizes; a scenario (YAML) →
    timeline + message sizes (by running the schedule). Returns the PNG paths. ``bin_ns`` and
    ``window`` (captures only): the throughput's bin width and the time window after the first
    frame (:func:`tokenpcap.analysis.plot_series.capture_series`).

    Raises:
        OutputError: ``outdir`` (created with its parents, like ``generate -o``; removed again
            if nothing is drawn) cannot be made: a path component is a file, or the file
            system refuses; another run is writing into it. CaptureError/ProfileError from the
            input. The pictures land together or not at all
            (:class:`tokenpcap.pcap.outputset.OutputSet`).
    """
    from tokenpcap.pcap.output import make_directory
    from tokenpcap.pcap.outputset import OutputSet

    with make_directory(outdir) as outdir, OutputSet(outdir, what="plot") as outset:
        drawn = _plot_all(source, outset, scale=scale, iterations=iterations, ranks=ranks,
                          bin_ns=bin_ns, window=window)
        outset.commit()
        return [outset.final(p) for p in drawn]


def _plot_all(source, outset, *, scale: int, iterations: int,
              ranks: list[int] | None, bin_ns: int | None = None,
              window: tuple[int | None, int | None] | None = None) -> list[Path]:
    src = Path(source)
    if src.suffix in (".yaml", ".yml"):
        from tokenpcap.config.profiles import load_scenario
        from tokenpcap.pipeline import prepare

        _, plan, sched = prepare(load_scenario(src), scale=scale, iterations=iterations,
                                 run="plot")
        if ranks is not None:
            bad = sorted(r for r in ranks if not 0 <= r < plan.layout.world_size)
            if bad:
                raise InputError(f"--ranks: got {bad[0]}, expected ranks in "
                                 f"0..{plan.layout.world_size - 1}")
        for _ in sched.run():
            pass
        stage(f"drawing the timeline of {src.stem}")
        m = sched.messages
        lay = plan.layout
        stage_of = {r: lay.coords(r).pp for r in range(lay.world_size)}
        if ranks is None:
            ranks, which = default_timeline_ranks(stage_of)
        else:
            which = f"{len(ranks)} of {lay.world_size} ranks, chosen with --ranks"
        sizes: dict[int, int] = {}
        count_values(sizes, m["size_bytes"][m["kind"] == 0])
        series = {"frame_sizes": {}, "message_sizes": sizes}
        return [plot_timeline(sched.timeline, m, outset.path(f"{src.stem}-timeline.png"),
                              ranks=ranks, stage_of=stage_of,
                              title=f"{shown(src.stem)}: compute and RDMA messages per rank "
                                    f"({_run_name(plan.scenario)})\n"
                                    f"{which}"),
                plot_sizes(series, outset.path(f"{src.stem}-message-sizes.png"),
                           title=f"{shown(src.stem)}: message sizes of one iteration")]
    stage(f"reading {src.name}")
    series = capture_series(src, bin_ns=bin_ns, window=window)
    stage(f"drawing {src.stem}")
    return [plot_throughput(series, outset.path(f"{src.stem}-throughput.png"),
                            title=f"{shown(src.name)}: layer-2 throughput per sending NIC, by phase"),
            plot_sizes(series, outset.path(f"{src.stem}-sizes.png"),
                       title=f"{shown(src.name)}: frame and message sizes")]



def _views() -> dict:
    """The pictures of several captures together, by option name: ``(numbers, drawing, title)``
    (:mod:`tokenpcap.analysis.plot_heatmap`, :mod:`tokenpcap.analysis.plot_fanin`)."""
    from tokenpcap.analysis.plot_fanin import fan_in_series, plot_fan_in
    from tokenpcap.analysis.plot_heatmap import heatmap_series, plot_heatmap

    return {"heatmap": (heatmap_series, plot_heatmap,
                        "layer-2 throughput per sending NIC over time"),
            "fan-in": (fan_in_series, plot_fan_in,
                       "distinct senders with data to each receiver")}


#: the option names of the views :func:`plot_together` draws, in the order drawn
TOGETHER_VIEWS = ("heatmap", "fan-in")


def plot_together(paths, outdir: str | os.PathLike, views, *, stem: str,
                  bin_ns: int | None = None,
                  window: tuple[int | None, int | None] | None = None) -> list[Path]:
    """The pictures ``views`` (names of :data:`TOGETHER_VIEWS`) of the captures ``paths`` read
    together on common bins: ``<stem>-heatmap.png`` (NICs x time), ``<stem>-fan-in.png``
    (senders per receiver and bin). Returns the PNG paths; they land together or not at all.

    Raises:
        OutputError, CaptureError, InputError: as :func:`plot_all`; InputError also for no RDMA
            frame to draw.
    """
    from tokenpcap.pcap.output import make_directory
    from tokenpcap.pcap.outputset import OutputSet

    table = _views()
    with make_directory(outdir) as outdir, OutputSet(outdir, what="plot") as outset:
        drawn = []
        for name in views:
            numbers, draw, what = table[name]
            stage(f"reading {len(paths)} capture{'s' if len(paths) != 1 else ''} for the {name}")
            series = numbers(paths, bin_ns=bin_ns, window=window)
            drawn.append(draw(series, outset.path(f"{stem}-{name}.png"),
                              title=f"{shown(stem)}: {what}"))
        outset.commit()
        return [outset.final(p) for p in drawn]
