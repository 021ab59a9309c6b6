"""Stage 2: parameter counts, tensor shards and message sizes of a decoder-only transformer.

:mod:`tokenpcap.model.counts`: whole-model and per-layer element counts (GPT, Llama/Mixtral,
DeepSeek-V3 with multi-latent attention and dense and MoE layers), activation sizes, FLOPs.
:mod:`tokenpcap.model.shards`: the tensors each rank holds under Megatron-LM's tensor, pipeline
and expert parallelism, and their sums per stage.
"""
from __future__ import annotations

from tokenpcap.model.counts import (LayerParameters, ParameterCount, activation_bytes,
                                    attention_core_flops, attention_forward_flops,
                                    attention_projection_flops,
                                    attention_parameters,
                                    layer_forward_flops, layer_parameters, logits_forward_flops,
                                    narayanan_eq2, padded_vocab_size, parameter_count)
from tokenpcap.model.shards import (ShardParameters, Tensor, rank_tensors, scenario_shards,
                                    shard_parameters)

__all__ = [
    "LayerParameters",
    "ParameterCount",
    "ShardParameters",
    "narayanan_eq2",
    "Tensor",
    "rank_tensors",
    "padded_vocab_size",
    "attention_parameters",
    "layer_parameters",
    "parameter_count",
    "shard_parameters",
    "scenario_shards",
    "activation_bytes",
    "attention_core_flops",
    "attention_projection_flops",
    "attention_forward_flops",
    "layer_forward_flops",
    "logits_forward_flops",
]
