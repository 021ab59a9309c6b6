"""Megatron's ``overlap_param_gather``: the distributed optimizer's parameter AllGathers leave the
optimizer phase and run in the next forward, in the order Megatron-LM's DDP dispatches and waits
for them (``megatron/core/distributed/distributed_data_parallel.py``, ``param_and_grad_buffer.py``,
``megatron/core/pipeline_parallel/schedules.py``; commit d98e8a64)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.schedule.test_schedule import assert_data_bytes_equal_the_plan
from tokenpcap.config.profiles import load_scenario
from tokenpcap.errors import InfeasiblePlanError
from tokenpcap.model import scenario_shards
from tokenpcap.plan.build import build_plan
from tokenpcap.plan.pipeline import chunk_layers
from tokenpcap.schedule.compute import stage_times
from tokenpcap.schedule.program import Call, CallMode, Mark, Overlap, build_programs
from tokenpcap.schedule.runner import Schedule

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "profiles" / "scenarios"
ON = {"training.overlap_param_gather": True}


def _program(s, rank, scale=1024):
    plan = build_plan(s, scale=scale)
    lay = plan.layout
    times = [stage_times(s, k, scale) for k in range(lay.pp)]
    prog = build_programs(list(plan.calls(0)), range(rank, rank + 1), lay.coords,
                          scenario_shards(s), times, plan.microbatches, 0, s.training.recompute,
                          chunks=[chunk_layers(s, k) for k in range(lay.pp)],
                          overlap=Overlap.of(s.training))[rank]
    return plan, prog


def _gathers(plan, prog):
    """``[(index, mode, call)]`` of the program's parameter AllGathers."""
    return [(i, ins.mode, plan.call(ins.call_id)) for i, ins in enumerate(prog)
            if isinstance(ins, Call) and plan.call(ins.call_id).phase == "optimizer"
            and plan.call(ins.call_id).bucket >= 0]


def test_without_interleaving_each_wait_dispatches_the_next_bucket():
    """finish_param_sync (param_and_grad_buffer.py, lines 553-573): dispatch the bucket if not yet
    dispatched, wait, then dispatch next_param_gather_bucket_group, which is bucket k - 1
    (distributed_data_parallel.py, lines 369-380: "all-gathers happen in reverse order of
    buckets"). Each wait comes right before the first layer (or the embedding) the bucket holds,
    in microbatch 0's forward; nothing is gathered after the optimizer step."""
    s = load_scenario(SCENARIOS / "llama2-7b-a100-ib.yaml", ON)
    plan, prog = _program(s, 0)
    g = _gathers(plan, prog)
    buckets = sorted({c.bucket for _, _, c in g}, reverse=True)
    assert len(buckets) > 2
    seq = [(mode, c.bucket) for _, mode, c in g]
    # the first hook dispatches its bucket and waits; each wait then dispatches the next
    assert seq == [(mode, b) for b in buckets for mode in (CallMode.SEND, CallMode.WAIT)]
    assert all(g[k + 1][0] == g[k][0] + 1 for k in range(1, len(g) - 1, 2))
    first_fwd_end = next(i for i, x in enumerate(prog) if isinstance(x, Mark) and not x.begin)
    assert all(i < first_fwd_end for i, _, _ in g)
    # each wait precedes its bucket's first layer: the layer's first call (SP AllGather of mb 0)
    for i, mode, c in g:
        if mode != CallMode.WAIT:
            continue
        op = "embedding" if c.bucket == buckets[0] else "attn_in"
        layer = -1 if op == "embedding" else c.layer
        start = next(k for k, x in enumerate(prog) if isinstance(x, Call)
                     and plan.call(x.call_id).op == op and plan.call(x.call_id).layer == layer
                     and plan.call(x.call_id).microbatch == 0)
        between = prog[i + 1:start]
        assert i < start and all(isinstance(x, Call) and plan.call(x.call_id).phase == "optimizer"
                                 for x in between), (c.bucket, c.layer)


def test_with_interleaving_every_chunk_is_dispatched_at_once_aligned_across_stages():
    """align_param_gather (Megatron's default with interleaving): param_sync_func is each chunk's
    start_param_sync (training.py), called for chunks 0 and 1 before the first forward
    (schedules.py, lines 1219-1221) and for chunk c + 1 >= 2 before forward k with k + stage the
    first microbatch of chunk c (lines 1335-1353); the forward pre-hooks only wait."""
    s = load_scenario(SCENARIOS / "dante.yaml",
                      {**ON, "parallelism.zero_stage": 1,
                       "parallelism.virtual_pipeline_model_parallel_size": 3})
    for rank in (0, 16):                       # stage 0 and stage 1
        plan, prog = _program(s, rank)
        stage = plan.layout.coords(rank).pp
        g = _gathers(plan, prog)
        f_marks = [i for i, x in enumerate(prog) if isinstance(x, Mark) and x.begin
                   and x.what == "F"]

        def chunk(c):                                    # op <kind>_param_bucket_chunk<c>
            return int(c.op.rpartition("_chunk")[2])

        sends = [(i, c) for i, mode, c in g if mode == CallMode.SEND]
        assert {chunk(c) for i, c in sends if i < f_marks[0]} == {0, 1}
        at = f_marks[1 * 2 - stage]                      # chunk 1's first microbatch: vmid 2
        late = [i for i, c in sends if chunk(c) == 2]
        assert late and all(f_marks[1 * 2 - stage - 1] < i < at for i in late)
        # in each chunk the dense buckets in index order (start_param_sync's bucket groups)
        for k in (0, 1):
            idx = [c.bucket for _, c in sends if chunk(c) == k]
            assert idx == sorted(idx)
        # every wait is preceded by its send, and no send follows a wait directly
        for n, (i, mode, c) in enumerate(g):
            if mode == CallMode.WAIT:
                assert any(x.call_id == c.call_id for _, m, x in g[:n] if m == CallMode.SEND)


@pytest.mark.parametrize("name,extra", [
    ("llama2-7b-a100-ib", {}),
    ("dante", {"parallelism.zero_stage": 1, "parallelism.virtual_pipeline_model_parallel_size": 3})])
def test_the_bytes_are_the_plans_with_the_gathers_moved(name, extra):
    s = load_scenario(SCENARIOS / f"{name}.yaml", {**ON, **extra})
    sched = Schedule(build_plan(s, scale=4096))
    for _ in sched.run():
        pass
    assert_data_bytes_equal_the_plan(sched.messages, sched.plan)


def test_megatrons_rules_refuse_what_it_refuses():
    # arguments.py: only with the distributed optimizer, and with --overlap-grad-reduce
    with pytest.raises(InfeasiblePlanError, match="zero_stage 1 or 2"):
        load_scenario(SCENARIOS / "dante.yaml", ON)
    with pytest.raises(InfeasiblePlanError, match="overlap_grad_reduce true"):
        load_scenario(SCENARIOS / "llama2-7b-a100-ib.yaml",
                      {**ON, "training.overlap_grad_reduce": False})
