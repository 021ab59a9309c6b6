"""Megatron-core's pipeline split (config/pipeline.py) against its own code: ``get_num_layers_to_build``
and ``get_transformer_layer_offset`` (megatron/core/transformer/transformer_block.py,
transformer_layer.py) and the checks of ``TransformerConfig.__post_init__``."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from tokenpcap.config.pipeline import (PipelineSplitError, chunk_first_layers, chunk_layer_counts,
                                       stage_first_layers, stage_layer_counts)


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


def megatron_vp_offset(layers: int, pp: int, vp: int, rank: int, vp_stage: int,
                       first: int | None, last: int | None, embedding: bool, loss: bool) -> int:
    """get_transformer_layer_offset with virtual stages (``vp_stage``), transcribed as its
    arithmetic (Megatron-core transformer_layer.py: the uneven branch's
    ``num_layers_per_virtual_model_chunk_in_*_pipeline_stage`` and ``total_virtual_chunks``;
    the account-for branch's ``num_layers_per_virtual_rank`` and the embedding's ``offset -= 1``
    off the first virtual stage)."""
    if first is not None or last is not None:
        middle_stages = pp - (first is not None) - (last is not None)
        middle_layers = layers - (first or 0) - (last or 0)
        f_chunk, l_chunk = (first or 0) // vp, (last or 0) // vp
        m_chunk = middle_layers // vp
        total = f_chunk + m_chunk + l_chunk
        if rank == 0:
            return vp_stage * total
        return vp_stage * total + f_chunk + (rank - 1) * (m_chunk // middle_stages)
    n = layers + embedding + loss
    per_rank = n // pp
    offset = vp_stage * (n // vp) + rank * (per_rank // vp)
    if embedding and not (rank == 0 and vp_stage == 0):
        offset -= 1
    return offset


def test_llama3_405b_on_16_stages_of_4_chunks():
    """126 layers + embedding + loss = 128 slots, 2 per chunk: the first chunk of stage 0 and
    the last of stage 15 hold one layer, so stages hold 7, 8 x 14, 7 (Llama 3, Sec. 3.3.2)."""
    c = chunk_layer_counts(126, 16, 4, embedding=True, loss=True)
    assert c[0] == (1, 2, 2, 2) and c[-1] == (2, 2, 2, 1) and set(c[1:-1]) == {(2, 2, 2, 2)}
    assert tuple(map(sum, c)) == stage_layer_counts(126, 16, embedding=True, loss=True)
    assert chunk_first_layers(c)[0] == (0, 31, 63, 95)
    with pytest.raises(PipelineSplitError, match="holds only the embedding"):
        chunk_layer_counts(126, 16, 8, embedding=True, loss=True)   # 1 slot: embedding only
    with pytest.raises(PipelineSplitError, match="dividing them") as err:
        chunk_layer_counts(126, 16, 3, embedding=True, loss=True)
    assert err.value.key == "virtual_pipeline_model_parallel_size"
    with pytest.raises(PipelineSplitError, match="divisible by virtual pipeline parallel"):
        chunk_layer_counts(61, 16, 2, 3, 2)          # DeepSeek-V3's 3 first layers on 2 chunks


@given(pp=st.integers(2, 16), vp=st.integers(2, 4), per=st.integers(1, 4),
       split=st.sampled_from(["even", "uneven", "embedding", "loss", "both"]),
       fl=st.tuples(st.integers(0, 2), st.integers(0, 2)))
def test_chunk_counts_and_offsets_agree_with_megatron(pp, vp, per, split, fl):
    first = last = None
    emb, loss = split in ("embedding", "both"), split in ("loss", "both")
    if split == "uneven":
        first = fl[0] * vp or None
        last = fl[1] * vp or None
        middle = pp - (first is not None) - (last is not None)
        if middle <= 0:
            return
        layers = per * vp * middle + (first or 0) + (last or 0)
    else:
        layers = per * vp * pp - emb - loss
    try:
        c = chunk_layer_counts(layers, pp, vp, first, last, emb, loss)
    except PipelineSplitError:
        assert per == 1 and (emb or loss) or (first == 0 or last == 0)
        return
    offsets = chunk_first_layers(c)
    # Megatron's uneven offset counts rank 0 as a first stage even when only the last stage is
    # set (``(pipeline_rank - 1) * ...``): its chunks would then overlap; the counts still hold
    check = split != "uneven" or first is not None or last is None
    for r in range(pp):
        for v in range(vp):
            assert not check or offsets[r][v] == megatron_vp_offset(
                layers, pp, vp, r, v, first, last, emb, loss)
    ends = sorted((offsets[r][v], offsets[r][v] + c[r][v]) for r in range(pp) for v in range(vp))
    assert ends[0][0] == 0 and ends[-1][1] == layers
    assert all(a[1] == b[0] for a, b in zip(ends, ends[1:]))      # the chunks tile the model
    assert tuple(map(sum, c)) == stage_layer_counts(layers, pp, first, last, emb, loss)
