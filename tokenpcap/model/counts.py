"""Stage 2 (part): parameter counts, activation sizes and FLOPs of a decoder-only transformer.

Counts are exact element counts of the weight tensors (not approximations) for three families:

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

* DeepSeek-V3 (DeepSeek-AI 2024, arXiv 2412.19437; Hugging Face ``deepseek-ai/DeepSeek-V3``
  ``config.json``): multi-latent attention (:func:`attention_parameters`), the first
  ``first_k_dense_replace = 3`` layers dense (SwiGLU of 18,432), the other 58 MoE layers of 256
  routed experts (``top_k`` 8) and 1 shared expert, each a SwiGLU of 2,048, RMSNorm, untied
  embeddings of 129,280 rows, h = 7,168, 128 heads. Term by term: attention per layer
  ``7168*1536 + 1536 + 1536*128*192 + 7168*576 + 512 + 512*128*256 + 128*128*7168 =
  187,107,328``; norms ``2*7168``; dense MLP ``3*7168*18432 = 396,361,728`` (dense layer
  583,483,392); one expert ``3*7168*2048 = 44,040,192``, 257 of them 11,318,329,344, router
  ``256*7168 = 1,835,008`` (MoE layer 11,507,286,016); embedding and output layer
  ``129280*7168 = 926,679,040`` each, final norm 7,168. Total ``3*583,483,392 +
  58*11,507,286,016 + 2*926,679,040 + 7,168 = 671,026,404,352`` (published: 671 B); active per
  token (8 routed + 1 shared expert per MoE layer: 585,318,400) ``37,552,282,624`` (published:
  37 B). The router's ``e_score_correction_bias`` (256 per MoE layer) is a buffer in
  Megatron-core (``moe_router_enable_expert_bias``), not a parameter, and is not counted. The
  one MTP module (``mtp_num_layers: 1``, off by default) would add 11,610,067,968 (its layer,
  ``eh_proj`` 2h x h and three norms); the model card's "685B = 671B + 14B of MTP weights"
  counts the module with its own copy of the embedding and output layer (13,463,426,048; in all
  684,489,830,400).

Multi-layer kinds: :attr:`ModelProfile.moe_layers` says which layers are MoE
(``moe.layer_freq``); :class:`ParameterCount` holds one :class:`LayerParameters` per layer.
How ranks shard the tensors is :mod:`tokenpcap.model.shards`.
"""
from __future__ import annotations

from dataclasses import dataclass

from tokenpcap.errors import InputError
from tokenpcap.config.profiles import ModelProfile

