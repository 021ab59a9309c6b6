"""Kernel kinds in the compute model: GEMMs and the attention kernel at their own share of the
peak, ``training.mfu`` as the one share for both, the GPU profile's per-kind values otherwise."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

from tokenpcap.config.profiles import load_scenario
from tokenpcap.model import attention_core_flops, attention_projection_flops
from tokenpcap.schedule.compute import DEFAULT_MFU, kernel_efficiency, stage_times

ROOT = Path(__file__).resolve().parents[2]
DANTE = ROOT / "profiles" / "scenarios" / "dante.yaml"


def _hand_ns(gemm: int, attention: int, peak: str, e_gemm: str, e_attention: str) -> int:
    """ceil((G / e_g + A / e_a) / (peak x 10^3)) ns in exact decimals (a hand rule)."""
    t = (Fraction(gemm) / Fraction(e_gemm) + Fraction(attention) / Fraction(e_attention))
    return -(-t // (Fraction(peak) * 1000))


def test_each_kernel_kind_runs_at_its_own_efficiency():
    """Dante's attention block at tp 4: the QKV and output projections at the GEMM efficiency,
    the causal scores and values at the attention kernel's (Megatron-LM's causal count)."""
    s = load_scenario(DANTE, {"training.mfu": None, "cluster.gpu.gemm_efficiency": 0.6,
                              "cluster.gpu.attention_efficiency": 0.3})
    m, tp = s.model, s.parallelism.tp
    h, seq = m.hidden_size, m.seq_length
    proj, core = attention_projection_flops(m, 1), attention_core_flops(m, 1)
    assert (proj, core) == (8 * seq * h * h, 2 * seq * seq * h)
    t = stage_times(s, 0)
    assert t.attn_fwd == _hand_ns(proj // tp, core // tp, "989", "0.6", "0.3")
    assert t.attn_bwd == _hand_ns(2 * proj // tp, 2 * core // tp, "989", "0.6", "0.3")
    mlp = 2 * seq * 2 * h * m.ffn_hidden_size // tp                   # GELU MLP: GEMMs only
    assert t.mlp_fwd == _hand_ns(mlp, 0, "989", "0.6", "1")


def test_mfu_is_the_one_share_for_every_kernel_and_the_default_fills_the_rest():
    s = load_scenario(DANTE, {"training.mfu": 0.5, "cluster.gpu.gemm_efficiency": 0.9})
    assert (kernel_efficiency(s).gemm, kernel_efficiency(s).attention) == (0.5, 0.5)
    s = load_scenario(DANTE, {"training.mfu": None, "cluster.gpu.gemm_efficiency": 0.9,
                              "cluster.gpu.name": "unknown-gpu"})
    assert (kernel_efficiency(s).gemm, kernel_efficiency(s).attention) == (0.9, DEFAULT_MFU)
    s = load_scenario(DANTE, {"training.mfu": None, "cluster.gpu.name": "unknown-gpu"})
    assert kernel_efficiency(s).gemm == kernel_efficiency(s).attention == DEFAULT_MFU == 0.45


def test_half_the_attention_efficiency_gives_the_full_score_products_time():
    """2 b s^2 h at e/2 takes as long as the non-causal 4 b s^2 h at e, to the nanosecond: how
    the simulator fixtures made before causal counting keep their compute (tests/cases)."""
    s = load_scenario(DANTE, {"training.mfu": None, "cluster.gpu.gemm_efficiency": 0.45,
                              "cluster.gpu.attention_efficiency": 0.225})
    m, tp = s.model, s.parallelism.tp
    proj, core = attention_projection_flops(m, 1), attention_core_flops(m, 1)
    assert stage_times(s, 0).attn_fwd == _hand_ns((proj + 2 * core) // tp, 0, "989", "0.45", "1")
