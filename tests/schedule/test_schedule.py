"""Stage 5: compute times, 1F1B, blocking TP, DP overlap, ring dependencies, byte conservation.

Right values: Narayanan et al. 2021 Eq. 3 (FLOPs of an iteration with full recomputation) and
Fig. 4 (the 1F1B order of 4 workers and 8 microbatches); the ring rule that rank i forwards at step
k+1 what it received from rank i-1 at step k; the plan's NIC bytes (stage 3) per phase and NIC.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.collectives.algorithms import selectable_algorithms
from tokenpcap.schedule.compute import flops_time_ns, iteration_flops, stage_times
from tokenpcap.records import COLLECTIVES, DIMS, KIND_DATA, PHASES, phase_label
from tokenpcap.plan.build import build_plan
from tokenpcap.config.profiles import load_scenario
from tokenpcap.schedule.program import one_f_one_b
from tokenpcap.schedule.runner import NVLINK_LATENCY_NS, Schedule

ROOT = Path(__file__).resolve().parents[2]

TINY_MODEL = """  name: tiny-gpt
  source: "a small GPT-2-like decoder for tests"
  layers: 4
  hidden_size: 256
  attention_heads: 4
  vocab_size: 512
  seq_length: 128
"""


def tiny_scenario(tmp: Path, name: str, dp: int, tp: int, pp: int, gbs: int, *,
                  cluster: str = "h100-rocev2-8x1", algorithm: str = "ring", channels: int = 2,
                  extra: str = "", par: str = "", model: str = "") -> Path:
    """A scenario on ``profiles/clusters/<cluster>.yaml`` with a tiny inline GPT model."""
    path = tmp / f"{name}.yaml"
    path.write_text(
        f"name: {name}\ncorpus: {ROOT / 'samples' / 'divina_commedia.txt'}\ntokenizer: utf8\n"
        f"model:\n{TINY_MODEL}{model}cluster: {ROOT / 'profiles' / 'clusters' / (cluster + '.yaml')}\n"
        f"parallelism: {{dp: {dp}, tp: {tp}, pp: {pp}{par}}}\n"
        f"training: {{micro_batch_size: 1, global_batch_size: {gbs}, precision: bf16, "
        f"grad_reduce_dtype: bf16{extra}}}\n"
        f"collectives: {{algorithm: {algorithm}, channels: {channels}}}\n")
    return path


def run(path: Path, **kw) -> tuple[Schedule, np.ndarray]:
    s = load_scenario(path)
    sched = Schedule(build_plan(s), **kw)
    tx = np.concatenate(list(sched.run()))
    return sched, tx


# ------------------------------------------------------------------ compute


def test_iteration_flops_is_narayanan_eq3_with_causal_attention():
    s = load_scenario(ROOT / "profiles" / "scenarios" / "gpt3-175b-megatron.yaml")
    m, t = s.model, s.training
    B, seq, l, h, V = t.global_batch_size, m.seq_length, m.layers, m.hidden_size, m.vocab_size
    assert t.recompute == "full"
    # Eq. 3, F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)), with the attention scores causal (half
    # of Eq. 3's s/(6h) term, as Megatron-LM counts them): 96 B s l h^2 (1 + s/(12h) + ...),
    # multiplied out to stay in integers
    eq3 = 96 * B * seq * l * h * h + 8 * B * seq * seq * l * h + 6 * B * seq * h * V
    assert iteration_flops(s) == eq3


def test_flops_time_uses_exact_decimal_rates():
    # 989 TFLOP/s * 0.45 = 445.05e12 FLOP/s = 445,050 FLOP/ns
    assert flops_time_ns(445_050_000, 989, 0.45) == 1000
    assert flops_time_ns(445_050_001, 989, 0.45) == 1001         # rounded up
    assert flops_time_ns(445_050_000 * 4, 989, 0.45, scale=4) == 1000
    assert flops_time_ns(0, 989, 0.45) == 0


def test_backward_is_twice_forward_and_tp_divides_work():
    s = load_scenario(ROOT / "profiles" / "scenarios" / "dante.yaml")
    t = stage_times(s, 0)
    assert abs(t.attn_bwd - 2 * t.attn_fwd) <= 1 and abs(t.mlp_bwd - 2 * t.mlp_fwd) <= 1
    assert t.logits_fwd == 0 and stage_times(s, 1).logits_fwd > 0


# ------------------------------------------------------------------ 1F1B


def test_one_f_one_b_is_narayanan_figure_4():
    # Fig. 4 (top): 4 workers, 8 microbatches; forward and backward alternate after warm-up
    fig = {0: "1 2 3 4 1 5 2 6 3 7 4 8 5 6 7 8", 1: "1 2 3 1 4 2 5 3 6 4 7 5 8 6 7 8",
           2: "1 2 1 3 2 4 3 5 4 6 5 7 6 8 7 8", 3: "1 1 2 2 3 3 4 4 5 5 6 6 7 7 8 8"}
    for stage, seq in fig.items():
        order = one_f_one_b(4, stage, 8)
        assert [j + 1 for _, j in order] == [int(x) for x in seq.split()]
        warm = 4 - stage - 1
        assert [k for k, _ in order[:warm]] == ["F"] * warm
        assert [k for k, _ in order[warm:warm + 8]] == ["F", "B"] * 4 if warm < 4 else True


def expected_sends(pp: int, stage: int, m: int) -> list[tuple[str, int]]:
    """The point-to-point sends of one stage in Narayanan's 1F1B order, written independently of
    tokenpcap.schedule.program: warm-up min(p-s-1, m) forwards, then forward/backward pairs, then the rest."""
    w = min(pp - stage - 1, m)
    seq = [("F", j) for j in range(w)]
    f, b = w, 0
    while b < m:
        if f < m:
            seq.append(("F", f))
            f += 1
        seq.append(("B", b))
        b += 1
    return [x for x in seq if (x[0] == "F" and stage < pp - 1) or (x[0] == "B" and stage > 0)]


def test_pipeline_sends_follow_1f1b_per_stage(tmp_path):
    sched, _ = run(tiny_scenario(tmp_path, "pp4", dp=2, tp=1, pp=4, gbs=16))
    m = sched.messages
    lay = sched.layout
    pp_msgs = m[(m["kind"] == KIND_DATA) & (m["dim"] == DIMS.index("pp"))]
    for r in range(lay.world_size):
        mine = pp_msgs[pp_msgs["rank_src"] == r]
        first = {}
        for row in mine[np.argsort(mine["first_tx_ns"], kind="stable")]:
            key = ("F" if PHASES[row["phase"]] == "forward" else "B", int(row["microbatch"]))
            first.setdefault(key, int(row["first_tx_ns"]))
        got = sorted(first, key=first.get)
        assert got == expected_sends(4, lay.coords(r).pp, 8), r
    tl = sched.timeline
    for r in range(lay.world_size):
        blocks = tl[(tl["rank"] == r) & np.isin(tl["what"], [b"F", b"B"])]
        order = [(x["what"].decode(), int(x["microbatch"])) for x in np.sort(blocks, order="start_ns")]
        assert order == one_f_one_b(4, lay.coords(r).pp, 8)
        assert (blocks["end_ns"] > blocks["start_ns"]).all()


# ------------------------------------------------------------------ dependencies and blocking


def test_ring_step_k_plus_1_never_precedes_arrival_of_step_k(tmp_path):
    sched, _ = run(tiny_scenario(tmp_path, "ring8", dp=8, tp=1, pp=1, gbs=8))
    m = sched.messages
    dp = m[(m["kind"] == KIND_DATA) & (m["dim"] == DIMS.index("dp"))]
    assert dp["step"].max() == 2 * (8 - 1) - 1                  # ring AllReduce over 8 ranks
    # slice j of (call, step, sender, channel): messages in id order (posted in slice order)
    index = defaultdict(list)
    for row in dp[np.argsort(dp["msg_id"])]:
        index[(int(row["call_id"]), int(row["step"]), int(row["rank_src"]), int(row["qp"]))].append(row)
    checked = 0
    for (call, step, src, qp), rows in index.items():
        if step == 0:
            continue
        pred = index[(call, step - 1, (src - 1) % 8, qp)]       # rank i-1 sends to i
        assert len(pred) == len(rows)
        for j, row in enumerate(rows):
            assert pred[j]["rank_dst"] == src
            assert row["first_tx_ns"] >= pred[j]["arrival_ns"]
            checked += 1
    assert checked > 100


def test_tp_collectives_block_and_dp_overlaps_backward(tmp_path):
    # buckets of 400 kB: a stage holds several, the first is ready before the backward ends
    sched, _ = run(tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8,
                                 extra=", overlap_grad_reduce: true, bucket_size: 200000"))
    m = sched.messages
    d = m[m["kind"] == KIND_DATA]
    tl = sched.timeline
    for r in range(sched.layout.world_size):
        # TP: a rank starts sending for its next TP call only after all data of its previous
        # TP call has arrived at it (the next compute needs the result)
        tp = d[(d["dim"] == DIMS.index("tp")) & ((d["rank_src"] == r) | (d["rank_dst"] == r))
               & (d["iteration"] == 0)]
        calls = sorted(set(tp["call_id"].tolist()), key=lambda c: tp["first_tx_ns"][tp["call_id"] == c].min())
        for a, b in zip(calls, calls[1:]):
            into_a = tp["arrival_ns"][(tp["call_id"] == a) & (tp["rank_dst"] == r)]
            if not into_a.size:                  # the root of a batch Broadcast receives none
                continue
            done_a = into_a.max()
            from_b = tp["first_tx_ns"][(tp["call_id"] == b) & (tp["rank_src"] == r)]
            if not from_b.size:                  # a Broadcast's last rank sends none
                continue
            start_b = from_b.min()
            assert start_b >= done_a
        # DP buckets go out while the rank still computes its last backward, optimizer after;
        # Megatron buckets only the first stage (DDP: bucket_size None for pp rank > 0), so
        # the last stage reduces its one buffer after its backward
        dpm = d[(d["dim"] == DIMS.index("dp")) & (d["rank_src"] == r)]
        b_blocks = tl[(tl["rank"] == r) & (tl["what"] == b"B")]
        last_b = b_blocks[b_blocks["microbatch"] == b_blocks["microbatch"].max()][0]
        if sched.layout.coords(r).pp == 0:
            assert dpm["first_tx_ns"].min() < last_b["end_ns"]
            assert dpm["first_tx_ns"].min() >= last_b["start_ns"]
        else:
            assert dpm["first_tx_ns"].min() >= last_b["end_ns"]
        opt = tl[(tl["rank"] == r) & (tl["what"] == b"O")][0]
        into = d[(d["dim"] == DIMS.index("dp")) & (d["rank_dst"] == r)
                 & (d["phase"] == PHASES.index("backward"))]       # the gradients, not the loss
        assert opt["start_ns"] >= into["arrival_ns"].max()


def test_nvlink_copies_stay_off_the_nics(tmp_path):
    # dante: TP (4 GPUs) inside a node: no TP message reaches the engine, all go over NVLink
    s = load_scenario(ROOT / "profiles" / "scenarios" / "dante.yaml")
    sched = Schedule(build_plan(s), scale=64)
    for _ in sched.run():
        pass
    m = sched.messages
    assert not (m["dim"] == DIMS.index("tp")).any()
    nv = sched.nvlink
    tp = nv[nv["dim"] == DIMS.index("tp")]
    assert len(tp) and (tp["rank_src"] // 8 == tp["rank_dst"] // 8).all()
    rate = 3600                                   # nvlink_gbps of the cluster: bits per ns
    assert ((tp["arrival_ns"] - tp["start_ns"]) == -(-tp["size_bytes"] * 8 // rate)
            + NVLINK_LATENCY_NS).all()



def assert_data_bytes_equal_the_plan(m: np.ndarray, plan) -> None:  # type: ignore[no-untyped-def]
    """Data message bytes per phase label and per sending NIC equal the plan's NIC bytes."""
    d = m[m["kind"] == KIND_DATA]
    got = defaultdict(int)
    for row in d:
        got[phase_label(int(row["dim"]), int(row["phase"]), int(row["collective"]))] += int(row["size_bytes"])
    assert dict(got) == {r.name: r.nic_bytes for r in plan.rows if r.nic_bytes}
    want = plan.nic_bytes_per_nic()
    per_nic = np.bincount(d["src_nic"], weights=d["size_bytes"], minlength=want.size).astype(np.int64)
    assert (per_nic == want).all()


