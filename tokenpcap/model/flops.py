"""Stage 2 (part): model FLOPs per iteration as Megatron-LM reports them, for MFU.

:func:`megatron_flops` is Megatron-LM's ``num_floating_point_operations(args, batch_size)``
(``megatron/training/training.py``, ``transformer_flops``; NVIDIA/Megatron-LM d98e8a6,
2026-08-22) for the model kinds a :class:`~tokenpcap.config.types.ModelProfile` describes, with
``b·s`` tokens per sample and the BSHD layout (every sample ``seq_length`` tokens)::

    F = B·s·( 6·h·( f·F_dense·L_dense + f·(F_moe·k + F_shared)·L_moe )   MLP GEMMs
            + L·A_lin                                                    attention GEMMs
            + 6·mtp·(3h + 2h²)                                           MTP norms and projection
            + 6·h·V_pad·(mtp + 1) )                                      logits
      + B·s²·L·A_core                                                    causal attention

``f`` = 3 (SwiGLU: gate, up, down) or 2; ``L`` counts the MTP layers as layers of the last
layer's kind; ``V_pad`` is the vocabulary padded for TP (:func:`tokenpcap.model.padded_vocab_size`).
MHA/GQA with ``q = n·d``, ``kv = g·d``: ``A_lin = 6·(h·(q + 2·kv) + q·h)``, ``A_core = 6·q``
(``/2`` for the causal mask, ``×2`` for ``QK^T`` and ``PV``). MLA: ``A_lin = 6·(q_term +
r_kv·(h + n·(d_qk + d_v) + 1) + h·d_rope + n·d_v·h)`` with ``q_term = r_q·(h + n·(d_qk +
d_rope) + 1)`` (``h·n·(d_qk + d_rope)`` without a query low rank), ``A_core = 3·n·(d_qk + d_rope
+ d_v)``. The factor 6 is forward, weight-gradient and data-gradient GEMMs (3) times 2 FLOPs per
multiply-add. Recomputation, the router's GEMM, norms and elementwise kernels are not counted:
MFU by this formula is the model's useful work, whatever the schedule executes.
"""
from __future__ import annotations

from tokenpcap.config.profiles import ModelProfile
from tokenpcap.model.counts import padded_vocab_size

__all__ = ["megatron_flops", "model_flops_utilization"]


def _attention_terms(m: ModelProfile) -> tuple[int, int]:
    """``(A_lin, A_core)`` of one attention layer per token (module docstring)."""
    h, n = m.hidden_size, m.attention_heads
    a = m.mla
    if a is None:
        d = h // n
        q, kv = n * d, m.kv_heads * d
        return 6 * (h * (q + 2 * kv) + q * h), 6 * q
    qk = a.qk_head_dim + a.qk_pos_emb_head_dim
    q_term = (a.q_lora_rank * (h + n * qk + 1)) if a.q_lora_rank else h * n * qk
    lin = 6 * (q_term + a.kv_lora_rank * (h + n * (a.qk_head_dim + a.v_head_dim) + 1)
               + h * a.qk_pos_emb_head_dim + n * a.v_head_dim * h)
    return lin, 3 * n * (qk + a.v_head_dim)


def megatron_flops(m: ModelProfile, global_batch_size: int, tp: int) -> int:
    """Model FLOPs of one iteration of ``global_batch_size`` samples of model ``m`` trained with
    tensor parallelism ``tp`` (it sets the padded vocabulary), by Megatron-LM's formula (module
    docstring). Exact integer; Megatron computes the same products in floating point.

    Raises:
        InputError: ``tp`` does not pad the vocabulary (:func:`padded_vocab_size`).
    """
    h, s, b = m.hidden_size, m.seq_length, global_batch_size
    kinds = m.moe_layers
    mtp = m.mtp_num_layers
    moe_layers = sum(kinds) + (mtp if kinds and kinds[-1] else 0)
    dense_layers = len(kinds) - sum(kinds) + (mtp if not (kinds and kinds[-1]) else 0)
    layers = len(kinds) + mtp
    f = 3 if m.mlp == "swiglu" else 2
    if m.moe is None:
        moe_mlp = 0
    else:
        moe_mlp = f * (m.moe.ffn_hidden_size * m.moe.top_k + m.moe.shared_expert_intermediate_size)
    lin, core = _attention_terms(m)
    per_token = (6 * h * (f * m.ffn_hidden_size * dense_layers + moe_mlp * moe_layers)
                 + layers * lin
                 + 6 * mtp * (3 * h + 2 * h * h)
                 + 6 * h * padded_vocab_size(m, tp) * (mtp + 1))
    return b * s * per_token + b * s * s * layers * core


def model_flops_utilization(flops: int, iteration_ns: int, gpus: int, peak_tflops: float) -> float:
    """``flops / (iteration_ns · 10⁻⁹ · gpus · peak_tflops · 10¹²)``: the share of the cluster's
    peak the iteration's model FLOPs (:func:`megatron_flops`) fill, as Megatron-LM's
    ``throughput per GPU / peak`` reports it.

    Raises:
        ValueError: ``iteration_ns``, ``gpus`` or ``peak_tflops`` not > 0.
    """
    if iteration_ns <= 0 or gpus <= 0 or not peak_tflops > 0:
        raise ValueError(f"model_flops_utilization: got iteration_ns={iteration_ns}, gpus={gpus}, "
                         f"peak_tflops={peak_tflops}, expected each > 0")
    return flops / (iteration_ns * gpus * peak_tflops * 1000)
