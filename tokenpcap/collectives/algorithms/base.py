"""The collective-algorithm registry: one class per algorithm, registered by name.

An :class:`Algorithm` owns everything about itself: which collectives it runs, its hops (who
sends which bytes to whom at which step), the rule of which earlier hops a hop waits for, where
a hop's bytes lie in the collective's buffer, and its closed-form total. The profile check
(``collectives.algorithm``), the plan, the transfers and the parametrised tests read
:data:`ALGORITHMS`; adding an algorithm is one new module in this package with an
``@register`` class, imported by the package's ``__init__``.
"""
from __future__ import annotations

from typing import ClassVar

import numpy as np

from tokenpcap.collectives.hops import chunk_starts
from tokenpcap.collectives.layout import RankLayout

__all__ = ["Algorithm", "ALGORITHMS", "register", "effective_algorithm", "selectable_algorithms",
           "carriers"]

#: name -> the registered algorithm (one instance each).
ALGORITHMS: dict[str, "Algorithm"] = {}
#: The algorithm that runs a collective nobody else was chosen for.
DEFAULT = "ring"


class Algorithm:
    """A collective algorithm (module docstring). Subclasses set :attr:`name` and :attr:`runs`
    and implement :meth:`hops`, :meth:`pieces` and :meth:`total_bytes`.

    Attributes:
        name: the scenario's ``collectives.algorithm`` value.
        runs: the collectives it runs.
        exclusive: the only algorithm for its collectives, whatever a scenario chooses (NCCL
            sends SendRecv point to point and AllToAll directly); not a scenario's choice.
        source: where the algorithm is described.
    """

    name: ClassVar[str] = ""
    runs: ClassVar[frozenset[str]] = frozenset()
    exclusive: ClassVar[bool] = False
    source: ClassVar[str] = ""

    def hops(self, collective: str, group: tuple[int, ...], s: int, e: int,
             layout: RankLayout) -> np.ndarray:
        """:data:`~tokenpcap.collectives.hops.HOP_DTYPE` rows of one call of ``collective`` on
        ``group`` with ``S = s`` bytes of ``e``-byte elements."""
        raise NotImplementedError

    def nonempty_hops(self, collective: str, group: tuple[int, ...], s: int, e: int,
                      layout: RankLayout) -> tuple[np.ndarray, np.ndarray] | None:
        """The rows of :meth:`hops` that carry bytes, made without the others, and their row
        indices in :meth:`hops`: ``(HOP_DTYPE (k,), int64 (k,))``, indices ascending; None
        when the algorithm has no cheaper way than filtering :meth:`hops` (the default).
        Worth it where most hops are empty (the ring's chunks of a message of fewer elements
        than ranks: :func:`~tokenpcap.collectives.algorithms.ring.ring_nonempty_hops`). Only
        for an algorithm whose chunk carries the same bytes in every hop: then no hop that
        carries bytes waits for an empty one, and :meth:`predecessors` of the rows kept are
        the same hops as in the whole table (what the transfers rely on)."""
        return None

    def pieces(self, collective: str, group: tuple[int, ...], layout: RankLayout) -> int:
        """Into how many parts :meth:`hops` deals ``S``'s elements for one call of
        ``collective`` on ``group`` (ring: ``N`` chunks; tree: 2 halves; direct AllToAll: one
        chunk per destination; point to point: 1), 0 when the call has no hops. Exact: every
        hop carries at least ``k`` whole elements iff ``S`` holds at least ``k * pieces``
        elements (the parts are dealt as evenly as
        :func:`~tokenpcap.collectives.hops.ring_chunk_bytes` deals them, the smallest holding
        ``elements // pieces``)."""
        raise NotImplementedError

    def total_bytes(self, collective: str, group: tuple[int, ...], s: int,
                    layout: RankLayout) -> int:
        """Closed-form bytes all ranks of ``group`` send together (NIC + NVLink)."""
        raise NotImplementedError

    def predecessors(self, h: np.ndarray) -> list[list[int]]:
        """Hop indices each hop of ``h`` waits for. Default (ring, pipelined chain): a hop from
        rank ``x`` carrying chunk ``c`` waits for the hop(s) that last brought chunk ``c`` to
        ``x`` (the largest earlier step)."""
        n = len(h)
        if n == 0:
            return []
        step = h["step"].astype(np.int64)
        # the hops into (rank, chunk), sorted by step then hop index; a hop's candidates are
        # those into (its src, its chunk); the last step before its own, all hops of that step
        into = _pair_key(h["dst"], h["chunk"], h)
        frm = _pair_key(h["src"], h["chunk"], h)
        s0 = step - step.min()
        span = int(s0.max()) + 1
        order = np.lexsort((np.arange(n), s0, into))
        key_sorted = into[order] * span + s0[order]
        below = _search(key_sorted, frm * span + s0)                        # first >= own step
        has = (below > 0) & (into[order][np.maximum(below - 1, 0)] == frm)
        best = s0[order][np.maximum(below - 1, 0)]
        start = _search(key_sorted, frm * span + best)
        idx = order.tolist()
        return [idx[a:b] if ok else [] for a, b, ok in
                zip(start.tolist(), below.tolist(), has.tolist())]

    def chunk_offsets(self, h: np.ndarray, collective: str, group: tuple[int, ...], s: int,
                      e: int, layout: RankLayout) -> np.ndarray:
        """Byte offset of each hop's data in the collective's buffer: int64 ``(len(h),)``.
        Default: ``chunk`` indexes the ``N`` ring chunks of ``S``."""
        if collective == "Broadcast" or len(h) == 0:
            return np.zeros(len(h), np.int64)
        return chunk_starts(s, len(group), e)[h["chunk"] % len(group)]