# ------------------------------------------------------------------ bytes


@pytest.mark.parametrize("alg", ["ring", "tree"])
def test_rails_every_nic_of_the_node_sends_what_the_plan_says(tmp_path, alg):
    """dp 32 on 4 nodes of 8 GPUs and 8 NICs, 16 channels (NCCL's on this cluster): each
    channel crosses nodes on its own NIC, so all 32 NICs send data, as the plan counts."""
    path = tiny_scenario(tmp_path, "rails", dp=32, tp=1, pp=1, gbs=32, algorithm=alg,
                         cluster="h100-rocev2-400g", channels=16)
    sched, _ = run(path)
    assert_data_bytes_equal_the_plan(sched.messages, sched.plan)
    d = sched.messages[sched.messages["kind"] == KIND_DATA]
    assert set(d["src_nic"].tolist()) == set(range(32))


@pytest.mark.parametrize("name,dp,tp,pp,alg", [("cross", 2, 2, 2, "ring"), ("tree", 4, 1, 2, "tree")])
def test_message_bytes_equal_the_plan_per_phase_and_nic(tmp_path, name, dp, tp, pp, alg):
    path = tiny_scenario(tmp_path, name, dp=dp, tp=tp, pp=pp, gbs=8, algorithm=alg)
    sched, tx = run(path)
    plan = sched.plan
    m = sched.messages
    assert_data_bytes_equal_the_plan(m, plan)
    # and what the NICs actually sent (data packets of the engine) adds up to the same
    assert (m["arrival_ns"] >= 0).all()


