"""The DP gradient collectives (plan/grads.py): Megatron-core's buckets, dense and expert buffers."""
from __future__ import annotations

import math
from collections import Counter

from tokenpcap.model import shard_parameters
from tokenpcap.plan.build import build_plan
from tokenpcap.config.profiles import load_scenario
from tests.plan.test_plan import PROFILES, dante, vary

def test_dp_buckets_hold_every_gradient_once():
    s = vary(dante(), overlap_grad_reduce=True, bucket_size=5_000_000)
    plan = build_plan(s)
    lay = plan.layout
    by_rank = Counter()
    for c in plan.calls():
        if c.dim == "dp" and c.op.endswith("grad_bucket"):
            for r in c.group:
                by_rank[r] += c.message_bytes
    for r in range(lay.world_size):
        sh = shard_parameters(s.model, 4, 2, lay.coords(r).pp)
        assert by_rank[r] == sh.total * 2            # bf16 gradients
    buckets = [c for c in plan.calls() if c.dim == "dp" and c.group[0] == 0 and c.bucket >= 0]
    assert [c.bucket for c in buckets] == list(range(len(buckets)))
    # Stage 0 fills buckets from layer 5 down to 0, then the embeddings (backward order): the
    # first bucket is ready once the lowest layer it reaches is done.
    layers = [c.layer for c in buckets if c.layer >= 0]
    assert layers == sorted(layers, reverse=True) and layers[-1] == 0
    # Stage 1 (pp rank 1) is not bucketed: one AllReduce of its whole buffer.
    last = [c for c in plan.calls() if c.dim == "dp" and c.stage == 1 and c.group[0] == 16
            and c.bucket >= 0]
    assert [c.message_bytes for c in last] == [shard_parameters(s.model, 4, 2, 1).dense * 2]


def test_megatron_buckets_close_after_the_tensor_that_fills_them():
    """Megatron-core DDP (distributed_data_parallel.py, param_and_grad_buffer.py): bucket_size
    counts parameters, default max(40,000,000, 1,000,000 * dp); a bucket closes after the tensor
    that brings it to bucket_size or more, walking the tensors in reverse registration order.
    GPT-3 175B at tp 8 (h 12,288): per layer and rank linear_fc2.weight 12,288^2*4/8 =
    75,497,472 and bias 12,288; linear_fc1 75,497,472 + 6,144; linear_qkv 3*12,288^2/8 =
    56,623,104 + 4,608; pre_mlp_layernorm 2*12,288. So the first buckets of stage 0 (layer 11
    first) hold 75,509,760, 75,503,616 and 56,652,288 parameters; no overlap: one bucket."""
    g = vary(load_scenario(PROFILES / "scenarios" / "gpt3-175b-megatron.yaml"),
             global_batch_size=16, recompute="none", overlap_grad_reduce=True)
    assert g.training.bucket_size is None and g.parallelism.dp == 16   # -> 40,000,000
    calls = [c for c in build_plan(g).calls() if c.dim == "dp" and c.group[0] == 0]
    assert [c.message_bytes // 4 for c in calls[:3]] == [75_509_760, 75_503_616, 56_652_288]
    assert all(c.layer == 11 for c in calls[:3])
    sh = shard_parameters(g.model, 8, 8, 0)
    assert sum(c.message_bytes for c in calls) == sh.dense * 4
    off = build_plan(vary(g, overlap_grad_reduce=False))
    one = [c for c in off.calls() if c.dim == "dp" and c.group[0] == 0]
    assert [(c.message_bytes, c.bucket) for c in one] == [(sh.dense * 4, 0)]


def test_dense_and_expert_buffers_are_reduced_apart():
    """Mixtral with ZeRO-1 (distributed optimizer) and no overlap: one ReduceScatter per buffer
    (dense over dp, experts over the expert-data-parallel group), each padded at its end to a
    multiple of lcm(dp, 128) (param_layout.py pad_bucket_end) after 64-element-aligned
    tensors (pad_param_start)."""
    s = vary(load_scenario(PROFILES / "scenarios" / "mixtral-8x7b-ep.yaml"), ep=4,
             overlap_grad_reduce=False, overlap_param_gather=False)
    plan = build_plan(s)
    rs = [c for c in plan.calls() if c.dim == "dp" and c.collective == "ReduceScatter"
          and 0 in c.group]
    assert sorted(c.op for c in rs) == ["dense_grad_bucket", "expert_grad_bucket"]
    dense = next(c for c in rs if c.op == "dense_grad_bucket")
    expert = next(c for c in rs if c.op == "expert_grad_bucket")
    assert len(dense.group) == 8 and len(expert.group) == 2
    sh = shard_parameters(s.model, 2, 2, 0, 4)
    for c, n, dp in ((dense, sh.dense, 8), (expert, sh.expert, 2)):
        elems = c.message_bytes // 4
        assert elems % math.lcm(dp, 128) == 0 and n <= elems < n + 64 * 200 + 128


def test_buckets_follow_transformer_engines_registration_order():
    """Megatron-core's TE layer spec (gpt_layer_specs.py) fuses the input norm into
    ``linear_qkv`` (TE LayerNormColumnParallelLinear registers ``layer_norm_weight`` before
    ``weight``), built after ``linear_proj``; an MoE layer keeps ``pre_mlp_layernorm`` then
    ``router``. DDP walks the parameters in reverse. mixtral-8x7b-ep stage 0 (layers 0-15, tp 2,
    ep 8, fp32 gradients), per layer and rank: router 8 x 4096 = 32,768, pre_mlp_layernorm
    4,096, linear_qkv.weight (2048 + 2 x 512) x 4096 = 12,582,912, its layer_norm_weight 4,096,
    linear_proj 4096 x 2048 = 8,388,608: 21,012,480 elements. bucket_size max(40,000,000,
    1,000,000 x 8): a bucket closes with the second layer's linear_proj at 42,024,960 >= 40 M, so
    eight buckets of 42,024,960 x 4 = 168,099,840 B, then the word embedding 32,000 x 4096 / 2 =
    65,536,000 x 4 = 262,144,000 B. With the input norm before linear_proj (the local spec's
    order) the first bucket would close before it: 168,083,456 B."""
    s = load_scenario(PROFILES / "scenarios" / "mixtral-8x7b-ep.yaml")
    plan = build_plan(s)
    rs = [c.message_bytes for c in plan.calls() if c.dim == "dp" and c.group[0] == 0
          and c.op == "dense_grad_bucket"]
    assert rs == [168_099_840] * 8 + [262_144_000]


def test_sequence_parallel_allreduce_holds_the_router():
    """finalize_model_grads._allreduce_non_tensor_model_parallel_grads AllReduces over TP every
    gradient flagged ``sequence_parallel``: the norms and (moe/router.py reset_parameters) the
    router weight. mixtral-8x7b-ep (tp 2, SP, fp32 gradients), per layer 4,096 (input norm) +
    4,096 (pre_mlp_layernorm) + 8 x 4,096 (router) = 40,960 elements; 16 layers a stage:
    655,360 x 4 = 2,621,440 B on stage 0, plus the final norm's 4,096 x 4 on stage 1."""
    plan = build_plan(load_scenario(PROFILES / "scenarios" / "mixtral-8x7b-ep.yaml"))
    got = {(c.stage, c.message_bytes, c.collective) for c in plan.calls()
           if c.op == "tp_replicated_grads"}
    assert got == {(0, 2_621_440, "AllReduce"), (1, 2_637_824, "AllReduce")}
