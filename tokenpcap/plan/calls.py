"""Stage 3 (part): every collective call of one training iteration, per group instance.

Which collectives a Megatron-LM iteration makes (``b`` micro batch, ``s`` sequence length, ``h``
hidden size, ``B`` bytes per element of ``training.precision``, ``A = b*s*h*B``; ``m =
global_batch / (b*dp)`` microbatches; per stage the layers of Megatron's pipeline split,
:mod:`tokenpcap.config.pipeline`):

* **TP** (Shoeybi et al. 2019, Sec. 3; Narayanan et al. 2021, Sec. 2.3), per layer per microbatch:
  forward 2 AllReduce of ``A`` (after attention, after the MLP), backward 2 AllReduce of ``A`` (the
  ``f`` operators at the attention and MLP inputs). With sequence parallelism (Korthikanti et al.
  2022, Sec. 4.2.2) forward AllGather+ReduceScatter twice, backward ReduceScatter+AllGather twice
  plus the AllGather Megatron-LM repeats in backward to rebuild the sequence-parallel input of the
  QKV and MLP-in layers for their weight gradients (``op`` ``*_regather``). The vocabulary-parallel
  embedding AllReduces (SP: ReduceScatters) its output on stage 0; the output layer on the last
  stage AllReduces its input gradient (SP: AllGather forward, ReduceScatter + re-AllGather
  backward); with SP the embedding output is ReduceScattered only without learned absolute
  positions, else AllReduced then scattered (``LanguageModelEmbedding``:
  ``reduce_scatter_embeddings``), and its gradient AllGathered in both cases; the vocabulary-parallel cross entropy makes 3 AllReduces of ``b*s`` fp32 values
  (max, predicted logit, sum of exponentials). With ``recompute: full`` the layers' forward TP
  (and EP) collectives are replayed before their backward (``recompute=True``, phase forward).
  With SP, the gradients of TP-replicated parameters (norms, row-parallel biases) are AllReduced
  over TP once per iteration.
* **PP** (Narayanan et al. 2021, Sec. 2.2): per microbatch per stage boundary a SendRecv of ``A``
  forward (activations) and backward (their gradients); ``A/tp`` per TP rank with SP. With the
  interleaved schedule (``virtual_pipeline_model_parallel_size v``, Sec. 2.2.2;
  :mod:`tokenpcap.plan.pipeline`) a stage holds ``v`` model chunks and every chunk boundary is
  one: stage ``p-1`` chunk ``c`` sends to stage 0 chunk ``c+1``, so an interior stage sends
  ``v*m`` activations and ``v*m`` gradients; each chunk is its own DDP gradient buffer
  (:mod:`tokenpcap.plan.grads`).
* **EP** (Megatron-core ``MoEAlltoAllTokenDispatcher``): per MoE layer per microbatch, an
  AllGather of the per-expert token counts (int64 ``[experts]`` per rank) over the TP x EP group;
  dispatch and combine AllToAll of the routed tokens forward and their gradients backward, each
  of ``(b*s/tp_sp)*top_k*h*B`` (the tokens a rank routes, ``tp_sp = tp`` with SP else 1; the
  dispatch and the combine's gradient in ``moe.dispatch_dtype``, e.g. FP8 with its scales:
  :func:`tokenpcap.plan.moe.moe_ep_families`), and
  the dispatch AllToAll of their probs (``(b*s/tp_sp)*top_k`` values), over the EP group. With
  tp > 1 the dispatcher replaces the MLP's TP collectives: an AllGather of the dispatched tokens
  and probs over TP and a ReduceScatter before the combine, gradients the other way
  (:func:`tokenpcap.plan.moe.moe_tp_families`). In a model of dense and MoE layers
  (``moe.layer_freq``, e.g. DeepSeek-V3's first 3 dense layers) the dense layers keep the MLP's
  TP collectives and make no EP call.
* **DP** (Megatron-core DDP; Rajbhandari et al. 2020 for ZeRO): the gradient buckets of each
  stage's dense and expert buffers, reduced over the DP and the expert-data-parallel group
  (``dp*cp/ep`` ranks): :mod:`tokenpcap.plan.grads`. The small collectives of every iteration (batch
  broadcasts, gradient statistics, the loss): :mod:`tokenpcap.plan.small`.
* **emb** (Megatron-LM ``_allreduce_embedding_grads``): with tied embeddings and ``pp > 1`` the word
  embedding gradient shard is AllReduced between the first and the last stage.
* **CP** (``context_parallel_size`` ``cp > 1``; :mod:`tokenpcap.plan.context`): the ring-attention
  K,V (and dK,dV) sends of every layer and microbatch. A CP rank holds ``s/cp`` tokens of each
  sample, so every per-token buffer above (TP, PP, EP, cross entropy) has ``s/cp`` in place of
  ``s`` (Megatron-core ``schedules.py``: ``tensor_shape[0] // cp_group.size()``; Transformer
  Engine and ``get_batch_on_this_cp_rank``); the batch broadcasts within TP still carry whole
  samples (``get_batch_on_this_tp_rank`` runs before the CP split). DP gradients, the distributed
  optimizer's gathers and the loss go over the data-parallel group *with* context parallelism
  (``dp * cp`` ranks: DDP's ``dp_cp_group``, ``training.py``'s ``dp_cp`` group), and the default
  bucket size counts its ranks (``resolve_ddp_bucket_size``: ``max(40,000,000, 1,000,000 *
  dp_cp)``). The two ``s/(2*cp)`` chunks a CP rank holds are not one span of positions, so
  CP-split buffers carry no token range (``token_start = -1``).

Tokens: sample ``k`` of the corpus holds tokens ``[k*s, (k+1)*s)``; iteration ``it``, microbatch
``j``, DP replica ``d`` hold samples ``it*G + j*b*dp + d*b`` ... ``+ b - 1`` (Megatron-LM
``MegatronPretrainingSampler``: each step takes ``b*dp`` samples, replica ``d`` its ``d``-th
slice). A call's ``token_start``/``token_end`` span those ``b`` samples; ``seq_start``/``seq_end``
say which positions of each sample its bytes carry (``s/tp`` of them per TP rank in a SP PP
message). Activations are laid out ``[s, b, h]`` (Megatron), so for ``b > 1`` the bytes
interleave the samples. Token index ``i`` means corpus token ``i % tokens`` (epochs repeat).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from tokenpcap.errors import InputError
from tokenpcap.collectives.layout import RankLayout
from tokenpcap.collectives.transfers import smallest_message_elements
from tokenpcap.records import phase_label
from tokenpcap.model import activation_bytes, scenario_shards
from tokenpcap.config.profiles import DTYPE_BYTES, Scenario
from tokenpcap.plan.family import Family, Inst
from tokenpcap.plan.grads import dp_bucket_size, dp_families
from tokenpcap.plan.moe import (TOKEN_DISPATCHER_FAMILIES, moe_insts, moe_router_families,
                                moe_tp_families)
from tokenpcap.plan import moe_nodelimited  # noqa: F401  (registers the deepep dispatcher)
from tokenpcap.plan.small import small_families
from tokenpcap.plan.context import cp_families
from tokenpcap.plan.pipeline import chunk_layers, next_chunk, stage_layers

__all__ = ["CollectiveCall", "Family", "build_families", "dp_bucket_size", "scaled_bytes",
           "scale_families"]


@dataclass(frozen=True, slots=True)
class CollectiveCall:
    """One collective call on one group instance (see the module docstring for what exists).

    ``call_id`` is ``iteration * calls_per_iteration + index`` where ``index`` is the position in
    the plan's fixed enumeration order (stable for a scenario, not time order: the schedule orders
    by phase, microbatch, stage and layer). ``group`` is in ring order; for SendRecv it is
    ``(src, dst)``. ``message_bytes`` is ``S`` in the nccl-tests convention (AllReduce buffer,
    total buffer of ReduceScatter / AllGather / AllToAll). ``layer`` is the global transformer layer
    (``-1``: embedding, output layer, cross entropy, buckets without layer gradients); for a DP
    bucket the lowest layer whose gradients it holds (it is ready once that layer's backward is
    done). ``stage`` is the pipeline stage whose ranks make the call (SendRecv: the sender's; the
    tied-embedding AllReduce, whose group spans the first and last stage: 0). ``bucket`` numbers DP buckets (per stage, in the order they become ready). ``op`` names
    the operation (``attn_out``, ``mlp_in_regather``, ``activation``, ``grad_bucket`` ...).
    """

    call_id: int
    iteration: int
    dim: str
    phase: str
    collective: str
    group: tuple[int, ...]
    message_bytes: int
    elem_bytes: int
    layer: int = -1
    microbatch: int = -1
    stage: int = -1
    src: int = -1
    dst: int = -1
    token_start: int = -1
    token_end: int = -1
    seq_start: int = -1
    seq_end: int = -1
    bucket: int = -1
    recompute: bool = False
    op: str = ""

    @property
    def label(self) -> str:
        """:func:`tokenpcap.records.phase_label` of this call, e.g. ``"tp/forward/AllReduce"``."""
        return phase_label(self.dim, self.phase, self.collective)

    def token_spans(self, seq_length: int) -> list[tuple[int, int]]:
        """Corpus token ranges ``[start, end)`` whose data the call carries (``[]`` if none)."""
        if self.token_start < 0:
            return []
        return [(k + self.seq_start, k + self.seq_end)
                for k in range(self.token_start, self.token_end, seq_length)]


def build_families(s: Scenario, layout: RankLayout) -> list[Family]:
    """All call families of one iteration, in the plan's fixed enumeration order."""
    p, t, m = s.parallelism, s.training, s.model
    tp, pp, dp = p.tp, p.pp, p.dp
    sp = p.sequence_parallel and tp > 1
    e_act, e_grad = DTYPE_BYTES[t.precision], DTYPE_BYTES[t.grad_reduce_dtype]
    b, seq, h = t.micro_batch_size, m.seq_length, m.hidden_size
    cp = p.cp
    seq_cp = seq // cp                     # tokens of a sample on one CP rank
    act = activation_bytes(b, seq_cp, h, e_act)
    tok_mb, tok_sp = ("mb", "sp") if cp == 1 else ("", "")
    n_mb = t.global_batch_size // (b * dp)
    full = t.recompute == "full"
    fams: list[Family] = []
    shards = scenario_shards(s)

    def fam(dim: str, phase: str, coll: str, size: int, e: int, st: int, groups, insts,
            tokens: str = "") -> None:
        if size > 0 and groups and insts:
            fams.append(Family(dim, phase, coll, size, e, st, list(groups), list(insts), tokens))

    for st, sh in enumerate(shards):
        layers = stage_layers(s, st)
        moe_layers = [L for L in layers if m.moe_layers[L]]
        first, last = st == 0, st == pp - 1
        tpg = layout.stage_groups("tp", st)
        epg = [g for g in layout.groups("ep") if layout.coords(g[0]).pp == st] if p.ep > 1 else []
        rows = (b * seq_cp // (tp if sp else 1)) * m.moe.top_k if m.moe else 0
        a2a = rows * h * e_act            # the routed rows at the training precision
        if tp > 1:
            fwd_ops = [("AllGather", "attn_in"), ("ReduceScatter", "attn_out"),
                       ("AllGather", "mlp_in"), ("ReduceScatter", "mlp_out")] if sp else \
                [("AllReduce", "attn_out"), ("AllReduce", "mlp_out")]
            bwd_ops = [("ReduceScatter", "mlp_in_grad"), ("AllGather", "mlp_out_grad"),
                       ("AllGather", "mlp_in_regather"), ("ReduceScatter", "attn_in_grad"),
                       ("AllGather", "attn_out_grad"), ("AllGather", "attn_in_regather")] if sp \
                else [("AllReduce", "mlp_in_grad"), ("AllReduce", "attn_in_grad")]
            # on MoE layers the token dispatcher replaces the MLP's TP ops
            fwd_of = {False: fwd_ops, True: [x for x in fwd_ops if not x[1].startswith("mlp_")]}
            bwd_of = {False: bwd_ops, True: [x for x in bwd_ops if not x[1].startswith("mlp_")]}
            kind = {L: m.moe_layers[L] for L in layers}
            # LanguageModelEmbedding: with SP the vocabulary-parallel output is ReduceScattered,
            # unless the model adds learned positions: then AllReduced and scattered (no comm.)
            emb_coll = "ReduceScatter" if sp and m.position_embedding != "learned" else "AllReduce"
            for coll in ("AllReduce", "AllGather", "ReduceScatter"):
                fwd, bwd = [], []
                for j in range(n_mb):
                    if first and coll == emb_coll:
                        fwd.append(Inst(-1, j, op="embedding"))
                    fwd += [Inst(L, j, op=o) for L in layers for c, o in fwd_of[kind[L]]
                            if c == coll]
                    if last and sp and coll == "AllGather":
                        fwd.append(Inst(-1, j, op="lm_head_in"))
                    if full:
                        fwd += [Inst(L, j, recompute=True, op=o) for L in reversed(layers)
                                for c, o in fwd_of[kind[L]] if c == coll]
                    if last:
                        if coll == ("ReduceScatter" if sp else "AllReduce"):
                            bwd.append(Inst(-1, j, op="lm_head_in_grad"))
                        if sp and coll == "AllGather":
                            bwd.append(Inst(-1, j, op="lm_head_in_regather"))
                    bwd += [Inst(L, j, op=o) for L in reversed(layers)
                            for c, o in bwd_of[kind[L]] if c == coll]
                    if first and sp and coll == "AllGather":
                        bwd.append(Inst(-1, j, op="embedding_grad"))
                fam("tp", "forward", coll, act, e_act, st, tpg, fwd, tok_mb)
                fam("tp", "backward", coll, act, e_act, st, tpg, bwd, tok_mb)
            if last:
                fam("tp", "forward", "AllReduce", b * seq_cp * 4, 4, st, tpg,
                    [Inst(-1, j, op=o) for j in range(n_mb)
                     for o in ("xent_max", "xent_logit", "xent_sum_exp")], tok_mb)
            if sp:
                fam("tp", "backward", "AllReduce", sh.tp_replicated * e_grad, e_grad, st, tpg,
                    [Inst(-1, -1, op="tp_replicated_grads")])
            if moe_layers:
                moe_tp_families(fam, st, tpg, moe_layers, n_mb, full, tp * a2a, tp * a2a // h,
                                e_act)
        moe_router_families(fam, s, layout, st, moe_layers, n_mb, full)
        if moe_layers and m.moe is not None and (p.ep > 1 or tp > 1):
            # MoEAlltoAllTokenDispatcher.preprocess: the tokens each rank routes to each expert
            # (int64 [experts]) are AllGathered over the TP x EP group
            tpep = [g for g in layout.groups("tpep") if layout.coords(g[0]).pp == st]
            fam("ep", "forward", "AllGather", tp * p.ep * m.moe.experts * 8, 8, st, tpep,
                moe_insts(moe_layers, n_mb, full, ("moe_counts",), ()))
        if epg and moe_layers and m.moe is not None:
            # token_dispatch / token_combine: the routed tokens and their probs, as the
            # model's token dispatcher sends them
            TOKEN_DISPATCHER_FAMILIES[m.moe.token_dispatcher](
                fam, m.moe, st, epg, layout, moe_layers, n_mb, full, rows, h, e_act, t.precision)
        cp_families(s, layout, st, layers, n_mb, fam,
                    lambda L, j, rec, op: Inst(L, j, recompute=rec, op=op))
        pp_size = act // tp if sp else act
        for c, chunk in enumerate(chunk_layers(s, st)):   # interleaving: a SendRecv per chunk
            nxt = next_chunk(pp, p.vpp, st, c)
            if nxt is None:
                continue
            fwd_g = [(a, b_) for g, g1 in zip(tpg, layout.stage_groups("tp", nxt[0]))
                     for a, b_ in zip(g, g1)]
            fam("pp", "forward", "SendRecv", pp_size, e_act, st, fwd_g,
                [Inst(chunk[-1], j, op="activation") for j in range(n_mb)],
                tok_sp if sp else tok_mb)
            nfirst = chunk_layers(s, nxt[0])[nxt[1]][0]
            fam("pp", "backward", "SendRecv", pp_size, e_act, nxt[0],
                [(d_, s_) for s_, d_ in fwd_g],
                [Inst(nfirst, j, op="activation_grad") for j in range(n_mb)],
                tok_sp if sp else tok_mb)
    for st, sh in enumerate(shards):
        dp_families(s, layout, st, sh, n_mb, fam)
    small_families(s, layout, n_mb, fam)
    if layout.pp > 1 and m.tied_embeddings:
        emb = shards[0].embedding * e_grad
        groups = layout.groups("emb")
        fam("emb", "backward", "AllReduce", emb, e_grad, 0, groups,
            [Inst(-1, -1, op="tied_embedding_grads")])
    return fams


def scaled_bytes(message_bytes: int, elem_bytes: int, scale: int, min_elements: int = 1) -> int:
    """``message_bytes / scale`` in whole elements, at least ``min_elements`` elements, or the
    whole message when it has fewer (``--scale`` keeps every call and every piece of it, only
    smaller, and never makes a call larger). ``scale == 1`` returns ``message_bytes``.

    ``min_elements`` is the call's floor,
    :func:`tokenpcap.collectives.transfers.smallest_message_elements` (one element per piece of
    the call's algorithm, group and channels); a message of fewer elements than that already
    leaves some piece empty unscaled and keeps its whole elements. A message shorter than one
    element becomes one element.

    The one place a message size is scaled: :func:`tokenpcap.plan.build.build_plan` applies it to every
    call family once (``Plan.scale``, :func:`scale_families`); the schedule and the generator
    take the plan's sizes as they are, so bytes are never scaled twice.

    Raises:
        InputError: ``scale < 1`` or ``min_elements < 1``.
    """
    if scale < 1:
        raise InputError(f"scale: got {scale}, expected an integer >= 1")
    if min_elements < 1:
        raise InputError(f"min_elements: got {min_elements}, expected an integer >= 1")
    if scale == 1 or message_bytes == 0:
        return message_bytes
    elems = message_bytes // elem_bytes
    return max(1, min(elems, min_elements), elems // scale) * elem_bytes


def scale_families(fams: list[Family], scale: int, algorithm: str, layout: RankLayout,
                   channels: int) -> list[Family]:
    """``fams`` with every ``message_bytes`` divided by ``scale`` (:func:`scaled_bytes`), each
    family no smaller than the largest floor among its groups
    (:func:`tokenpcap.collectives.transfers.smallest_message_elements` with the scenario's
    ``algorithm`` and ``channels``); the same list when ``scale == 1``.

    Raises:
        InputError: ``scale < 1``; as :func:`~tokenpcap.collectives.transfers.smallest_message_elements`.
    """
    if scale < 1:
        raise InputError(f"scale: got {scale}, expected an integer >= 1")
    if scale == 1:
        return fams
    out = []
    for f in fams:
        floor = max(smallest_message_elements(f.collective, g, algorithm, layout, channels)
                    for g in f.groups)
        out.append(replace(f, message_bytes=scaled_bytes(f.message_bytes, f.elem_bytes, scale,
                                                         floor)))
    return out
