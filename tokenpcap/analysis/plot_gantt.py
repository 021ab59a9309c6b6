"""The picture of a scenario's schedule: a Gantt chart per rank of compute (forward, backward,
recompute, optimizer) and of the RDMA messages its NIC sends, coloured by parallel dimension, so
that the 1F1B warm-up, steady state and cool-down show per pipeline stage; and which ranks it
draws by default.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tokenpcap.analysis.figure import FAMILY_COLORS, pyplot, save_figure, time_axis
from tokenpcap.records import DIMS

__all__ = ["TIMELINE_ROWS", "plot_timeline", "default_timeline_ranks"]


def plot_timeline(timeline: np.ndarray, messages: np.ndarray, out: str | os.PathLike, *,
                  ranks: list[int] | None = None, stage_of: dict[int, int] | None = None,
                  title: str = "") -> Path:
    """Gantt chart per rank: compute blocks (F/B/R/O from :data:`tokenpcap.schedule.runner.TIMELINE_DTYPE`)
    on one lane and the RDMA messages its NIC sends (first bit .. last bit, from
    ``tokenpcap.schedule.engine.nic.MSG_STATE_DTYPE``) on a second lane, coloured by parallel dimension."""
    plt = pyplot()
    from matplotlib.patches import Patch

    if ranks is None:
        ranks = sorted(set(timeline["rank"].tolist()))[:16]
    t_end = max(int(timeline["end_ns"].max(initial=0)),
                int(messages["last_tx_end_ns"].max(initial=0)))
    unit, div = time_axis(t_end)
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
                color=FAMILY_COLORS[DIMS[d]])
    ax.set_yticks(range(len(ranks)))
    stage_of = stage_of or {}
    ax.set_yticklabels([f"rank {r}" + (f" (stage {stage_of[r]})" if r in stage_of else "")
                        for r in reversed(ranks)], fontsize=8)
    ax.set_xlabel(f"time ({unit})")
    ax.set_ylabel("rank: compute (upper lane), NIC sends (lower lane)")
    handles = [Patch(color=c, label={b"F": "forward", b"B": "backward", b"R": "recompute",
                                     b"O": "optimizer"}[k]) for k, c in compute_color.items()]
    handles += [Patch(color=FAMILY_COLORS[DIMS[d]], label=f"{DIMS[d]} messages")
                for d in sorted(set(messages["dim"].tolist()))]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              frameon=False)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title or "Per-rank timeline: compute and RDMA messages (1F1B pipeline)")
    return save_figure(fig, out)


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
