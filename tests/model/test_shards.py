"""The tensors each rank holds (model/shards.py): Megatron-LM's sharding against the whole
model's counts, published sizes, and Megatron-core's layer split."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from tokenpcap.errors import InputError
from tokenpcap.model import (
    padded_vocab_size,
    parameter_count,
    rank_tensors,
    shard_parameters,
)
from tokenpcap.config.profiles import MlaProfile, MoeProfile, load_model

MODELS = Path(__file__).resolve().parents[2] / "profiles" / "models"


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
    replicated = sum(sh.tp_replicated for sh in shards) + pc.position_embedding  # router in it
    if m.moe is not None:
        assert all(sh.tp_replicated >= sum(lp.router for lp in pc.per_layer[sh.first_layer:
                                                                         sh.last_layer + 1])
                   for sh in shards)
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


def test_deepseek_v3_stages_on_pp16_ep64():
    """The scenario's split (3 | 4 x 14 | 2 layers, Megatron --decoder-first/last-pipeline-num-
    layers): stage 0 holds the embedding and the 3 dense layers, all dense; a middle stage 4
    MoE layers whose dense part (attention, norms, router, shared expert) is 4 x 232,996,864
    and whose 4 local routed experts (256 / ep 64) are 4 x 4 x 44,040,192; at tp 1 the shards
    of all stages hold the model exactly once (dense once per DP replica, experts ep times)."""
    m = load_model(MODELS / "deepseek-v3.yaml")
    counts = (3,) + (4,) * 14 + (2,)
    shards = [shard_parameters(m, 1, 16, st, 64, counts) for st in range(16)]
    first, mid, last = shards[0], shards[7], shards[15]
    assert (first.dense, first.expert) == (926_679_040 + 3 * 583_483_392, 0)
    assert first.moe == (False,) * 3 and mid.moe == (True,) * 4
    attention_norms_router_shared = 187_107_328 + 2 * 7168 + 256 * 7168 + 3 * 7168 * 2048
    assert attention_norms_router_shared == 232_996_864
    assert mid.layer_dense == (232_996_864,) * 4 and mid.dense == 931_987_456
    assert mid.layer_expert == (4 * 3 * 7168 * 2048,) * 4 and mid.expert == 704_643_072
    assert (last.first_layer, last.last_layer) == (59, 60)
    assert last.dense == 2 * 232_996_864 + 7168 + 926_679_040
    assert sum(sh.dense + 64 * sh.expert for sh in shards) == parameter_count(m).total
    with pytest.raises(InputError):
        shard_parameters(m, 1, 16, 0, 64)            # 61 layers: no even split on 16 stages


def test_mla_tp_shards_split_the_heads_and_replicate_the_down_projections():
    """Megatron-core MLA spec (gpt_layer_specs.py): linear_q_down_proj and linear_kv_down_proj
    are plain linears on every TP rank, the up projections column-parallel, linear_proj
    row-parallel; per rank at tp 4 the heads are 128 / 4 = 32."""
    m = load_model(MODELS / "deepseek-v3.yaml")
    t = {x.name.split("self_attention.")[1]: x for x in rank_tensors(m, 4, 61, 0, 1, (1,) * 61)
         if "self_attention" in x.name}
    h = 7168
    assert t["linear_q_down_proj.weight"].elements == 1536 * h
    assert t["linear_q_up_proj.weight"].elements == 32 * 192 * 1536
    assert t["linear_kv_down_proj.weight"].elements == 576 * h
    assert t["linear_kv_up_proj.weight"].elements == 32 * 256 * 512
    assert t["linear_proj.weight"].elements == 32 * 128 * h
    replicated = {k for k, x in t.items() if x.sp_grad}
    # TE spec: q_layernorm / kv_layernorm fused into the up projections (norm weight first)
    assert replicated == {"linear_q_down_proj.weight", "linear_kv_down_proj.weight",
                          "linear_q_up_proj.layer_norm_weight",
                          "linear_kv_up_proj.layer_norm_weight"}
    order = list(t)
    assert order.index("linear_q_up_proj.layer_norm_weight") + 1 == \
        order.index("linear_q_up_proj.weight")
    whole = sum(x.elements for x in rank_tensors(m, 1, 61, 0, 1, (1,) * 61)
                if "self_attention" in x.name)
    per_rank = sum(x.elements for x in t.values())
    rep = sum(x.elements for x in t.values() if x.sp_grad)
    assert whole == 187_107_328 and 4 * per_rank == whole + 3 * rep


@settings(max_examples=40, deadline=None)
@given(pattern=st.lists(st.booleans(), min_size=2, max_size=12),
       pp=st.integers(1, 4), ep=st.sampled_from([1, 2, 4]), q_lora=st.booleans())
def test_shards_hold_every_layer_once_whatever_the_layer_kinds_and_split(pattern, pp, ep, q_lora):
    """At tp 1 the stages' shards hold each parameter once per DP replica (routed experts once
    per EP group): sum(dense) + ep * sum(expert) is the model's total, for any dense/MoE
    pattern, any uneven first stage and MLA with or without a query latent."""
    layers = len(pattern)
    if pp > layers:
        return
    first = layers - (pp - 1) * ((layers - 1) // max(1, pp - 1)) if pp > 1 else None
    counts = (first,) + ((layers - first) // (pp - 1),) * (pp - 1) if pp > 1 else (layers,)
    if min(counts) < 1 or sum(counts) != layers:
        return
    m = dataclasses.replace(
        load_model(MODELS / "deepseek-v3.yaml"), layers=layers, hidden_size=64,
        attention_heads=4, ffn_hidden_size=96, vocab_size=100,
        mla=MlaProfile(16 if q_lora else None, 8, 8, 4, 8),
        moe=MoeProfile(experts=4, top_k=2, ffn_hidden_size=32,
                       shared_expert_intermediate_size=32 * (1 - q_lora),
                       layer_freq=tuple(int(x) for x in pattern)))
    shards = [shard_parameters(m, 1, pp, s, ep, counts) for s in range(pp)]
    assert sum(sh.dense + ep * sh.expert for sh in shards) == parameter_count(m, tp=1).total
    assert [x for sh in shards for x in sh.moe] == pattern
    assert all((sh.expert_of(L) > 0) == sh.moe[L - sh.first_layer]
               for sh in shards for L in range(sh.first_layer, sh.last_layer + 1))
