"""Parameter counts and message sizes against published numbers (sources cited per test)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tokenpcap.model import (
    activation_bytes,
    layer_forward_flops,
    logits_forward_flops,
    narayanan_eq2,
    parameter_count,
)
from tokenpcap.config.profiles import ModelProfile, load_model

MODELS = Path(__file__).resolve().parents[2] / "profiles" / "models"


def gpt(layers: int, hidden: int, heads: int, vocab: int, seq: int) -> ModelProfile:
    return ModelProfile(name="gpt", source="test", layers=layers, hidden_size=hidden,
                        attention_heads=heads, kv_heads=heads, ffn_hidden_size=4 * hidden,
                        vocab_size=vocab, seq_length=seq)


def test_gpt3_175b_is_narayanan_eq2_term_by_term():
    # Narayanan et al. 2021 Eq. 2 with Brown et al. 2020 Table 2.1: 174,604,234,752.
    assert narayanan_eq2(96, 12288, 50257, 2048) == 174_604_234_752
    m = load_model(MODELS / "gpt3-175b.yaml")
    pc = parameter_count(m)
    h, l = 12288, 96
    assert sum(lp.total for lp in pc.per_layer) == 12 * l * h * h + 13 * l * h
    assert pc.word_embedding + pc.position_embedding == (50257 + 2048) * h
    # Eq. 2 leaves out the final LayerNorm (weight + bias), which the model has.
    assert pc.final_norm == 2 * h
    assert pc.total - pc.final_norm == 174_604_234_752


@pytest.mark.parametrize("hidden,layers,expected", [
    # Narayanan et al. 2021, Table 1 (V = 51200, s = 2048), by Eq. 2.
    (2304, 24, 1_652_226_048),
    (12288, 80, 145_622_237_184),
    (25600, 128, 1_008_038_707_200),
])
def test_narayanan_table1(hidden: int, layers: int, expected: int):
    assert narayanan_eq2(layers, hidden, 51200, 2048) == expected
    pc = parameter_count(gpt(layers, hidden, hidden // 128, 51200, 2048))
    assert pc.total - pc.final_norm == expected


def test_gpt2_small_matches_hugging_face_count():
    # Hugging Face `GPT2Model.from_pretrained("gpt2").num_parameters()` = 124,439,808
    # (the count includes the final LayerNorm ln_f, which Eq. 2 leaves out).
    pc = parameter_count(load_model(MODELS / "gpt2-small.yaml"))
    assert pc.total == 124_439_808


@pytest.mark.parametrize("name,total", [
    # Hugging Face config.json of each model; Touvron et al. 2023,
    # Llama Team 2024 Table 3.
    ("llama2-7b", 6_738_415_616),
    ("llama3-8b", 8_030_261_248),
    ("llama2-70b", 68_976_648_192),
    ("llama3.1-405b", 405_853_388_800),
])
def test_modern_decoders(name: str, total: int):
    pc = parameter_count(load_model(MODELS / f"{name}.yaml"))
    assert pc.total == total
    assert pc.active == total


def test_mixtral_total_and_active():
    # Jiang et al. 2024 (Mixtral of Experts): 46.7B total, 12.9B active; here to the parameter.
    pc = parameter_count(load_model(MODELS / "mixtral-8x7b.yaml"))
    assert pc.total == 46_702_792_704
    assert pc.active == 12_879_925_248


def test_activation_messages():
    # b*s*h*bytes: TP AllReduce of a 13B GPT (h 5120, s 2048, b 1, fp16) = 20,971,520 bytes;
    # PP message of GPT-3 (h 12288, s 2048, b 1, bf16) = 50,331,648 bytes.
    assert activation_bytes(1, 2048, 5120, 2) == 20_971_520
    assert activation_bytes(1, 2048, 12288, 2) == 50_331_648


def test_gpt_layer_flops_is_eq3_forward_term_with_causal_attention():
    # Narayanan et al. 2021 Eq. 3: forward of one layer 24 b s h^2 (1 + s / (6 h)), of which the
    # scores and values 4 b s^2 h; causal attention computes half of them (Megatron-LM
    # num_floating_point_operations: "/ 2  # causal mask"): 24 b s h^2 (1 + s / (12 h)).
    # Output layer 2 b s h V.
    m = load_model(MODELS / "gpt3-175b.yaml")
    b, s, h = 1, 2048, 12288
    assert layer_forward_flops(m, b) == 24 * b * s * h * h + 2 * b * s * s * h
    assert logits_forward_flops(m, b) == 2 * b * s * h * 50257


def test_deepseek_v3_is_671b_total_37b_active():
    """DeepSeek-V3 technical report (arXiv 2412.19437), abstract: 671 B total parameters, 37 B
    activated per token; here exactly, term by term from the Hugging Face config.json (the
    breakdown is in tokenpcap/model/counts.py)."""
    m = load_model(MODELS / "deepseek-v3.yaml")
    pc = parameter_count(m)
    h = 7168
    attention = (h * 1536 + 1536 + 1536 * 128 * (128 + 64) + h * (512 + 64) + 512
                 + 512 * 128 * (128 + 128) + 128 * 128 * h)
    assert attention == 187_107_328
    expert = 3 * h * 2048
    dense = attention + 2 * h + 3 * h * 18432
    moe = attention + 2 * h + 257 * expert + 256 * h
    assert (dense, moe) == (583_483_392, 11_507_286_016)
    assert [lp.total for lp in pc.per_layer] == [dense] * 3 + [moe] * 58
    assert pc.total == 3 * dense + 58 * moe + 2 * 129_280 * h + h == 671_026_404_352
    assert pc.active == 37_552_282_624
    assert round(pc.total / 1e9) == 671 and int(pc.active / 1e9) == 37
    assert pc.mtp == 0 and pc.word_embedding == pc.output_layer == 926_679_040


def test_deepseek_v3_mtp_module_is_counted_apart():
    """One MTP module (report Sec. 2.2, Megatron-core MultiTokenPredictionLayer): enorm, hnorm,
    eh_proj 2h x h, one MoE layer and its final norm; embedding and output layer shared."""
    m = dataclasses.replace(load_model(MODELS / "deepseek-v3.yaml"), mtp_num_layers=1)
    pc = parameter_count(m)
    h = 7168
    assert pc.mtp == 3 * h + 2 * h * h + 11_507_286_016 == 11_610_067_968
    assert pc.total == 671_026_404_352
    # the model card's 685 B "= 671 B + 14 B of MTP weights" stores the module with its own
    # embedding and output copies: 13.46 B, in all 684.49 B
    assert pc.mtp + pc.word_embedding + pc.output_layer == 13_463_426_048
    assert pc.total + 13_463_426_048 == 684_489_830_400


def test_mla_layer_flops_count_the_latent_projections_and_the_192_wide_scores():
    """2 b s x (weights a token uses) + b s^2 n (d_qk + d_v): MLA's causal scores (half of the
    full products, Megatron-LM's ``n (d_qk + d_rope) / 2 + n d_v / 2``) run over 128 heads of
    192 query/key dims and 128 value dims, not over h."""
    m = load_model(MODELS / "deepseek-v3.yaml")
    s, h = 4096, 7168
    attn = 187_107_328 - 1536 - 512
    assert layer_forward_flops(m, 1, moe=False) == \
        2 * s * (attn + 3 * h * 18432) + s * s * 128 * (192 + 128)
    assert layer_forward_flops(m, 1) == \
        2 * s * (attn + 9 * 3 * h * 2048 + 256 * h) + s * s * 128 * (192 + 128)
