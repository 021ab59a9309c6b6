"""The interleaved 1F1B schedule: Megatron-core's order (schedules.py), the P2P messages of
model chunks, the bubble of Narayanan et al. 2021, Sec. 2.2.2, and DP buckets per chunk."""
from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.schedule.test_schedule import tiny_scenario
from tokenpcap.config.profiles import load_scenario
from tokenpcap.errors import InfeasiblePlanError, InputError
from tokenpcap.plan.build import build_plan
from tokenpcap.plan.pipeline import chunk_layers
from tokenpcap.records import DIMS, KIND_DATA
from tokenpcap.schedule.compute import stage_times
from tokenpcap.schedule.interleave import interleaved_one_f_one_b, schedule_table
from tokenpcap.schedule.program import one_f_one_b
from tokenpcap.schedule.runner import Schedule


def test_schedule_table_is_megatrons_example():
    # schedules.py, forward_backward_pipelining_with_interleaving: "the tunable schedule table
    # for PP2 N3M5 with VP2": microbatch_id 0 1 2 0 1 2 3 4 3 4, model_chunk_id 0 0 0 1 1 1 0 0 1 1
    t = schedule_table(5, 2, 3)
    assert [j for j, _ in t] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
    assert [c for _, c in t] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]


def test_warm_up_and_order_of_one_stage():
    # p 4, v 2, m 8: stage 0 runs (4 - 0 - 1) * 2 + (2 - 1) * 4 = 10 warm-up forwards
    order = interleaved_one_f_one_b(4, 0, 8, 2)
    first_b = next(i for i, x in enumerate(order) if x[0] == "B")
    assert first_b == 11                       # 10 warm-up forwards, then forward 10, backward 0
    assert order[:4] == [("F", 0, 0), ("F", 1, 0), ("F", 2, 0), ("F", 3, 0)]
    assert order[4:8] == [("F", 0, 1), ("F", 1, 1), ("F", 2, 1), ("F", 3, 1)]
    assert order[11] == ("B", 0, 1)            # the backward starts in the last chunk
    # the last stage starts its 1F1B after (v - 1) * p = 4 forwards
    last = interleaved_one_f_one_b(4, 3, 8, 2)
    assert [x[0] for x in last[:6]] == ["F"] * 5 + ["B"] and last[5] == ("B", 0, 1)


@given(st.integers(1, 6), st.integers(1, 4), st.integers(1, 4), st.data())
def test_every_chunk_of_every_microbatch_once_forward_before_backward(pp, v, groups, data):
    m = pp * groups
    stage = data.draw(st.integers(0, pp - 1))
    order = interleaved_one_f_one_b(pp, stage, m, v)
    assert Counter(order) == Counter([(k, j, c) for k in "FB" for j in range(m) for c in range(v)])
    for j in range(m):
        for c in range(v):
            assert order.index(("F", j, c)) < order.index(("B", j, c))
    if v == 1:
        assert order == [(k, j, 0) for k, j in one_f_one_b(pp, stage, m)]


def test_bad_interleaving_arguments():
    with pytest.raises(InputError):
        interleaved_one_f_one_b(4, 4, 8, 2)
    with pytest.raises(InputError):
        interleaved_one_f_one_b(4, 0, 8, 2, group=2)      # Megatron: group in [pp, m]


def vpp_scenario(tmp_path, v: int, *, p: int = 4, m: int = 8, layers: int = 32, extra: str = "",
                 dp: int = 2):
    path = tiny_scenario(tmp_path, f"vpp{v}", dp=dp, tp=1, pp=p, gbs=dp * m, extra=extra,
                         par=f", virtual_pipeline_model_parallel_size: {v}")
    path.write_text(path.read_text().replace("layers: 4", f"layers: {layers}"))
    return path