def _search(key_sorted: np.ndarray, needles: np.ndarray) -> np.ndarray:
    """``np.searchsorted(key_sorted, needles, side="left")`` for needles in any order: the
    needles are searched in ascending order (each binary search then starts where the last one
    ended, so the accesses stay local: about 3x faster on millions of hops than in hop order) and
    the positions put back in the needles' order. int64 ``(len(needles),)``."""
    by = np.argsort(needles, kind="stable")
    out = np.empty(needles.size, np.int64)
    out[by] = np.searchsorted(key_sorted, needles[by], side="left")
    return out


def _pair_key(rank: np.ndarray, chunk: np.ndarray, h: np.ndarray) -> np.ndarray:
    """One int64 per (rank, chunk) pair, equal for equal pairs across the hops of ``h``."""
    c0 = min(int(h["chunk"].min()), 0)
    width = int(h["chunk"].max()) - c0 + 1
    return rank.astype(np.int64) * width + (chunk.astype(np.int64) - c0)


def carriers(h: np.ndarray) -> list[list[int]]:
    """For each hop of ``h``, the hops that bring its chunk into its sender (indices into ``h``)."""
    src, dst, chunk = h["src"].tolist(), h["dst"].tolist(), h["chunk"].tolist()
    into: dict[tuple[int, int], list[int]] = {}
    for i in range(len(h)):
        into.setdefault((dst[i], chunk[i]), []).append(i)
    return [into.get((src[i], chunk[i]), []) for i in range(len(h))]


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator: put one instance of ``cls`` into :data:`ALGORITHMS` under ``cls.name``.

    Raises:
        TypeError: the name is empty or already taken (a programming error, at import).
    """
    if not cls.name or cls.name in ALGORITHMS:
        raise ValueError(f"algorithm name {cls.name!r}: empty or registered twice")
    ALGORITHMS[cls.name] = cls()
    return cls


def selectable_algorithms() -> tuple[str, ...]:
    """The names a scenario may give as ``collectives.algorithm`` (registration order)."""
    return tuple(n for n, a in ALGORITHMS.items() if not a.exclusive)


def effective_algorithm(collective: str, algorithm: str) -> str:
    """The algorithm that runs ``collective`` when a scenario chose ``algorithm``: an exclusive
    algorithm of the collective (SendRecv: p2p, AllToAll: direct), else the chosen one when it
    runs the collective (trees and hierarchical run only AllReduce, as in NCCL), else ring."""
    for name, a in ALGORITHMS.items():
        if a.exclusive and collective in a.runs:
            return name
    if collective in ALGORITHMS[algorithm].runs:
        return algorithm
    return DEFAULT
