"""The MoE layers' TP and EP collectives (plan/moe.py, plan/calls.py)."""
from __future__ import annotations

import dataclasses

from tokenpcap.plan.build import build_plan
from tokenpcap.config.profiles import load_scenario
from tests.plan.test_plan import PROFILES, rows, vary

def test_mixtral_moe_tp_collectives_carry_top_k_times_the_dense_bytes():
    """Megatron-core MoEAlltoAllTokenDispatcher (token_dispatcher.py) at tp 2: after the dispatch
    AllToAll the routed tokens (and probs) are AllGathered over TP (dispatch_postprocess), the
    expert output is ReduceScattered over TP before the combine (combine_preprocess), gradients
    the other way; each carries top_k (2) x the bytes of a dense MLP's SP AllGather of b*s*h*B.
    The per-expert token counts (int64 [8]) are AllGathered over the TP x EP group (preprocess)."""
    s = load_scenario(PROFILES / "scenarios" / "mixtral-8x7b-ep.yaml")
    plan = build_plan(s)
    m = s.model
    dense = 1 * m.seq_length * m.hidden_size * 2           # b*s*h*B: the attention's AllGather
    calls = [c for c in plan.calls() if c.layer == 0 and 0 in c.group and c.microbatch == 0
             and not c.recompute]
    by_op = {c.op: c for c in calls}
    assert by_op["attn_in"].message_bytes == dense
    assert "mlp_in" not in by_op and "mlp_out" not in by_op and "mlp_in_regather" not in by_op
    for op, coll, phase in [("moe_gather", "AllGather", "forward"),
                            ("moe_scatter", "ReduceScatter", "forward"),
                            ("moe_scatter_grad", "AllGather", "backward"),
                            ("moe_gather_grad", "ReduceScatter", "backward")]:
        c = by_op[op]
        assert (c.dim, c.collective, c.phase, len(c.group)) == ("tp", coll, phase, 2)
        assert c.message_bytes == m.moe.top_k * dense
    assert by_op["moe_gather_probs"].message_bytes == m.moe.top_k * m.seq_length * 2
    counts = by_op["moe_counts"]
    assert (counts.dim, counts.collective, len(counts.group)) == ("ep", "AllGather", 16)
    assert counts.message_bytes == 2 * 8 * 8 * 8         # tp * ep ranks x 8 experts x int64
    assert plan.rows and rows(plan)["ep/forward/AllToAll"].nic_bytes > 0


def test_dense_layers_of_a_mixed_model_keep_the_mlp_tp_collectives_and_make_no_ep_call():
    """Megatron-core moe_layer_freq 2 (gpt_layer_specs.py: layer i is MoE when i % 2 == 0):
    Mixtral at tp 2, ep 4 with every other layer dense (the SP ReduceScatter/AllGather pair of
    the dense MLP, b*s*h*B) and the others routed by MoEAlltoAllTokenDispatcher."""
    import dataclasses
    s = load_scenario(PROFILES / "scenarios" / "mixtral-8x7b-ep.yaml")
    moe = dataclasses.replace(s.model.moe, layer_freq=2)
    s = dataclasses.replace(s, model=dataclasses.replace(s.model, moe=moe))
    plan = build_plan(s)
    ops: dict[int, set] = {}
    for c in plan.calls():
        if c.dim in ("tp", "ep") and c.layer >= 0 and 0 in c.group and c.microbatch == 0 \
                and not c.recompute:
            ops.setdefault(c.layer, set()).add(c.op)
    assert ops and all(L % 2 == 0 for L in ops if "dispatch" in ops[L])
    for L, o in ops.items():
        if L % 2:
            assert {"mlp_in", "mlp_out", "mlp_in_regather"} <= o
            assert not o & {"moe_counts", "dispatch", "moe_gather", "combine"}
        else:
            assert {"moe_counts", "dispatch", "combine", "moe_gather"} <= o
            assert not o & {"mlp_in", "mlp_out"}
    dense = 1 * s.model.seq_length * s.model.hidden_size * 2
    assert {c.message_bytes for c in plan.calls() if c.op == "mlp_in"} == {dense}


def test_router_small_collectives_as_megatron_makes_them():
    """Megatron-core Router (moe/router.py): with ``moe_aux_loss_coeff`` > 0 (Mixtral's example
    script: 1e-2) ``_apply_aux_loss`` AllReduces ``routing_map.sum(dim=0)``, int64 [8 experts]
    = 64 B, over the TP x CP group (tp 2 here) per MoE layer and microbatch forward, and again
    in full recomputation's replay: 16 layers x 2 microbatches x 2 on stage 0. With
    ``moe_router_enable_expert_bias`` (DeepSeek-V3) ``finalize_model_grads._update_router_
    expert_bias`` AllReduces the stacked fp32 [MoE layers, experts] over TP x DP x CP once:
    stage 1 of deepseek-v3-2048 holds 4 MoE layers of 256 experts, 4 x 256 x 4 = 4,096 B over
    its 128 ranks; stage 0 (3 dense layers) none."""
    s = load_scenario(PROFILES / "scenarios" / "mixtral-8x7b-ep.yaml")
    aux = [c for c in build_plan(s).calls() if c.op == "moe_aux_loss" and 0 in c.group]
    assert len(aux) == 16 * 2 * 2 and sum(c.recompute for c in aux) == 32
    assert {(c.collective, c.message_bytes, c.group, c.phase) for c in aux} == \
        {("AllReduce", 64, (0, 1), "forward")}
    ds = vary(load_scenario(PROFILES / "scenarios" / "deepseek-v3-2048.yaml"),
              global_batch_size=128)
    ds_calls = list(build_plan(ds).calls())
    bias = [c for c in ds_calls if c.op == "expert_bias"]
    assert {c.stage for c in bias} == set(range(1, 16))
    one = next(c for c in bias if c.stage == 1)
    assert (one.message_bytes, one.collective, len(one.group)) == (4096, "AllReduce", 128)
    assert one.group == tuple(range(128, 256))
    assert not [c for c in ds_calls if c.op == "moe_aux_loss"]   # tp 1, cp 1


