"""Pictures of a trace (matplotlib, Agg backend, PNG): what a person would rather look at.

From a capture alone (any pcap/pcapng/ERF, ours or foreign):

* :func:`plot_throughput`: layer-2 throughput over time per sending NIC (source address), stacked
  by phase when pcapng comments name it (``dp/backward/AllReduce`` ...), in Gb/s;
* :func:`plot_sizes`: the frame-size distribution and the RDMA message-size distribution (message
  sizes from the RETH DMA length of WRITE FIRST/ONLY packets, so no generator is needed).

From a scenario (runs the schedule, stage 5):

* :func:`plot_timeline`: a Gantt chart per rank of compute (forward, backward, recompute,
  optimizer) and of the RDMA messages each rank's NIC sends, coloured by parallel dimension: the
  1F1B warm-up, steady state and cool-down are visible per pipeline stage.

Every figure has a title and units on both axes. Times are integer ns until the last moment, when
they become µs or ms for the axis.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tokenpcap.analysis.inspect import address_text
from tokenpcap.records.comments import CONTROL_PREFIXES
from tokenpcap.analysis.decode import decode_batch
from tokenpcap.analysis.flows import is_rdma
from tokenpcap.errors import DecodeError, InputError, OutputError
from tokenpcap.records import DIMS, parse_phase_label
from tokenpcap.pcap.reader import open_capture
from tokenpcap.pcap.timestamps import NO_TIME

__all__ = ["capture_series", "plot_throughput", "plot_sizes", "plot_timeline", "plot_all"]

MAX_NICS = 8
CONTROL_LABEL = "control (CTS, ACK)"
_COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3",
           "#8C8C8C", "#CCB974", "#64B5CD"]


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def capture_series(path: str | os.PathLike, *, bins: int = 200) -> dict:
    """What the capture pictures need, aggregated while streaming (memory flat in the file size).

    Two passes over the records: the first finds the time span (record headers only), the
    second decodes every batch and adds it up.

    Returns:
        dict: ``t0_ns`` (first time), ``bin_ns`` (bin width, ns), ``bins`` (bins + 1 slots);
        ``nics`` (sending addresses) and ``phases`` (labels, plus control packets as one
        category); ``throughput``: ``{(nic index, phase index or -1): int64 (bins + 1,)}`` wire
        bytes of the RDMA frames starting in each bin; ``frame_sizes`` and ``message_sizes``:
        ``{bytes: count}`` of every frame's wire length and of every RETH DMA length;
        ``untimed``: RDMA frames without a time (pcapng Simple Packet Blocks carry none), counted
        in the size distributions but in no bin.

    Raises:
        CaptureError: as :func:`tokenpcap.pcap.reader.open_capture`.
    """
    cap = open_capture(path, on_truncation="stop")
    t0, t1 = None, None
    for rec in cap.batches():
        t = rec["time_ns"][rec["time_ns"] != NO_TIME]
        if t.size:
            t0 = int(t.min()) if t0 is None else min(t0, int(t.min()))
            t1 = int(t.max()) if t1 is None else max(t1, int(t.max()))
    t0 = t0 or 0
    width = max(((t1 or 0) - t0) // bins + 1, 1)
    nic_index: dict[tuple, int] = {}
    nics: list[str] = []
    labels: list[str] = []
    label_index: dict[str, int] = {}
    thr: dict[tuple[int, int], np.ndarray] = {}
    frame_sizes: dict[int, int] = {}
    message_sizes: dict[int, int] = {}
    untimed = 0
    for rec in cap.batches():
        d = decode_batch(cap.data, rec, cap.views)
        _count(frame_sizes, d["orig_len"])
        rd = np.flatnonzero(is_rdma(d["kind"]))
        if rd.size == 0:
            continue
        d = d[rd]
        _count(message_sizes, d["dmalen"][d["dmalen"] >= 0])
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
        codes = np.full(len(cap.comments) + 1, -1, np.int64)
        for i, text in enumerate(cap.comments):
            if text.startswith(CONTROL_PREFIXES):
                label = CONTROL_LABEL                   # clear-to-send writes and ACKs
            else:
                try:
                    label = "/".join(parse_phase_label(text))
                except DecodeError:
                    continue
            codes[i] = label_index.setdefault(label, len(labels))
            if codes[i] == len(labels):
                labels.append(label)
        phase = codes[d["comment"]]
        timed = d["time_ns"] != NO_TIME
        if not timed.all():
            untimed += int((~timed).sum())
            d, nic, phase = d[timed], nic[timed], phase[timed]
            if d.size == 0:
                continue
        # in uint64: the span of arbitrary int64 times may exceed int64 (wraps right here)
        slot = ((d["time_ns"].astype(np.uint64) - np.uint64(t0 % (1 << 64)))
                // np.uint64(width)).astype(np.int64)
        pair = (nic * (len(labels) + 1) + phase + 1)
        uniq, pinv = np.unique(pair, return_inverse=True)
        sums = np.bincount(pinv.ravel() * (bins + 1) + slot, d["orig_len"],
                           minlength=uniq.size * (bins + 1)).reshape(uniq.size, bins + 1)
        for p, row in zip(uniq.tolist(), np.rint(sums).astype(np.int64)):
            k = (p // (len(labels) + 1), p % (len(labels) + 1) - 1)
            thr[k] = thr[k] + row if k in thr else row
    return {"t0_ns": t0, "bin_ns": width, "bins": bins + 1, "nics": nics, "phases": labels,
            "throughput": thr, "frame_sizes": frame_sizes, "message_sizes": message_sizes,
            "untimed": untimed}


def _count(into: dict[int, int], values: np.ndarray) -> None:
    u, c = np.unique(values, return_counts=True)
    for v, k in zip(u.tolist(), c.tolist()):
        into[v] = into.get(v, 0) + k


def _time_axis(span_ns: int) -> tuple[str, int]:
    if span_ns >= 10_000_000:
        return "ms", 1_000_000
    if span_ns >= 10_000:
        return "µs", 1_000
    return "ns", 1


def plot_throughput(series: dict, out: str | os.PathLike, *, title: str = "") -> Path:
    """Stacked throughput per sending NIC by phase: one panel per NIC, at most ``MAX_NICS``
    spread evenly over the NICs in address order (so that every node/pipeline stage shows).

    Throughput in a bin = 8 · (wire bytes of the frames that start in it) / bin width, Gb/s.

    Raises:
        InputError: the capture has no RDMA packets to plot.
        OutputError: the PNG cannot be written.
    """
    return _save(throughput_figure(series, title=title), out)


def throughput_figure(series: dict, *, title: str = ""):
    """The figure of :func:`plot_throughput`, laid out (``tight_layout``), not saved. The
    phase legend sits outside the panels, right of the top one, so it never covers a bar.

    Raises:
        InputError: the capture has no RDMA packets to plot.
    """
    plt = _pyplot()
    thr, names = series["throughput"], series["nics"]
    if not thr:
        raise InputError("plot throughput: got no RoCE/InfiniBand packets, expected at least one")
    width, slots = series["bin_ns"], series["bins"]
    unit, div = _time_axis(width * (slots - 1))
    present = sorted({n for n, _ in thr}, key=lambda k: _address_key(names[k]))
    shown = [present[i] for i in np.unique(np.linspace(0, len(present) - 1, MAX_NICS)
                                           .round().astype(int))]
    labels = series["phases"] + ["(no phase)"]
    used = sorted({p for _, p in thr}, key=lambda p: (p < 0, p))
    fig, axes = plt.subplots(len(shown), 1, figsize=(11, 1.9 * len(shown) + 1.2),
                             sharex=True, squeeze=False)
    x = np.arange(slots) * width / div               # bin starts; steps hold for a bin
    zero = np.zeros(slots, np.int64)
    for ax, n in zip(axes[:, 0], shown):
        stack = [thr.get((n, p), zero) * 8 / width for p in used]   # bytes/ns * 8 = Gb/s
        ax.stackplot(x, stack, labels=[labels[p] for p in used],
                     colors=[_COLORS[i % len(_COLORS)] for i in range(len(used))], step="post")
        ax.set_ylabel("Gb/s")
        ax.set_title(f"NIC {names[n]}", fontsize=9, loc="left")
        ax.grid(alpha=0.3)
    axes[0, 0].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7,
                      title="phase", title_fontsize=7)
    axes[-1, 0].set_xlabel(f"time since first packet ({unit}); bins of {width:,} ns")
    some = f" ({len(shown)} of {len(present)} NICs)" if len(shown) < len(present) else ""
    fig.suptitle((title or "Layer-2 throughput per sending NIC, stacked by phase") + some)
    fig.tight_layout()
    return fig


def _address_key(text: str) -> tuple:
    """Sort key of an address text: numeric for IPv4/IPv6/LIDs."""
    import ipaddress
    if text.startswith("lid "):
        return (0, int(text[4:], 16))
    ip = ipaddress.ip_address(text)
    return (ip.version, int(ip))


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
    plt = _pyplot()
    frames, msgs = series["frame_sizes"], series["message_sizes"]
    if frames:
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2))
        _distribution(a, frames, _COLORS[0], "frames")
        a.set_xlabel("frame size (bytes, without FCS)")
        a.set_ylabel("frames (log scale)")
        a.set_title(f"frame sizes, {sum(frames.values()):,} frames", fontsize=10)
    else:                                            # a scenario: messages only
        fig, b = plt.subplots(1, 1, figsize=(7, 4.2))
    _distribution(b, msgs, _COLORS[1], "messages")
    b.set_xlabel("RDMA message size (bytes; RETH DMA length)")
    b.set_ylabel("messages (log scale)")
    b.set_title(f"message sizes, {sum(msgs.values()):,} messages", fontsize=10)
    fig.suptitle(title or "Frame and message size distributions")
    return _save(fig, out)


def plot_timeline(timeline: np.ndarray, messages: np.ndarray, out: str | os.PathLike, *,
                  ranks: list[int] | None = None, stage_of: dict[int, int] | None = None,
                  title: str = "") -> Path:
    """Gantt chart per rank: compute blocks (F/B/R/O from :data:`tokenpcap.schedule.runner.TIMELINE_DTYPE`)
    on one lane and the RDMA messages its NIC sends (first bit .. last bit, from
    ``tokenpcap.schedule.engine.nic.MSG_STATE_DTYPE``) on a second lane, coloured by parallel dimension."""
    plt = _pyplot()
    from matplotlib.patches import Patch

    if ranks is None:
        ranks = sorted(set(timeline["rank"].tolist()))[:16]
    t_end = max(int(timeline["end_ns"].max(initial=0)),
                int(messages["last_tx_end_ns"].max(initial=0)))
    unit, div = _time_axis(t_end)
    fig, ax = plt.subplots(figsize=(12, 0.55 * len(ranks) + 1.8))
    compute_color = {b"F": "#4C72B0", b"B": "#C44E52", b"R": "#8172B3", b"O": "#55A868"}
    for i, r in enumerate(ranks):
        y = len(ranks) - 1 - i
        blocks = timeline[timeline["rank"] == r]
        for what, color in compute_color.items():
            sel = blocks[blocks["what"] == what]
            if sel.size:
                ax.broken_barh(list(zip(sel["start_ns"] / div, (sel["end_ns"] - sel["start_ns"])
                                        / div)), (y + 0.05, 0.5), color=color,
                               edgecolor="white", linewidth=0.6)
        mine = messages[(messages["rank_src"] == r) & (messages["first_tx_ns"] >= 0)]
        for d in np.unique(mine["dim"]).tolist():
            sel = mine[mine["dim"] == d]
            ax.broken_barh(list(zip(sel["first_tx_ns"] / div, np.maximum(
                sel["last_tx_end_ns"] - sel["first_tx_ns"], 1) / div)), (y - 0.4, 0.38),
                color=_COLORS[(4 + d) % len(_COLORS)])
    ax.set_yticks(range(len(ranks)))
    stage_of = stage_of or {}
    ax.set_yticklabels([f"rank {r}" + (f" (stage {stage_of[r]})" if r in stage_of else "")
                        for r in reversed(ranks)], fontsize=8)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("rank: compute (upper lane), NIC sends (lower lane)")
    handles = [Patch(color=c, label={b"F": "forward", b"B": "backward", b"R": "recompute",
                                     b"O": "optimizer"}[k]) for k, c in compute_color.items()]
    handles += [Patch(color=_COLORS[(4 + d) % len(_COLORS)], label=f"{DIMS[d]} messages")
                for d in sorted(set(messages["dim"].tolist()))]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              frameon=False)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title or "Per-rank timeline: compute and RDMA messages (1F1B pipeline)")
    return _save(fig, out)


#: rows of the default timeline: a figure stays readable, and ranks of one stage look alike
TIMELINE_ROWS = 16


def default_timeline_ranks(stage_of: dict[int, int]) -> tuple[list[int], str]:
    """The ranks a scenario's timeline draws unless ``--ranks`` names others, and the caption
    that says which.

    Every rank of a pipeline stage runs the same 1F1B schedule (they differ in their TP and DP
    position, not in when they compute and send), so the first ``TIMELINE_ROWS // pp`` ranks of
    each stage (at least one) show the whole pipeline in a figure of at most about
    :data:`TIMELINE_ROWS` rows, where one row per rank of a large job would be unreadable.

    Args:
        stage_of: pipeline stage of every rank, ``{rank: stage}`` for ranks ``0 .. world - 1``.

    Returns:
        ``(ranks, caption)``, e.g. for Dante (32 ranks, pp 2): ``[0..7, 16..23]`` and
        ``"16 of 32 ranks: the first 8 of each pipeline stage (stage 0: 0-7, stage 1: 16-23);
        --ranks draws others"``.
    """
    world = len(stage_of)
    stages = sorted(set(stage_of.values()))
    per = max(1, TIMELINE_ROWS // len(stages))
    chosen = {st: [r for r in range(world) if stage_of[r] == st][:per] for st in stages}
    ranks = [r for st in stages for r in chosen[st]]
    if len(ranks) == world:
        return ranks, f"all {world} ranks"
    first = "the first rank" if per == 1 else f"the first {per}"
    if len(stages) > 4:
        return ranks, (f"{len(ranks)} of {world} ranks: {first} of each of the {len(stages)} "
                       "pipeline stages; --ranks draws others")
    spans = ", ".join(f"stage {st}: " + _span(rs) for st, rs in chosen.items())
    return ranks, (f"{len(ranks)} of {world} ranks: {first} of each pipeline stage ({spans}); "
                   "--ranks draws others")


def _span(ranks: list[int]) -> str:
    """``[16, 17, ..., 23]`` → ``"16-23"``; ranks that are not consecutive are listed."""
    if len(ranks) > 1 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return " ".join(str(r) for r in ranks)


def _save(fig, out) -> Path:
    """Write ``fig`` to a temporary name and rename it to ``out``.

    Raises:
        OutputError: the file system refuses (read-only, no space, no permission); nothing is
            left behind.
    """
    import matplotlib.pyplot as plt

    out = Path(out)
    tmp = out.with_name(f".{out.name}.part.png")
    fig.tight_layout()
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, out)
    except OSError as err:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise OutputError(f"{out}: cannot write: {err.strerror or err}") from None
    finally:
        plt.close(fig)
    return out


def _schedule_name(vpp: int) -> str:
    """The pipeline schedule's name: Megatron-LM's 1F1B, or with ``vpp`` > 1 model chunks per
    stage its interleaved 1F1B (megatron/core/pipeline_parallel/schedules.py)."""
    return "1F1B" if vpp <= 1 else f"interleaved 1F1B, {vpp} model chunks per stage"


def plot_all(source: str | os.PathLike, outdir: str | os.PathLike, *, scale: int = 1,
             iterations: int = 1, ranks: list[int] | None = None) -> list[Path]:
    """Every picture ``source`` allows: a capture → throughput + sizes; a scenario (YAML) →
    timeline + message sizes (by running the schedule). Returns the PNG paths.

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
        drawn = _plot_all(source, outset, scale=scale, iterations=iterations, ranks=ranks)
        outset.commit()
        return [outset.final(p) for p in drawn]


