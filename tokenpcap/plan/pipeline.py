"""Stage 3 (part): which layers a pipeline stage holds, in model chunks (interleaved 1F1B).

Without interleaving a stage holds one contiguous block of layers (Megatron-core's split, even
or with ``decoder_first/last_pipeline_num_layers``: :mod:`tokenpcap.config.pipeline`). With
Megatron-LM's interleaved schedule (``virtual_pipeline_model_parallel_size
v``; Narayanan et al. 2021, Sec. 2.2.2) each stage holds ``v`` chunks, chunk ``c`` of stage ``st``
being virtual stage ``c*p + st``: evenly ``l/(p*v)`` layers each, chunk ``c`` of stage ``st`` being
layers ``[(c*p + st) * l/(p*v), (c*p + st + 1) * l/(p*v))`` (Megatron-core
``get_transformer_layer_offset``: ``vp_stage * (l/v) + pp_rank * (l/(p*v))``), or by an uneven
split per virtual stage (:func:`tokenpcap.config.pipeline.chunk_layer_counts`). The
activations go from chunk ``c`` of stage ``p-1`` to chunk ``c+1`` of stage 0 (:func:`next_chunk`).
The embedding lives in chunk 0 of stage 0, the output layer in chunk ``v-1`` of stage ``p-1``; a
stage keeps one gradient buffer per chunk (Megatron wraps every chunk in its own DDP).
"""
from __future__ import annotations

from tokenpcap.config.profiles import Scenario
from tokenpcap.config.pipeline import chunk_first_layers

__all__ = ["chunk_layers", "stage_layers", "next_chunk"]


def chunk_layers(s: Scenario, stage: int) -> list[range]:
    """The global layer indices of each model chunk of pipeline ``stage``, chunk 0 first (module
    docstring); one chunk, the shard's layers, without interleaving."""
    counts = s.parallelism.chunk_layer_counts(s.model.layers)
    first = chunk_first_layers(counts)
    return [range(f, f + n) for f, n in zip(first[stage], counts[stage])]


def stage_layers(s: Scenario, stage: int) -> list[int]:
    """Every layer of pipeline ``stage``, chunk by chunk."""
    return [L for r in chunk_layers(s, stage) for L in r]


def next_chunk(pp: int, vpp: int, stage: int, chunk: int) -> tuple[int, int] | None:
    """``(stage, chunk)`` that receives the activations of ``(stage, chunk)``, or None for the
    model's last chunk (stage ``pp-1``, chunk ``vpp-1``)."""
    if stage < pp - 1:
        return stage + 1, chunk
    return (0, chunk + 1) if chunk < vpp - 1 else None
