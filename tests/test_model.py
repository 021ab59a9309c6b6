"""Parameter counts and message sizes against published numbers (sources cited per test)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenpcap.errors import InputError
from tokenpcap.model import (
    padded_vocab_size,
    activation_bytes,
    layer_forward_flops,
    logits_forward_flops,
    narayanan_eq2,
    parameter_count,
    shard_parameters,
)
from tokenpcap.config.profiles import ModelProfile, load_model

MODELS = Path(__file__).resolve().parent.parent / "profiles" / "models"


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
    assert pc.layers * pc.per_layer.total == 12 * l * h * h + 13 * l * h
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


def test_gpt_layer_flops_is_eq3_forward_term():
    # Narayanan et al. 2021 Eq. 3: forward of one layer 24 b s h^2 (1 + s / (6 h)),
    # output layer 2 b s h V.
    m = load_model(MODELS / "gpt3-175b.yaml")
    b, s, h = 1, 2048, 12288
    assert layer_forward_flops(m, b) == 24 * b * s * h * h + 4 * b * s * s * h
    assert logits_forward_flops(m, b) == 2 * b * s * h * 50257


@pytest.mark.parametrize("name,tp,pp", [
    ("gpt3-175b", 8, 8), ("gpt2-small", 4, 2), ("llama2-70b", 8, 4), ("llama3-8b", 8, 1),
    ("mixtral-8x7b", 2, 4), ("llama3.1-405b", 8, 2),
])
def test_shards_add_up_to_the_model(name: str, tp: int, pp: int):
    """Summed over TP ranks and stages, the shards hold the model once, plus what Megatron
    replicates across TP (norms, row-parallel biases, position embedding, MoE router), the tied
    copy on the last stage, and Megatron's vocabulary padding to a multiple of 128·tp."""
    m = load_model(MODELS / f"{name}.yaml")
    pc = parameter_count(m)
    shards = [shard_parameters(m, tp, pp, st) for st in range(pp)]
    held = tp * sum(sh.total for sh in shards)
    replicated = sum(sh.tp_replicated for sh in shards) + pc.position_embedding
    if m.moe is not None:
        replicated += m.layers * pc.per_layer.router
    if m.kv_heads < tp:
        hd = m.hidden_size // m.attention_heads
        replicated += m.layers * 2 * m.hidden_size * hd * (tp - m.kv_heads) // tp
    pad = (padded_vocab_size(m, tp) - m.vocab_size) * m.hidden_size
    tied_copy = pc.word_embedding if (m.tied_embeddings and pp > 1) else 0
    n_vocab_tensors = (1 if m.tied_embeddings else 2) + (1 if tied_copy else 0)
    assert held == pc.total + (tp - 1) * replicated + tied_copy + n_vocab_tensors * pad


def test_shard_layers_and_embedding_stages():
    m = load_model(MODELS / "gpt3-175b.yaml")
    first, mid, last = (shard_parameters(m, 8, 8, st) for st in (0, 3, 7))
    assert (first.first_layer, first.last_layer, last.first_layer, last.last_layer) == \
        (0, 11, 84, 95)
    assert first.pre > 0 and first.post == 0 and mid.pre == mid.post == 0 and last.pre == 0
    assert first.embedding == last.embedding == 51_200 // 8 * 12288 and mid.embedding == 0
    with pytest.raises(InputError):
        shard_parameters(m, 8, 8, 8)


def test_megatron_vocabulary_padding_of_gpt3_175b():
    """Megatron-LM ``vocab_size_with_padding`` (megatron/core/tokenizers/utils/build_tokenizer.py):
    V rounded up to a multiple of make_vocab_size_divisible_by (128) x tp. GPT-3's 50,257 at tp 8
    -> 51,200 (multiple 1,024: 50 x 1,024); the stage-0 embedding shard has 6,400 rows, the
    tied-embedding AllReduce of fp32 gradients carries 6,400 x 12,288 x 4 bytes."""
    m = load_model(MODELS / "gpt3-175b.yaml")
    assert (m.vocab_size, m.make_vocab_size_divisible_by) == (50_257, 128)
    assert padded_vocab_size(m, 8) == 51_200
    assert padded_vocab_size(m, 1) == 50_304          # 393 x 128, nanoGPT's padded GPT-2 vocabulary
    sh = shard_parameters(m, 8, 8, 0)
    assert sh.embedding == 6_400 * 12_288
    assert sh.pre == 6_400 * 12_288 + 2_048 * 12_288  # + the replicated position embedding
    assert parameter_count(m).word_embedding == 50_257 * 12_288        # published: unpadded
    assert parameter_count(m, tp=8).word_embedding == 51_200 * 12_288  # as trained
