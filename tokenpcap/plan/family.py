"""Stage 3 (part): a family of collective calls, the unit the plan enumerates.

A :class:`Family` is one operation repeated (:class:`Inst`: layer, microbatch, bucket) on every
one of its group instances; :class:`tokenpcap.plan.calltable.CallTable` lists its calls as
columns and makes the :class:`~tokenpcap.plan.calls.CollectiveCall` objects.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tokenpcap.records import phase_label

__all__ = ["Inst", "Family"]


@dataclass
class Inst:
    """One repetition of a family on every one of its groups."""

    layer: int = -1
    microbatch: int = -1
    bucket: int = -1
    recompute: bool = False
    op: str = ""


@dataclass
class Family:
    """Calls sharing dim, phase, collective, size and stage over a list of group instances.

    ``tokens``: ``""`` (no per-token data), ``"mb"`` (the microbatch's samples, all positions) or
    ``"sp"`` (positions ``[t*s/tp, (t+1)*s/tp)`` of the sending rank's TP index ``t``).
    ``channel``: -1 (the calls' bytes split over the scenario's channels), or the one connection
    lane every transfer of a point-to-point family goes on, whole (a ``flows`` workload:
    :mod:`tokenpcap.plan.flows`).
    """

    dim: str
    phase: str
    collective: str
    message_bytes: int
    elem_bytes: int
    stage: int
    groups: list[tuple[int, ...]]
    insts: list[Inst] = field(default_factory=list)
    tokens: str = ""
    channel: int = -1

    @property
    def label(self) -> str:
        return phase_label(self.dim, self.phase, self.collective)

    @property
    def n_calls(self) -> int:
        return len(self.groups) * len(self.insts)
