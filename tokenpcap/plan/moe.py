"""Stage 3 (part): the instances and TP collectives of mixture-of-experts layers (Megatron-core
``MoEAlltoAllTokenDispatcher``)."""
from __future__ import annotations

from typing import Sequence

from tokenpcap.plan.family import Inst

__all__ = ["moe_insts", "moe_tp_families", "moe_router_families"]


def moe_insts(layers: Sequence[int], n_mb: int, full: bool, fwd_ops: tuple[str, ...],
               bwd_ops: tuple[str, ...]) -> list[Inst]:
    """Instances of MoE-layer operations: forward ``fwd_ops`` per microbatch and layer (and
    again before the backward with full recomputation), or backward ``bwd_ops``."""
    out = [Inst(L, j, op=o) for j in range(n_mb) for L in layers for o in fwd_ops]
    if full:
        out += [Inst(L, j, recompute=True, op=o) for j in range(n_mb) for L in reversed(layers)
                for o in fwd_ops]
    out += [Inst(L, j, op=o) for j in range(n_mb) for L in reversed(layers) for o in bwd_ops]
    return out


def moe_tp_families(fam, st: int, tpg, layers: Sequence[int], n_mb: int, full: bool,  # type: ignore[no-untyped-def]
                     tokens_bytes: int, probs_bytes: int, e: int) -> None:
    """Megatron-core ``MoEAlltoAllTokenDispatcher`` with tp > 1, per MoE layer and microbatch
    (``megatron/core/transformer/moe/token_dispatcher.py``): ``dispatch_postprocess``
    AllGathers the tokens the dispatch AllToAll brought (and their probs) over the TP group,
    ``combine_preprocess`` ReduceScatters the expert output over it before the combine
    AllToAll; backward the gradients go the other way (ReduceScatter, AllGather). With ``T``
    tokens per rank (``b*s/tp`` with sequence parallelism) each buffer is ``tp * T * top_k``
    tokens of ``h`` elements: ``top_k`` times the dense MLP's AllGather / ReduceScatter.
    """
    fam("tp", "forward", "AllGather", tokens_bytes, e, st, tpg,
        moe_insts(layers, n_mb, full, ("moe_gather",), ()))
    fam("tp", "forward", "AllGather", probs_bytes, e, st, tpg,
        moe_insts(layers, n_mb, full, ("moe_gather_probs",), ()))
    fam("tp", "forward", "ReduceScatter", tokens_bytes, e, st, tpg,
        moe_insts(layers, n_mb, full, ("moe_scatter",), ()))
    fam("tp", "backward", "AllGather", tokens_bytes, e, st, tpg,
        moe_insts(layers, n_mb, False, (), ("moe_scatter_grad",)))
    fam("tp", "backward", "ReduceScatter", tokens_bytes, e, st, tpg,
        moe_insts(layers, n_mb, False, (), ("moe_gather_grad",)))
    fam("tp", "backward", "ReduceScatter", probs_bytes, e, st, tpg,
        moe_insts(layers, n_mb, False, (), ("moe_gather_probs_grad",)))


def moe_router_families(fam, s, layout, st: int, layers: Sequence[int], n_mb: int,  # type: ignore[no-untyped-def]
                        full: bool) -> None:
    """The routers' own small collectives on stage ``st`` (``layers``: its MoE layers):

    * with ``moe.aux_loss_coeff > 0``, per MoE layer and microbatch forward (again in a full
      recomputation's replay), ``Router._apply_aux_loss`` sums the tokens routed to each expert
      over the TP x CP group (``moe_utils.get_tokens_per_expert_and_token_count``:
      ``routing_map.sum(dim=0)``, int64 ``[experts]``, ``reduce_from_tensor_model_parallel_
      region``; its backward sends nothing);
    * with ``moe.router_enable_expert_bias``, once per iteration in ``finalize_model_grads``
      (``_update_router_expert_bias``, after the embedding gradients), the fp32 tokens per
      expert of every router the rank holds, stacked ``[layers, experts]``, AllReduced over
      TP x DP x CP (``moe_utils.get_updated_expert_bias``).

    Groups of one rank send nothing (``fam`` drops them with their size 0 of peers).
    """
    moe, p = s.model.moe, s.parallelism
    if moe is None or not layers:
        return
    if moe.aux_loss_coeff > 0 and p.tp * p.cp > 1:
        groups = [g for g in layout.groups("tpcp") if layout.coords(g[0]).pp == st]
        fam("tp", "forward", "AllReduce", moe.experts * 8, 8, st, groups,
            moe_insts(layers, n_mb, full, ("moe_aux_loss",), ()))
    if moe.router_enable_expert_bias and p.tp * p.dp * p.cp > 1:
        groups = [g for g in layout.groups("tpdpcp") if layout.coords(g[0]).pp == st]
        fam("dp", "backward", "AllReduce", len(layers) * moe.experts * 4, 4, st, groups,
            [Inst(-1, -1, op="expert_bias")])
