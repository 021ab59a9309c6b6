"""The per-phase rows of a plan and the small formulas its report uses.

:class:`PhaseRow` aggregates every call with one phase label; :func:`bytes_per_nic` folds bytes
per (rank, local NIC) into bytes per global NIC; :func:`wire_time_ns` is a byte count at link
rate; :func:`pipeline_bubble_fraction` is the 1F1B / interleaved bubble of Narayanan et al.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from tokenpcap.collectives.layout import RankLayout
from tokenpcap.errors import InputError

__all__ = ["PhaseRow", "bytes_per_nic", "pipeline_bubble_fraction", "wire_time_ns"]


def pipeline_bubble_fraction(pp: int, microbatches: int, virtual_stages: int = 1) -> Fraction:
    """1F1B pipeline bubble over ideal time: ``(p - 1) / (v * m)`` (Narayanan et al. 2021, Sec.
    2.2.1; ``v`` model chunks per device for the interleaved schedule, Sec. 2.2.2).

    Raises:
        InputError: a non-positive argument.
    """
    if pp < 1 or microbatches < 1 or virtual_stages < 1:
        raise InputError(f"pp {pp}, microbatches {microbatches}, virtual_stages {virtual_stages}")
    return Fraction(pp - 1, virtual_stages * microbatches)


def bytes_per_nic(by_rank_nic: np.ndarray, layout: RankLayout) -> np.ndarray:
    """``(world_size, nics_per_node)`` bytes per rank and local NIC -> int64 ``(nodes *
    nics_per_node,)`` bytes per global NIC (NIC ``node * nics_per_node + local``)."""
    npn = layout.nics_per_node
    per_node = by_rank_nic.reshape(layout.nodes, layout.gpus_per_node, npn).sum(axis=1)
    return per_node.reshape(-1).astype(np.int64)


def wire_time_ns(nbytes: int, link_gbps: float) -> int:
    """Time to send ``nbytes`` of payload at ``link_gbps`` (1 Gb/s = 1 bit/ns), rounded up (ns).

    Exact rational arithmetic (the rate as written in decimal), so no float rounding at any size.
    """
    if nbytes <= 0:
        return 0
    ns = Fraction(nbytes * 8) / Fraction(str(link_gbps))
    return -(-ns.numerator // ns.denominator)


@dataclass
class PhaseRow:
    """Aggregate of every call with one phase label in one iteration.

    ``calls``: all calls (all group instances); ``count``: most calls any one rank takes part in;
    ``group_size``/``message_bytes``: the largest; ``sizes``: ``{message_bytes: calls}``;
    ``ranks``: ranks that take part; ``nic_bytes``/``nvlink_bytes``: bytes all ranks send;
    ``nic_bytes_per_rank``/``nvlink_bytes_per_rank``: the busiest participating rank's bytes;
    ``wire_time_ns``: the busiest rank's NIC bytes at link rate.
    """

    name: str
    dim: str
    phase: str
    collective: str
    calls: int = 0
    count: int = 0
    group_size: int = 0
    message_bytes: int = 0
    sizes: dict[int, int] = field(default_factory=dict)
    ranks: int = 0
    nic_bytes: int = 0
    nvlink_bytes: int = 0
    nic_bytes_per_rank: int = 0
    nvlink_bytes_per_rank: int = 0
    wire_time_ns: int = 0
    #: The collectives' data among ``nic_bytes`` (which are the bytes on the wire: LL and LL128
    #: lines carry flags, :mod:`tokenpcap.plan.protocol`); ``protocols``: calls per protocol
    #: other than Simple; ``nccl_forced``: ``{"Tree/LL": calls}`` where NCCL's tuner would run
    #: another algorithm than the scenario's, which ran (forced). The three keys are in the
    #: JSON only when a call of the row is not Simple or is forced.
    nic_payload_bytes: int = 0
    protocols: dict[str, int] = field(default_factory=dict)
    nccl_forced: dict[str, int] = field(default_factory=dict)
    #: NIC bytes each rank sends with this label in one iteration: int64 ``(world_size,)``
    #: (``nic_bytes`` is its sum; not part of the JSON).
    nic_bytes_by_rank: np.ndarray | None = field(default=None, repr=False, compare=False)
    #: NIC bytes each rank sends through each NIC of its node: int64 ``(world_size,
    #: nics_per_node)`` (rows sum to ``nic_bytes_by_rank``; rings and trees spread a rank's bytes
    #: over the group's NICs, :mod:`tokenpcap.collectives.rails`; not part of the JSON).
    nic_bytes_by_rank_nic: np.ndarray | None = field(default=None, repr=False, compare=False)

    def nic_bytes_by_nic(self, layout: RankLayout) -> np.ndarray:
        """Bytes each NIC sends with this label: int64 ``(nodes * nics_per_node,)``."""
        return bytes_per_nic(self.nic_bytes_by_rank_nic, layout)

    def to_json(self) -> dict:
        out = {
            "name": self.name, "dim": self.dim, "phase": self.phase, "collective": self.collective,
            "group_size": self.group_size, "message_bytes": self.message_bytes,
            "count": self.count, "calls": self.calls, "ranks": self.ranks,
            "sizes": [{"message_bytes": k, "calls": v} for k, v in sorted(self.sizes.items())],
            "nic_bytes_per_rank": self.nic_bytes_per_rank,
            "nvlink_bytes_per_rank": self.nvlink_bytes_per_rank,
            "nic_bytes": self.nic_bytes, "nvlink_bytes": self.nvlink_bytes,
            "wire_time_ns": self.wire_time_ns,
        }
        if self.protocols or self.nccl_forced:
            out.update(nic_payload_bytes=self.nic_payload_bytes, protocols=dict(self.protocols),
                       nccl_forced=dict(self.nccl_forced))
        return out
