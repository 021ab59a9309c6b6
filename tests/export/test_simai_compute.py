"""Every layer's compute in the SimAI export, counted by hand: one record per transformer layer
over the files of all pipeline stages, whether the layer has a collective or not (a tp 1 dense
model has none), its forward and input-gradient compute the FLOPs of Narayanan et al. 2021
(Eq. 3: a GPT layer's forward ``24 b s h^2 + 4 b s^2 h``, of which the attention scores and values
``4 b s^2 h`` are computed causal, half, as Megatron-LM counts them; backward twice that) at the GPU's peak
times the MFU, the output layer's ``2 b s h V`` on the last stage, and the MoE layers carrying
their expert dispatch and combine AllToAlls over the EP group."""
from __future__ import annotations

import dataclasses
from fractions import Fraction
from pathlib import Path

from tokenpcap.config.gpu_types import GPU_TYPES
from tokenpcap.config.profiles import load_scenario
from tokenpcap.export.simai import write_simai
from tokenpcap.plan.build import build_plan

from tests.export.test_simai import parse

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "profiles" / "scenarios"


def _ns(s, flops: int) -> int:
    """GEMM FLOPs of one TP rank -> ns at peak x efficiency, rounded up (a hand rule, not the
    code's): ``training.mfu``, else the GPU type's GEMM efficiency, else the default 0.45."""
    known = GPU_TYPES.get(s.cluster.gpu.name)
    mfu = s.training.mfu if s.training.mfu is not None else (
        0.45 if known is None else known.gemm_efficiency)
    rate = Fraction(str(s.cluster.gpu.peak_tflops)) * 1000 * Fraction(str(mfu))
    tp = s.parallelism.tp
    return -(-Fraction(-(-flops // tp)) // rate)


def _records(plan, tmp_path) -> dict[str, list[list[str]]]:
    """Every record of every stage's file, by id (a layer id must occur once overall)."""
    out: dict[str, list[list[str]]] = {}
    for path in write_simai(plan, tmp_path / "w.txt"):
        _, records = parse(path.read_text())
        for r in records:
            out.setdefault(r[0], []).append(r)
    return out


def test_dante_at_tp_1_exports_every_layers_compute(tmp_path):
    s = load_scenario(SCEN / "dante.yaml")
    s = dataclasses.replace(s, parallelism=dataclasses.replace(
        s.parallelism, tp=1, dp=16, sequence_parallel=False))
    plan = build_plan(s)
    recs = _records(plan, tmp_path)
    m = s.model
    b, seq, h, ffn, V = 1, m.seq_length, m.hidden_size, m.ffn_hidden_size, m.vocab_size
    assert (b, seq, h, ffn, m.layers) == (s.training.micro_batch_size, 1024, 768, 3072, 12)
    attn = 8 * b * seq * h * h + 2 * b * seq * seq * h      # QKV + projection, causal attention
    mlp = 2 * b * seq * 2 * h * ffn                          # two GELU MLP matmuls
    assert attn + mlp == 24 * b * seq * h * h + 4 * b * seq * seq * h // 2
    for L in range(12):
        [r] = recs[f"layer{L}"]
        assert int(r[2]) == _ns(s, attn) + _ns(s, mlp) > 0
        assert int(r[5]) == _ns(s, 2 * attn) + _ns(s, 2 * mlp)
        assert r[3] == r[6] == "NONE"                        # tp 1: no TP collective
    [out] = recs["output_layer"]
    assert (int(out[2]), int(out[5])) == (_ns(s, 2 * b * seq * h * V), _ns(s, 4 * b * seq * h * V))
    layer_ids = [k for k in recs if k.startswith("layer")]
    assert sorted(layer_ids) == sorted(f"layer{L}" for L in range(12))
    fwd_total = sum(int(r[2]) for rs in recs.values() for r in rs)
    assert fwd_total == 12 * (_ns(s, attn) + _ns(s, mlp)) + _ns(s, 2 * b * seq * h * V)


def test_deepseek_v3_exports_all_61_layers_and_the_expert_traffic(tmp_path):
    """deepseek-v3-2048's model, pipeline split (16 stages: 3, 4 x 14, 2 layers), tp 1 and
    compute, on 16 nodes (dp 8, ep 8, 2 microbatches) so that the plan builds in well under a
    second: a layer's compute does not depend on dp or ep, its AllToAll size neither."""
    s = load_scenario(SCEN / "deepseek-v3-2048.yaml")
    s = dataclasses.replace(
        s, parallelism=dataclasses.replace(s.parallelism, dp=8, ep=8),
        model=dataclasses.replace(s.model, moe=dataclasses.replace(   # SimAI's ALLTOALL_EP
            s.model.moe, token_dispatcher="alltoall")),
        training=dataclasses.replace(s.training, global_batch_size=16),
        cluster=dataclasses.replace(s.cluster, nodes=16))
    plan = build_plan(s)
    assert s.parallelism.pp == 16 and s.parallelism.tp == 1
    recs = _records(plan, tmp_path)
    m, e = s.model, s.model.moe
    bs, h = s.training.micro_batch_size * m.seq_length, m.hidden_size
    dense_mlp = 2 * bs * 3 * h * m.ffn_hidden_size           # SwiGLU: 3 matrices
    moe_mlp = 2 * bs * (e.top_k * 3 * h * e.ffn_hidden_size + h * e.experts
                        + 3 * h * e.shared_expert_intermediate_size)   # + router
    fwd = {L: int(recs[f"layer{L}"][0][2]) for L in range(61)}
    assert all(len(recs[f"layer{L}"]) == 1 for L in range(61))
    # the attention is the same in every layer: dense and MoE layers differ by their MLP alone
    attn = {fwd[L] - (_ns(s, dense_mlp) if L < 3 else _ns(s, moe_mlp)) for L in range(61)}
    assert len(attn) == 1 and attn.pop() > 0
    for L in range(61):
        a2a = [k for k in recs if k.startswith(f"layer{L}_")
               and recs[k][0][3] + recs[k][0][6] != "NONENONE"]
        if L < 3:
            assert a2a == []
        else:
            [d] = recs[f"layer{L}_dispatch"]
            [c] = recs[f"layer{L}_combine"]
            # each rank sends its b*s*top_k routed token copies: to the experts h FP8 values
            # and an fp32 scale per 128 (DeepSeek-V3 Sec. 3.3.3), back h bf16 values
            assert d[3] == c[3] == "ALLTOALL_EP"
            assert int(d[4]) == bs * e.top_k * (h + h // 128 * 4)
            assert int(c[4]) == bs * e.top_k * h * 2
            assert recs[f"layer{L}_combine_grad"][0][6] == "ALLTOALL_EP"


def test_deepep_dispatch_is_refused_in_one_line(tmp_path):
    """SimAI's ALLTOALL_EP is one AllToAll over the EP group: DeepEP's calls over rails and
    nodes have no such record, so the export names the key instead of writing a wrong one."""
    import pytest
    from tokenpcap.errors import InputError
    s = load_scenario(SCEN / "deepseek-v3-2048.yaml")
    s = dataclasses.replace(
        s, parallelism=dataclasses.replace(s.parallelism, dp=16, ep=16),
        model=dataclasses.replace(s.model, moe=dataclasses.replace(
            s.model.moe, router_num_groups=2, router_group_topk=2)),
        training=dataclasses.replace(s.training, global_batch_size=16),
        cluster=dataclasses.replace(s.cluster, nodes=32))
    with pytest.raises(InputError) as err:
        write_simai(build_plan(s), tmp_path / "w.txt")
    assert "model.moe.token_dispatcher: got 'deepep', expected 'alltoall'" in str(err.value)
    assert "--set model.moe.token_dispatcher=alltoall" in str(err.value)     # what does fit
    assert "\n" not in str(err.value) and not list(tmp_path.iterdir())
