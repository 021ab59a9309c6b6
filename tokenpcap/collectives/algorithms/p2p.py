"""Point to point (NCCL ``ncclSend``/``ncclRecv``): ``group = (src, dst)``, ``src`` sends ``S``;
pipeline-parallel activations and their gradients. Closed form ``S``."""
from __future__ import annotations

import numpy as np

from tokenpcap.errors import InputError
from tokenpcap.collectives.algorithms.base import Algorithm, register
from tokenpcap.collectives.hops import hop_table
from tokenpcap.collectives.layout import RankLayout

__all__ = ["P2P"]


@register
class P2P(Algorithm):
    name = "p2p"
    runs = frozenset({"SendRecv"})
    exclusive = True
    source = "NCCL src/collectives.cc ncclSend/ncclRecv"

    def hops(self, collective: str, group: tuple[int, ...], s: int, e: int,
             layout: RankLayout) -> np.ndarray:
        if len(group) != 2:
            raise InputError(f"SendRecv needs a group (src, dst), got {group}")
        return hop_table(np.zeros(1), np.array([group[0]]), np.array([group[1]]), np.zeros(1),
                         np.array([s]))

    def pieces(self, collective: str, group: tuple[int, ...], layout: RankLayout) -> int:
        return 1                                      # S whole from src to dst

    def total_bytes(self, collective: str, group: tuple[int, ...], s: int,
                    layout: RankLayout) -> int:
        return s

    def predecessors(self, h: np.ndarray) -> list[list[int]]:
        return [[] for _ in range(len(h))]

    def chunk_offsets(self, h: np.ndarray, collective: str, group: tuple[int, ...], s: int,
                      e: int, layout: RankLayout) -> np.ndarray:
        return np.zeros(len(h), np.int64)
