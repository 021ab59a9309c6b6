"""Megatron-core's EP AllToAll overlap (``overlap_moe_expert_parallel_comm``): the order of
steps and, inside a combined step, of a layer pair's nodes, against Megatron-LM's source
(commit d98e8a64); the bytes the NICs send unchanged."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenpcap.config.profiles import load_scenario
from tokenpcap.errors import InfeasiblePlanError
from tokenpcap.model import scenario_shards
from tokenpcap.plan.build import build_plan
from tokenpcap.plan.pipeline import chunk_layers
from tokenpcap.schedule.compute import stage_times
from tokenpcap.schedule.epoverlap import BACKWARD_NODES, FORWARD_NODES, combined_order
from tokenpcap.schedule.instructions import BWD_LAYER, FWD_LAYER
from tokenpcap.schedule.interleave import schedule_table
from tokenpcap.schedule.program import Call, CallMode, Compute, Overlap, build_programs

ROOT = Path(__file__).resolve().parents[2]
MIXTRAL = ROOT / "profiles" / "scenarios" / "mixtral-8x7b-ep.yaml"


def test_the_nodes_split_each_layer_template_once():
    # fine_grained_callables.py build_transformer_layer_callables: every operation of a layer
    # belongs to exactly one of its four nodes
    for nodes, template in ((FORWARD_NODES, FWD_LAYER), (BACKWARD_NODES, BWD_LAYER)):
        names = [n for node in nodes for n in node]
        assert len(names) == len(set(names))
        assert set(names) == {n for _, n in template}


def test_no_pipelining_is_megatrons_combined_schedule():
    # combined_1f1b.py, combined_1f1b_schedule_for_no_pipelining (lines 59-64, 76-134): forward 0
    # alone, forward i + 1 with backward i, the last backward alone
    m = 4
    assert combined_order(1, 0, m, 1) == (
        [("F", 0, 0)] + [("FB", (i + 1, 0), (i, 0)) for i in range(m - 1)] + [("B", m - 1, 0)])


@given(pp=st.integers(2, 6), v=st.integers(1, 3), groups=st.integers(1, 4), data=st.data())
def test_pipelined_order_has_one_more_warm_up_forward_and_independent_pairs(pp, v, groups, data):
    """schedules.py get_pp_rank_microbatches (lines 956-970): the interleaved warm-up
    (p - r - 1) * 2 + (v - 1) * g, plus one with the overlap "to ensure the forward and backward
    computations are independent in all 1f1b steps"; every (forward, backward) pair after it is
    one combined step. With v = 1 the same rule (tokenpcap's extension to plain 1F1B)."""
    m = pp * groups
    stage = data.draw(st.integers(0, pp - 1))
    order = combined_order(pp, stage, m, v)
    w = min((pp - stage - 1) * 2 + (v - 1) * pp + 1, v * m)
    assert all(x[0] == "F" for x in order[:w])
    pairs = [x for x in order if x[0] == "FB"]
    assert len(pairs) == v * m - w
    table = schedule_table(m, v, pp) if v > 1 else [(j, 0) for j in range(m)]
    fwd = [x[1:] if x[0] == "F" else x[1] for x in order if x[0] in ("F", "FB")]
    bwd = [x[1:] if x[0] == "B" else x[2] for x in order if x[0] in ("B", "FB")]
    assert fwd == [tuple(t) for t in table]                      # the forwards in table order
    assert bwd == [(j, v - 1 - c) for j, c in table]             # get_model_chunk_id(backward)
    done: set = set()
    for x in order:                      # a backward's own forward ran in an earlier step
        if x[0] == "F":
            done.add(x[1:])
        elif x[0] == "B":
            assert x[1:] in done
        else:
            assert x[2] in done and x[1] != x[2]
            done.add(x[1])


def _program(s, rank):
    plan = build_plan(s, scale=1024)
    lay = plan.layout
    calls = list(plan.calls(0))
    times = [stage_times(s, k, 1024) for k in range(lay.pp)]
    prog = build_programs(calls, range(rank, rank + 1), lay.coords, scenario_shards(s), times,
                          plan.microbatches, 0, s.training.recompute,
                          chunks=[chunk_layers(s, k) for k in range(lay.pp)],
                          overlap=Overlap.of(s.training))[rank]
    return plan, prog, times[lay.coords(rank).pp]


def _overlapped(**training):
    s = load_scenario(MIXTRAL)
    tr = dict(recompute="selective", global_batch_size=64, overlap_moe_expert_parallel_comm=True)
    tr.update(training)
    return dataclasses.replace(s, training=dataclasses.replace(s.training, **tr))


def test_a_layer_pair_runs_in_megatrons_order():
    """model_chunk_schedule_plan.py TransformerLayerSchedulePlan.run (lines 261-301): combine
    backward | attention forward; dispatch forward | MLP backward; dispatch backward | MLP
    forward; combine forward | attention backward. Each AllToAll is started before the other
    microbatch's computation and waited for after it."""
    s = _overlapped()
    rank = 31                                       # the last stage: one warm-up forward
    plan, prog, t = _program(s, rank)
    names = {t.attn_fwd: "attn_fwd", t.mlp_fwd: "mlp_fwd", t.attn_bwd: "attn_bwd",
             t.mlp_bwd: "mlp_bwd"}
    assert len(names) == 4
    seq = []
    for ins in prog:
        if isinstance(ins, Compute) and ins.ns in names:
            seq.append(names[ins.ns])
        elif isinstance(ins, Call) and plan.call(ins.call_id).dim == "ep":
            c = plan.call(ins.call_id)
            if c.collective == "AllToAll":
                seq.append((ins.mode.name, c.microbatch, c.layer, c.op))
    first, last = s.parallelism.stage_layer_counts(s.model.layers)[0], s.model.layers - 1
    # the combined step of forward 1 and backward 0: forward layer `first` with backward `last`
    i = seq.index(("SEND", 0, last, "combine_grad"))
    want = [("SEND", 0, last, "combine_grad"), "attn_fwd", ("WAIT", 0, last, "combine_grad"),
            ("SEND", 1, first, "dispatch"), ("SEND", 1, first, "dispatch_probs"), "mlp_bwd",
            ("WAIT", 1, first, "dispatch"), ("WAIT", 1, first, "dispatch_probs"),
            ("SEND", 0, last, "dispatch_grad"), ("SEND", 0, last, "dispatch_probs_grad"),
            "mlp_fwd", ("WAIT", 0, last, "dispatch_grad"), ("WAIT", 0, last, "dispatch_probs_grad"),
            ("SEND", 1, first, "combine"), "attn_bwd", ("WAIT", 1, first, "combine"),
            ("SEND", 0, last - 1, "combine_grad")]
    assert seq[i:i + len(want)] == want
    # microbatch 0's forward ran alone: its AllToAlls block
    assert ("BLOCK", 0, first, "dispatch") in seq
    assert not any(x[0] == "BLOCK" and x[1] > 0 for x in seq if isinstance(x, tuple)
                   and x[3] in ("dispatch", "combine"))


def test_every_call_is_placed_once_and_waited_for():
    s = _overlapped()
    plan, prog, _ = _program(s, 31)
    mine = {c.call_id for c in plan.calls(0) if 31 in c.group}
    calls = [i for i in prog if isinstance(i, Call)]
    started = [i.call_id for i in calls if i.mode != CallMode.WAIT]
    assert sorted(started) == sorted(mine)
    posted = {i.call_id for i in calls if i.mode == CallMode.SEND
              and plan.call(i.call_id).dim != "pp"}
    assert posted == {i.call_id for i in calls if i.mode == CallMode.WAIT}


def test_megatrons_rules_refuse_what_it_refuses(tmp_path):
    # transformer_config.py __post_init__: expert parallelism, no full recomputation
    with pytest.raises(InfeasiblePlanError, match="overlap_moe_expert_parallel_comm"):
        load_scenario(MIXTRAL, {"training.overlap_moe_expert_parallel_comm": True})
    with pytest.raises(InfeasiblePlanError, match="ep > 1"):
        load_scenario(ROOT / "profiles" / "scenarios" / "dante.yaml",
                      {"training.overlap_moe_expert_parallel_comm": True})


def test_the_bytes_are_the_plans_and_the_a2a_hides_behind_compute():
    """The same messages with the overlap as without (payload = plan per phase and NIC), and the
    iteration no longer: the AllToAlls of the combined steps run beside computation."""
    from tokenpcap.records import KIND_DATA
    from tokenpcap.schedule.runner import Schedule

    out = {}
    for on in (False, True):
        s = _overlapped(overlap_moe_expert_parallel_comm=on)
        sched = Schedule(build_plan(s, scale=4096))
        for _ in sched.run():
            pass
        m = sched.messages[sched.messages["kind"] == KIND_DATA]
        key = np.lexsort((m["size_bytes"], m["src_nic"], m["call_id"]))
        out[on] = (m[["call_id", "src_nic", "size_bytes"]][key], int(m["arrival_ns"].max()))
    assert (out[True][0] == out[False][0]).all()
    assert out[True][1] < out[False][1]
