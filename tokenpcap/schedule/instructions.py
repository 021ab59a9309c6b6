"""Stage 5 (part): the instructions of a rank's program (:mod:`tokenpcap.schedule.program`),
the overlap options they follow, and the order of a layer's operations.

A layer's template lists, in the order a rank runs them, its collectives (``c``: blocking; ``a``:
on the asynchronous stream), its computations (``t``: a :class:`~tokenpcap.schedule.compute.
StageTimes` field) and its ring-attention steps (``r``).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Union

__all__ = ["CallMode", "Compute", "Call", "Wait", "Mark", "Instruction", "Overlap",
           "FORWARD_LAYER_OPS", "BACKWARD_LAYER_OPS", "FWD_LAYER", "BWD_LAYER", "BATCH_OPS"]


class CallMode(IntEnum):
    """How a rank makes a collective call."""

    BLOCK = 0   #: the rank waits until its part of the call is finished (TP, EP, ZeRO-3 gathers)
    ASYNC = 1   #: queued on the rank's one communication stream (DP buckets, optimizer gathers)
    SEND = 2    #: started; never waited for (PP sends) or waited for later by a WAIT
    RECV = 3    #: a pipeline receive: the rank waits for the data
    WAIT = 4    #: the rank waits until its part of a call it started earlier (SEND) is finished
    #: (CP ring steps, overlapped EP AllToAlls, overlapped parameter gathers)


@dataclass(frozen=True, slots=True)
class Compute:
    """The rank computes for ``ns`` nanoseconds (> 0)."""

    ns: int


@dataclass(frozen=True, slots=True)
class Call:
    """The rank makes collective call ``call_id`` (:attr:`CollectiveCall.call_id`) in ``mode``."""

    call_id: int
    mode: CallMode


@dataclass(frozen=True, slots=True)
class Wait:
    """The rank waits until its asynchronous stream is empty."""


@dataclass(frozen=True, slots=True)
class Mark:
    """Begin (``begin``) or end of a timeline block: ``what`` is ``F`` (forward), ``B`` (backward),
    ``R`` (recomputed forward) or ``O`` (optimizer) of ``microbatch`` (-1: none)."""

    begin: bool
    what: str
    microbatch: int
    iteration: int


@dataclass(frozen=True, slots=True)
class Overlap:
    """Megatron's overlap options a program follows (``training.overlap_grad_reduce``,
    ``.overlap_param_gather``, ``.overlap_moe_expert_parallel_comm``)."""

    grad_reduce: bool = True
    param_gather: bool = False
    moe_a2a: bool = False

    @classmethod
    def of(cls, training) -> Overlap:  # type: ignore[no-untyped-def]
        """The options of a scenario's ``training``."""
        return cls(training.overlap_grad_reduce, training.overlap_param_gather,
                   training.overlap_moe_expert_parallel_comm)


#: One step of a rank's program.
Instruction = Union[Compute, Call, Wait, Mark]
_WAIT = Wait()
BLOCK, ASYNC, SEND, RECV, WAIT = (CallMode.BLOCK, CallMode.ASYNC, CallMode.SEND,
                                   CallMode.RECV, CallMode.WAIT)

FWD_LAYER = (("c", "dense_params"), ("c", "expert_params"), ("c", "attn_in"), ("r", "cp_kv"),
              ("t", "attn_fwd"),
              ("c", "attn_out"), ("c", "mlp_in"), ("c", "moe_aux_loss"), ("c", "moe_counts"),
              ("c", "dispatch"), ("c", "dispatch_ib"), ("c", "dispatch_nvl"),
              ("c", "dispatch_probs"), ("c", "dispatch_probs_ib"), ("c", "dispatch_probs_nvl"),
              ("c", "moe_gather"), ("c", "moe_gather_probs"),
              ("t", "mlp_fwd"), ("c", "moe_scatter"), ("c", "combine"), ("c", "combine_nvl"),
              ("c", "combine_ib"), ("c", "mlp_out"))
BWD_LAYER = (("c", "dense_params"), ("c", "expert_params"), ("c", "mlp_out_grad"),
              ("c", "combine_grad"), ("c", "combine_grad_ib"), ("c", "combine_grad_nvl"),
              ("c", "moe_scatter_grad"), ("c", "mlp_in_regather"),
              ("t", "mlp_bwd"), ("c", "moe_gather_grad"), ("c", "moe_gather_probs_grad"),
              ("c", "dispatch_grad"), ("c", "dispatch_grad_nvl"), ("c", "dispatch_grad_ib"),
              ("c", "dispatch_probs_grad"), ("c", "dispatch_probs_grad_nvl"),
              ("c", "dispatch_probs_grad_ib"), ("c", "mlp_in_grad"),
              ("c", "attn_out_grad"),
              ("c", "attn_in_regather"), ("r", "cp_kv_grad"), ("t", "attn_bwd"),
              ("c", "attn_in_grad"),
              ("a", "dense_grads"), ("a", "expert_grads"))


#: The collectives of one layer in the order a rank makes them, forward and backward.
FORWARD_LAYER_OPS = tuple(n for t, n in FWD_LAYER if t == "c")
BACKWARD_LAYER_OPS = tuple(n for t, n in BWD_LAYER if t == "c")
#: The batch broadcasts of a microbatch's forward (plan: ``small.small_families``).
BATCH_OPS = ("batch_tokens", "batch_labels", "batch_loss_mask", "batch_position_ids",
              "batch_attention_mask")