def _plot_all(source, outset, *, scale: int, iterations: int,
              ranks: list[int] | None) -> list[Path]:
    src = Path(source)
    if src.suffix in (".yaml", ".yml"):
        from tokenpcap.config.profiles import load_scenario
        from tokenpcap.pipeline import prepare

        _, plan, sched = prepare(load_scenario(src), scale=scale, iterations=iterations)
        if ranks is not None:
            bad = sorted(r for r in ranks if not 0 <= r < plan.layout.world_size)
            if bad:
                raise InputError(f"--ranks: got {bad[0]}, expected ranks in "
                                 f"0..{plan.layout.world_size - 1}")
        for _ in sched.run():
            pass
        m = sched.messages
        lay = plan.layout
        stage_of = {r: lay.coords(r).pp for r in range(lay.world_size)}
        if ranks is None:
            ranks, which = default_timeline_ranks(stage_of)
        else:
            which = f"{len(ranks)} of {lay.world_size} ranks, chosen with --ranks"
        sizes: dict[int, int] = {}
        _count(sizes, m["size_bytes"][m["kind"] == 0])
        series = {"frame_sizes": {}, "message_sizes": sizes}
        return [plot_timeline(sched.timeline, m, outset.path(f"{src.stem}-timeline.png"),
                              ranks=ranks, stage_of=stage_of,
                              title=f"{src.stem}: compute and RDMA messages per rank "
                                    f"({_schedule_name(plan.scenario.parallelism.vpp)})\n"
                                    f"{which}"),
                plot_sizes(series, outset.path(f"{src.stem}-message-sizes.png"),
                           title=f"{src.stem}: message sizes of one iteration")]
    series = capture_series(src)
    return [plot_throughput(series, outset.path(f"{src.stem}-throughput.png"),
                            title=f"{src.name}: layer-2 throughput per sending NIC, by phase"),
            plot_sizes(series, outset.path(f"{src.stem}-sizes.png"),
                       title=f"{src.name}: frame and message sizes")]

