"""Stage 5 (part): the EP AllToAlls hidden behind another microbatch's computation, as
Megatron-core runs them with ``overlap_moe_expert_parallel_comm`` (``--overlap-moe-expert-
parallel-comm``; Megatron-LM commit d98e8a64).

**The order of steps.** Megatron's interleaved schedule runs ``(p - s - 1) * 2 + (v - 1) * g``
warm-up forwards on stage ``s`` and, with the overlap, one more "to ensure the forward and
backward computations are independent in all 1f1b steps" (``megatron/core/pipeline_parallel/
schedules.py``, ``get_pp_rank_microbatches``, lines 956-970), then runs every steady-state pair
(forward ``w + i``, backward ``i``) as one combined step (``megatron/core/pipeline_parallel/
combined_1f1b.py``,
``combined_1f1b_schedule_for_interleaved_pipelining``; without pipelining
``combined_1f1b_schedule_for_no_pipelining``, lines 76-134: forward 0 alone, then forward
``i + 1`` with backward ``i``, then the last backward alone), the remaining backwards alone.
Megatron-core asks for interleaving when pp > 1 (``transformer_config.py``: "If enabling EP A2A
overlap, virtual_pipeline_model_parallel_size must be specified", and ``arguments.py`` turns a
virtual size of 1 into none). tokenpcap runs a stage of one model chunk by the interleaved
schedule's own rule with ``v = 1`` (:func:`combined_order`): ``2 (p - s - 1)`` warm-up forwards,
one more, then combined pairs. A combined step sends its forward's output only at its end, so
the 1F1B warm-up of ``p - s - 1`` (+ 1) would make neighbouring stages wait for each other's
whole step in turn; the interleaved warm-up keeps two steps in flight between them. The pairing
is the one DeepSeek-V3's DualPipe overlaps (arXiv 2412.19437, Sec. 3.2.1, Fig. 4: a forward and
a backward chunk, the dispatch and combine of one beside the attention and MLP of the other),
without DualPipe's bidirectional feeding.

**Inside a combined step** (``megatron/core/models/common/model_chunk_schedule_plan.py``,
``TransformerModelChunkSchedulePlan.run``, lines 536-630): the forward's receive and
preprocessing (embedding), the backward's receive and postprocessing (output layer); then the
forward's layer ``i`` with the backward's ``n - 1 - i`` for ``i < min(nf, nb)``; the backward's
remaining layers; the forward's remaining layers; the sends; the forward's output layer and
loss; the backward's embedding. Each layer is four nodes (``megatron/core/models/gpt/
fine_grained_callables.py``, ``build_transformer_layer_callables``): attention with the router and the dispatch's
preprocessing (``pre_dispatch_computation``, the computation stream), the dispatch AllToAll
(the communication stream), the experts (``mlp``, computation), the combine AllToAll
(communication). ``TransformerLayerSchedulePlan.run`` (lines 261-301) issues, for forward layer
``f`` and backward layer ``b``::

    b.combine backward   (comm)  | f.attention forward (comp)
    f.dispatch forward   (comm)  | b.mlp backward      (comp)
    b.dispatch backward  (comm)  | f.mlp forward       (comp)
    f.combine forward    (comm)  | b.attention backward (comp)

Each stream runs its work in issue order, and each node waits (``ScheduleNode.
stream_acquire_context``: ``event.wait``, ``event.record``; one event per microbatch) for the
previous node of its own microbatch. So every row's two nodes run side by side, and the next row
starts when both have ended: a row is, in a rank's program, the AllToAlls posted (``SEND``), the
computation, then a ``WAIT`` for them (:func:`combined_step`). A dense layer's row has no
AllToAll; the TP collectives of a node block inside it as without overlap. The calls of one
communication node (DeepEP's IB part and its NVLink forwarding, the tokens' and the probs'
AllToAlls) are started together, where the stream runs them one after another. Weight
gradients are not split from the backward (``delay_wgrad_compute`` off).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tokenpcap.errors import InputError
from tokenpcap.schedule.instructions import BWD_LAYER, FWD_LAYER
from tokenpcap.schedule.interleave import schedule_table

if TYPE_CHECKING:
    from tokenpcap.schedule.program import _Builder

__all__ = ["combined_order", "combined_step", "FORWARD_NODES", "BACKWARD_NODES"]

_DISPATCH = ("dispatch", "dispatch_ib", "dispatch_nvl", "dispatch_probs", "dispatch_probs_ib",
             "dispatch_probs_nvl")
_COMBINE = ("combine", "combine_nvl", "combine_ib")
#: The layer's operations by node, forward: attention (``pre_dispatch_computation``), dispatch,
#: experts (``mlp``), combine; together the names of :data:`~tokenpcap.schedule.instructions.
#: FWD_LAYER`, each once.
FORWARD_NODES = (
    ("dense_params", "expert_params", "attn_in", "cp_kv", "attn_fwd", "attn_out",
     "moe_aux_loss", "moe_counts"),
    _DISPATCH,
    ("mlp_in", "moe_gather", "moe_gather_probs", "mlp_fwd", "moe_scatter", "mlp_out"),
    _COMBINE)
#: Backward: combine, experts, dispatch, attention (with the ZeRO-3 gathers in the experts'
#: node, the layer's first computation).
BACKWARD_NODES = (
    ("combine_grad", "combine_grad_ib", "combine_grad_nvl"),
    ("dense_params", "expert_params", "mlp_out_grad", "moe_scatter_grad", "mlp_in_regather",
     "mlp_bwd", "moe_gather_grad", "moe_gather_probs_grad", "mlp_in_grad"),
    ("dispatch_grad", "dispatch_grad_nvl", "dispatch_grad_ib", "dispatch_probs_grad",
     "dispatch_probs_grad_nvl", "dispatch_probs_grad_ib"),
    ("attn_out_grad", "attn_in_regather", "cp_kv_grad", "attn_bwd", "attn_in_grad",
     "dense_grads", "expert_grads"))


def combined_order(pp: int, stage: int, microbatches: int, chunks: int
                   ) -> list[tuple[str, int, int] | tuple[str, tuple[int, int], tuple[int, int]]]:
    """The steps of one stage with ``overlap_moe_expert_parallel_comm``: ``("F", microbatch,
    chunk)`` and ``("B", microbatch, chunk)`` alone, ``("FB", (microbatch, chunk),
    (microbatch, chunk))`` a forward and a backward combined (module docstring): Megatron's
    interleaved order (:mod:`tokenpcap.schedule.interleave`, microbatch groups of ``pp``) with
    ``w = (pp - stage - 1) * 2 + (chunks - 1) * pp + 1`` warm-up forwards (at most all), each
    steady-state pair combined; with one chunk the same rule (``w = 2 (pp - stage - 1) + 1``;
    without pipelining 1).

    >>> combined_order(1, 0, 3, 1)
    [('F', 0, 0), ('FB', (1, 0), (0, 0)), ('FB', (2, 0), (1, 0)), ('B', 2, 0)]

    Raises:
        InputError: ``stage`` outside ``[0, pp)``, ``microbatches`` or ``chunks`` < 1.
    """
    if not 0 <= stage < pp or microbatches < 1 or chunks < 1:
        raise InputError(f"stage {stage} of pp {pp}, microbatches {microbatches}, "
                         f"chunks {chunks}")
    table = schedule_table(microbatches, chunks, pp if chunks > 1 else microbatches)
    total = len(table)
    w = min((pp - stage - 1) * 2 + (chunks - 1) * pp + 1, total)
    out: list = [("F", j, c) for j, c in table[:w]]
    for i in range(total - w):
        (jf, cf), (jb, cb) = table[w + i], table[i]
        out.append(("FB", (jf, cf), (jb, chunks - 1 - cb)))
    return out + [("B", j, chunks - 1 - c) for j, c in table[total - w:]]


def combined_step(b: _Builder, fwd: tuple[int, int], bwd: tuple[int, int]) -> None:
    """Append to ``b``'s program forward ``fwd`` and backward ``bwd`` (``(microbatch,
    chunk)`` each) run as one combined step (module docstring)."""
    (jf, cf), (jb, cb) = fwd, bwd
    fwd_layer, bwd_layer = FWD_LAYER, BWD_LAYER
    b.begin_forward()
    b.take_pp("F", "recv", jf, cf)
    b.take_pp("B", "recv", jb, cb)
    b.mark(True, "F", jf)
    b.mark(True, "B", jb)
    b.forward_head(jf, cf)
    b.backward_head(jb, cb)
    f_layers, b_layers = list(b.chunks[cf]), list(reversed(b.chunks[cb]))
    fwd_nodes, bwd_nodes = _FWD_NODES, _BWD_NODES
    n = min(len(f_layers), len(b_layers))
    for Lf, Lb in zip(f_layers[:n], b_layers[:n]):
        b.gather(jf, cf, Lf)
        rows = ((("backward", jb, Lb, bwd_nodes[0]), ("forward", jf, Lf, fwd_nodes[0])),
                (("forward", jf, Lf, fwd_nodes[1]), ("backward", jb, Lb, bwd_nodes[1])),
                (("backward", jb, Lb, bwd_nodes[2]), ("forward", jf, Lf, fwd_nodes[2])),
                (("forward", jf, Lf, fwd_nodes[3]), ("backward", jb, Lb, bwd_nodes[3])))
        for (cphase, cj, cL, comm), (phase, j, L, comp) in rows:
            posted = [cid for _, name in comm
                      if (cid := b.post((cphase, False, cj, cL, name))) is not None]
            b.layer(comp, phase, False, j, L)
            b.wait_for(posted)
        b.backward_done(jb, cb, Lb)
    for Lb in b_layers[n:]:
        b.layer(bwd_layer, "backward", False, jb, Lb)
        b.backward_done(jb, cb, Lb)
    for Lf in f_layers[n:]:
        b.gather(jf, cf, Lf)
        b.layer(fwd_layer, "forward", False, jf, Lf)
    b.forward_tail(jf, cf)
    b.mark(False, "F", jf)
    b.take_pp("F", "send", jf, cf)
    b.backward_tail(jb, cb)
    b.mark(False, "B", jb)
    b.take_pp("B", "send", jb, cb)


def _node(template: tuple, names: tuple[str, ...]) -> tuple:
    """The entries of a layer template that belong to one node, in the template's order."""
    return tuple(e for e in template if e[1] in names)


_FWD_NODES = [_node(FWD_LAYER, names) for names in FORWARD_NODES]
_BWD_NODES = [_node(BWD_LAYER, names) for names in BACKWARD_NODES]
