"""Context parallelism: the ring-attention sends of Transformer Engine's AttnFuncWithCPAndKVP2P
(transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py), counted per
rank, layer and microbatch, and what CP changes in the rest of the plan (Megatron-core)."""
from __future__ import annotations

import dataclasses
from collections import defaultdict
from pathlib import Path

import pytest

from tokenpcap.config.profiles import load_scenario
from tokenpcap.errors import InfeasiblePlanError
from tokenpcap.plan.build import build_plan
from tokenpcap.plan.context import kv_bytes, ring_steps

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "profiles" / "scenarios"


def with_cp(s, cp: int, **par):  # type: ignore[no-untyped-def]
    tr = {k: par.pop(k) for k in list(par) if k in ("recompute", "global_batch_size",
                                                    "overlap_grad_reduce", "bucket_size")}
    return dataclasses.replace(
        s, parallelism=dataclasses.replace(s.parallelism, context_parallel_size=cp, **par),
        training=dataclasses.replace(s.training, **tr))


def cross_cp(cp: int, **kw):  # type: ignore[no-untyped-def]
    """GPT-2 small on 8 single-GPU nodes with tp 1 (or 2), pp 2 and cp ranks: every CP ring edge
    crosses nodes."""
    s = load_scenario(SCEN / "gpt2-all-cross.yaml")
    tp = kw.pop("tp", 1)
    return with_cp(s, cp, dp=8 // (tp * 2 * cp), tp=tp, **kw)


def test_kv_bytes_is_the_shape_of_k_and_v_on_one_cp_rank():
    # Llama-3 70B (64 heads, 8 KV heads of head_dim 128, s 8192) at tp 8, cp 2, b 1, bf16:
    # K and V of [b, s/cp, kv_heads/tp, head_dim] = [1, 4096, 1, 128], two bytes each
    s = load_scenario(SCEN / "llama3-70b-64n.yaml")
    s = with_cp(s, 2, dp=s.parallelism.dp // 2)
    assert (s.parallelism.tp, s.training.micro_batch_size, s.training.precision) == (8, 1, "bf16")
    assert kv_bytes(s) == 2 * 1 * 4096 * 1 * 128 * 2 == 2_097_152
    # GPT-2 small (12 heads = KV heads, head_dim 64, s 1024) at tp 2, cp 4: [1, 256, 6, 64]
    g = cross_cp(4, tp=1)
    assert kv_bytes(g) == 2 * 256 * 12 * 64 * 2
    assert kv_bytes(load_scenario(SCEN / "dante.yaml")) == 0


@pytest.mark.parametrize("cp", [2, 3, 4, 8])
def test_ring_steps_are_te_forward_and_backward(cp: int):
    fwd, bwd = ring_steps(cp, 100)
    # forward: cp - 1 sends of K,V; backward: K,V at step 0, K,V + dK,dV at 1..cp-2, dK,dV last
    assert fwd == [100] * (cp - 1)
    assert bwd[0] == 100 and bwd[-1] == 100 and all(x == 200 for x in bwd[1:-1])
    assert len(bwd) == cp and sum(bwd) == 2 * (cp - 1) * 100
    assert ring_steps(1, 100) == ([], [])


def _cp_sends(plan) -> dict:  # type: ignore[no-untyped-def]
    """(rank, phase, recompute, layer, microbatch) -> [(op, dst, bytes)] of every CP send."""
    out: dict = defaultdict(list)
    for c in plan.calls():
        if c.dim == "cp":
            assert c.collective == "SendRecv" and c.group == (c.src, c.dst)
            out[c.src, c.phase, c.recompute, c.layer, c.microbatch].append(
                (c.op, c.dst, c.message_bytes))
    return out


@pytest.mark.parametrize("cp, recompute", [(2, "none"), (4, "none"), (4, "full")])
def test_every_rank_sends_te_ring_steps_per_layer_and_microbatch(cp: int, recompute: str):
    s = cross_cp(cp, recompute=recompute)
    plan = build_plan(s)
    kv = kv_bytes(s)
    lay = plan.layout
    sends = _cp_sends(plan)
    n_mb, layers = plan.microbatches, s.model.layers // s.parallelism.pp
    for r in range(lay.world_size):
        ring = lay.group_of("cp", r)
        k = ring.index(r)
        st = lay.coords(r).pp
        for L in range(st * layers, (st + 1) * layers):
            for j in range(n_mb):
                fwd = sends[r, "forward", False, L, j]
                assert sorted(fwd) == [(f"cp_kv_{i}", ring[(k + 1) % cp], kv)
                                       for i in range(cp - 1)]
                bwd = sorted(sends[r, "backward", False, L, j])
                assert [x[2] for x in bwd] == ring_steps(cp, kv)[1]
                assert {x[1] for x in bwd} == {ring[(k - 1) % cp]}
                assert sum(x[2] for x in fwd) == (cp - 1) * kv
                assert sum(x[2] for x in bwd) == 2 * (cp - 1) * kv
                rec = sends.get((r, "forward", True, L, j), [])
                assert sorted(rec) == (sorted(fwd) if recompute == "full" else [])
    rows = {x.name: x for x in plan.rows}
    ranks, total_layers = lay.world_size, s.model.layers
    per_rank_layers = total_layers // s.parallelism.pp
    fwd_calls = ranks * per_rank_layers * n_mb * (cp - 1) * (2 if recompute == "full" else 1)
    assert rows["cp/forward/SendRecv"].calls == fwd_calls
    assert rows["cp/backward/SendRecv"].calls == ranks * per_rank_layers * n_mb * cp
    # single-GPU nodes: every byte is on a NIC
    assert rows["cp/backward/SendRecv"].nic_bytes == \
        ranks * per_rank_layers * n_mb * 2 * (cp - 1) * kv


def test_cp_shrinks_per_token_buffers_and_widens_the_dp_group():
    base = load_scenario(SCEN / "dante.yaml")               # dp 4, tp 4 (SP), pp 2
    cp = with_cp(base, 2, dp=2)
    a, b = build_plan(base), build_plan(cp)
    ra, rb = ({r.name: r for r in p.rows} for p in (a, b))
    # TP and PP buffers hold s/cp tokens (Megatron-core schedules.py: seq_length // cp)
    for name in ("tp/forward/AllGather", "tp/forward/ReduceScatter", "pp/forward/SendRecv"):
        assert rb[name].message_bytes * 2 == ra[name].message_bytes, name
    # the cross-entropy AllReduces: b * s/cp fp32 values
    xent = {c.message_bytes for c in b.calls() if c.op == "xent_max"}
    assert xent == {1 * 1024 // 2 * 4}
    # the batch broadcast within TP still carries whole samples (before the CP split)
    assert {c.message_bytes for c in b.calls() if c.op == "batch_tokens"} == {1024 * 8}
    # DP gradients and the loss over dp x cp = 4 ranks (DDP's dp_cp_group); same buckets
    dpa = [c for c in a.calls() if c.dim == "dp"]
    dpb = [c for c in b.calls() if c.dim == "dp"]
    assert {len(c.group) for c in dpb} == {4}
    assert sorted(c.message_bytes for c in dpa) == sorted(c.message_bytes for c in dpb)
    for c in dpb:
        assert len({b.layout.coords(r).cp for r in c.group}) == 2
    # the global batch is split over dp only: twice the microbatches with half the replicas
    assert b.microbatches == 2 * a.microbatches
    assert b.to_json()["parallelism"]["context_parallel_size"] == 2
    assert b.to_json()["layout"]["groups"]["cp"]["size"] == 2


def test_default_bucket_size_counts_the_dp_cp_ranks():
    from tokenpcap.plan.calls import dp_bucket_size

    s = load_scenario(SCEN / "llama3.1-405b-2048.yaml")
    s = with_cp(s, 16, dp=s.parallelism.dp // 16, overlap_grad_reduce=True, bucket_size=None,
                global_batch_size=s.training.global_batch_size)
    dp_cp = s.parallelism.dp * 16
    assert dp_bucket_size(s, 0) == max(40_000_000, 1_000_000 * dp_cp)


@pytest.mark.parametrize("change, key, text", [
    (dict(cp=3), "parallelism.context_parallel_size", "2*context_parallel_size = 6"),
    (dict(cp=2, dp=4), "parallelism", "dp*context_parallel_size*tp*pp = 4*2*1*2 = 16"),
])
def test_infeasible_context_parallel_sizes_are_one_line_errors(change, key, text):
    from tokenpcap.config.profiles import check_feasible

    s = load_scenario(SCEN / "gpt2-all-cross.yaml")
    m = dataclasses.replace(s.model, seq_length=1028) if change["cp"] == 3 else s.model
    s = dataclasses.replace(s, model=m)
    s = with_cp(s, change["cp"], dp=change.get("dp", 1), tp=1)
    if change["cp"] == 3:
        s = dataclasses.replace(s, cluster=dataclasses.replace(s.cluster, nodes=6))
    with pytest.raises(InfeasiblePlanError) as e:
        check_feasible(s)
    msg = str(e.value)
    assert "\n" not in msg and f"{key}: got" in msg and text in msg


def test_context_parallel_size_is_read_from_the_scenario(tmp_path: Path):
    src = (SCEN / "gpt2-all-cross.yaml").read_text().replace(
        "parallelism: {dp: 2, tp: 2, pp: 2,",
        "parallelism: {dp: 1, tp: 2, pp: 2, context_parallel_size: 2,")
    src = src.replace("../../", str(ROOT) + "/").replace("../", str(ROOT / "profiles") + "/")
    p = tmp_path / "cp.yaml"
    p.write_text(src)
    s = load_scenario(p)
    assert s.parallelism.cp == 2 and build_plan(s).layout.cp == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text(src.replace("context_parallel_size: 2", "context_parallel_size: 0"))
    with pytest.raises(Exception) as e:
        load_scenario(bad)
    assert "context_parallel_size" in str(e.value) and "\n" not in str(e.value)


def test_cp_plan_pcap_estimate_equals_the_messages_generate_posts():
    """As tests/plan/test_plan.py does for the bundled scenarios: the plan's packet and byte
    counts equal generate's per-message prediction from the schedule, here with ring attention
    across nodes (cp 4: K,V, K,V + dK,dV and dK,dV sends)."""
    from tokenpcap.generate.size import predict_messages, record_bytes
    from tokenpcap.schedule.runner import Schedule

    s = cross_cp(4, tp=1, global_batch_size=2)
    for scale in (64, 100_000):
        plan = build_plan(s, scale=scale)
        sched = Schedule(plan, iterations=1, keep_nvlink=False)
        pred = predict_messages(sched)
        npk, nb, nak, ab = record_bytes(pred, "pcap", 262144, False, None)
        pc = plan.pcap
        assert pc["data_packets"] + pc["cts_packets"] + pc["ack_packets"] == \
            int(npk.sum() + nak.sum())
        assert pc["file_bytes"] == 24 + int(nb.sum() + ab.sum())
        assert {r.name for r in plan.rows} >= {"cp/forward/SendRecv", "cp/backward/SendRecv"}
