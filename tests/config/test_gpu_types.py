"""Kernel efficiencies set once per GPU type: the values against the published figures they
come from, and the bundled published-recipe scenarios timed with their GPU type's values (not
a scenario's own)."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenpcap.config.gpu_types import GPU_TYPES, LAYER_SHARE_OF_MAMF
from tokenpcap.config.profiles import load_scenario
from tokenpcap.schedule.compute import DEFAULT_MFU, kernel_efficiency

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = sorted((ROOT / "profiles" / "scenarios").glob("*.yaml"))
PUBLISHED = [p for p in SCENARIOS if "\npublished:" in p.read_text(encoding="utf-8")]


def test_the_attention_efficiency_is_cudnns_fused_attention_forward_and_backward():
    """Shah et al. 2024 (FlashAttention-3), Fig. 5 and 6, H100 SXM5, BF16, head dim 128, 8 k
    tokens, cuDNN: forward 600 TFLOP/s, backward 518 TFLOP/s. A layer runs the forward once and
    the backward (twice the FLOPs) once: 3 FLOP units in 1/600 + 2/518 time units."""
    rate = 3 / (1 / 600 + 2 / 518)
    assert GPU_TYPES["H100-SXM"].attention_efficiency == pytest.approx(rate / 989, abs=0.005)


@pytest.mark.parametrize("name, mamf_tflops, peak", [("H100-SXM", "792.1", 989),
                                                     ("A100-SXM4-80GB", "267.9", 312)])
def test_the_gemm_efficiency_is_the_measured_matmul_ceiling_times_one_layer_share(
        name, mamf_tflops, peak):  # type: ignore[no-untyped-def]
    """Bekman's maximum achievable matmul FLOPS table (CUDA 12.1): H100 SXM 792.1, A100 SXM
    267.9 TFLOP/s, times the one share of it a layer keeps, the same for every GPU type."""
    assert LAYER_SHARE_OF_MAMF == 0.75
    want = float(mamf_tflops) / peak * 0.75
    assert GPU_TYPES[name].gemm_efficiency == pytest.approx(want, abs=0.0005)


def test_the_h800_is_timed_as_the_h100():
    assert GPU_TYPES["H800-SXM"] == GPU_TYPES["H100-SXM"]


def test_there_are_published_recipes():
    names = {p.stem for p in PUBLISHED}
    assert {"gpt3-175b-megatron", "llama3.1-405b-2048-interleaved"} <= names


@pytest.mark.parametrize("path", PUBLISHED, ids=[p.stem for p in PUBLISHED])
def test_a_published_recipe_is_timed_with_its_gpu_types_efficiencies(path):  # type: ignore[no-untyped-def]
    """No per-scenario knob: neither ``training.mfu`` nor the cluster's own efficiencies; the
    efficiencies are the GPU type's, and the same on any other cluster of that GPU."""
    s = load_scenario(path)
    g = s.cluster.gpu
    assert s.training.mfu is None and g.gemm_efficiency is None
    assert g.attention_efficiency is None
    t = GPU_TYPES[g.name]
    eff = kernel_efficiency(s)
    assert (eff.gemm, eff.attention) == (t.gemm_efficiency, t.attention_efficiency)
    assert 0 < s.published.mfu < 1 and s.published.source


def test_the_one_knob_and_the_profile_override_the_gpu_type_and_an_unknown_gpu_the_default():
    dante = ROOT / "profiles" / "scenarios" / "dante.yaml"
    h100 = GPU_TYPES["H100-SXM"]
    s = load_scenario(dante, {"training.mfu": None})
    assert (kernel_efficiency(s).gemm, kernel_efficiency(s).attention) == (
        h100.gemm_efficiency, h100.attention_efficiency)
    s = load_scenario(dante, {"training.mfu": None, "cluster.gpu.attention_efficiency": 0.3})
    assert (kernel_efficiency(s).gemm, kernel_efficiency(s).attention) == (
        h100.gemm_efficiency, 0.3)
    s = load_scenario(dante, {"training.mfu": 0.5})
    assert (kernel_efficiency(s).gemm, kernel_efficiency(s).attention) == (0.5, 0.5)
    s = load_scenario(dante, {"training.mfu": None, "cluster.gpu.name": "B200"})
    assert (kernel_efficiency(s).gemm, kernel_efficiency(s).attention) == (DEFAULT_MFU,
                                                                           DEFAULT_MFU)
