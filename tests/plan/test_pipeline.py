"""Model chunks of the interleaved schedule: Megatron-core's layer offsets, the chunk that
receives each chunk's activations, and the gradient buffer of every chunk."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tokenpcap.config.profiles import load_scenario
from tokenpcap.model import rank_tensors, shard_parameters
from tokenpcap.plan.grads import chunk_tensors
from tokenpcap.plan.pipeline import chunk_layers, next_chunk, stage_layers

SCEN = Path(__file__).resolve().parents[2] / "profiles" / "scenarios"


def gpt3(v):  # type: ignore[no-untyped-def]
    s = load_scenario(SCEN / "gpt3-175b-megatron.yaml")
    return dataclasses.replace(s, parallelism=dataclasses.replace(
        s.parallelism, virtual_pipeline_model_parallel_size=v))


def test_chunks_hold_megatrons_layers():
    # get_transformer_layer_offset: vp_stage * (l / v) + pp_rank * (l / (p * v)); GPT-3 175B,
    # 96 layers, p 8, v 2: stage 1 holds layers 6-11 and 54-59
    s = gpt3(2)
    p, L = s.parallelism.pp, s.model.layers
    assert (p, L) == (8, 96)
    assert chunk_layers(s, 1) == [range(6, 12), range(54, 60)]
    assert stage_layers(s, 1) == list(range(6, 12)) + list(range(54, 60))
    seen = sorted(x for st in range(p) for r in chunk_layers(s, st) for x in r)
    assert seen == list(range(L))
    # without interleaving: the shard's layers
    s1 = gpt3(None)
    sh = shard_parameters(s1.model, s1.parallelism.tp, p, 3)
    assert chunk_layers(s1, 3) == [range(sh.first_layer, sh.last_layer + 1)]


def test_activations_go_to_the_next_chunk():
    assert next_chunk(4, 2, 0, 0) == (1, 0)
    assert next_chunk(4, 2, 3, 0) == (0, 1)        # stage p-1 chunk c -> stage 0 chunk c+1
    assert next_chunk(4, 2, 3, 1) is None          # the model's last chunk
    assert next_chunk(4, 1, 3, 0) is None and next_chunk(1, 1, 0, 0) is None
    # the chain visits every (stage, chunk) once, in layer order
    s = gpt3(3)
    p, v = s.parallelism.pp, 3
    at, order = (0, 0), []
    while at is not None:
        order.append(chunk_layers(s, at[0])[at[1]])
        at = next_chunk(p, v, *at)
    assert [x for r in order for x in r] == list(range(s.model.layers))


@pytest.mark.parametrize("stage", [0, 3, 7])
def test_every_chunk_has_its_own_gradient_buffer(stage):
    s = gpt3(2)
    p = s.parallelism
    tensors = rank_tensors(s.model, p.tp, p.pp, stage, p.ep)
    chunks = chunk_tensors(s, stage, tensors)
    assert len(chunks) == 2
    assert sum(x.elements for c in chunks for x in c) == sum(x.elements for x in tensors)
    for c, buf in enumerate(chunks):
        layers = {x.layer for x in buf if x.layer >= 0}
        assert layers == set(chunk_layers(s, stage)[c])
    names0 = {x.name for x in chunks[0]}
    names1 = {x.name for x in chunks[1]}
    assert ("embedding.word_embeddings.weight" in names0) == (stage == 0)
    assert ("output_layer.weight" in names1) == (stage == p.pp - 1)
    assert "output_layer.weight" not in names0 and "embedding.word_embeddings.weight" not in names1


@pytest.mark.parametrize("stage", [0, 7, 15])
def test_llama3_405b_recipe_holds_the_papers_split_in_uneven_chunks(stage):
    """Llama Team 2024, Sec. 3.3.2 and Table 3: 126 layers on 16 stages, one fewer on the first
    and the last (7 + 14 x 8 + 7), here as Megatron-core's embedding and loss counted as layers
    over 4 chunks per stage: stage 0 holds 1 + 2 + 2 + 2 layers, stage 15 2 + 2 + 2 + 1. Each
    chunk's gradient buffer holds exactly its layers, the embedding in stage 0's first and the
    output layer in stage 15's last; the stage holds every parameter of its layers."""
    s = load_scenario(SCEN / "llama3.1-405b-2048-interleaved.yaml")
    p = s.parallelism
    want = {0: [1, 2, 2, 2], 7: [2, 2, 2, 2], 15: [2, 2, 2, 1]}[stage]
    assert [len(r) for r in chunk_layers(s, stage)] == want
    assert [len(stage_layers(s, st)) for st in range(p.pp)] == [7] + [8] * 14 + [7]
    tensors = rank_tensors(s.model, p.tp, p.pp, stage, p.ep, p.stage_layer_counts(s.model.layers))
    chunks = chunk_tensors(s, stage, tensors)
    for c, buf in enumerate(chunks):
        assert {x.layer for x in buf if x.layer >= 0} == set(chunk_layers(s, stage)[c])
    assert sum(x.elements for c in chunks for x in c) == sum(x.elements for x in tensors)
    names = [{x.name for x in c} for c in chunks]
    assert ("embedding.word_embeddings.weight" in names[0]) == (stage == 0)
    assert ("output_layer.weight" in names[-1]) == (stage == 15)
