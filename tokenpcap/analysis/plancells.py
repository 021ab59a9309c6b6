"""The plan's RDMA payload bytes per (NIC, phase label), for ``inspect --against``.

:func:`plan_cells` builds the plan (:func:`tokenpcap.plan.build.build_plan`, at the capture's
scale) and takes each phase row's bytes per rank and NIC (``PhaseRow.nic_bytes_by_rank_nic``:
rings and trees spread a rank's bytes over the group's NICs, :mod:`tokenpcap.collectives.rails`). The column sums are the
plan's per-phase ``PhaseRow.nic_bytes`` and the row sums its ``nic_bytes_per_nic()`` (tested).
A rank selection keeps the bytes those ranks send only.

:func:`phase_patterns` resolves ``--phases`` patterns (the generator's rule:
:class:`tokenpcap.generate.select.Selection`) to plan labels; :func:`nic_index_by_address` maps a
capture's source addresses to global NIC indices.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import numpy as np

__all__ = ["PlanCells", "plan_cells", "phase_patterns", "nic_index_by_address"]


@dataclass
class PlanCells:
    """Payload bytes per (NIC, label) of ``iterations`` iterations at ``scale``.

    Attributes:
        labels: the plan's phase labels with NIC bytes (columns).
        bytes: int64 (nics, len(labels)): bytes each NIC sends per label.
        nics: number of NICs of the cluster; rank_nic: int64 (world_size,) NIC of each rank.
    """

    labels: list[str]
    bytes: np.ndarray
    nics: int
    rank_nic: np.ndarray

    def column(self, label: str) -> int:
        return self.labels.index(label)


def nic_index_by_address(cluster) -> dict[str, int]:
    """Address text (as :func:`tokenpcap.analysis.inspect.address_text` prints it) → global NIC index,
    for IPv4, IPv6 and LIDs of every NIC of ``cluster``."""
    from tokenpcap.config.addresses import nic_addresses

    a = nic_addresses(cluster)
    out: dict[str, int] = {}
    for g in range(len(a)):
        out[str(ipaddress.IPv4Address(bytes(a.ipv4[g])))] = g
        out[str(ipaddress.IPv6Address(bytes(a.ipv6[g])))] = g
        out[f"lid 0x{int(a.lid[g]):04x}"] = g
    return out


def plan_cells(scenario, *, scale: int = 1, iterations: int = 1,
               ranks: tuple[int, ...] | None = None) -> PlanCells:
    """Per (NIC, label) payload bytes of ``scenario`` (module docstring).

    Args:
        scenario: a loaded :class:`tokenpcap.config.profiles.Scenario`.
        scale: message sizes divided by it (``generate --scale``); iterations: multiplier.
        ranks: keep the bytes these ranks send (``generate --ranks``), None: all.

    Raises:
        InputError, InfeasiblePlanError: from :func:`tokenpcap.plan.build.build_plan`.
    """
    from tokenpcap.plan.build import build_plan
    from tokenpcap.plan.rows import bytes_per_nic

    plan = build_plan(scenario, scale=scale)
    layout = plan.layout
    rows = [r for r in plan.rows if r.nic_bytes]
    labels = [r.name for r in rows]
    world = layout.world_size
    keep = np.ones(world, bool)
    if ranks is not None:
        keep[:] = False
        keep[[r for r in ranks if 0 <= r < world]] = True
    nics = layout.nodes * scenario.cluster.nics_per_node
    rank_nic = layout.nic_array(np.arange(world))
    out = np.zeros((nics, len(labels)), np.int64)
    for j, r in enumerate(rows):
        out[:, j] = bytes_per_nic(r.nic_bytes_by_rank_nic * keep[:, None], layout)
    return PlanCells(labels, out * int(iterations), nics, rank_nic)


def phase_patterns(patterns, labels: list[str]) -> set[str]:
    """The labels of ``labels`` that ``--phases`` patterns select (a whole label, a prefix
    ending at ``/`` or one component, :class:`tokenpcap.generate.select.Selection`)."""
    from tokenpcap.records import LABELS
    from tokenpcap.generate.select import Selection

    keep = Selection(phases=tuple(patterns)).labels()
    chosen = {LABELS[i] for i in np.flatnonzero(keep)}
    return {name for name in labels if name in chosen}
