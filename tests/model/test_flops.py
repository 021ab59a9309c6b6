"""Megatron-LM's model FLOPs (``num_floating_point_operations``) against two independent counts:
the closed form of Narayanan et al. 2021 for a GPT model, and the weight-by-weight forward count
of :mod:`tokenpcap.model.counts` for every bundled model."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenpcap.config.profiles import load_model, load_scenario
from tokenpcap.model import (layer_forward_flops, layer_parameters, logits_forward_flops,
                             padded_vocab_size)
from tokenpcap.model.flops import megatron_flops, model_flops_utilization

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = [p for p in sorted((ROOT / "profiles" / "scenarios").glob("*.yaml"))
             if "\nmodel:" in p.read_text()]                   # workload scenarios have none


def test_gpt3_is_the_closed_form_without_recomputation_and_with_causal_attention():
    """Narayanan et al. 2021 Eq. 3 without recomputation (forward + backward: 72 instead of 96)
    and with causal attention (Megatron: half the scores): ``72 B s l h^2 (1 + s/(12h) +
    V/(12 l h))``, V the vocabulary padded to a multiple of 128 x tp (50,257 -> 51,200 at tp 8)."""
    m = load_model(ROOT / "profiles" / "models" / "gpt3-175b.yaml")
    B, s, l, h = 1536, 2048, 96, 12288
    assert padded_vocab_size(m, 8) == 51_200
    want = 72 * B * s * l * h * h + 6 * B * s * s * l * h + 6 * B * s * h * 51_200
    assert megatron_flops(m, B, 8) == want


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_bundled_model_is_three_times_its_weight_by_weight_forward(path):
    """Megatron's formula = 3 x (forward FLOPs counted from the weight tensors, per layer, causal
    attention, plus the output layer), less what Megatron leaves out (the router's GEMM ``2 b s h
    E`` per MoE layer), plus what it adds (MLA's two latent norms, one multiply-add per latent
    element) and with the output layer over the padded vocabulary."""
    s = load_scenario(path)
    m = s.model
    b, B, tp = s.training.micro_batch_size, s.training.global_batch_size, s.parallelism.tp
    seq, h = m.seq_length, m.hidden_size
    fwd = sum(layer_forward_flops(m, b, k) for k in m.moe_layers) + logits_forward_flops(m, b)
    router = sum(2 * b * seq * layer_parameters(m, k).router for k in m.moe_layers)
    pad = 2 * b * seq * h * (padded_vocab_size(m, tp) - m.vocab_size)
    mla_norms = 0 if m.mla is None else 2 * b * seq * m.layers * (
        (m.mla.q_lora_rank or 0) + m.mla.kv_lora_rank)
    assert m.mtp_num_layers == 0
    assert megatron_flops(m, B, tp) == (B // b) * 3 * (fwd - router + pad + mla_norms)


def test_mfu_is_flops_over_time_and_the_worlds_peak():
    # 989 TFLOP/s x 8 GPUs x 1 s, half used
    assert model_flops_utilization(989 * 8 * 10**12 // 2, 10**9, 8, 989) == 0.5
    with pytest.raises(ValueError, match="iteration_ns=0"):
        model_flops_utilization(1, 0, 8, 989)
