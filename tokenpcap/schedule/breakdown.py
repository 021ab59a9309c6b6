"""Stage 5 (part): where a timed iteration's time goes, and the MFU it implies.

An iteration of ``T`` ns (from its start to the end of the last rank's optimizer block) is split,
on the *critical rank*, into parts that add up to ``T`` exactly. The critical rank is the one
whose last forward or backward block ends last (the lowest such rank): in 1F1B, a rank of stage 0,
whose last backward closes the pipeline, so that the pipeline's bubble falls before it and what
follows is the data-parallel and optimizer tail.

* ``compute_ns``: the forward and backward work of the rank's layers over its ``m`` microbatches
  (and the recomputed forward with ``recompute: full``, the output layer on the last stage), at
  the kernel efficiencies (:mod:`tokenpcap.schedule.compute`): what the rank would take with
  every collective free and no pipeline;
* ``in_layer_comm_ns``: time inside the forward and backward blocks (their union: a combined
  step's forward and backward blocks overlap) not spent computing: the
  blocking collectives between a layer's kernels (TP, CP ring steps, EP AllToAll, the batch
  broadcast), exposed;
* ``pipeline_ns``: time before the last backward block ends outside any block: the pipeline
  bubble (ideally ``(p - 1) / (v·m)`` of the pipeline's compute, Narayanan et al. 2021, Sec. 2.2)
  and waits for the neighbour stage's activations and gradients. :meth:`IterationBreakdown.
  pipeline_parts` splits it in three: the *ideal bubble* ``(p - 1) / (v·m)`` of the slowest
  stage's compute ``S`` (the pipeline runs at the pace of its slowest stage), the *stage
  imbalance* ``(S - C)·(1 - 1/(v·m))`` for a critical rank of compute ``C`` (a stage with fewer
  layers, as the first and last of Llama 3's split, waits for the slower ones at each of its
  ``v·m`` forward-backward slots but the first: in 1F1B its idle time is ``(p - 1)·c_s +
  (m - 1)·(c_s - c)`` with ``c_s``, ``c`` one microbatch's forward and backward on the slowest
  and on its own stage) and the rest, *waits for the neighbour stages* (their transfers and
  in-layer communication, not the critical rank's);
* ``optimizer_ns``: the optimizer step's memory-bound compute;
* ``tail_ns``: the rest after the last backward block: the data-parallel gradient reduction not
  hidden behind backward, the optimizer's small collectives and parameter AllGathers.

MFU is the model FLOPs of the iteration by Megatron-LM's formula
(:func:`tokenpcap.model.flops.megatron_flops`) over ``T`` times the world's peak; the executed
share counts what the schedule runs (recomputation included, :func:`~tokenpcap.schedule.
compute.iteration_flops`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tokenpcap.model import scenario_shards
from tokenpcap.model.flops import megatron_flops, model_flops_utilization
from tokenpcap.plan.rows import pipeline_bubble_fraction
from tokenpcap.schedule.compute import StageTimes, iteration_flops, kernel_efficiency, stage_times

__all__ = ["IterationBreakdown", "iteration_breakdown", "stage_compute_ns"]


@dataclass(frozen=True)
class IterationBreakdown:
    """One timed iteration (module docstring); times in ns, FLOPs exact integers."""

    iteration_ns: int
    critical_rank: int
    stage: int
    compute_ns: int
    in_layer_comm_ns: int
    pipeline_ns: int
    optimizer_ns: int
    tail_ns: int
    ideal_bubble: float          # (p - 1) / (v m), a fraction of the pipeline's compute
    model_flops: int             # Megatron-LM's formula, whole iteration, every GPU
    executed_flops: int          # what the schedule computes (recomputation included)
    mfu: float                   # model_flops / (T · world · peak)
    executed_share: float        # executed_flops / (T · world · peak)
    gemm_efficiency: float
    attention_efficiency: float
    slowest_stage_compute_ns: int = 0   # the largest compute_ns of any stage (same definition)
    slots: int = 1                      # v·m: forward-backward slots of a rank per iteration

    def pipeline_parts(self) -> dict[str, int]:
        """``pipeline_ns`` in three parts (module docstring) that sum to it: the ideal bubble
        (``ideal_bubble`` × the slowest stage's compute, rounded down), the stage imbalance and
        the waits for the neighbour stages (the rest; negative if the schedule beats the ideal
        bubble, as a rank whose neighbours start early can)."""
        bubble = int(self.ideal_bubble * self.slowest_stage_compute_ns)
        slots = self.slots
        imbalance = (self.slowest_stage_compute_ns - self.compute_ns) * (slots - 1) // slots
        return {"ideal bubble": bubble, "stage imbalance": imbalance,
                "waits for neighbour stages": self.pipeline_ns - bubble - imbalance}

    def parts(self) -> dict[str, int]:
        """The five parts in ns, in the order of the module docstring (they sum to
        :attr:`iteration_ns`)."""
        return {"compute": self.compute_ns, "in-layer communication": self.in_layer_comm_ns,
                "pipeline bubble and waits": self.pipeline_ns, "optimizer": self.optimizer_ns,
                "DP reduction and optimizer collectives": self.tail_ns}


def stage_compute_ns(t: StageTimes, moe: tuple[bool, ...], microbatches: int, recompute: str,
                     last: bool) -> int:
    """Forward plus backward compute (ns) of one rank of a stage over ``microbatches``
    microbatches: per layer ``attn + mlp`` (the dense MLP for a dense layer, ``moe`` one flag per
    layer of the stage) forward and backward, the replayed forward with ``recompute ==
    "full"``, the output layer when ``last``."""
    fwd = sum(t.attn_fwd + (t.mlp_fwd if x else t.dense_mlp_fwd) for x in moe)
    bwd = sum(t.attn_bwd + (t.mlp_bwd if x else t.dense_mlp_bwd) for x in moe)
    per = fwd + bwd + (fwd if recompute == "full" else 0)
    if last:
        per += t.logits_fwd + t.logits_bwd
    return microbatches * per


def _covered_ns(start: np.ndarray, end: np.ndarray) -> int:
    """Nanoseconds covered by the union of the blocks ``[start, end)`` (int64 ``(n,)`` each): a
    forward and a backward block of a combined step (:mod:`tokenpcap.schedule.epoverlap`) run
    at once and count once."""
    order = np.argsort(start, kind="stable")
    s, e = start[order].astype(np.int64), end[order].astype(np.int64)
    reach = np.maximum.accumulate(e) if e.size else e
    lo = np.maximum(s, np.concatenate(([np.iinfo(np.int64).min], reach[:-1])))
    return int(np.maximum(e - lo, 0).sum())


def iteration_breakdown(schedule, iteration: int = 0) -> IterationBreakdown:
    """:class:`IterationBreakdown` of ``iteration`` of a schedule run to its end with
    ``keep_history`` (its :attr:`~tokenpcap.schedule.runner.Schedule.timeline`).

    Raises:
        ValueError: the schedule holds no compute block of ``iteration`` (not run, run without
            ``keep_history``, or a workload scenario without a model).
    """
    s = schedule.scenario
    tl = schedule.timeline
    tl = tl[tl["iteration"] == iteration]
    if tl.size == 0 or s.model is None:
        raise ValueError(f"iteration_breakdown: no compute block of iteration {iteration}; "
                         "expected a schedule of a model run to its end with keep_history")
    start = 0 if iteration == 0 else int(schedule.timeline["end_ns"][
        schedule.timeline["iteration"] == iteration - 1].max())
    fb_all = tl[(tl["what"] == b"F") | (tl["what"] == b"B")]
    last = np.full(int(tl["rank"].max()) + 1, -1, np.int64)
    np.maximum.at(last, fb_all["rank"], fb_all["end_ns"])
    rank = int(np.argmax(last))                 # the first rank whose last block ends last
    mine = fb_all[fb_all["rank"] == rank]
    t_end = int(tl["end_ns"].max())
    p, tr = s.parallelism, s.training
    st = schedule.layout.coords(rank).pp
    times = stage_times(s, st, schedule.scale)
    m = schedule.plan.microbatches
    shards = scenario_shards(s)
    per_stage = [stage_compute_ns(times if k == st else stage_times(s, k, schedule.scale),
                                  shards[k].moe, m, tr.recompute, k == p.pp - 1)
                 for k in range(p.pp)]
    compute = per_stage[st]
    in_blocks = _covered_ns(mine["start_ns"], mine["end_ns"])
    last_fb = int(last[rank])
    world = s.cluster.nodes * s.cluster.gpus_per_node
    peak = s.cluster.gpu.peak_tflops
    total = t_end - start
    mf = megatron_flops(s.model, tr.global_batch_size, p.tp) // schedule.scale
    ex = iteration_flops(s) // schedule.scale
    eff = kernel_efficiency(s)
    return IterationBreakdown(
        iteration_ns=total, critical_rank=rank, stage=st, compute_ns=compute,
        in_layer_comm_ns=in_blocks - compute, pipeline_ns=last_fb - start - in_blocks,
        optimizer_ns=times.optimizer, tail_ns=t_end - last_fb - times.optimizer,
        ideal_bubble=float(pipeline_bubble_fraction(p.pp, m, p.vpp)),
        model_flops=mf, executed_flops=ex,
        mfu=model_flops_utilization(mf, total, world, peak),
        executed_share=model_flops_utilization(ex, total, world, peak),
        gemm_efficiency=eff.gemm, attention_efficiency=eff.attention,
        slowest_stage_compute_ns=max(per_stage), slots=p.vpp * m)
