"""What a plan's canonical call shapes say of the timing engine's memory for one iteration,
before anything is built (:func:`shape_counts`, read by :mod:`tokenpcap.schedule.limits`): the
NVLink copies timed one by one, the rows of the call-shape templates the engine holds
(:mod:`tokenpcap.schedule.flatbuild`), and a bound of the dependency countdowns the calls in
flight hold at once (:mod:`tokenpcap.schedule.engine.slabs`).
"""
from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Shapes", "shape_counts"]

#: Dimensions whose calls are once per iteration (the gradient reductions and the gradient
#: norm's): every one of an iteration may be in flight at once (started by the first rank of
#: its group to reach it, its countdowns held until the last rank's transfers are launched).
_ITERATION_DIMS = ("dp", "emb", "mp")


@dataclass(frozen=True)
class Shapes:
    """What the plan's canonical call shapes (:func:`tokenpcap.schedule.flatbuild.
    canonical_shape`, the engine's templates) say of one iteration: NVLink copies timed one by
    one, the templates' rows (the distinct shapes' transfers), and the countdown slab words
    (:mod:`tokenpcap.schedule.engine.slabs`) the calls in flight may hold at once: every
    once-per-iteration call's (:data:`_ITERATION_DIMS`) and, of the other calls, ``2·W/G``
    slabs of the largest per rank (a rank holds at most its blocking call and one sent or
    streamed call in flight, a call has its group's ``G`` ranks), twice over for the size
    classes' free slabs (a slab is at most twice its countdowns; the pool's high-water mark,
    measured, stays within this: benchmarks/README.md, "engine_state.py")."""

    copies: int
    template_rows: int
    slab_words: int


def shape_counts(plan) -> Shapes:  # type: ignore[no-untyped-def]
    """The :class:`Shapes` of ``plan`` (one pass over every group of every call family; the
    transfers of each distinct shape are made once and cached, for the schedule's flat build)."""
    from tokenpcap.schedule.engine.slabs import slab_words
    from tokenpcap.schedule.flatbuild import canonical_shape, shape_transfers
    from tokenpcap.schedule.runner import NVLINK_COPIES_PER_COPY

    n = mixed = rows = per_iteration = 0
    per_rank = 0.0
    seen: set = set()
    for f in plan.families:
        per = per_mixed = 0
        for g in f.groups:
            # a group moved to its canonical shape has as many copies (flatbuild); the
            # schedule's flat build then finds these transfers cached
            key, _ = canonical_shape(f.collective, g, f.message_bytes, f.elem_bytes,
                                     plan.layout.gpus_per_node, plan.layout.nics_per_node)
            tr = shape_transfers(key, plan)
            nic = tr.table["nic"]
            copies = int((~nic).sum())
            per += copies
            per_mixed += copies if nic.any() else 0
            if key not in seen:
                seen.add(key)
                rows += len(tr.table)
            words = int(slab_words([len(tr.table)])[0])
            if f.dim in _ITERATION_DIMS:
                per_iteration += words * len(f.insts)
            elif f.insts:
                per_rank = max(per_rank, words / max(1, len(g)))
        n += per * len(f.insts)
        mixed += per_mixed * len(f.insts)
    world = plan.layout.world_size
    slabs = 2 * (per_iteration + int(2 * world * per_rank))
    return Shapes(n if n <= NVLINK_COPIES_PER_COPY else mixed, rows, slabs)
