"""Where a timed iteration's time goes: the parts add up to the iteration, a pure pipeline's
bubble is Narayanan et al.'s ``(p - 1) / (v m)`` of its compute, and MFU is Megatron's FLOPs over
the time and the world's peak."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.schedule.test_schedule import tiny_scenario
from tokenpcap.config.profiles import load_scenario
from tokenpcap.model.flops import megatron_flops
from tokenpcap.pipeline import prepare
from tokenpcap.schedule.breakdown import _covered_ns, iteration_breakdown


def _pure_pipeline(tmp_path, name: str, layers: int, p: int, m: int, vpp: int, par: str = ""):  # type: ignore[no-untyped-def]
    """A tiny GPT of ``layers`` layers on ``p`` stages, ``m`` microbatches, v ``vpp``, timed
    with communication negligible (compute slowed by a low MFU, tiny activations)."""
    par += f", virtual_pipeline_model_parallel_size: {vpp}" if vpp > 1 else ""
    path = tiny_scenario(tmp_path, name, dp=2, tp=1, pp=p, gbs=2 * m, extra=", mfu: 0.001",
                         cluster="h100-rocev2-8x1", par=par)
    path.write_text(path.read_text().replace("layers: 4", f"layers: {layers}").replace(
        "vocab_size: 512", "vocab_size: 64"))
    s, sched = _timed(path)
    return s, iteration_breakdown(sched)


def _timed(path, **kw):
    s = load_scenario(path)
    done = prepare(s, nics=(), keep_messages=False, keep_nvlink=False, **kw)
    for _ in done.schedule.run():
        pass
    return s, done.schedule


@pytest.mark.parametrize("vpp", [1, 2])
def test_a_pure_pipelines_bubble_is_p_minus_1_over_v_m_of_its_compute(tmp_path, vpp):
    """p = 4 stages, m = 8 microbatches, communication negligible (tiny activations, compute
    slowed by a low MFU): the time outside compute blocks before the last backward is
    ``(p - 1) / (v m)`` of the critical rank's compute, within 3 % (each of the ``2 v m``
    activation and gradient transfers still takes its few microseconds); nothing is exposed
    inside the layers (tp 1: no collective there)."""
    p, m = 4, 8
    s, b = _pure_pipeline(tmp_path, "pipe", 32, p, m, vpp)
    assert sum(b.parts().values()) == b.iteration_ns
    assert all(v >= 0 for v in b.parts().values()), b
    assert b.ideal_bubble == (p - 1) / (vpp * m)
    assert b.pipeline_ns == pytest.approx(b.ideal_bubble * b.compute_ns, rel=0.03)
    assert b.in_layer_comm_ns <= 0.001 * b.compute_ns
    world = s.cluster.nodes * s.cluster.gpus_per_node
    want = megatron_flops(s.model, s.training.global_batch_size, 1) / (
        b.iteration_ns * world * s.cluster.gpu.peak_tflops * 1000)
    assert b.mfu == pytest.approx(want, rel=1e-12) and 0 < b.mfu < 0.001


def test_dantes_parts_add_up_and_tp_shows_inside_the_layers():
    """Dante (tp 4 with SP inside a node, DP buckets, 2 stages): every part non-negative, their
    sum the iteration; its blocking TP collectives show as in-layer communication."""
    from pathlib import Path

    dante = Path(__file__).resolve().parents[2] / "profiles" / "scenarios" / "dante.yaml"
    s, sched = _timed(dante)
    b = iteration_breakdown(sched)
    assert sum(b.parts().values()) == b.iteration_ns == int(sched.timeline["end_ns"].max())
    assert all(v >= 0 for v in b.parts().values()), b
    assert b.in_layer_comm_ns > 0 and b.optimizer_ns > 0
    assert b.executed_flops < b.model_flops          # no recompute; the router-free formula


@pytest.mark.parametrize("vpp", [1, 2])
def test_a_short_first_stage_idles_its_shortfall_beyond_the_ideal_bubble(tmp_path, vpp):
    """p = 4, m = 8, 30 layers split 6 + 8 + 8 + 8 (``decoder_first_pipeline_num_layers``; v
    chunks of each stage's layers), communication negligible; the last stage, with the output
    layer, is the slowest. 1F1B runs at the
    pace of its slowest stage: the first stage (the critical rank), of forward plus backward
    ``c`` per microbatch against the slowest stage's ``c_s``, idles ``(p - 1)·c_s + (m - 1)·(c_s
    - c)`` (the first microbatch crosses every stage, the other m - 1 leave at the slowest
    stage's pace): the ideal bubble plus the stage imbalance ``(S - C)·(1 - 1/m)``, within 3 %
    (each transfer still takes its microseconds); the three pipeline parts add up to the
    pipeline's time."""
    from tokenpcap.model import scenario_shards
    from tokenpcap.schedule.breakdown import stage_compute_ns
    from tokenpcap.schedule.compute import stage_times

    p, m = 4, 8
    s, b = _pure_pipeline(tmp_path, "short", 30, p, m, vpp,
                          ", decoder_first_pipeline_num_layers: 6")
    assert [len(sh.moe) for sh in scenario_shards(s)] == [6, 8, 8, 8] and b.stage == 0
    middle = stage_compute_ns(stage_times(s, 1), scenario_shards(s)[1].moe, m, "none", False)
    slowest = stage_compute_ns(stage_times(s, p - 1), scenario_shards(s)[p - 1].moe, m, "none",
                               True)
    assert b.slowest_stage_compute_ns == slowest and b.slots == vpp * m
    parts = b.pipeline_parts()
    assert sum(parts.values()) == b.pipeline_ns
    shortfall = b.slowest_stage_compute_ns - b.compute_ns
    assert shortfall == pytest.approx(2 / 8 * middle + slowest - middle, rel=1e-6)
    assert parts["stage imbalance"] == shortfall * (vpp * m - 1) // (vpp * m)
    assert parts["ideal bubble"] == int((p - 1) / (vpp * m) * slowest)
    assert abs(parts["waits for neighbour stages"]) <= 0.03 * b.pipeline_ns, parts


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(0, 20)), max_size=12))
def test_blocks_that_overlap_count_once(blocks):
    """A combined step's forward and backward blocks overlap: the time inside blocks is their
    union, counted nanosecond by nanosecond."""
    start = np.array([a for a, _ in blocks], np.int64)
    end = np.array([a + d for a, d in blocks], np.int64)
    covered = set()
    for a, b in zip(start.tolist(), end.tolist()):
        covered.update(range(a, b))
    assert _covered_ns(start, end) == len(covered)


def test_combined_steps_parts_add_up():
    """mixtral-8x7b-ep-64 with overlap_moe_expert_parallel_comm (combined steps, overlapping F
    and B blocks): the five parts still sum to the iteration, none negative; the hidden
    AllToAlls leave less communication in the layers, the compute the same."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "profiles" / "scenarios" / "mixtral-8x7b-ep-64.yaml"
    got = {}
    for on in (False, True):
        s = load_scenario(path, {"training.overlap_moe_expert_parallel_comm": on})
        done = prepare(s, scale=4096, nics=(), keep_messages=False, keep_nvlink=False)
        for _ in done.schedule.run():
            pass
        b = got[on] = iteration_breakdown(done.schedule)
        assert sum(b.parts().values()) == b.iteration_ns
        assert all(v >= 0 for v in b.parts().values()), b
    assert got[True].in_layer_comm_ns < got[False].in_layer_comm_ns
    assert got[True].compute_ns == got[False].compute_ns
