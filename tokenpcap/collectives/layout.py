"""Rank layout: which GPU holds which (pipeline, data, context, tensor) coordinate, its groups,
node and NIC.

Megatron-LM order (``parallel_state.initialize_model_parallel``: ``RankGenerator`` with order
``tp-cp-ep-dp-pp``, ``ep = 1`` for the dense layers): tensor parallelism varies fastest, then
context parallelism, then data parallelism, then pipeline parallelism::

    rank = ((pp_index * dp + dp_index) * cp + cp_index) * tp + tp_index

``dp`` is Megatron's data-parallel size *without* context parallelism (``world / (tp * cp *
pp)``: samples are split over it); the ``cp`` ranks of one ``(pp, dp, tp)`` hold the chunks of
the same samples. The ``dp`` groups this module gives are Megatron's data-parallel groups *with*
context parallelism (``get_data_parallel_group(with_context_parallel=True)``, the ``dp-cp`` ranks
of one ``(pp, tp)``, ``dp * cp`` of them), which reduce the gradients (DDP's ``dp_cp_group``) and
the loss; without CP they are the plain data-parallel groups. Worked example with CP (masks of
``RankGenerator.get_ranks`` over sizes ``[tp, cp, dp, pp] = [2, 2, 2, 2]``, 16 GPUs): TP groups
[0, 1], [2, 3] ...; CP groups [0, 2], [1, 3], [4, 6], [5, 7], [8, 10] ...; dp-cp groups
[0, 2, 4, 6], [1, 3, 5, 7], [8, 10, 12, 14], [9, 11, 13, 15]; pipeline groups [0, 8], [1, 9] ...

Worked example (the one in Megatron-LM's docstring): 16 GPUs, ``tp = 2``, ``pp = 4``, so
``dp = 16 / (2 * 4) = 2``:

* 8 tensor-parallel groups: [0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11], [12, 13], [14, 15]
* 8 data-parallel groups: [0, 2], [1, 3], [4, 6], [5, 7], [8, 10], [9, 11], [12, 14], [13, 15]
* 4 pipeline groups: [0, 4, 8, 12], [1, 5, 9, 13], [2, 6, 10, 14], [3, 7, 11, 15]
* embedding groups (first and last stage): [0, 12], [1, 13], [2, 14], [3, 15]

With 8 GPUs per node, rank 5 is node 0, local GPU 5; rank 12 is node 1, local GPU 4. With 8 NICs
per node (rail-optimised) local GPU ``g`` uses local NIC ``g * nics_per_node // gpus_per_node``,
and its global NIC index is ``node * nics_per_node + local NIC``: rank 12 → NIC 12. So the TP
groups stay inside a node, the DP groups [0, 2] ... too, and the pipeline groups cross nodes.

Expert parallelism (MoE) is carved out of the dp-cp dimension as in Megatron-LM (the expert
``RankGenerator`` has order ``tp-ep-dp-pp`` with ``cp = 1`` and expert-data-parallel size
``world / (tp * ep * pp)``): with ``dpcp_index = dp_index * cp + cp_index``, ``dpcp_index =
edp_index * ep + ep_index`` (EP varies fastest inside DP). An EP group holds the ``ep`` ranks of
consecutive ``dp_index`` that share ``(pp, tp, edp)``; the expert-data-parallel group (which
reduces expert gradients) holds the ``dp * cp / ep`` ranks that share ``(pp, tp, ep_index)``.

Groups are tuples of global ranks in ring order, which is ascending rank order: ranks on one node
are consecutive, so a ring crosses each node boundary once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from tokenpcap.errors import InputError


__all__ = ["RankCoords", "RankLayout", "DIM_NAMES"]

#: Group kinds :meth:`RankLayout.groups` knows.
DIM_NAMES = ("tp", "dp", "pp", "ep", "edp", "tpep", "mp", "emb", "cp", "tpcp", "tpdpcp")

Group = tuple[int, ...]


class RankCoords(NamedTuple):
    pp: int
    dp: int
    tp: int
    cp: int = 0


@dataclass(frozen=True)
class RankLayout:
    """Rank ↔ (pp, dp, tp, cp) coordinates, groups, nodes and NICs (see the module docstring)."""

    dp: int
    tp: int
    pp: int
    gpus_per_node: int
    nics_per_node: int
    ep: int = 1
    cp: int = 1

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "gpus_per_node", "nics_per_node", "ep", "cp"):
            if getattr(self, name) < 1:
                raise InputError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.dpcp % self.ep:
            raise InputError(f"ep {self.ep} must divide dp*cp {self.dpcp}")
        if self.world_size % self.gpus_per_node:
            raise InputError(f"world size {self.world_size} is not a multiple of "
                             f"gpus_per_node {self.gpus_per_node}")

    # ------------------------------------------------------------------ coordinates
    @property
    def world_size(self) -> int:
        return self.dp * self.cp * self.tp * self.pp

    @property
    def dpcp(self) -> int:
        """Size of the data-parallel group with context parallelism: ``dp * cp``."""
        return self.dp * self.cp

    @property
    def nodes(self) -> int:
        return self.world_size // self.gpus_per_node

    def rank(self, pp: int, dp: int, tp: int, cp: int = 0) -> int:
        """Global rank of coordinates ``(pp, dp, tp, cp)`` (module docstring).

        Raises:
            InputError: a coordinate out of range.
        """
        if not (0 <= pp < self.pp and 0 <= dp < self.dp and 0 <= tp < self.tp
                and 0 <= cp < self.cp):
            raise InputError(f"coordinates (pp={pp}, dp={dp}, tp={tp}, cp={cp}) outside "
                             f"(pp<{self.pp}, dp<{self.dp}, tp<{self.tp}, cp<{self.cp})")
        return ((pp * self.dp + dp) * self.cp + cp) * self.tp + tp

    def coords(self, rank: int) -> RankCoords:
        """``(pp, dp, tp, cp)`` of a global rank.

        Raises:
            InputError: rank outside ``[0, world_size)``.
        """
        self._check_rank(rank)
        return RankCoords(*(int(x) for x in self.coords_array(np.asarray(rank))))

    def coords_array(self, ranks: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Vectorized :meth:`coords`: int64 arrays ``(pp, dp, tp, cp)`` of the shape of
        ``ranks``."""
        r = np.asarray(ranks, dtype=np.int64)
        return (r // (self.dpcp * self.tp), (r // (self.tp * self.cp)) % self.dp, r % self.tp,
                (r // self.tp) % self.cp)

    def stage_groups(self, dim: str, stage: int) -> list[Group]:
        """The ``tp`` or ``cp`` groups of pipeline ``stage``, ordered by ``(dp, cp)`` index (``tp``)
        or ``(dp, tp)`` index (``cp``); each in ring order.

        Raises:
            InputError: a ``dim`` other than ``tp`` and ``cp``, or a stage out of range.
        """
        if not 0 <= stage < self.pp:
            raise InputError(f"stage {stage} outside [0, {self.pp})")
        if dim == "tp":
            return [tuple(self.rank(stage, d, k, c) for k in range(self.tp))
                    for d in range(self.dp) for c in range(self.cp)]
        if dim == "cp":
            return [tuple(self.rank(stage, d, k, c) for c in range(self.cp))
                    for d in range(self.dp) for k in range(self.tp)]
        raise InputError(f"stage group kind {dim!r}, expected tp or cp")

    def node(self, rank: int) -> int:
        """Node index of a rank: ``rank // gpus_per_node``."""
        self._check_rank(rank)
        return rank // self.gpus_per_node

    def local_gpu(self, rank: int) -> int:
        self._check_rank(rank)
        return rank % self.gpus_per_node

    def nic(self, rank: int) -> int:
        """Global NIC index of a rank: ``node * nics_per_node + local_gpu * nics_per_node //
        gpus_per_node``."""
        self._check_rank(rank)
        return int(self.nic_array(np.asarray([rank]))[0])

    def nic_array(self, ranks: np.ndarray) -> np.ndarray:
        """Vectorized :meth:`nic`: int64 array of the shape of ``ranks``."""
        r = np.asarray(ranks, dtype=np.int64)
        local = r % self.gpus_per_node
        return (r // self.gpus_per_node) * self.nics_per_node + local * self.nics_per_node // \
            self.gpus_per_node

    def node_array(self, ranks: np.ndarray) -> np.ndarray:
        return np.asarray(ranks, dtype=np.int64) // self.gpus_per_node

    def _check_rank(self, rank: int) -> None:
        if not 0 <= rank < self.world_size:
            raise InputError(f"rank {rank} outside [0, {self.world_size})")

    # ------------------------------------------------------------------ groups
    def groups(self, dim: str) -> list[Group]:
        """All groups of one kind, each a tuple of global ranks in ring (ascending) order.

        ``dim``: ``tp``, ``dp`` (data-parallel with context parallelism: ``dp * cp`` ranks),
        ``pp``, ``cp`` (context-parallel), ``ep`` (expert-parallel), ``edp``
        (expert-data-parallel), ``tpep`` (the TP x EP group of MoE token counts), ``mp`` (the
        model-parallel group: TP x PP ranks of one (DP, CP) index), ``tpcp`` (Megatron's
        ``tp_cp`` group: TP x CP ranks of one (PP, DP) index), ``tpdpcp`` (``tp_dp_cp``: every
        rank of one pipeline stage) or ``emb`` (first and last pipeline stage, empty when
        ``pp == 1``). Groups are listed in the order of their smallest
        rank.

        Raises:
            InputError: an unknown ``dim``.
        """
        ranks = np.arange(self.world_size).reshape(self.pp, self.dpcp, self.tp)
        if dim == "tp":
            arr = ranks.reshape(-1, self.tp)
        elif dim == "dp":
            arr = ranks.transpose(0, 2, 1).reshape(-1, self.dpcp)
        elif dim == "cp":     # vary cp_index; fixed (pp, dp, tp)
            arr = ranks.reshape(self.pp, self.dp, self.cp, self.tp).transpose(0, 1, 3, 2) \
                .reshape(-1, self.cp)
        elif dim == "pp":
            arr = ranks.transpose(1, 2, 0).reshape(-1, self.pp)
        elif dim in ("ep", "edp", "tpep"):
            edp = self.dpcp // self.ep
            r5 = ranks.reshape(self.pp, edp, self.ep, self.tp)
            if dim == "ep":   # vary ep_index; fixed (pp, edp, tp)
                arr = r5.transpose(0, 1, 3, 2).reshape(-1, self.ep)
            elif dim == "tpep":   # vary (ep_index, tp); fixed (pp, edp): Megatron's tp_ep_group
                arr = r5.reshape(-1, self.ep * self.tp)
            else:             # vary edp_index; fixed (pp, ep, tp)
                arr = r5.transpose(0, 2, 3, 1).reshape(-1, edp)
        elif dim == "mp":     # Megatron's model-parallel group: vary (pp, tp); fixed dp
            arr = ranks.transpose(1, 0, 2).reshape(self.dpcp, -1)
        elif dim == "tpcp":   # vary (cp, tp); fixed (pp, dp)
            arr = ranks.reshape(self.pp * self.dp, self.cp * self.tp)
        elif dim == "tpdpcp":  # vary (dp, cp, tp); fixed pp
            arr = ranks.reshape(self.pp, -1)
        elif dim == "emb":
            if self.pp == 1:
                return []
            arr = np.stack([ranks[0].reshape(-1), ranks[-1].reshape(-1)], axis=1)
        else:
            raise InputError(f"group kind {dim!r}, expected one of {', '.join(DIM_NAMES)}")
        out = [tuple(int(x) for x in row) for row in arr]
        return sorted(out, key=lambda g: g[0])

    def group_of(self, dim: str, rank: int) -> Group:
        """The ``dim`` group that contains ``rank`` (``()`` for ``emb`` on a middle stage)."""
        self._check_rank(rank)
        for g in self.groups(dim):
            if rank in g:
                return g
        return ()

    def is_intra_node(self, group: Group) -> bool:
        """True when every rank of ``group`` is on the same node (no NIC traffic)."""
        return len({r // self.gpus_per_node for r in group}) <= 1

    def intra_node_summary(self) -> dict[str, dict[str, int | bool]]:
        """Per group kind: ``size``, ``groups`` and ``intra_node`` (all its groups inside one node).

        ``ep``/``edp`` are listed only with expert parallelism (``ep > 1``), ``emb`` only with
        ``pp > 1``, ``cp`` only with context parallelism (``cp > 1``)."""
        out: dict[str, dict[str, int | bool]] = {}
        for dim in DIM_NAMES:
            if (dim in ("ep", "edp", "tpep") and self.ep == 1) or (dim == "cp" and self.cp == 1):
                continue
            gs = self.groups(dim)
            if not gs:
                continue
            out[dim] = {"size": len(gs[0]), "groups": len(gs),
                        "intra_node": all(self.is_intra_node(g) for g in gs)}
        return out
