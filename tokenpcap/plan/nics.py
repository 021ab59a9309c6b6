"""Bytes per NIC and phase for the whole job (``tokenpcap plan --nics``): which NIC carries what.

NIC ``g`` is local NIC ``g % nics_per_node`` of node ``g // nics_per_node`` (the numbering of
``generate --nics``). Its bytes in one phase are the bytes every rank of its node sends
through it with that label in one iteration, summed (:meth:`PhaseRow.nic_bytes_by_nic`, from
each row's ``(world_size, nics_per_node)`` ranks x local NICs, :mod:`tokenpcap.collectives.
rails`). NICs with equal bytes in every phase form one group, so a job of thousands of NICs
reads as a few lines (DeepSeek-V3's NICs of the stage holding the dense layers carry no expert
traffic, the others' carry it); the groups come busiest first.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["NicPhaseTable", "nic_phase_table", "index_ranges"]


@dataclass(frozen=True)
class NicPhaseTable:
    """``phases``: the labels of the rows that put bytes on a NIC, in the plan's order;
    ``bytes``: int64 ``(nodes * nics_per_node, len(phases))`` bytes each NIC sends per phase in
    one iteration; ``nics_per_node``."""

    phases: tuple[str, ...]
    bytes: np.ndarray
    nics_per_node: int

    def groups(self) -> list[tuple[list[int], np.ndarray]]:
        """``[(NICs, bytes per phase)]``: NICs with equal bytes in every phase together, the
        group with the most bytes per NIC first (ties: the lowest NIC first)."""
        if self.bytes.shape[0] == 0:
            return []
        uniq, inverse = np.unique(self.bytes, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        out = [(np.flatnonzero(inverse == i).tolist(), uniq[i]) for i in range(len(uniq))]
        out.sort(key=lambda g: (-int(g[1].sum()), g[0][0]))
        return out

    def to_json(self) -> dict:
        return {"phases": list(self.phases), "nics_per_node": self.nics_per_node,
                "groups": [{"nics": index_ranges(nics), "count": len(nics),
                            "bytes_per_nic": int(b.sum()),
                            "phases": {p: int(v) for p, v in zip(self.phases, b)}}
                           for nics, b in self.groups()]}


def nic_phase_table(plan) -> NicPhaseTable:  # type: ignore[no-untyped-def]
    """The :class:`NicPhaseTable` of ``plan`` (a :class:`tokenpcap.plan.build.Plan`)."""
    lay = plan.layout
    cols, names = [], []
    for r in plan.rows:
        if r.nic_bytes_by_rank_nic is None or r.nic_bytes <= 0:
            continue
        cols.append(r.nic_bytes_by_nic(lay))
        names.append(r.name)
    n = lay.nodes * lay.nics_per_node
    table = np.stack(cols, axis=1) if cols else np.zeros((n, 0), np.int64)
    return NicPhaseTable(tuple(names), table.astype(np.int64), lay.nics_per_node)


def index_ranges(ids: list[int]) -> str:
    """Sorted distinct integers as ``0-3,8,16-19`` (the text ``--nics`` reads)."""
    out, i = [], 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(out)