def test_interior_stages_send_2_v_m_p2p_messages(tmp_path):
    v, p, m = 3, 4, 8
    s = load_scenario(vpp_scenario(tmp_path, v, p=p, m=m, layers=24))
    plan = build_plan(s)
    sends = Counter()
    for c in plan.calls():
        if c.dim == "pp":
            sends[plan.layout.coords(c.src).pp, c.phase] += 1
    dp = s.parallelism.dp
    for stage in range(p):
        fwd, bwd = sends[stage, "forward"] // dp, sends[stage, "backward"] // dp
        # every chunk sends its activations on, except the model's last chunk; gradients back,
        # except the model's first chunk (Narayanan et al. 2021, Sec. 2.2.2: v x the messages)
        assert fwd == v * m - (m if stage == p - 1 else 0)
        assert bwd == v * m - (m if stage == 0 else 0)
        if 0 < stage < p - 1:
            assert fwd + bwd == 2 * v * m
    # stage p-1 chunk c hands to stage 0 chunk c+1
    last0, first0 = plan.layout.rank(p - 1, 0, 0), plan.layout.rank(0, 0, 0)
    wrap = [c for c in plan.calls() if c.dim == "pp" and c.src == last0 and c.phase == "forward"]
    assert {c.dst for c in wrap} == {first0}
    assert sorted({c.layer for c in wrap}) == [r[-1] for r in chunk_layers(s, p - 1)[:-1]]
    # and the programs make exactly these calls, in Megatron's order
    sched = Schedule(plan, nics=())
    for _ in sched.run():
        pass
    assert plan.to_json()["bubble_fraction"] == pytest.approx((p - 1) / (v * m))


@pytest.mark.parametrize("v", [1, 2, 4])
def test_a_pure_interleaved_pipeline_takes_narayanans_time(tmp_path, v):
    """Narayanan et al. 2021, Sec. 2.2.2: with v model chunks per device the bubble is (p − 1)/v
    slots of t_f + t_b, so an iteration of m microbatches takes (m + (p − 1)/v)·(t_f + t_b),
    t_f and t_b the forward and backward compute of one microbatch on a whole stage. With
    communication negligible (tiny activations, compute made slow by a low MFU): within 1%."""
    p, m = 4, 8
    path = vpp_scenario(tmp_path, v, p=p, m=m, layers=32, extra=", mfu: 0.001")
    path.write_text(path.read_text().replace("vocab_size: 512", "vocab_size: 64"))
    s = load_scenario(path)
    sched = Schedule(build_plan(s), nics=())
    for _ in sched.run():
        pass
    times = stage_times(s, 1)
    layers = 32 // p
    t_f = layers * (times.attn_fwd + times.mlp_fwd)
    t_b = layers * (times.attn_bwd + times.mlp_bwd)
    tl = sched.timeline
    fb = tl[np.isin(tl["what"], [b"F", b"B"])]
    span = int(fb["end_ns"].max() - fb["start_ns"].min())
    want = (m + (p - 1) / v) * (t_f + t_b)
    assert abs(span - want) <= 0.01 * want, (span, want)


def test_dp_buckets_of_each_chunk_follow_its_last_backward(tmp_path):
    """Megatron wraps every model chunk in its own DDP: a chunk's gradient buffer is reduced as
    soon as its backward of the last microbatch is done (with overlap_grad_reduce), so on stage
    0 the later chunk's buffer goes out while the first chunk still computes its backward."""
    v, p, m = 2, 4, 8
    path = vpp_scenario(tmp_path, v, p=p, m=m, layers=16,
                        extra=", overlap_grad_reduce: true, bucket_size: 100000")
    s = load_scenario(path)
    sched = Schedule(build_plan(s))
    for _ in sched.run():
        pass
    call = sched.call
    d = sched.messages[(sched.messages["kind"] == KIND_DATA)
                       & (sched.messages["dim"] == DIMS.index("dp"))]
    tl = sched.timeline
    lay = sched.layout
    for r in range(lay.world_size):
        stage = lay.coords(r).pp
        chunks = chunk_layers(s, stage)
        mine = d[d["rank_src"] == r]
        by_chunk = defaultdict(list)
        for row in mine:
            c = call(int(row["call_id"]))
            if c.op.startswith("dense_grad_bucket"):
                by_chunk[int(c.op.rsplit("chunk", 1)[1])].append(int(row["start_ns"]))
        assert set(by_chunk) == {0, 1}
        b = tl[(tl["rank"] == r) & (tl["what"] == b"B")]
        last = b[b["microbatch"] == m - 1]
        assert len(last) == v
        first_end, second_end = sorted(last["end_ns"].tolist())
        # the last chunk (v - 1) finishes its final backward first: its buffer goes out then,
        # before the first chunk's final backward ends; chunk 0's after it
        assert min(by_chunk[1]) >= first_end and min(by_chunk[1]) < second_end
        assert min(by_chunk[0]) >= (second_end if stage > 0 else last["start_ns"].max())
        # stage 0, chunk 0: several buckets (bucketing only there), the others one per buffer
        n0 = len({call(int(x["call_id"])).bucket for x in mine
                  if call(int(x["call_id"])).op.endswith("chunk0")})
        assert (n0 > 1) == (stage == 0)