def _ep_token_calls(plan, rank: int) -> dict:
    """op -> the first microbatch's token AllToAll of rank ``rank`` (first MoE layer of its
    stage, no recomputation)."""
    out: dict = {}
    for c in plan.calls():
        if c.dim == "ep" and c.collective == "AllToAll" and rank in c.group \
                and c.microbatch == 0 and not c.recompute and c.op not in out:
            out[c.op] = c
    return out


def test_deepseek_v3_dispatches_in_fp8_with_1x128_scales_and_combines_in_bf16():
    """DeepSeek-V3 (arXiv 2412.19437, Sec. 3.3.2-3.3.3): the tokens go to the experts in FP8
    (1 B per element) with one fp32 scale per 1x128 tile; the forward and backward combine stay
    BF16; the activation gradient before the down-projections (the backward of the combine,
    ``combine_grad``) goes out like the dispatch. Per rank and MoE layer, tokens b*s = 4,096,
    top_k 8, h 7,168: dispatch 4,096 x 8 x (7,168 x 1 + 7,168/128 x 4) = 242,221,056 B, combine
    4,096 x 8 x 7,168 x 2 = 469,762,048 B; the probs stay 4,096 x 8 x 2 B. Megatron-core's
    AllToAll dispatcher (``moe.token_dispatcher: alltoall``; the profile's is DeepEP's,
    tests/plan/test_moe_nodelimited.py)."""
    s = vary(load_scenario(PROFILES / "scenarios" / "deepseek-v3-2048.yaml"),
             global_batch_size=128)
    s = dataclasses.replace(s, model=dataclasses.replace(s.model, moe=dataclasses.replace(
        s.model.moe, token_dispatcher="alltoall")))
    assert s.model.moe.dispatch_dtype == "fp8"
    tokens, k, h = 1 * 4096, 8, 7168
    fp8 = tokens * k * (h * 1 + h // 128 * 4)
    bf16 = tokens * k * h * 2
    assert (fp8, bf16) == (242_221_056, 469_762_048)
    calls = _ep_token_calls(build_plan(s), 128)       # stage 1: MoE layers 3-6
    want = {"dispatch": (fp8, 1, "forward"), "combine": (bf16, 2, "forward"),
            "combine_grad": (fp8, 1, "backward"), "dispatch_grad": (bf16, 2, "backward"),
            "dispatch_probs": (tokens * k * 2, 2, "forward"),
            "dispatch_probs_grad": (tokens * k * 2, 2, "backward")}
    assert {op: (c.message_bytes, c.elem_bytes, c.phase) for op, c in calls.items()} == want
    assert all(len(c.group) == 64 and 3 <= c.layer <= 6 for c in calls.values())


def test_dispatch_dtype_scales_with_tp_sp_and_hidden_size_not_multiple_of_128():
    """Mixtral at tp 2 with sequence parallelism routes b*s/tp = 16,384 tokens x top_k 2 per rank
    (Megatron-core token_dispatcher.py); h 4,096 in FP8: 4,096 + 32 x 4 = 4,224 B per row, the
    combine 8,192 B (bf16). A hidden size of 4,100 starts a 33rd tile: 4,100 + 33 x 4 B. With
    ``dispatch_dtype`` equal to the training precision the plan is the default's, call for call."""
    s = load_scenario(PROFILES / "scenarios" / "mixtral-8x7b-ep.yaml")
    base = list(build_plan(s).calls())
    rows_ = 32768 // 2 * 2

    def with_dtype(dtype, h=None):  # type: ignore[no-untyped-def]
        moe = dataclasses.replace(s.model.moe, dispatch_dtype=dtype)
        model = dataclasses.replace(s.model, moe=moe, **({"hidden_size": h} if h else {}))
        return build_plan(dataclasses.replace(s, model=model))

    calls = _ep_token_calls(with_dtype("fp8"), 0)
    assert calls["dispatch"].message_bytes == calls["combine_grad"].message_bytes \
        == rows_ * (4096 + 32 * 4)
    assert calls["combine"].message_bytes == calls["dispatch_grad"].message_bytes \
        == rows_ * 4096 * 2
    odd = _ep_token_calls(with_dtype("fp8", 4100), 0)
    assert odd["dispatch"].message_bytes == rows_ * (4100 + 33 * 4)
    assert list(with_dtype("bf16").calls()) == base


def test_dispatch_dtype_is_checked_by_the_model_loader(tmp_path):
    """A dispatch dtype outside the known ones is one ProfileError naming the key."""
    import pytest
    import yaml
    from tokenpcap.config.model_profile import load_model
    from tokenpcap.errors import ProfileError
    data = yaml.safe_load((PROFILES / "models" / "mixtral-8x7b.yaml").read_text())
    data["moe"]["dispatch_dtype"] = "int4"
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError, match="moe.dispatch_dtype"):
        load_model(path)