__all__ = [
    "LayerParameters",
    "ParameterCount",
    "narayanan_eq2",
    "padded_vocab_size",
    "attention_parameters",
    "layer_parameters",
    "parameter_count",
    "activation_bytes",
    "attention_forward_flops",
    "attention_core_flops",
    "attention_projection_flops",
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

    ``attention``: the attention block (MHA/GQA: QKV and output projection with biases; MLA:
    the down and up projections, their latent norms and the output projection); ``mlp``: the
    dense MLP, or all routed and shared experts of an MoE layer; ``router``: MoE gate ``h x
    experts``; ``norms``: the two norms; ``mlp_active``: the MLP parameters one token uses
    (``top_k`` routed experts and the shared experts, or the dense MLP).
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
    """Whole-model element counts. ``total`` counts every tensor once (tied embeddings once).

    ``per_layer``: one :class:`LayerParameters` per transformer layer (dense and MoE layers
    differ); ``mtp``: the multi-token prediction modules, not in ``total`` or ``active`` (the
    published DeepSeek-V3 671 B / 37 B leave them out).
    """

    word_embedding: int
    position_embedding: int
    per_layer: tuple[LayerParameters, ...]
    final_norm: int
    output_layer: int          # 0 with tied embeddings
    mtp: int = 0

    @property
    def layers(self) -> int:
        return len(self.per_layer)

    @property
    def total(self) -> int:
        return (self.word_embedding + self.position_embedding
                + sum(lp.total for lp in self.per_layer) + self.final_norm + self.output_layer)

    @property
    def active(self) -> int:
        """Parameters one token touches (MoE layers: ``top_k`` routed and the shared experts;
        the whole embedding and output matrices, as published counts take them)."""
        return (self.word_embedding + self.position_embedding
                + sum(lp.active for lp in self.per_layer) + self.final_norm + self.output_layer)


def _head_dim(m: ModelProfile) -> int:
    return m.hidden_size // m.attention_heads


def _mlp_params(m: ModelProfile, ffn: int) -> int:
    h = m.hidden_size
    if m.mlp == "swiglu":
        return 3 * h * ffn + ((2 * ffn + h) if m.bias else 0)
    return 2 * h * ffn + ((ffn + h) if m.bias else 0)


def _norm_params(m: ModelProfile, size: int | None = None) -> int:
    """One norm over ``size`` (default ``h``) elements: weight (RMSNorm), weight and bias
    (LayerNorm)."""
    return (2 if m.norm == "layernorm" else 1) * (m.hidden_size if size is None else size)


def attention_parameters(m: ModelProfile) -> int:
    """Elements of one layer's attention block.

    MHA/GQA: ``2 h^2 + 2 h kv_dim`` weights (``kv_dim = kv_heads * h / attention_heads``) plus
    ``2 h + 2 kv_dim`` biases when the model has them. MLA (DeepSeek-V2 paper, arXiv 2405.04434,
    Sec. 2.1.2, Eqs. 9-14; Megatron-core ``MLASelfAttention``), with ``n`` heads, ``d_q =
    qk_head_dim + qk_pos_emb_head_dim``: query down ``h x q_lora_rank`` and its norm, query up
    ``q_lora_rank x n d_q`` (without ``q_lora_rank``: one ``h x n d_q``); key/value down
    ``h x (kv_lora_rank + qk_pos_emb_head_dim)`` and the latent's norm, key/value up
    ``kv_lora_rank x n (qk_head_dim + v_head_dim)``; output ``n v_head_dim x h``; no biases.
    """
    h = m.hidden_size
    a = m.mla
    if a is None:
        kv_dim = m.kv_heads * _head_dim(m)
        return 2 * h * h + 2 * h * kv_dim + ((2 * h + 2 * kv_dim) if m.bias else 0)
    n = m.attention_heads
    d_q = a.qk_head_dim + a.qk_pos_emb_head_dim
    q = (h * a.q_lora_rank + _norm_params(m, a.q_lora_rank) + a.q_lora_rank * n * d_q
         if a.q_lora_rank is not None else h * n * d_q)
    kv = (h * (a.kv_lora_rank + a.qk_pos_emb_head_dim) + _norm_params(m, a.kv_lora_rank)
          + a.kv_lora_rank * n * (a.qk_head_dim + a.v_head_dim))
    return q + kv + n * a.v_head_dim * h


def layer_parameters(m: ModelProfile, moe: bool | None = None) -> LayerParameters:
    """Element counts of one transformer layer of ``m``: an MoE layer if ``moe`` (default:
    whether the model has experts), else a dense one (module docstring)."""
    h = m.hidden_size
    if moe is None:
        moe = m.moe is not None
    if not moe or m.moe is None:
        mlp = mlp_active = _mlp_params(m, m.ffn_hidden_size)
        router = 0
    else:
        one = _mlp_params(m, m.moe.ffn_hidden_size)
        shared = (_mlp_params(m, m.moe.shared_expert_intermediate_size)
                  if m.moe.shared_expert_intermediate_size else 0)
        mlp, mlp_active = m.moe.experts * one + shared, m.moe.top_k * one + shared
        router = h * m.moe.experts
    return LayerParameters(attention=attention_parameters(m), mlp=mlp, router=router,
                           norms=2 * _norm_params(m), mlp_active=mlp_active)


def parameter_count(m: ModelProfile, tp: int | None = None) -> ParameterCount:
    """Parameter count of the whole model (module docstring for the formulas and sources):
    the published count over ``vocab_size`` rows, or with ``tp`` the model Megatron-LM trains,
    over :func:`padded_vocab_size` rows.

    Each multi-token prediction module (Megatron-core ``MultiTokenPredictionLayer``; DeepSeek-V3
    report Sec. 2.2) holds two norms of the inputs (``enorm``, ``hnorm``), the projection
    ``2h x h`` (``eh_proj``), one transformer layer of the last layer's kind and its final norm;
    it shares the embedding and the output layer with the main model.
    """
    h = m.hidden_size
    v = m.vocab_size if tp is None else padded_vocab_size(m, tp)
    kinds = m.moe_layers
    one = {k: layer_parameters(m, k) for k in set(kinds)}
    mtp = m.mtp_num_layers * (3 * _norm_params(m) + 2 * h * h + one[kinds[-1]].total)
    return ParameterCount(
        word_embedding=v * h,
        position_embedding=m.seq_length * h if m.position_embedding == "learned" else 0,
        per_layer=tuple(one[k] for k in kinds),
        final_norm=_norm_params(m),
        output_layer=0 if m.tied_embeddings else v * h,
        mtp=mtp,
    )


def activation_bytes(micro_batch: int, seq_length: int, hidden_size: int, elem_bytes: int) -> int:
    """Bytes of one activation tensor ``[s, b, h]``: ``b * s * h * B`` (Narayanan et al. 2021, Sec.
    3.2: the point-to-point message between pipeline stages and the TP AllReduce buffer). MLA
    changes the attention's inner shapes, not this: its input and output are ``[s, b, h]``."""
    return micro_batch * seq_length * hidden_size * elem_bytes


def attention_core_flops(m: ModelProfile, micro_batch: int) -> int:
    """Scores and values of one layer's causal attention for one microbatch, forward: ``b s^2
    (n d_qk) + b s^2 (n d_v)``, ``2 b s^2 h`` for MHA/GQA with ``n d = h``.

    The full products ``Q K^T`` and ``P V`` are ``2 b s^2 (n d)`` each; under the causal mask only
    the lower triangle is computed (flash-attention kernels skip the masked blocks), half of it.
    This is Megatron-LM's count (``megatron/training/training.py``
    ``num_floating_point_operations``: ``query_projection_size / 2  # causal mask``; MLA
    ``(n (d_qk + d_rope) / 2 + n d_v / 2)``), and what selective recomputation repeats
    (Korthikanti et al. 2022, Sec. 5)."""
    b, s, a = micro_batch, m.seq_length, m.mla
    if a is None:
        return 2 * b * s * s * m.attention_heads * _head_dim(m)
    return b * s * s * m.attention_heads * (a.qk_head_dim + a.qk_pos_emb_head_dim + a.v_head_dim)


def attention_projection_flops(m: ModelProfile, micro_batch: int) -> int:
    """Forward FLOPs of one layer's attention matrix multiplies for one microbatch (all TP ranks
    together): ``2 b s`` times the attention weights (:func:`attention_parameters`, norms and
    biases aside): QKV and output projections ``2 b s (2h^2 + 2h kv_dim)`` for MHA/GQA, the
    low-rank projections for MLA."""
    b, s, h = micro_batch, m.seq_length, m.hidden_size
    a = m.mla
    if a is None:
        kv_dim = m.kv_heads * _head_dim(m)
        weights = 2 * h * h + 2 * h * kv_dim
    else:
        weights = (attention_parameters(m) - _norm_params(m, a.kv_lora_rank)
                   - (_norm_params(m, a.q_lora_rank) if a.q_lora_rank else 0))
    return 2 * b * s * weights


def attention_forward_flops(m: ModelProfile, micro_batch: int) -> int:
    """Forward FLOPs of one layer's attention block for one microbatch (all TP ranks together):
    its matrix multiplies (:func:`attention_projection_flops`) plus the causal scores and values
    (:func:`attention_core_flops`)."""
    return attention_projection_flops(m, micro_batch) + attention_core_flops(m, micro_batch)


def layer_forward_flops(m: ModelProfile, micro_batch: int, moe: bool | None = None) -> int:
    """Forward FLOPs of one whole transformer layer for one microbatch (all TP ranks together);
    ``moe`` as in :func:`layer_parameters`.

    ``2 * b * s * (matmul weights a token uses)`` plus attention scores and values
    (:func:`attention_forward_flops`, causal). For a GPT layer this is ``24 b s h^2 + 2 b s^2 h =
    24 b s h^2 (1 + s/(12h))``: the per-layer forward term of Narayanan et al. 2021, Eq. 3
    (``24 b s h^2 (1 + s/(6h))``, which counts the masked half of the scores too) with the causal
    half Megatron-LM counts today. Backward is twice the forward (Eq. 3).
    """
    lp = layer_parameters(m, moe)
    h, s, b = m.hidden_size, m.seq_length, micro_batch
    per_mlp = 3 if m.mlp == "swiglu" else 2
    if lp.router == 0:
        ffn_weights = per_mlp * h * m.ffn_hidden_size
    else:
        assert m.moe is not None
        ffn_weights = (m.moe.top_k * per_mlp * h * m.moe.ffn_hidden_size + lp.router
                       + per_mlp * h * m.moe.shared_expert_intermediate_size)
    return attention_forward_flops(m, b) + 2 * b * s * ffn_weights


def logits_forward_flops(m: ModelProfile, micro_batch: int) -> int:
    """Forward FLOPs of the output layer: ``2 b s h V`` (Narayanan et al. 2021, Eq. 3)."""
    return 2 * micro_batch * m.seq_length * m.hidden_size * m.vocab_size
