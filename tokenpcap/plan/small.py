"""Stage 3 (part): the small collectives of every iteration (batch broadcasts, gradient
statistics, the loss), Megatron-LM's (:func:`small_families`)."""
from __future__ import annotations

from tokenpcap.collectives.layout import RankLayout
from tokenpcap.config.profiles import Scenario
from tokenpcap.plan.family import Inst

__all__ = ["small_families"]


#: What TP rank 0 broadcasts to its TP group per microbatch (Megatron-core
#: ``get_batch_on_this_tp_rank``, ``megatron/core/utils.py``): name, bytes per token, stages
#: (``one`` without PP, ``first``/``last`` stage with PP). tokens, labels and position_ids are
#: int64, loss_mask float32; the attention mask (bool ``[b, 1, s, s]``) is added apart.
_BATCH = (("tokens", 8, ("one", "first")), ("labels", 8, ("one", "last")),
          ("loss_mask", 4, ("one", "last")), ("position_ids", 8, ("one", "first")))


def small_families(s: Scenario, layout: RankLayout, n_mb: int, fam) -> None:  # type: ignore[no-untyped-def]
    """The small collectives of every iteration (Megatron-LM):

    * batch broadcasts from TP rank 0 within each TP group, per microbatch at the start of its
      forward, on the first and the last stage (every stage holds them without PP):
      :data:`_BATCH` and, with ``create_attention_mask_in_dataloader``, the ``b*s*s`` bool mask;
    * with fp16 (loss scaling), the found-inf/NaN flag (one fp32) AllReduced (MAX) over the
      gradient-statistics group before the step (``MixedPrecisionOptimizer.
      _unscale_main_grads_and_check_for_nan``), and with ``clip_grad > 0`` the squared gradient
      norm (one fp32) over the same group (``clip_grads.get_grad_norm_fp32``); that group is the
      model-parallel group, every rank with the distributed optimizer
      (``get_grad_stats_parallel_group``);
    * after the step, over the model-parallel group (``pg_collection.mp``, TP x PP), whatever
      the optimizer: ``update_successful`` (one int32, MIN: ``common_utils.
      logical_and_across_model_parallel_group``) and ``grad_norm`` (one fp32, MAX:
      ``reduce_max_stat_across_model_parallel_group``), both in ``training.py train_step``;
    * the loss AllReduce over DP (with CP: the dp-cp group) on the last stage after the step:
      the summed loss and token count, two fp32 (``training.py train_step``: ``all_reduce(val,
      group=dp_cp_group)``);
    * the learning rate (one fp32, MAX over the model-parallel group) that ``training_log``
      reduces every iteration for the log (``reduce_max_stat_across_model_parallel_group``).
    """
    p, t, m = s.parallelism, s.training, s.model
    b, seq = t.micro_batch_size, m.seq_length
    if p.tp > 1:
        for st in sorted({0, p.pp - 1}):
            where = "one" if p.pp == 1 else ("first" if st == 0 else "last")
            tpg = layout.stage_groups("tp", st)
            for name, e, stages in _BATCH:
                if where in stages:
                    fam("tp", "forward", "Broadcast", b * seq * e, e, st, tpg,
                        [Inst(-1, j, op=f"batch_{name}") for j in range(n_mb)], "mb")
            if t.create_attention_mask_in_dataloader:
                fam("tp", "forward", "Broadcast", b * seq * seq, 1, st, tpg,
                    [Inst(-1, j, op="batch_attention_mask") for j in range(n_mb)], "mb")
    stats = [tuple(range(layout.world_size))] if p.zero_stage in (1, 2, 3) else \
        layout.groups("mp")
    if len(stats[0]) > 1:
        if t.precision == "fp16":
            fam("mp", "optimizer", "AllReduce", 4, 4, 0, stats, [Inst(-1, -1, op="found_inf")])
        if t.clip_grad > 0:
            fam("mp", "optimizer", "AllReduce", 4, 4, 0, stats, [Inst(-1, -1, op="grad_norm")])
    mp = layout.groups("mp")
    if len(mp[0]) > 1:
        fam("mp", "optimizer", "AllReduce", 4, 4, 0, mp,
            [Inst(-1, -1, op=o) for o in ("update_successful", "grad_norm_max",
                                           "learning_rate_max")])
    if p.dp * p.cp > 1:
        dpg = [g for g in layout.groups("dp") if layout.coords(g[0]).pp == p.pp - 1]
        fam("dp", "optimizer", "AllReduce", 8, 4, p.pp - 1, dpg, [Inst(-1, -1, op="loss")])
