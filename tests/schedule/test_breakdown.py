"""Where a timed iteration's time goes: the parts add up to the iteration, a pure pipeline's
bubble is Narayanan et al.'s ``(p - 1) / (v m)`` of its compute, and MFU is Megatron's FLOPs over
the time and the world's peak."""
from __future__ import annotations

import pytest

from tests.schedule.test_schedule import tiny_scenario
from tokenpcap.config.profiles import load_scenario
from tokenpcap.model.flops import megatron_flops
from tokenpcap.pipeline import prepare
from tokenpcap.schedule.breakdown import iteration_breakdown


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
    par = f", virtual_pipeline_model_parallel_size: {vpp}" if vpp > 1 else ""
    path = tiny_scenario(tmp_path, "pipe", dp=2, tp=1, pp=p, gbs=2 * m, extra=", mfu: 0.001",
                         cluster="h100-rocev2-8x1", par=par)
    path.write_text(path.read_text().replace("layers: 4", "layers: 32").replace(
        "vocab_size: 512", "vocab_size: 64"))
    s, sched = _timed(path)
    b = iteration_breakdown(sched)
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
