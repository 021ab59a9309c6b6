"""The kernel efficiencies of each GPU type, written once: the share of the dense peak a kind
of kernel sustains in training, looked up by a cluster profile's ``gpu.name``.

The schedule times a piece of work of ``G`` GEMM FLOPs and ``A`` attention FLOPs as
``G / e_gemm + A / e_attention`` over the peak (:mod:`tokenpcap.schedule.compute`). Which
efficiencies it uses (:func:`tokenpcap.schedule.compute.kernel_efficiency`): the scenario's
``training.mfu`` for both kinds if set (the one simple knob), else the cluster profile's
``gpu.gemm_efficiency`` / ``gpu.attention_efficiency`` if set, else this table's values for the
GPU's ``name``, else :data:`tokenpcap.schedule.compute.DEFAULT_MFU`.

Where the values come from (docs/plan.md, "Kernel efficiencies per GPU type"):

* ``attention``: cuDNN's fused attention (what Transformer Engine runs on Hopper), BF16, head
  dimension 128, 8 k tokens, H100 SXM5 (Shah et al. 2024, "FlashAttention-3", Fig. 5 and 6,
  the panels without the causal mask; the causal kernel skips the masked blocks, whose FLOPs
  Megatron does not count either): forward 600 TFLOP/s, backward 518 TFLOP/s; a layer runs the forward once and the backward
  (twice its FLOPs) once, so ``3 / (1/600 + 2/518)`` = 543 TFLOP/s = 0.549 of 989: 0.55.
  A100: FlashAttention-2 reaches 50-73 % of the A100's peak (Dao 2023, "FlashAttention-2",
  abstract; the forward at the top, the backward lower): 0.6, between.
* ``gemm``: the largest share of the peak a BF16 ``matmul`` reaches at its best shape (the
  maximum achievable matmul FLOPS, MAMF: Bekman, "Machine Learning Engineering", compute/
  accelerator, measured with CUDA 12.1: H100 SXM 792.1 of 989 TFLOP/s = 80.1 %, A100 SXM
  267.9 of 312 = 85.9 %) times :data:`LAYER_SHARE_OF_MAMF`. A training step does not run its
  GEMMs at the best shape: a TP rank multiplies slices of the weights, between the kernels
  that Megatron's FLOP count leaves out (norms, activations, rotary embedding, residual adds,
  the optimizer's casts) and the launch gaps between them. That share is a calibration, one
  number for every GPU type (docs/plan.md gives the published jobs it is checked against).
* H800 SXM: the H100 SXM's SMs, clock and HBM (NVIDIA: it differs in NVLink and FP64 only):
  the H100's values.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

__all__ = ["GpuType", "GPU_TYPES", "LAYER_SHARE_OF_MAMF", "gpu_type"]

#: Share of the best-shape matmul rate (MAMF) a transformer layer's GEMMs keep in training
#: (module docstring): a calibration, the same for every GPU type.
LAYER_SHARE_OF_MAMF = Fraction(3, 4)


@dataclass(frozen=True)
class GpuType:
    """The published figures of one GPU type: ``mamf`` the best-shape BF16 matmul share of the
    peak, ``attention_efficiency`` the fused attention kernel's (fractions in ``(0, 1]``)."""

    mamf: Fraction
    attention_efficiency: float

    @property
    def gemm_efficiency(self) -> float:
        """``mamf × LAYER_SHARE_OF_MAMF``, rounded to 3 decimals (a profile's decimal)."""
        return round(float(self.mamf * LAYER_SHARE_OF_MAMF), 3)


_H100_SXM = GpuType(mamf=Fraction("792.1") / 989, attention_efficiency=0.55)

#: The bundled GPU types, by the ``gpu.name`` a cluster profile gives (module docstring).
GPU_TYPES: dict[str, GpuType] = {
    "H100-SXM": _H100_SXM,
    "H800-SXM": _H100_SXM,
    "A100-SXM4-80GB": GpuType(mamf=Fraction("267.9") / 312, attention_efficiency=0.6),
}


def gpu_type(name: str) -> GpuType | None:
    """The :class:`GpuType` of ``name`` (a cluster profile's ``gpu.name``), None when the
    table does not know it."""
    return GPU_TYPES.get(name)