def test_infeasible_interleaving_is_a_one_line_error(tmp_path):
    path = vpp_scenario(tmp_path, 3, p=4, m=8, layers=32)      # 32 % (4 * 3) != 0
    with pytest.raises(InfeasiblePlanError) as e:
        load_scenario(path)
    msg = str(e.value)
    assert "\n" not in msg and "virtual_pipeline_model_parallel_size: got 3" in msg
    path = vpp_scenario(tmp_path, 2, p=4, m=6, layers=32)      # 6 microbatches, pp 4
    with pytest.raises(InfeasiblePlanError, match="a multiple of pp 4"):
        load_scenario(path)


def test_without_overlap_every_chunk_is_reduced_after_the_backward(tmp_path):
    """Without overlap_grad_reduce Megatron reduces the gradients in finalize_model_grads after
    the whole backward, model chunk by model chunk (chunk 0 first)."""
    v, p, m = 2, 4, 8
    s = load_scenario(vpp_scenario(tmp_path, v, p=p, m=m, layers=16))
    assert not s.training.overlap_grad_reduce
    sched = Schedule(build_plan(s))
    for _ in sched.run():
        pass
    call = sched.call
    d = sched.messages[(sched.messages["kind"] == KIND_DATA)
                       & (sched.messages["dim"] == DIMS.index("dp"))]
    tl = sched.timeline
    for r in range(sched.layout.world_size):
        mine = d[d["rank_src"] == r]
        b_end = tl[(tl["rank"] == r) & (tl["what"] == b"B")]["end_ns"].max()
        starts = defaultdict(list)
        for row in mine:
            c = call(int(row["call_id"]))
            if c.phase == "backward":
                starts[int(c.op.rsplit("chunk", 1)[1])].append(int(row["start_ns"]))
        assert set(starts) == {0, 1}
        assert min(starts[0]) >= b_end and min(starts[1]) >= b_end
        assert min(starts[0]) < min(starts[1])          # chunk 0's buffer first


def test_the_embedding_and_loss_counted_as_layers_make_shorter_end_chunks(tmp_path):
    """Llama 3's split (Sec. 3.3.2, Megatron's account_for_embedding/loss_in_pipeline_split)
    with interleaving: 14 layers + embedding + loss = 16 slots on p 4 x v 2 chunks of 2, so
    chunk 0 of stage 0 and chunk 1 of stage 3 hold one layer. The stages hold the layers and the
    gradient bytes of the split without chunks; the chunks tile the model; the one-layer chunk's
    forward takes half the time of the two-layer one (compute made dominant by a low MFU)."""
    v, p, m = 2, 4, 8
    split = (", account_for_embedding_in_pipeline_split: true, "
             "account_for_loss_in_pipeline_split: true")
    path = vpp_scenario(tmp_path, v, p=p, m=m, layers=14, extra=", mfu: 0.001")
    path.write_text(path.read_text().replace("virtual_pipeline_model_parallel_size: 2",
                                             "virtual_pipeline_model_parallel_size: 2" + split))
    s = load_scenario(path)
    chunks = [chunk_layers(s, st) for st in range(p)]
    assert [len(r) for r in chunks[0]] == [1, 2] and [len(r) for r in chunks[-1]] == [2, 1]
    assert sorted(L for c in chunks for r in c for L in r) == list(range(14))
    flat = tmp_path / "flat.yaml"
    flat.write_text(path.read_text().replace("virtual_pipeline_model_parallel_size: 2",
                                             "virtual_pipeline_model_parallel_size: 1"))
    plan, plan1 = build_plan(s), build_plan(load_scenario(flat))

    def dp_bytes(pl):
        out = Counter()
        for c in pl.calls():
            if c.dim == "dp":
                out[c.stage] += c.message_bytes
        return out
    assert dp_bytes(plan) == dp_bytes(plan1) and len(dp_bytes(plan)) == p
    sent = {st: sorted({c.layer for c in plan.calls() if c.dim == "pp" and c.stage == st
                        and c.phase == "forward"}) for st in range(p)}
    assert sent[0] == [chunks[0][0][-1], chunks[0][1][-1]]            # a send after each chunk
    assert sent[p - 1] == [chunks[p - 1][0][-1]]                      # the model's end: none
    sched = Schedule(plan, nics=())
    for _ in sched.run():
        pass
    tl = sched.timeline
    f = tl[(tl["rank"] == 0) & (tl["what"] == b"F")]
    d = np.sort((f["end_ns"] - f["start_ns"]).astype(np.int64))
    assert len(d) == v * m
    short, long_ = d[:m], d[m:]
    assert np.allclose(long_, 2 * short, rtol=0.05), (short, long_)
