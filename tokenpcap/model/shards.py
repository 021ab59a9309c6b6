"""Stage 2 (part): the parameter tensors each rank holds under Megatron-LM's sharding.

Sharding follows Megatron-LM (Shoeybi et al. 2019, Sec. 3): QKV and MLP-in are column-parallel
(weights and biases split by ``tp``), attention projection and MLP-out are row-parallel (weights
split, bias replicated), norms are replicated, the word embedding (and an untied output layer)
is vocabulary-parallel over the *padded* vocabulary (:func:`~tokenpcap.model.counts.
padded_vocab_size`), ``padded / tp`` rows per rank, position embeddings are replicated. With
``kv_heads < tp`` the key/value heads are replicated (one head's dims per rank). Multi-latent
attention (Megatron-core ``get_gpt_layer_with_transformer_engine_spec`` with
``multi_latent_attention``): the query and key/value down projections are plain linears
replicated on every TP rank (``backend.linear()``), the up projections column-parallel (heads
split), the output projection row-parallel, the latent norms replicated. MoE layers: the rank
holds ``experts/ep`` routed experts, each split by ``tp``; the router and the shared experts
(a dense, TP-split MLP, ``SharedExpertMLP``) are dense parameters.

Pipeline stage 0 holds the embeddings, the last stage the final norm and the output layer (with
tied embeddings and ``pp > 1`` the last stage holds a copy of the word embedding that the
embedding group keeps in sync); the transformer layers are split over the stages as Megatron
does (:mod:`tokenpcap.config.pipeline`; ``counts`` below). Dense and MoE layers differ
(:attr:`~tokenpcap.config.types.ModelProfile.moe_layers`), so :class:`ShardParameters` keeps
each layer's elements.

:func:`rank_tensors` is the one place the shapes are written; :func:`shard_parameters` sums it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from tokenpcap.config.pipeline import PipelineSplitError, stage_first_layers, stage_layer_counts
from tokenpcap.config.profiles import ModelProfile, Scenario
from tokenpcap.errors import InputError
from tokenpcap.model.counts import padded_vocab_size

__all__ = ["Tensor", "rank_tensors", "ShardParameters", "shard_parameters", "scenario_shards"]


class Tensor(NamedTuple):
    """One parameter tensor a rank holds: Megatron-core module path, global layer (``-1``
    outside the transformer layers), element count on this rank, whether it is an expert
    parameter (reduced over the expert-data-parallel group, in its own DDP buffer), and whether
    it is replicated across TP with a gradient sequence parallelism AllReduces over TP (norms,
    row-parallel biases of dense MLPs and attention, MLA's down projections, the router)."""

    name: str
    layer: int
    elements: int
    expert: bool = False
    sp_grad: bool = False


def _stage_range(m: ModelProfile, pp: int, stage: int,
                 counts: tuple[int, ...] | None) -> tuple[int, int]:
    """``(first layer, layers)`` of ``stage``. Raises: InputError (bad stage or split)."""
    if not 0 <= stage < pp:
        raise InputError(f"stage {stage} of pp {pp} with {m.layers} layers")
    if counts is None:
        try:
            counts = stage_layer_counts(m.layers, pp)
        except PipelineSplitError as err:
            raise InputError(f"stage {stage} of pp {pp} with {m.layers} layers: {err}") from None
    if len(counts) != pp or sum(counts) != m.layers or min(counts) < 1:
        raise InputError(f"counts: got {counts}, expected {pp} stages of >= 1 layer summing to "
                         f"{m.layers}")
    return stage_first_layers(counts)[stage], counts[stage]


def rank_tensors(m: ModelProfile, tp: int, pp: int, stage: int, ep: int = 1,
                 counts: tuple[int, ...] | None = None) -> list[Tensor]:
    """The parameter tensors one rank of pipeline ``stage`` holds, in the registration order of
    Megatron-core's Transformer Engine layer spec (``gpt_layer_specs.
    get_gpt_layer_with_transformer_engine_spec``, Megatron-LM's default ``--transformer-impl
    transformer_engine``), which DDP walks in reverse to fill its gradient buckets
    (``param_and_grad_buffer.py``):

    * ``GPTModel``: ``embedding.word_embeddings``, ``embedding.position_embeddings``;
    * per ``TransformerLayer``: ``self_attention.linear_proj`` (``Attention.__init__`` builds it
      before ``SelfAttention`` builds ``linear_qkv``), then ``linear_qkv`` as a TE
      ``LayerNormColumnParallelLinear`` that holds the input norm: ``layer_norm_weight``
      (``layer_norm_bias``) registered before ``weight`` and ``bias``
      (``module/layernorm_linear.py``); MLA: the input norm stays a separate ``input_layernorm``
      first, then ``linear_proj``, ``linear_q_down_proj``, ``linear_q_up_proj``,
      ``linear_kv_down_proj``, ``linear_kv_up_proj`` (``MLASelfAttention.__init__``), the
      ``q_layernorm``/``kv_layernorm`` fused into the up projections (their norm weight first,
      ``mla_qk_norm_config.QKNormConfigResolver``);
    * a dense MLP fuses ``pre_mlp_layernorm`` into ``mlp.linear_fc1`` likewise (norm, then
      ``linear_fc1``, ``linear_fc2``); an MoE layer keeps a separate ``pre_mlp_layernorm``
      (``TENorm``), then ``mlp.router``, ``mlp.experts``, ``mlp.shared_experts``
      (``MoELayer.__init__``);
    * ``decoder.final_layernorm``, ``output_layer``.

    Weights before biases. The tensors a TP all-reduce of sequence parallelism must sum
    (``sp_grad``): every norm, the row-parallel biases of dense MLPs and attention, MLA's
    down projections, and the router's weight (``moe/router.py`` ``reset_parameters`` sets
    ``sequence_parallel`` on it). ``counts``: layers per stage (default: the even split).

    Raises:
        InputError: ``stage`` outside ``[0, pp)``, or a split that does not fit the model
            (callers check feasibility first: :func:`tokenpcap.config.profiles.check_feasible`).
    """
    first, n_layers = _stage_range(m, pp, stage, counts)
    h, hd = m.hidden_size, m.hidden_size // m.attention_heads
    kv = (m.kv_heads // tp) * hd if m.kv_heads >= tp else hd
    q = h // tp
    ln = ("weight", "bias") if m.norm == "layernorm" else ("weight",)
    moe_layers = m.moe_layers
    out: list[Tensor] = []

    def add(name: str, layer: int, n: int, expert: bool = False, sp_grad: bool = False) -> None:
        if n:
            out.append(Tensor(name, layer, n, expert, sp_grad))

    def norm(name: str, layer: int, size: int) -> None:
        # a separate norm module: ``<name>.weight``; fused in a TE linear: ``<name>_weight``
        sep = "_" if name.endswith(".layer_norm") else "."
        for w in ln:
            add(f"{name}{sep}{w}", layer, size, sp_grad=True)

    def mlp(prefix: str, layer: int, ffn: int, expert: bool, fused_norm: bool = False) -> None:
        f = ffn // tp
        n_in = 2 if m.mlp == "swiglu" else 1
        if fused_norm:                      # the layer's pre_mlp_layernorm, fused in TE
            norm(f"{prefix}.linear_fc1.layer_norm", layer, h)
        add(f"{prefix}.linear_fc1.weight", layer, n_in * f * h, expert)
        add(f"{prefix}.linear_fc1.bias", layer, n_in * f if m.bias else 0, expert)
        add(f"{prefix}.linear_fc2.weight", layer, h * f, expert)
        add(f"{prefix}.linear_fc2.bias", layer, h if m.bias else 0, expert, sp_grad=not expert)

    def attention(pre: str, L: int) -> None:
        a = m.mla
        if a is None:
            add(f"{pre}.linear_proj.weight", L, h * q)
            add(f"{pre}.linear_proj.bias", L, h if m.bias else 0, sp_grad=True)
            norm(f"{pre}.linear_qkv.layer_norm", L, h)       # the layer's input norm
            add(f"{pre}.linear_qkv.weight", L, (q + 2 * kv) * h)
            add(f"{pre}.linear_qkv.bias", L, (q + 2 * kv) if m.bias else 0)
            return
        n = m.attention_heads // tp
        d_q = a.qk_head_dim + a.qk_pos_emb_head_dim
        norm(f"{pre[:-len('.self_attention')]}.input_layernorm", L, h)
        add(f"{pre}.linear_proj.weight", L, n * a.v_head_dim * h)
        if a.q_lora_rank is None:
            add(f"{pre}.linear_q_proj.weight", L, n * d_q * h)
        else:
            add(f"{pre}.linear_q_down_proj.weight", L, a.q_lora_rank * h, sp_grad=True)
            norm(f"{pre}.linear_q_up_proj.layer_norm", L, a.q_lora_rank)     # q_layernorm
            add(f"{pre}.linear_q_up_proj.weight", L, n * d_q * a.q_lora_rank)
        add(f"{pre}.linear_kv_down_proj.weight", L, (a.kv_lora_rank + a.qk_pos_emb_head_dim) * h,
            sp_grad=True)
        norm(f"{pre}.linear_kv_up_proj.layer_norm", L, a.kv_lora_rank)       # kv_layernorm
        add(f"{pre}.linear_kv_up_proj.weight", L,
            n * (a.qk_head_dim + a.v_head_dim) * a.kv_lora_rank)

    vocab_rank = padded_vocab_size(m, tp) // tp * h
    if stage == 0:
        add("embedding.word_embeddings.weight", -1, vocab_rank)
        add("embedding.position_embeddings.weight", -1,
            m.seq_length * h if m.position_embedding == "learned" else 0)
    for L in range(first, first + n_layers):
        pre = f"decoder.layers.{L}"
        attention(f"{pre}.self_attention", L)
        if not moe_layers[L] or m.moe is None:
            mlp(f"{pre}.mlp", L, m.ffn_hidden_size, False, fused_norm=True)
        else:
            norm(f"{pre}.pre_mlp_layernorm", L, h)
            add(f"{pre}.mlp.router.weight", L, m.moe.experts * h, sp_grad=True)
            for x in range(m.moe.experts // ep):
                mlp(f"{pre}.mlp.experts.local_experts.{x}", L, m.moe.ffn_hidden_size, True)
            if m.moe.shared_expert_intermediate_size:
                mlp(f"{pre}.mlp.shared_experts", L, m.moe.shared_expert_intermediate_size, False)
    if stage == pp - 1:
        norm("decoder.final_layernorm", -1, h)
        if not m.tied_embeddings or pp > 1:
            add("output_layer.weight", -1, vocab_rank)
    return out


@dataclass(frozen=True)
class ShardParameters:
    """Elements one rank holds at pipeline ``stage`` with tensor-parallel degree ``tp``.

    ``dense``: parameters whose gradients are reduced over the whole DP group (attention, dense
    MLP, shared experts, norms, router, embeddings, output layer); ``expert``: routed-expert
    parameters, reduced over the expert-data-parallel group; ``embedding``: the word-embedding
    shard this stage holds when it takes part in the tied-embedding AllReduce (first and last
    stage with ``pp > 1``), else 0; ``tp_replicated``: parameters replicated across TP whose
    gradients sequence parallelism must AllReduce over the TP group (:class:`Tensor`
    ``sp_grad``); ``layer_dense``/``layer_expert``: dense and expert elements of each layer on
    this stage (index ``L - first_layer``); ``moe``: whether each is an MoE layer.
    ``first_layer``/``last_layer``: global indices of the layers on this stage (inclusive).
    """

    stage: int
    first_layer: int
    last_layer: int
    layer_dense: tuple[int, ...]
    layer_expert: tuple[int, ...]
    moe: tuple[bool, ...]
    pre: int          # stage 0: word (+ position) embedding shard; else 0
    post: int         # last stage: final norm + output layer (or tied copy) shard; else 0
    embedding: int
    tp_replicated: int

    @property
    def layers(self) -> int:
        return self.last_layer - self.first_layer + 1

    @property
    def dense(self) -> int:
        return self.pre + sum(self.layer_dense) + self.post

    @property
    def expert(self) -> int:
        return sum(self.layer_expert)

    @property
    def total(self) -> int:
        return self.dense + self.expert

    def dense_of(self, layer: int) -> int:
        """Dense elements of global ``layer`` on this rank."""
        return self.layer_dense[layer - self.first_layer]

    def expert_of(self, layer: int) -> int:
        """Expert elements of global ``layer`` on this rank."""
        return self.layer_expert[layer - self.first_layer]


def shard_parameters(m: ModelProfile, tp: int, pp: int, stage: int, ep: int = 1,
                     counts: tuple[int, ...] | None = None) -> ShardParameters:
    """Elements held by one rank of pipeline ``stage`` (0-based): the sums of
    :func:`rank_tensors` (module docstring for the shapes). ``counts``: layers per stage
    (default: the even split; :func:`scenario_shards` passes the scenario's).

    Raises:
        InputError: as :func:`rank_tensors`.
    """
    tensors = rank_tensors(m, tp, pp, stage, ep, counts)
    first, n_layers = _stage_range(m, pp, stage, counts)
    dense, expert = [0] * n_layers, [0] * n_layers
    pre = post = 0
    for t in tensors:
        if t.layer >= 0:
            (expert if t.expert else dense)[t.layer - first] += t.elements
        elif t.name.startswith("embedding."):
            pre += t.elements
        else:
            post += t.elements
    vocab_rank = padded_vocab_size(m, tp) // tp * m.hidden_size
    tied = m.tied_embeddings and pp > 1 and stage in (0, pp - 1)
    return ShardParameters(
        stage=stage, first_layer=first, last_layer=first + n_layers - 1,
        layer_dense=tuple(dense), layer_expert=tuple(expert),
        moe=m.moe_layers[first:first + n_layers], pre=pre, post=post,
        embedding=vocab_rank if tied else 0,
        tp_replicated=sum(t.elements for t in tensors if t.sp_grad))


def scenario_shards(s: Scenario) -> list[ShardParameters]:
    """:func:`shard_parameters` of every stage of scenario ``s`` (its parallelism and pipeline
    split, :meth:`~tokenpcap.config.types.Parallelism.stage_layer_counts`).

    Raises:
        InputError: a split that does not fit (a loaded scenario has been checked).
    """
    p = s.parallelism
    try:
        counts = p.stage_layer_counts(s.model.layers)
    except PipelineSplitError as err:
        raise InputError(str(err)) from None
    return [shard_parameters(s.model, p.tp, p.pp, st, p.ep, counts) for st in range(p.pp)]
