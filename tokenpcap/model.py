"""Stage 2: parameter counts, tensor shards and message sizes of a decoder-only transformer.

Counts are exact element counts of the weight tensors (not approximations) for two families:

* GPT-style (Megatron-LM GPT, GPT-2/3): learned position embeddings, LayerNorm (weight and bias),
  GeLU MLP of ``ffn_hidden_size``, biases on every linear layer, tied input/output embeddings.
  Per layer this gives Narayanan et al. 2021 ("Efficient Large-Scale Language Model Training on
  GPU Clusters Using Megatron-LM", SC21), Eq. 2 term by term: ``12 h^2`` weights (QKV ``3h^2``,
  projection ``h^2``, MLP ``8h^2``) plus ``13 h`` biases and LayerNorm parameters (QKV ``3h``,
  projection ``h``, MLP ``4h + h``, two LayerNorms ``4h``), and ``(V + s) h`` for the word and
  position embeddings. Eq. 2 leaves out the final LayerNorm (``2h``), which the model does have;
  :attr:`ParameterCount.total` counts it (GPT-2 small: 124,439,808, as Hugging Face reports).
* Modern (Llama, Mixtral): grouped-query attention with ``kv_heads`` key/value heads of
  ``h / attention_heads`` dims, SwiGLU MLP (gate, up, down: ``3 h f``), RMSNorm (weight only), no
  biases, untied output layer, rotary positions (no parameters), optional mixture of experts
  (``experts`` SwiGLU MLPs and a router ``h x experts`` per layer; ``top_k`` active per token).

Sharding follows Megatron-LM (Shoeybi et al. 2019, Sec. 3): QKV and MLP-in are column-parallel
(weights and biases split by ``tp``), attention projection and MLP-out are row-parallel (weights
split, bias replicated), norms are replicated, the word embedding (and an untied output layer)
is vocabulary-parallel over the *padded* vocabulary (:func:`padded_vocab_size`: Megatron-LM's
``vocab_size_with_padding`` rounds ``V`` up to a multiple of ``make_vocab_size_divisible_by *
tp``, ``megatron/core/tokenizers/utils/build_tokenizer.py``), ``padded / tp`` rows per rank,
position embeddings are replicated. :class:`ParameterCount` counts the published, unpadded
model; :func:`parameter_count` with ``tp`` the model as trained (padded rows included).
Pipeline stage 0 holds the embeddings, the last stage the final norm and the output layer (with
tied embeddings and ``pp > 1`` the last stage holds a copy of the word embedding that the
embedding group keeps in sync).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from tokenpcap.errors import InputError
from tokenpcap.config.profiles import ModelProfile

__all__ = [
    "LayerParameters",
    "ParameterCount",
    "ShardParameters",
    "narayanan_eq2",
    "Tensor",
    "rank_tensors",
    "padded_vocab_size",
    "layer_parameters",
    "parameter_count",
    "shard_parameters",
    "activation_bytes",
    "layer_forward_flops",
    "logits_forward_flops",
]


def padded_vocab_size(m: ModelProfile, tp: int) -> int:
    """The vocabulary Megatron-LM trains with at tensor-parallel degree ``tp``: ``V`` rounded up
    to a multiple of ``make_vocab_size_divisible_by * tp`` (``vocab_size_with_padding``,
    ``megatron/core/tokenizers/utils/build_tokenizer.py``). GPT-3's 50,257 at tp 8 -> 51,200.

    Raises:
        InputError: ``tp < 1``.
    """
    if tp < 1:
        raise InputError(f"tp: got {tp}, expected an integer >= 1")
    multiple = m.make_vocab_size_divisible_by * tp
    return -(-m.vocab_size // multiple) * multiple


def narayanan_eq2(layers: int, hidden_size: int, vocab_size: int, seq_length: int) -> int:
    """Narayanan et al. 2021, Eq. 2: ``P = 12 l h^2 (1 + 13/(12 h) + (V + s)/(12 l h))``.

    Evaluated exactly as ``12 l h^2 + 13 l h + (V + s) h`` (integers).
    """
    l, h = layers, hidden_size
    return 12 * l * h * h + 13 * l * h + (vocab_size + seq_length) * h


@dataclass(frozen=True)
class LayerParameters:
    """Element counts of one transformer layer (the whole, unsharded layer).

    ``attention``: QKV and output projection (weights + biases); ``mlp``: the dense MLP or all
    experts of an MoE layer; ``router``: MoE gate ``h x experts``; ``norms``: the two norms;
    ``mlp_active``: the MLP parameters one token uses (``top_k`` experts, or the dense MLP).
    """

    attention: int
    mlp: int
    router: int
    norms: int
    mlp_active: int

    @property
    def total(self) -> int:
        return self.attention + self.mlp + self.router + self.norms

    @property
    def active(self) -> int:
        return self.attention + self.mlp_active + self.router + self.norms


@dataclass(frozen=True)
class ParameterCount:
    """Whole-model element counts. ``total`` counts every tensor once (tied embeddings once)."""

    word_embedding: int
    position_embedding: int
    per_layer: LayerParameters
    layers: int
    final_norm: int
    output_layer: int          # 0 with tied embeddings

    @property
    def total(self) -> int:
        return (self.word_embedding + self.position_embedding + self.layers * self.per_layer.total
                + self.final_norm + self.output_layer)

    @property
    def active(self) -> int:
        """Parameters one token touches (MoE: ``top_k`` experts per layer; else ``total``)."""
        return (self.word_embedding + self.position_embedding + self.layers * self.per_layer.active
                + self.final_norm + self.output_layer)


def _head_dim(m: ModelProfile) -> int:
    return m.hidden_size // m.attention_heads


def _mlp_params(m: ModelProfile, ffn: int) -> int:
    h = m.hidden_size
    if m.mlp == "swiglu":
        return 3 * h * ffn + ((2 * ffn + h) if m.bias else 0)
    return 2 * h * ffn + ((ffn + h) if m.bias else 0)


def _norm_params(m: ModelProfile) -> int:
    return (2 if m.norm == "layernorm" else 1) * m.hidden_size


def layer_parameters(m: ModelProfile) -> LayerParameters:
    """Element counts of one transformer layer of ``m`` (see the module docstring)."""
    h, kv_dim = m.hidden_size, m.kv_heads * _head_dim(m)
    attention = 2 * h * h + 2 * h * kv_dim + ((2 * h + 2 * kv_dim) if m.bias else 0)
    if m.moe is None:
        mlp = mlp_active = _mlp_params(m, m.ffn_hidden_size)
        router = 0
    else:
        one = _mlp_params(m, m.moe.ffn_hidden_size)
        mlp, mlp_active, router = m.moe.experts * one, m.moe.top_k * one, h * m.moe.experts
    return LayerParameters(attention=attention, mlp=mlp, router=router,
                           norms=2 * _norm_params(m), mlp_active=mlp_active)


def parameter_count(m: ModelProfile, tp: int | None = None) -> ParameterCount:
    """Parameter count of the whole model (module docstring for the formulas and sources):
    the published count over ``vocab_size`` rows, or with ``tp`` the model Megatron-LM trains,
    over :func:`padded_vocab_size` rows."""
    h = m.hidden_size
    v = m.vocab_size if tp is None else padded_vocab_size(m, tp)
    return ParameterCount(
        word_embedding=v * h,
        position_embedding=m.seq_length * h if m.position_embedding == "learned" else 0,
        per_layer=layer_parameters(m),
        layers=m.layers,
        final_norm=_norm_params(m),
        output_layer=0 if m.tied_embeddings else v * h,
    )


@dataclass(frozen=True)
class ShardParameters:
    """Elements one rank holds at pipeline ``stage`` with tensor-parallel degree ``tp``.

    ``dense``: parameters whose gradients are reduced over the whole DP group (attention, dense
    MLP, norms, router, embeddings, output layer); ``expert``: MoE expert parameters, reduced over
    the expert-data-parallel group; ``embedding``: the word-embedding shard this stage holds when
    it takes part in the tied-embedding AllReduce (first and last stage with ``pp > 1``), else 0;
    ``tp_replicated``: parameters replicated across TP whose gradients sequence parallelism must
    AllReduce over the TP group (norm weights/biases, row-parallel biases); ``per_layer``: dense
    elements of one layer on this rank; ``per_layer_expert``: expert elements of one layer.
    ``first_layer``/``last_layer``: global indices of the layers on this stage (inclusive).
    """

    stage: int
    first_layer: int
    last_layer: int
    per_layer: int
    per_layer_expert: int
    pre: int          # stage 0: word (+ position) embedding shard; else 0
    post: int         # last stage: final norm + output layer (or tied copy) shard; else 0
    embedding: int
    tp_replicated: int

    @property
    def layers(self) -> int:
        return self.last_layer - self.first_layer + 1

    @property
    def dense(self) -> int:
        return self.pre + self.layers * self.per_layer + self.post

    @property
    def expert(self) -> int:
        return self.layers * self.per_layer_expert

    @property
    def total(self) -> int:
        return self.dense + self.expert


def shard_parameters(m: ModelProfile, tp: int, pp: int, stage: int, ep: int = 1) -> ShardParameters:
    """Elements held by one rank of pipeline ``stage`` (0-based) under Megatron-LM sharding.

    Per layer on one TP rank: QKV ``(h*h + 2*h*kv_dim)/tp`` weights (``kv_dim/tp`` becomes one
    head's dims when ``kv_heads < tp``: heads are replicated), QKV biases split likewise, projection
    ``h*h/tp`` plus a replicated bias ``h``; MLP-in ``h*f/tp`` (``2*h*f/tp`` for SwiGLU) and its
    bias split, MLP-out ``f*h/tp`` plus a replicated bias ``h``; norms replicated. MoE: the rank
    holds ``experts/ep`` experts, each split by ``tp``; the router is replicated.

    Raises:
        InputError: ``stage`` outside ``[0, pp)`` or ``layers`` not divisible by ``pp`` (callers
            check feasibility first: :func:`tokenpcap.config.profiles.check_feasible`).
    """
    if not 0 <= stage < pp or m.layers % pp:
        raise InputError(f"stage {stage} of pp {pp} with {m.layers} layers")
    h, hd = m.hidden_size, _head_dim(m)
    kv_dim_rank = (m.kv_heads // tp) * hd if m.kv_heads >= tp else hd
    q_dim_rank = h // tp
    norms = 2 * _norm_params(m)
    attn = h * q_dim_rank + 2 * h * kv_dim_rank + q_dim_rank * h
    row_bias = 0
    if m.bias:
        attn += q_dim_rank + 2 * kv_dim_rank + h
        row_bias += h

    def mlp_rank(ffn: int) -> int:
        f_rank = ffn // tp
        n_in = 2 if m.mlp == "swiglu" else 1
        p = n_in * h * f_rank + f_rank * h
        return p + ((n_in * f_rank + h) if m.bias else 0)

    if m.moe is None:
        dense_mlp, expert_mlp, router = mlp_rank(m.ffn_hidden_size), 0, 0
    else:
        dense_mlp = 0
        expert_mlp = (m.moe.experts // ep) * mlp_rank(m.moe.ffn_hidden_size)
        router = h * m.moe.experts
    row_bias += h if (m.bias and m.moe is None) else 0
    per_layer = attn + dense_mlp + router + norms
    per_stage_layers = m.layers // pp
    first = stage * per_stage_layers
    vocab_rank = padded_vocab_size(m, tp) // tp * h
    pre = post = embedding = 0
    if stage == 0:
        pre = vocab_rank + (m.seq_length * h if m.position_embedding == "learned" else 0)
    if stage == pp - 1:
        post = _norm_params(m)
        if not m.tied_embeddings or pp > 1:
            post += vocab_rank          # output layer, or the tied copy on the last stage
    if m.tied_embeddings and pp > 1 and stage in (0, pp - 1):
        embedding = vocab_rank
    tp_replicated = per_stage_layers * (norms + row_bias) + (
        _norm_params(m) if stage == pp - 1 else 0)
    return ShardParameters(
        stage=stage, first_layer=first, last_layer=first + per_stage_layers - 1,
        per_layer=per_layer, per_layer_expert=expert_mlp, pre=pre, post=post,
        embedding=embedding, tp_replicated=tp_replicated,
    )


class Tensor(NamedTuple):
    """One parameter tensor a rank holds: Megatron-core module path, global layer (``-1``
    outside the transformer layers), element count on this rank, and whether it is an expert
    parameter (reduced over the expert-data-parallel group, in its own DDP buffer)."""

    name: str
    layer: int
    elements: int
    expert: bool = False


def rank_tensors(m: ModelProfile, tp: int, pp: int, stage: int, ep: int = 1) -> list[Tensor]:
    """The parameter tensors one rank of pipeline ``stage`` holds, in Megatron-core's
    registration order (``GPTModel``: ``embedding.word_embeddings``, ``embedding.
    position_embeddings``; per ``TransformerLayer``: ``input_layernorm``, ``self_attention.
    linear_proj``, ``self_attention.linear_qkv``, ``pre_mlp_layernorm``, ``mlp.linear_fc1``,
    ``mlp.linear_fc2`` or ``mlp.router`` and ``mlp.experts``; ``decoder.final_layernorm``,
    ``output_layer``); weights before biases. DDP walks them in reverse to fill its gradient
    buckets (``param_and_grad_buffer.py``). Element counts are those of :func:`shard_parameters`
    (their sums are its ``dense`` and ``expert``; tested).

    Raises:
        InputError: as :func:`shard_parameters`.
    """
    sh = shard_parameters(m, tp, pp, stage, ep)
    h, hd = m.hidden_size, _head_dim(m)
    kv = (m.kv_heads // tp) * hd if m.kv_heads >= tp else hd
    q = h // tp
    ln = ("weight", "bias") if m.norm == "layernorm" else ("weight",)
    out: list[Tensor] = []

    def add(name: str, layer: int, n: int, expert: bool = False) -> None:
        if n:
            out.append(Tensor(name, layer, n, expert))

    def mlp(prefix: str, layer: int, ffn: int, expert: bool) -> None:
        f = ffn // tp
        n_in = 2 if m.mlp == "swiglu" else 1
        add(f"{prefix}.linear_fc1.weight", layer, n_in * f * h, expert)
        add(f"{prefix}.linear_fc1.bias", layer, n_in * f if m.bias else 0, expert)
        add(f"{prefix}.linear_fc2.weight", layer, h * f, expert)
        add(f"{prefix}.linear_fc2.bias", layer, h if m.bias else 0, expert)

    vocab_rank = padded_vocab_size(m, tp) // tp * h
    if stage == 0:
        add("embedding.word_embeddings.weight", -1, vocab_rank)
        add("embedding.position_embeddings.weight", -1,
            m.seq_length * h if m.position_embedding == "learned" else 0)
    for L in range(sh.first_layer, sh.last_layer + 1):
        pre = f"decoder.layers.{L}"
        for w in ln:
            add(f"{pre}.input_layernorm.{w}", L, h)
        add(f"{pre}.self_attention.linear_proj.weight", L, h * q)
        add(f"{pre}.self_attention.linear_proj.bias", L, h if m.bias else 0)
        add(f"{pre}.self_attention.linear_qkv.weight", L, (q + 2 * kv) * h)
        add(f"{pre}.self_attention.linear_qkv.bias", L, (q + 2 * kv) if m.bias else 0)
        for w in ln:
            add(f"{pre}.pre_mlp_layernorm.{w}", L, h)
        if m.moe is None:
            mlp(f"{pre}.mlp", L, m.ffn_hidden_size, False)
        else:
            add(f"{pre}.mlp.router.weight", L, m.moe.experts * h)
            for x in range(m.moe.experts // ep):
                mlp(f"{pre}.mlp.experts.local_experts.{x}", L, m.moe.ffn_hidden_size, True)
    if stage == pp - 1:
        for w in ln:
            add(f"decoder.final_layernorm.{w}", -1, h)
        if not m.tied_embeddings or pp > 1:
            add("output_layer.weight", -1, vocab_rank)
    return out


def activation_bytes(micro_batch: int, seq_length: int, hidden_size: int, elem_bytes: int) -> int:
    """Bytes of one activation tensor ``[s, b, h]``: ``b * s * h * B`` (Narayanan et al. 2021, Sec.
    3.2: the point-to-point message between pipeline stages and the TP AllReduce buffer)."""
    return micro_batch * seq_length * hidden_size * elem_bytes


def layer_forward_flops(m: ModelProfile, micro_batch: int) -> int:
    """Forward FLOPs of one whole transformer layer for one microbatch (all TP ranks together).

    ``2 * b * s * (matmul weights a token uses)`` plus attention scores and values ``4 * b * s^2 *
    h``. For a GPT layer this is ``24 b s h^2 + 4 b s^2 h = 24 b s h^2 (1 + s/(6h))``, the per-layer
    forward term of Narayanan et al. 2021, Eq. 3. Backward is twice the forward (Eq. 3).
    """
    lp = layer_parameters(m)
    h, s, b = m.hidden_size, m.seq_length, micro_batch
    kv_dim = m.kv_heads * _head_dim(m)
    matmul = 2 * h * h + 2 * h * kv_dim
    if m.moe is None:
        ffn_weights = (3 if m.mlp == "swiglu" else 2) * h * m.ffn_hidden_size
    else:
        ffn_weights = m.moe.top_k * (3 if m.mlp == "swiglu" else 2) * h * m.moe.ffn_hidden_size
        matmul += lp.router
    matmul += ffn_weights
    return 2 * b * s * matmul + 4 * b * s * s * h


def logits_forward_flops(m: ModelProfile, micro_batch: int) -> int:
    """Forward FLOPs of the output layer: ``2 b s h V`` (Narayanan et al. 2021, Eq. 3)."""
    return 2 * micro_batch * m.seq_length * m.hidden_size * m.vocab_size
