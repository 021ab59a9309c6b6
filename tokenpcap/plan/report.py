"""The plan's JSON report: the scenario, the model's parameters per stage, the layout, the
phases, the totals, the epoch and the capture estimate (``docs/plan.md`` documents every key).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tokenpcap.config.profiles import DTYPE_BYTES
from tokenpcap.model import (activation_bytes, narayanan_eq2, padded_vocab_size, parameter_count,
                             scenario_shards)
from tokenpcap.model.flops import megatron_flops
from tokenpcap.plan.moe_nodelimited import deepep_bytes_per_layer
from tokenpcap.plan.pipeline import chunk_layers
from tokenpcap.plan.rows import pipeline_bubble_fraction
from tokenpcap.plan.workload import workload_json

if TYPE_CHECKING:
    from tokenpcap.plan.build import Plan

__all__ = ["plan_json"]


def plan_json(plan: "Plan") -> dict:
    """The plan as plain JSON types (``docs/plan.md`` documents every key). A
    workload scenario has no model section: ``model``, ``parameters``, ``microbatches``
    ... are absent, ``workload`` is its mapping (:meth:`Workload.to_json`)."""
    if plan.scenario.workload is not None:
        return workload_json(plan)
    s, m = plan.scenario, plan.scenario.model
    t, p = s.training, s.parallelism
    pc = parameter_count(m)
    gpt_like = (m.mlp == "gelu" and m.norm == "layernorm" and m.bias and m.tied_embeddings
                and m.position_embedding == "learned" and m.moe is None)
    stages = []
    for st, sh in enumerate(scenario_shards(s)):
        stages.append({
            "stage": st, "first_layer": sh.first_layer, "last_layer": sh.last_layer,
            "chunks": [[r[0], r[-1]] for r in chunk_layers(s, st)],
            "parameters_per_rank": sh.total, "dense_per_rank": sh.dense,
            "expert_per_rank": sh.expert,
            "gradient_bytes_per_rank": sh.total * DTYPE_BYTES[t.grad_reduce_dtype],
        })
    out = {
        "scenario": s.name,
        "model": m.name,
        "cluster": s.cluster.name,
        "parallelism": {"dp": p.dp, "tp": p.tp, "pp": p.pp, "ep": p.ep,
                        "context_parallel_size": p.cp,
                        "virtual_pipeline_model_parallel_size": p.vpp,
                        "sequence_parallel": p.sequence_parallel, "zero_stage": p.zero_stage},
        "algorithm": plan.algorithm,
        "scale": plan.scale,
        "parameters": {
            "total": pc.total, "active": pc.active,
            "vocab_size": m.vocab_size, "padded_vocab_size": padded_vocab_size(m, p.tp),
            "total_padded": parameter_count(m, p.tp).total,
            "narayanan_eq2": (narayanan_eq2(m.layers, m.hidden_size, m.vocab_size,
                                            m.seq_length) if gpt_like else None),
            "per_layer": (pc.per_layer[0].total if len(set(pc.per_layer)) == 1 else None),
            "layer_kinds": [{"kind": "moe" if moe else "dense",
                             "layers": sum(1 for x in m.moe_layers if x == moe),
                             "parameters": pc.per_layer[m.moe_layers.index(moe)].total,
                             "active": pc.per_layer[m.moe_layers.index(moe)].active}
                            for moe in sorted(set(m.moe_layers))],
            "mtp": pc.mtp,
            "embedding": pc.word_embedding + pc.position_embedding,
            "per_stage": stages,
        },
        "layout": {"world_size": plan.layout.world_size, "nodes": plan.layout.nodes,
                   "groups": plan.layout.intra_node_summary()},
        "microbatches": plan.microbatches,
        "bubble_fraction": float(pipeline_bubble_fraction(p.pp, plan.microbatches, p.vpp)),
        "model_flops": megatron_flops(m, t.global_batch_size, p.tp) // plan.scale,
        "activation_bytes": activation_bytes(t.micro_batch_size, m.seq_length,
                                             m.hidden_size, DTYPE_BYTES[t.precision]),
        "phases": [r.to_json() for r in plan.rows],
        "totals": plan.totals(),
        "epoch": plan.epoch(),
        "pcap": plan.pcap,
        "tokens": plan.tokens.to_json() if plan.tokens is not None else None,
    }
    deepep = deepep_bytes_per_layer(plan.families, plan.algorithm, plan.layout)
    if deepep:
        out["moe_dispatch"] = deepep
    return out
