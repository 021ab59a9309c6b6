"""Stage 5 (part): how long a GPU computes, from FLOPs over peak × MFU, in integer nanoseconds.

Forward FLOPs of one transformer layer for one microbatch of ``b`` sequences of ``s`` tokens
(:func:`tokenpcap.model.layer_forward_flops`): ``2·b·s·(weights a token uses) + 2·b·s²·h``, the
weights' matrix multiplies plus causal attention (half of the ``4·b·s²·h`` of the full score and
value products: :func:`tokenpcap.model.attention_core_flops`, Megatron-LM's
``num_floating_point_operations``). For a GPT layer, summed with the output layer ``2·b·s·h·V``
(:func:`tokenpcap.model.logits_forward_flops`), that is Narayanan et al. 2021, Eq. 3 with the
causal half: ``F = 96·B·s·l·h²·(1 + s/(12h) + V/(16·l·h))`` per iteration of batch ``B`` with
full activation recomputation (forward ×1, backward ×2, recomputed forward ×1; the output layer
is not recomputed). We split a layer into its attention part (QKV and output projections
``2·b·s·(2h² + 2h·kv_dim)`` plus the causal scores and values ``2·b·s²·h``) and its MLP part
(the rest), so that TP collectives fall between the right pieces of work. A TP rank does ``1/tp`` of the
work (Megatron's column/row split of every matmul), and with context parallelism a CP rank
``1/cp`` of that (it holds ``s/cp`` tokens; causal attention is balanced over the CP ranks by
the two-chunk split, so each computes ``1/cp`` of the attention scores too). Backward is twice
the forward (Eq. 3); ``recompute: selective`` adds the attention core ``2·b·s²·h`` (MLA: over its
query/key and value head dims, :func:`tokenpcap.model.attention_core_flops`) again in backward
(Korthikanti et
al. 2022, Sec. 5); ``recompute: full`` replays the layer's forward before its backward (the
schedule does that as its own compute step).

Kernel kinds: a piece of work of ``G`` FLOPs of matrix multiplies (every weight's product, the
output layer, the router) and ``A`` FLOPs of the attention kernel (causal scores and values) takes
``ceil((G / e_gemm + A / e_attention) / (peak_tflops·10³))`` ns (1 TFLOP/s = 10³ FLOP per ns),
computed with exact fractions of the profile's decimals. The efficiencies are
:func:`kernel_efficiency`: ``training.mfu`` for both when the scenario sets it (the simple case:
one share of the peak for every kernel), else the GPU profile's ``gemm_efficiency`` and
``attention_efficiency``, else the GPU type's (:mod:`tokenpcap.config.gpu_types`: set once per
GPU type, with their sources), else :data:`DEFAULT_MFU`. Elementwise kernels (norms, activations,
dropout, residual adds) are not counted as FLOPs, as Megatron's formula does not count them; the
one memory-bound step the schedule times is the optimizer (below). ``--scale k`` divides every
time by ``k`` (rounding up), as it divides message sizes, so that the timeline keeps its shape.

The optimizer step is memory bound: ``OPTIMIZER_BYTES_PER_PARAM`` bytes of HBM traffic per
parameter the rank updates (mixed-precision Adam reads and writes fp32 master weights, both
moments, the gradient and the half-precision copy) at ``HBM_BYTES_PER_NS``. Both are modelling
constants, not profile keys.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from tokenpcap.config.gpu_types import gpu_type
from tokenpcap.errors import InputError
from tokenpcap.model import (attention_core_flops, attention_forward_flops as _attention_flops,
                             layer_forward_flops, logits_forward_flops, scenario_shards)
from tokenpcap.config.profiles import Scenario

__all__ = ["StageTimes", "stage_times", "flops_time_ns", "work_time_ns", "iteration_flops",
           "attention_forward_flops", "KernelEfficiency", "kernel_efficiency", "DEFAULT_MFU",
           "OPTIMIZER_BYTES_PER_PARAM", "HBM_BYTES_PER_NS"]

#: Share of the GPU peak every kernel reaches when neither the scenario (``training.mfu``), nor
#: the GPU profile, nor the table of GPU types says: 0.45, about the MFU of well-tuned Megatron-LM jobs on A100 and H100
#: (Megatron-LM README, 41-48 % MFU on H100 for 2-462 B models; Llama 3 paper, Table 4: 38-43 %).
DEFAULT_MFU = 0.45

#: HBM bytes per parameter of one mixed-precision Adam step (read + write of fp32 weight, m, v,
#: read of the gradient, write of the bf16 copy: 4·2·3 + 4 + 2 ≈ 30, rounded to 32).
OPTIMIZER_BYTES_PER_PARAM = 32
#: HBM bandwidth assumed for the optimizer step: 2 TB/s = 2000 bytes/ns (A100 80GB 2.0 TB/s,
#: H100 SXM 3.35 TB/s; the lower one, a modelling constant).
HBM_BYTES_PER_NS = 2000


_INT64_MAX = (1 << 63) - 1


def _exact(value: float, key: str) -> Fraction:
    r = Fraction(repr(float(value)))
    if not r > 0:
        raise InputError(f"{key}: got {value!r}, expected a number > 0")
    return r


def flops_time_ns(flops: int, peak_tflops: float, mfu: float, scale: int = 1) -> int:
    """``ceil(flops / (peak_tflops·10³·mfu) / scale)`` ns (module docstring).

    Raises:
        InputError: ``peak_tflops`` or ``mfu`` not > 0, ``scale`` < 1, or the time past int64 ns
            (every time of the schedule is an int64 ns; a wrapped one would be garbage).
    """
    if scale < 1:
        raise InputError(f"scale: got {scale}, expected an integer >= 1")
    rate = _exact(peak_tflops, "gpu.peak_tflops") * 1000 * _exact(mfu, "training.mfu") * scale
    t = -(-(flops * rate.denominator) // rate.numerator) if flops > 0 else 0
    if t > _INT64_MAX:
        raise InputError(f"training.mfu {mfu!r} x gpu.peak_tflops {peak_tflops!r}: got a compute "
                         f"time of {t:.3g} ns for {flops:.3g} FLOPs, expected at most 2^63 - 1 "
                         "ns (int64): a larger mfu or peak_tflops")
    return t


@dataclass(frozen=True)
class KernelEfficiency:
    """Share of the GPU peak per kernel kind (each in ``(0, 1]``): ``gemm`` for matrix
    multiplies, ``attention`` for the attention kernel."""

    gemm: float
    attention: float


def kernel_efficiency(s: Scenario) -> KernelEfficiency:
    """The efficiencies the schedule times ``s``'s compute with (module docstring): ``training.mfu``
    for both kinds if set, else ``cluster.gpu.gemm_efficiency`` / ``attention_efficiency``, each
    else the GPU type's (:data:`tokenpcap.config.gpu_types.GPU_TYPES` by ``cluster.gpu.name``),
    else :data:`DEFAULT_MFU`."""
    mfu, g = s.training.mfu, s.cluster.gpu
    if mfu is not None:
        return KernelEfficiency(mfu, mfu)
    known = gpu_type(g.name)
    gemm = DEFAULT_MFU if known is None else known.gemm_efficiency
    attention = DEFAULT_MFU if known is None else known.attention_efficiency
    return KernelEfficiency(gemm if g.gemm_efficiency is None else g.gemm_efficiency,
                            attention if g.attention_efficiency is None
                            else g.attention_efficiency)


def _key(s_mfu: float | None, kind: str) -> str:
    return "training.mfu" if s_mfu is not None else f"gpu.{kind}_efficiency"


def work_time_ns(gemm_flops: int, attention_flops: int, s: Scenario, scale: int = 1) -> int:
    """``ceil((G / e_gemm + A / e_attention) / (peak_tflops·10³) / scale)`` ns: the time of
    ``gemm_flops`` of matrix multiplies and ``attention_flops`` of attention kernel on one GPU of
    ``s`` (module docstring; efficiencies :func:`kernel_efficiency`).

    Raises:
        InputError: a peak or efficiency not > 0, ``scale`` < 1, or the time past int64 ns.
    """
    if scale < 1:
        raise InputError(f"scale: got {scale}, expected an integer >= 1")
    eff, g, mfu = kernel_efficiency(s), s.cluster.gpu, s.training.mfu
    peak = _exact(g.peak_tflops, "gpu.peak_tflops") * 1000 * scale
    t = (Fraction(max(gemm_flops, 0)) / _exact(eff.gemm, _key(mfu, "gemm"))
         + Fraction(max(attention_flops, 0)) / _exact(eff.attention, _key(mfu, "attention")))
    ns = -(-(t.numerator * peak.denominator) // (t.denominator * peak.numerator))
    if ns > _INT64_MAX:
        raise InputError(f"{_key(mfu, 'gemm')} {eff.gemm!r} x gpu.peak_tflops {g.peak_tflops!r}: "
                         f"got a compute time of {ns:.3g} ns for {gemm_flops + attention_flops:.3g}"
                         " FLOPs, expected at most 2^63 - 1 ns (int64): a larger efficiency or "
                         "peak_tflops")
    return ns


def attention_forward_flops(s: Scenario) -> int:
    """Attention part of one layer's forward FLOPs for one microbatch (all TP ranks together):
    ``2·b·s·(2h² + 2h·kv_dim) + 4·b·s²·h`` (MLA: :func:`tokenpcap.model.
    attention_forward_flops`)."""
    return _attention_flops(s.model, s.training.micro_batch_size)


@dataclass(frozen=True)
class StageTimes:
    """Compute times (ns) of one TP (and CP) rank of one pipeline stage for one microbatch.

    ``attn_fwd``/``mlp_fwd``: one layer's attention and MLP forward; ``attn_bwd``/``mlp_bwd``: their
    backward (×2, plus the selective recomputation in ``attn_bwd``); the MLP is an MoE layer's
    when the model has experts; ``dense_mlp_fwd``/``dense_mlp_bwd``: the dense MLP of the
    dense layers of a model that mixes both (``moe.layer_freq``; equal to ``mlp_*`` for a dense
    model); ``attn_core_fwd``/``attn_core_bwd``: the attention kernel's share of ``attn_fwd`` /
    ``attn_bwd`` (the causal scores and values, with selective recomputation's replay in
    backward), which ring attention splits into its steps; ``logits_fwd``/``logits_bwd``:
    the output layer on the last stage (0 elsewhere); ``optimizer``: the optimizer step of the
    rank's parameters (once per iteration).
    """

    attn_fwd: int
    mlp_fwd: int
    attn_bwd: int
    mlp_bwd: int
    logits_fwd: int
    logits_bwd: int
    optimizer: int
    dense_mlp_fwd: int = 0
    dense_mlp_bwd: int = 0
    attn_core_fwd: int = 0
    attn_core_bwd: int = 0


def stage_times(s: Scenario, stage: int, scale: int = 1) -> StageTimes:
    """:class:`StageTimes` of pipeline ``stage`` of scenario ``s`` (module docstring).

    Raises:
        InputError: bad peak, efficiency or scale (:func:`work_time_ns`).
    """
    m, p, t = s.model, s.parallelism, s.training
    b, tp = t.micro_batch_size, p.tp
    layer = layer_forward_flops(m, b)
    core = attention_core_flops(m, b)
    attn = attention_forward_flops(s)                     # projections + core
    mlp = layer - attn
    dense_mlp = layer_forward_flops(m, b, moe=False) - attn
    selective = core if t.recompute == "selective" else 0
    last = stage == p.pp - 1
    logits = logits_forward_flops(m, b) if last else 0
    split = tp * p.cp

    def ns(gemm: int, attention: int = 0) -> int:
        return work_time_ns(-(-gemm // split), -(-attention // split), s, scale)

    sh = scenario_shards(s)[stage]
    params = sh.total if p.zero_stage == 0 else -(-sh.total // (p.dp * p.cp))
    opt = -(-params * OPTIMIZER_BYTES_PER_PARAM // (HBM_BYTES_PER_NS * scale))
    proj = attn - core
    return StageTimes(attn_fwd=ns(proj, core), mlp_fwd=ns(mlp),
                      attn_bwd=ns(2 * proj, 2 * core + selective),
                      mlp_bwd=ns(2 * mlp), logits_fwd=ns(logits), logits_bwd=ns(2 * logits),
                      optimizer=opt, dense_mlp_fwd=ns(dense_mlp), dense_mlp_bwd=ns(2 * dense_mlp),
                      attn_core_fwd=ns(0, core), attn_core_bwd=ns(0, 2 * core + selective))


def iteration_flops(s: Scenario) -> int:
    """Model FLOPs of one iteration over the whole global batch, all layers, as the schedule
    executes them: forward, backward (×2), full recomputation's replayed layer forward, selective
    recomputation's attention core. With ``recompute: full`` on a GPT model this is Narayanan et
    al. 2021, Eq. 3 exactly."""
    m, t = s.model, s.training
    b = t.micro_batch_size
    mbs = t.global_batch_size // b
    total = 0
    for moe in m.moe_layers:
        layer = layer_forward_flops(m, b, moe)
        total += 3 * layer + (layer if t.recompute == "full" else 0)
        if t.recompute == "selective":
            total += attention_core_flops(m, b)
    return mbs * (total + 3 * logits_forward_flops(m, b))