#: Bundled scenarios whose plan and schedule build in about a second at any scale.
SMALL_SCENARIOS = ("dante", "gpt2-all-cross", "llama2-7b-a100-ib", "llama3-8b-zero3",
                   "mixtral-8x7b-ep", "mixtral-8x7b-ep-64")


@settings(max_examples=20, deadline=None)
@given(name=st.sampled_from(SMALL_SCENARIOS),
       scale=st.one_of(st.sampled_from([1, 10 ** 7, 10 ** 8, 10 ** 9]), st.integers(1, 10 ** 9)))
def test_the_transfers_carry_the_plans_nic_bytes_per_phase_and_nic_at_any_scale(name, scale):
    """The data messages the schedule posts (known before it runs) sum, per phase label and
    sending NIC, to the plan's rows at any --scale up to 10^9; every AllToAll call of an EP
    scenario sends to every peer of its group on another node (none drops out however small
    the scale makes it)."""
    plan = build_plan(load_scenario(ROOT / "profiles" / "scenarios" / f"{name}.yaml"), scale=scale)
    sched = Schedule(plan, keep_messages=False)
    tr = sched.nic_transfers([0])
    codes = np.stack([tr["dim"], tr["phase"], tr["collective"]], axis=1)
    keys, inv = np.unique(codes, axis=0, return_inverse=True)
    got = {}
    for k, key in enumerate(keys.tolist()):
        at = inv.ravel() == k
        got[phase_label(*key)] = np.bincount(tr["src_nic"][at], weights=tr["size_bytes"][at],
                                             minlength=plan.layout.nodes * plan.layout.nics_per_node)
    want = {r.name: r.nic_bytes_by_nic(plan.layout) for r in plan.rows if r.nic_bytes}
    assert sorted(got) == sorted(want)
    for label, per_nic in want.items():
        assert (got[label].astype(np.int64) == per_nic).all(), label
    a2a = np.flatnonzero((tr["dim"] == DIMS.index("ep"))
                         & (tr["collective"] == COLLECTIVES.index("AllToAll")))
    peers: dict[int, set] = defaultdict(set)
    for c, a, b in zip(*(tr[k][a2a].tolist() for k in ("call_id", "rank_src", "rank_dst"))):
        peers[c].add((a, b))
    gpn = plan.layout.gpus_per_node
    for c, pairs in peers.items():
        g = plan.call(c).group
        assert pairs == {(a, b) for a in g for b in g if a // gpn != b // gpn}, c
    across = sum(len(f.insts) for f in plan.families if f.dim == "ep" and f.collective == "AllToAll"
                 for g in f.groups if len({r // gpn for r in g}) > 1)
    assert len(peers) == across
    if name == "mixtral-8x7b-ep":
        assert across == 768 + 384                     # its expert AllToAlls cross nodes


VARIANTS = {
    # ZeRO-3 (per-layer gathers forward and backward, gradient ReduceScatter per microbatch)
    "zero3": dict(dp=8, tp=1, pp=1, gbs=8, par=", zero_stage: 3"),
    # ZeRO-1, sequence parallelism, selective recomputation, double binary tree, InfiniBand
    "ib-sp-tree": dict(dp=4, tp=4, pp=2, gbs=8, cluster="a100-hdr-ib", algorithm="tree",
                       par=", sequence_parallel: true, zero_stage: 1",
                       extra=", recompute: selective, overlap_grad_reduce: true, bucket_size: 150000"),
    # MoE with expert parallelism across nodes, full recomputation
    "moe": dict(dp=4, tp=1, pp=2, gbs=8, par=", ep: 2", extra=", recompute: full",
                model="  moe: {experts: 4, top_k: 2}\n"),
    # MoE with tp 2 and sequence parallelism (the token dispatcher's TP AllGather and
    # ReduceScatter, the counts AllGather over TP x EP), EP across nodes
    "moe-tp": dict(dp=2, tp=2, pp=2, gbs=4, par=", ep: 2, sequence_parallel: true",
                   model="  moe: {experts: 4, top_k: 2}\n"),
    # context parallelism across nodes: ring-attention K,V sends forward, K,V + dK,dV backward,
    # replayed by the full recomputation; sequence parallelism over s/cp tokens
    "cp": dict(dp=1, tp=2, pp=2, gbs=2, par=", context_parallel_size: 2, sequence_parallel: true",
               extra=", recompute: full"),
    # cp 4 (the backward's middle steps carry K,V and dK,dV) with MoE: EP carved out of dp x cp
    "cp-moe": dict(dp=1, tp=1, pp=2, gbs=2, par=", context_parallel_size: 4, ep: 2",
                   model="  moe: {experts: 4, top_k: 2}\n"),
    # everything at once: interleaved 1F1B (2 chunks per stage), ring attention over 4 CP
    # ranks, experts over ep 2 of the dp x cp ranks, ZeRO-1 buckets per chunk, full recompute
    "vpp-cp-moe": dict(dp=1, tp=1, pp=2, gbs=4, model="  moe: {experts: 4, top_k: 2}\n",
                       par=", context_parallel_size: 4, ep: 2, zero_stage: 1, "
                           "virtual_pipeline_model_parallel_size: 2",
                       extra=", recompute: full, overlap_grad_reduce: true, bucket_size: 50000"),
    # hierarchical AllReduce: DP groups with 2 ranks on each of 2 nodes
    "hier": dict(dp=4, tp=4, pp=2, gbs=8, cluster="h100-rocev2-400g", algorithm="hierarchical",
                 par=", sequence_parallel: true"),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_kind_of_call_runs_and_conserves_bytes(tmp_path, variant):
    kw = dict(VARIANTS[variant])
    path = tiny_scenario(tmp_path, variant, kw.pop("dp"), kw.pop("tp"), kw.pop("pp"), kw.pop("gbs"), **kw)
    sched, tx = run(path, iterations=2)
    plan = sched.plan
    d = sched.messages[sched.messages["kind"] == KIND_DATA]
    got = defaultdict(int)
    for row in d:
        got[phase_label(int(row["dim"]), int(row["phase"]), int(row["collective"]))] += int(row["size_bytes"])
    assert dict(got) == {r.name: 2 * r.nic_bytes for r in plan.rows if r.nic_bytes}
    n_nics = len(plan.nic_bytes_per_nic())
    per_nic = np.bincount(d["src_nic"], weights=d["size_bytes"], minlength=n_nics).astype(np.int64)
    assert (per_nic == 2 * plan.nic_bytes_per_nic()).all()
    # iteration 1 of a rank starts after its iteration 0 ended
    tl = sched.timeline
    for r in range(sched.layout.world_size):
        mine = tl[tl["rank"] == r]
        assert mine["start_ns"][mine["iteration"] == 1].min() >= mine["end_ns"][mine["iteration"] == 0].max()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=st.sampled_from([(8, 1, 1), (4, 2, 1), (2, 2, 2), (1, 2, 4), (2, 1, 4), (1, 4, 2)]),
       alg=st.sampled_from(selectable_algorithms()), channels=st.integers(1, 3),
       mb=st.integers(1, 3))
def test_random_small_scenarios_conserve_payload(tmp_path, shape, alg, channels, mb):
    dp, tp, pp = shape
    path = tiny_scenario(tmp_path, "rand", dp, tp, pp, gbs=dp * mb, algorithm=alg,
                         channels=channels, extra=", overlap_grad_reduce: true, bucket_size: 250000")
    sched, tx = run(path, scale=4)
    d = sched.messages[sched.messages["kind"] == KIND_DATA]
    assert (d["arrival_ns"] > d["start_ns"]).all()
    # every packet of every data message left its NIC
    sent = np.bincount(tx["msg"][tx["kind"] == 0], minlength=len(sched.messages))
    assert (sent[d["msg_id"]] == d["n_packets"]).all()
    # and with scale, the data are the plan's calls scaled, summed by the stage-3 accounting;
    # on the wire (NCCL's LL/LL128 lines of small calls) the plan's per-rank wire bytes
    from tokenpcap.collectives.traffic import per_rank_bytes
    want = np.zeros(sched.layout.world_size, np.int64)
    for c in sched.calls():
        want[list(c.group)] += per_rank_bytes(c, sched.plan.algorithm, sched.layout).nic_bytes
    got = np.bincount(d["rank_src"], weights=d["size_bytes"], minlength=len(want)).astype(np.int64)
    wire = sum(r.nic_bytes_by_rank for r in sched.plan.rows)
    assert (got == wire).all()
    assert sum(r.nic_payload_bytes for r in sched.plan.rows) == int(want.sum())
    if sched.plan.line_protocols() is None:            # every call Simple: the data themselves
        assert (got == want).all()


def test_the_schedule_takes_the_plans_scale_and_never_scales_twice(tmp_path):
    """A plan built at scale 4 runs with its own sizes: the data messages sum, per phase and NIC,
    to the scaled plan's rows (scaling again would give a quarter of that). Schedule(plan,
    scale=4) on an unscaled plan plans again at 4 and runs the same messages."""
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    s = load_scenario(path)
    plan = build_plan(s, scale=4)
    sched = Schedule(plan)
    assert sched.scale == 4 and sched.plan is plan
    for _ in sched.run():
        pass
    assert_data_bytes_equal_the_plan(sched.messages, plan)
    other = Schedule(build_plan(s), scale=4)
    assert other.plan.scale == 4
    for _ in other.run():
        pass
    assert other.messages["size_bytes"].tolist() == sched.messages["size_bytes"].tolist()
    assert other.messages["start_ns"].tolist() == sched.messages["start_ns"].tolist()


@pytest.mark.parametrize("kw", [dict(iterations=0), dict(scale=0), dict(scale=-3)])
def test_schedule_rejects_bad_iterations_or_scale_with_an_input_error(kw):
    from tokenpcap.errors import InputError

    plan = build_plan(load_scenario(ROOT / "profiles" / "scenarios" / "dante.yaml"))
    with pytest.raises(InputError, match="expected integers >= 1"):
        Schedule(plan, **kw)


def test_a_slice_of_nics_sends_exactly_their_frames_of_the_full_run(tmp_path):
    """Every NIC is timed whatever is materialized: a schedule asked for the frames of some NICs
    (without timeline or NVLink copies, in small chunks) yields exactly the full run's frames of
    those NICs, in the same order, and the same message table; chunks are time-ordered and never
    longer than asked."""
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8,
                         extra=", overlap_grad_reduce: true, bucket_size: 200000")
    s = load_scenario(path)
    plan = build_plan(s)
    n = 3
    full = Schedule(plan, iterations=n, chunk_rows=1 << 10)
    want = np.concatenate(list(full.run()))
    assert len(full.timeline) and len(np.unique(want["nic"])) == s.cluster.nodes * s.cluster.nics_per_node
    for nics in ({0}, {1, 3}):
        lean = Schedule(plan, iterations=n, nics=nics, keep_nvlink=False, keep_history=False,
                        chunk_rows=100)
        chunks = list(lean.run())
        assert all(0 < len(c) <= 100 for c in chunks)
        got = np.concatenate(chunks)
        assert (np.diff(got["time_ns"]) >= 0).all()
        assert got.tobytes() == want[np.isin(want["nic"], sorted(nics))].tobytes()
        assert lean.messages.tobytes() == full.messages.tobytes()
        assert not len(lean.timeline) and not len(lean.nvlink)


def test_a_pure_pipeline_takes_the_1f1b_time(tmp_path):
    """1F1B without interleaving (Narayanan et al. 2021, Sec. 2.2.1: the pipeline bubble is
    (p − 1) of the m + p − 1 slots): with communication negligible (tiny activations, compute made
    slow by a low MFU) an iteration of p = 4 stages and m = 8 microbatches (two pipelines) takes
    (m + p − 1)·(t_f + t_b) from the first forward to the last backward, within 1%, where t_f and
    t_b are the compute model's per-microbatch times of one stage."""
    from tokenpcap.model import shard_parameters

    p, m = 4, 8
    path = tiny_scenario(tmp_path, "pipe", dp=2, tp=1, pp=p, gbs=2 * m, extra=", mfu: 0.001",
                         cluster="h100-rocev2-8x1")
    path.write_text(path.read_text().replace("layers: 4", "layers: 32").replace("vocab_size: 512",
                                                                                "vocab_size: 64"))
    s = load_scenario(path)
    sched = Schedule(build_plan(s), nics=())
    for _ in sched.run():
        pass
    st = stage_times(s, 1)
    layers = shard_parameters(s.model, 1, p, 1).layers
    t_f = layers * (st.attn_fwd + st.mlp_fwd)
    t_b = layers * (st.attn_bwd + st.mlp_bwd)
    tl = sched.timeline
    fb = tl[np.isin(tl["what"], [b"F", b"B"])]
    span = int(fb["end_ns"].max() - fb["start_ns"].min())
    want = (m + p - 1) * (t_f + t_b)
    assert abs(span - want) <= 0.01 * want, (span, want)


def test_nvlink_only_calls_timed_as_a_whole_keep_the_nic_traffic():
    """Dante's TP calls stay inside nodes: timed as a whole (alpha-beta, as a job with more than
    NVLINK_COPIES_PER_COPY copies is), the NIC messages are the same (bytes per phase and NIC
    equal the plan), no copy of an NVLink-only call is listed, and the iteration ends within a
    few percent of the copy-by-copy timing (+0.9% at --scale 64, docs/generate.md)."""
    plan = build_plan(load_scenario(ROOT / "profiles" / "scenarios" / "dante.yaml"), scale=64)
    ends = {}
    for limit in (10 ** 12, 0):
        sched = Schedule(plan, nics=(), nvlink_copies=limit)
        for _ in sched.run():
            pass
        assert sched.nvlink_mode == ("copies" if limit else "collectives")
        assert_data_bytes_equal_the_plan(sched.messages, plan)
        ends[limit] = int(sched.timeline["end_ns"].max())
        tp = sched.nvlink[sched.nvlink["dim"] == DIMS.index("tp")]
        assert (len(tp) > 0) == bool(limit)
    assert 0 < ends[0] - ends[10 ** 12] <= 0.02 * ends[10 ** 12]


def test_ring_attention_step_i_plus_1_leaves_after_step_i_arrived(tmp_path):
    """Transformer Engine's AttnFuncWithCPAndKVP2P: step i + 1 sends what step i received (the
    K,V chunk of the previous CP rank), and the partial attention needs it, so a rank's send of
    step i + 1 of a layer starts only after its receive of step i has arrived; backward sends go
    to the previous ring position."""
    path = tiny_scenario(tmp_path, "cp4", dp=1, tp=1, pp=2, gbs=2,
                         par=", context_parallel_size: 4")
    sched, _ = run(path)
    call = sched.call
    m = sched.messages
    d = m[(m["kind"] == KIND_DATA) & (m["dim"] == DIMS.index("cp"))]
    by = defaultdict(list)       # (rank_src or rank_dst, phase, layer, mb, step) -> rows
    for row in d:
        c = call(int(row["call_id"]))
        step = int(c.op.rsplit("_", 1)[1])
        by["out", c.src, c.phase, c.layer, c.microbatch, step].append(row)
        by["in", c.dst, c.phase, c.layer, c.microbatch, step].append(row)
        ring = sched.layout.group_of("cp", c.src)
        k = ring.index(c.src)
        assert c.dst == ring[(k + 1) % 4 if c.phase == "forward" else (k - 1) % 4]
    checked = 0
    for (kind, r, phase, L, j, step), rows in list(by.items()):
        if kind != "out" or step == 0:
            continue
        before = by["in", r, phase, L, j, step - 1]
        assert before
        assert min(x["start_ns"] for x in rows) >= max(x["arrival_ns"] for x in before)
        checked += 1
    assert checked == 8 * 2 * 2 * (2 + 3)      # ranks x layers x microbatches x (fwd + bwd steps)


def test_streaming_refuses_the_whole_table_and_rows_no_longer_held():
    """keep_messages=False: the rows of a chunk's messages while it is handed out, a clear error
    for the whole table and for a message no longer held (the ring: tests/schedule/engine/test_ring.py)."""
    plan = build_plan(load_scenario(ROOT / "profiles" / "scenarios" / "dante.yaml"), scale=64)
    sched = Schedule(plan, iterations=1, nics=(0,), keep_messages=False, ring_rows=4)
    with pytest.raises(RuntimeError, match="keep_messages=False"):
        sched.messages
    it = sched.run()
    first = next(it)
    assert (sched.message_rows(first["msg"])["msg_id"] == first["msg"]).all()
    for _ in it:
        pass
    with pytest.raises(ValueError, match="message id 0: not held"):
        sched.message_rows([0])
    from tokenpcap.errors import InputError

    with pytest.raises(InputError, match="ring_rows: got 12"):
        Schedule(plan, iterations=1, keep_messages=False, ring_rows=12)


@pytest.mark.parametrize("cp", [2, 4])
def test_ring_attention_is_double_buffered_as_transformer_engine_runs_it(tmp_path, cp):
    """TE ``AttnFuncWithCPAndKVP2P`` posts the transfer that feeds step i + 1 (``send_recv_reqs[(i +
    1) % 2]``) before step i's partial attention and waits for it after: with compute dominating
    (a low MFU), the transfers of consecutive steps of a layer start exactly one partial
    attention (the attention kernel's time / cp) apart, forward and backward; backward's last
    transfer (dK, dV) starts two partial attentions after the one before it (after the last step),
    and a layer's attention block takes its compute alone, the ring hidden."""
    dp = 8 // (2 * cp)                                       # 8 GPUs
    path = tiny_scenario(tmp_path, f"cp{cp}", dp=dp, tp=1, pp=2, gbs=2 * dp, extra=", mfu: 0.00001",
                         par=f", context_parallel_size: {cp}")
    sched, _ = run(path)
    st = stage_times(sched.scenario, 0)
    m = sched.messages
    d = m[(m["kind"] == KIND_DATA) & (m["dim"] == DIMS.index("cp"))]
    first: dict = {}
    for row in d:
        c = sched.call(int(row["call_id"]))
        key = (c.src, c.phase, c.layer, c.microbatch, int(c.op.rsplit("_", 1)[1]))
        first[key] = min(first.get(key, 1 << 62), int(row["start_ns"]))
    checked = 0
    for phase, core, steps in (("forward", st.attn_core_fwd, cp - 1), ("backward", st.attn_core_bwd, cp)):
        per, extra = divmod(core, cp)
        assert per > 10_000                          # the compute dominates the transfers
        for (src, ph, L, j, i), t in first.items():
            if ph != phase or i == 0:
                continue
            gap = t - first[src, ph, L, j, i - 1]
            want = per + (i - 1 < extra) + (per + (i < extra) if i == cp - 1 and phase == "backward" else 0)
            assert gap == want, (phase, src, L, j, i, gap, want)
            checked += 1
        assert sum(1 for k in first if k[1] == phase) == 8 * 2 * 2 * steps  # ranks x layers x mbs
    assert checked == 8 * 2 * 2 * (cp - 2 + cp - 1)
