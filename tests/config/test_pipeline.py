"""Megatron-core's pipeline split (config/pipeline.py) against its own code: ``get_num_layers_to_build``
and ``get_transformer_layer_offset`` (megatron/core/transformer/transformer_block.py,
transformer_layer.py) and the checks of ``TransformerConfig.__post_init__``."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from tokenpcap.config.pipeline import PipelineSplitError, stage_first_layers, stage_layer_counts


def megatron_offset(layers: int, pp: int, rank: int, first: int | None, last: int | None) -> int:
    """get_transformer_layer_offset without virtual stages, transcribed as its arithmetic."""
    if pp == 1:
        return 0
    if first is None and last is None:
        return rank * (layers // pp)
    middle_stages = pp - (first is not None) - (last is not None)
    middle_layers = layers - (first or 0) - (last or 0)
    per = middle_layers // middle_stages if middle_stages > 0 else 0
    middle_rank = rank if first is None else rank - 1
    return 0 if rank == 0 else middle_rank * per + (first or 0)


def test_deepseek_v3_on_16_stages():
    """61 layers, pp 16, first 3 and last 2: 56 middle layers on 14 stages, 4 each."""
    counts = stage_layer_counts(61, 16, 3, 2)
    assert counts == (3,) + (4,) * 14 + (2,)
    assert stage_first_layers(counts)[:3] == (0, 3, 7) and stage_first_layers(counts)[-1] == 59
    with pytest.raises(PipelineSplitError, match="pp: got 16 with 61 layers"):
        stage_layer_counts(61, 16)          # Megatron: num_layers should be divisible by pp


def test_even_split_and_the_embedding_and_loss_counted_as_layers():
    assert stage_layer_counts(24, 4) == (6, 6, 6, 6)
    # (30 + 1 + 1) / 4 = 8 per stage; the first builds 7 (embedding), the last 7 (loss)
    assert stage_layer_counts(30, 4, embedding=True, loss=True) == (7, 8, 8, 7)
    assert stage_layer_counts(31, 4, embedding=True) == (7, 8, 8, 8)
    with pytest.raises(PipelineSplitError, match=r"31 \+ 1 \(embedding\) \+ 1 \(loss\) = 33"):
        stage_layer_counts(31, 4, embedding=True, loss=True)


@pytest.mark.parametrize("args, key, words", [
    ((61, 16, 3, 3), "pp", "middle stages that divide"),
    ((8, 2, 3, 3), "pp", "Mismatch"),                       # 2 layers left, no middle stage
    ((8, 3, 4, 4), "pp", "Mismatch"),                       # a middle stage, no layer left
    ((8, 3, 6, 6), "decoder_first_pipeline_num_layers", "at most 8"),
    ((8, 2, 0, None), "decoder_first_pipeline_num_layers", "> 0"),
    ((8, 1, 4, 4), "pp", "pp >= 2"),
])
def test_megatron_refuses(args, key, words):
    with pytest.raises(PipelineSplitError, match=words) as err:
        stage_layer_counts(*args)
    assert err.value.key == key


def test_uneven_with_embedding_or_loss_and_stages_without_layers_are_refused():
    with pytest.raises(PipelineSplitError, match="unset with account_for"):
        stage_layer_counts(8, 2, 4, None, embedding=True)
    with pytest.raises(PipelineSplitError, match="at least one transformer layer"):
        stage_layer_counts(2, 4, embedding=True, loss=True)   # (2+2)/4 = 1: stage 0 builds 0


@given(pp=st.integers(2, 32), first=st.one_of(st.none(), st.integers(1, 8)),
       last=st.one_of(st.none(), st.integers(1, 8)), per=st.integers(1, 8))
def test_counts_and_offsets_agree_with_megatron(pp, first, last, per):
    middle = pp - (first is not None) - (last is not None)
    layers = per * middle + (first or 0) + (last or 0)
    if middle <= 0:
        return
    counts = stage_layer_counts(layers, pp, first, last)
    assert sum(counts) == layers and len(counts) == pp
    assert stage_first_layers(counts) == tuple(megatron_offset(layers, pp, r, first, last)
                                               for r in range(pp))
    if first is not None:
        assert counts[0] == first
    if last is not None:
        assert counts[-1] == last
