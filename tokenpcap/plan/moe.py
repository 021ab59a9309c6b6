"""Stage 3 (part): the instances and TP collectives of mixture-of-experts layers (Megatron-core
``MoEAlltoAllTokenDispatcher``)."""
from __future__ import annotations

from typing import Callable, Sequence

from tokenpcap.config.types import DTYPE_BYTES
from tokenpcap.plan.family import Inst

__all__ = ["moe_insts", "moe_tp_families", "moe_router_families", "ep_row_bytes",
           "moe_ep_families", "FP8_SCALE_BLOCK", "FP8_SCALE_BYTES", "TOKEN_DISPATCHER_FAMILIES",
           "register_token_dispatcher"]

#: Elements of a token's hidden state per FP8 scale: DeepSeek-V3 (arXiv 2412.19437, Sec. 3.3.2)
#: quantizes activations on 1x128 tiles (per token, per 128 channels); DeepEP's FP8 dispatch
#: (``deep_ep.Buffer.dispatch``: ``x`` as ``(fp8 [tokens, h], fp32 [tokens, h / 128])``) sends
#: the same layout.
FP8_SCALE_BLOCK = 128
#: Bytes of one scale: fp32 (DeepEP's ``x_scales`` dtype; the report's scales are powers of 2,
#: held in fp32).
FP8_SCALE_BYTES = 4

#: ``moe.token_dispatcher`` name -> the builder of its EP calls per stage, called as
#: ``builder(fam, moe, stage, ep_groups, layout, moe_layers, microbatches, full_recompute,
#: rows, hidden_size, element_bytes, precision)`` (:func:`moe_ep_families`; ``deepep``:
#: :func:`tokenpcap.plan.moe_nodelimited.moe_deepep_families`). Its keys are the names
#: :data:`tokenpcap.config.types.TOKEN_DISPATCHERS` accepts.
TOKEN_DISPATCHER_FAMILIES: dict[str, Callable[..., None]] = {}


def register_token_dispatcher(name: str) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Decorator: register a builder of a token dispatcher's EP calls under ``name``.

    Raises:
        ValueError: ``name`` registered twice (a programming error, at import).
    """
    def put(f: Callable[..., None]) -> Callable[..., None]:
        if name in TOKEN_DISPATCHER_FAMILIES:
            raise ValueError(f"token dispatcher {name!r} registered twice")
        TOKEN_DISPATCHER_FAMILIES[name] = f
        return f
    return put


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


def ep_row_bytes(hidden_size: int, dtype: str) -> int:
    """Bytes of one routed token (one of its ``top_k`` rows) in an EP AllToAll of element type
    ``dtype`` (a key of :data:`~tokenpcap.config.types.DTYPE_BYTES`): ``h * B``, and for
    ``"fp8"`` ``h`` bytes plus one fp32 scale per started 128 elements, ``h + ceil(h / 128) * 4``
    (DeepSeek-V3, arXiv 2412.19437, Sec. 3.3.2-3.3.3: FP8 E4M3 activations with 1x128 tile
    scaling; 7,392 B for its ``h`` 7,168 instead of 14,336 B in bf16).

    Raises:
        KeyError: ``dtype`` not a key of ``DTYPE_BYTES``.
    """
    if dtype == "fp8":
        return hidden_size + -(-hidden_size // FP8_SCALE_BLOCK) * FP8_SCALE_BYTES
    return hidden_size * DTYPE_BYTES[dtype]


@register_token_dispatcher("alltoall")
def moe_ep_families(fam, moe, st: int, epg, layout, layers: Sequence[int],  # type: ignore[no-untyped-def]
                    n_mb: int, full: bool, rows: int, h: int, e_act: int,
                    precision: str) -> None:
    """The EP AllToAlls of ``MoEAlltoAllTokenDispatcher`` (Megatron-core
    ``megatron/core/transformer/moe/token_dispatcher.py``: ``token_dispatch`` /
    ``token_combine``) per MoE layer and microbatch on stage ``st``, over the EP groups ``epg``.

    A rank routes ``rows = tokens * top_k`` rows. Forward: the dispatch of the rows (and again in
    a full recomputation's replay), the combine of the experts' output, and the dispatch of
    their probs; backward the combine's gradient, the dispatch's gradient and the probs'
    gradient. The rows that go from their owner to the experts (``dispatch`` and
    ``combine_grad``) are of ``moe.dispatch_dtype`` (default the training ``precision``), the
    rows coming back (``combine``, ``dispatch_grad``) of the training precision: DeepSeek-V3
    (arXiv 2412.19437, Sec. 3.3.3, *Low-Precision Communication*) quantizes the activation
    before the MoE up-projections to FP8 for the dispatch and applies "a similar strategy" to the
    activation gradient before the MoE down-projections (the gradient the backward of the
    combine sends to the experts), and keeps both the forward and the backward combine (the
    backward of the dispatch) in BF16. The probs are ``rows`` values of the training
    precision's size (``rows * B``). An FP8 AllToAll has element size 1 (its buffer: the FP8
    rows then their scales, :func:`ep_row_bytes`). Operations of equal size and element size
    share one family (in the order dispatch, combine; combine_grad, dispatch_grad).
    """
    back = ep_row_bytes(h, precision)
    out_dtype = moe.dispatch_dtype or precision
    out = (ep_row_bytes(h, out_dtype), DTYPE_BYTES[out_dtype])      # fp8: element size 1
    for phase, ops in (("forward", (("dispatch", out), ("combine", (back, e_act)))),
                       ("backward", (("combine_grad", out), ("dispatch_grad", (back, e_act))))):
        kinds: dict[tuple[int, int], list[str]] = {}
        for op, k in ops:
            kinds.setdefault(k, []).append(op)
        for (row, e), names in kinds.items():
            fwd, bwd = (tuple(names), ()) if phase == "forward" else ((), tuple(names))
            fam("ep", phase, "AllToAll", rows * row, e, st, epg,
                moe_insts(layers, n_mb, full and phase == "forward", fwd, bwd))
    fam("ep", "forward", "AllToAll", rows * e_act, e_act, st, epg,
        moe_insts(layers, n_mb, full, ("dispatch_probs",), ()))
    fam("ep", "backward", "AllToAll", rows * e_act, e_act, st, epg,
        moe_insts(layers, n_mb, False, (), ("dispatch_probs_grad",)))
