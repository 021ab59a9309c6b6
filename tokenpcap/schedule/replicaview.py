"""What a run timed through its quotient (:mod:`tokenpcap.schedule.replicas`) answers for the
whole job: the frames of representatives' NICs with their real peers, message rows as each end
of a message sees it, and the timeline and NVLink copies of every rank.

In the quotient a transfer ``x`` that a representative's NIC ``s`` sends to a rank of
data-parallel index ``e`` is received by that rank's representative, on NIC ``P = σ^-e(r)``
(``r`` its real receiving NIC, ``σ`` the translation). What ``s`` sees of ``x`` is ``x``
itself, so ``s``'s frames of it (its data, the ACKs of its clear-to-send write) go to ``r``;
what ``P`` sees is ``x``'s image ``σ^-e(x)``, sent by ``σ^-e(s)`` (the same times, the run being
a fixed point of ``σ``), so ``P``'s frames of it (the ACKs of its data, its clear-to-send write)
go to ``σ^-e(s)``. A frame at ``P`` therefore names the *receiver's view* of its message, id
``msg + RECEIVER_VIEW``, whose row (:meth:`ReplicaView.message_rows`) is ``x``'s moved by
``σ^-e``: both NICs and both ranks; a frame at ``s`` names ``x``'s real row (the receiving NIC
``r``). Every other column (sizes, PSNs, byte offsets, times, provenance) is the same in both,
as it is in the whole run for ``x`` and its image.

The timeline and the NVLink copies are those of the representatives and of their translates
(every rank of an orbit has the same rows, moved).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.records import KIND_CTS, PKT_ACK
from tokenpcap.schedule.replicas import ReplicaQuotient, _replica, _translate

__all__ = ["ReplicaView", "RECEIVER_VIEW"]

#: Added to a message id in a frame that the receiving representative's NIC sends (its ACKs of
#: the data, its clear-to-send write): that frame names the receiver's view of the message. Above
#: any message id a run can hold (ids are dense from 0; memory bounds them far below 2**50).
RECEIVER_VIEW = 1 << 50


class ReplicaView:
    """The whole job's view of a run timed through ``q`` (module docstring).

    Args:
        q: :func:`~tokenpcap.schedule.replicas.quotient_flats`'s quotient.
    """

    def __init__(self, q: ReplicaQuotient):
        self.D, self.stride, self.nic_stride = int(q.replicas), int(q.stride), int(q.nic_stride)

    # ------------------------------------------------------------ NICs and ranks
    def nic(self, n: np.ndarray, k: np.ndarray) -> np.ndarray:
        """``σ^k`` of NICs ``n`` (int64 arrays of one shape)."""
        return _translate(np.asarray(n, np.int64), np.asarray(k, np.int64), self.nic_stride, self.D)

    def rank(self, r: np.ndarray, k: np.ndarray) -> np.ndarray:
        """``σ^k`` of ranks ``r`` (int64 arrays of one shape)."""
        return _translate(np.asarray(r, np.int64), np.asarray(k, np.int64), self.stride, self.D)

    def representative_nics(self, n_nics: int) -> np.ndarray:
        """The NICs of data-parallel index 0 (int64, sorted)."""
        n = np.arange(n_nics, dtype=np.int64)
        return n[_replica(n, self.nic_stride, self.D) == 0]

    # ------------------------------------------------------------ frames
    def frames(self, rows: np.ndarray, recv_rank: np.ndarray, kind: np.ndarray) -> None:
        """Give the engine's frame rows ``rows`` (int64 ``(n, 7)``: time, NIC, peer NIC, message,
        packet index, frame kind, frame bytes; every NIC a representative's) their real peers
        and views, in place. ``recv_rank``, ``kind``: int64 ``(n,)`` per row, the rank its
        message's transfer really reaches and the message's kind (``KIND_CTS``: the
        clear-to-send write of the transfer, sent by the receiving side)."""
        e = _replica(recv_rank, self.stride, self.D)
        # the frame is at the transfer's sending NIC s when it is the data's own or the ACK of
        # the clear-to-send write (s and P may be one NIC: a transfer from data-parallel index
        # 0 to 1 of two, whose image comes back)
        sender = (rows[:, 5] == PKT_ACK) == (kind == KIND_CTS)
        moved = e != 0
        at_s, at_p = moved & sender, moved & ~sender
        rows[at_s, 2] = self.nic(rows[at_s, 2], e[at_s])
        rows[at_p, 2] = self.nic(rows[at_p, 2], -e[at_p])
        rows[at_p, 3] += RECEIVER_VIEW

    # ------------------------------------------------------------ message rows
    def message_rows(self, out: np.ndarray, view: np.ndarray) -> np.ndarray:
        """``MSG_STATE_DTYPE`` rows ``out`` of quotient messages (the engine's NICs) as the whole
        job has them, in place: the quotient's receiving NIC ``P`` replaced by the real one, and
        where ``view`` (bool, same shape) the receiver's view (both ends moved by ``σ^-e``,
        ``msg_id``/``peer_msg`` in the receiver's view's ids)."""
        cts = out["kind"] == KIND_CTS
        recv_rank = np.where(cts, out["rank_src"], out["rank_dst"]).astype(np.int64)
        e = _replica(recv_rank, self.stride, self.D)
        # the transfer's receiving NIC: dst_nic of its data, src_nic of its clear-to-send write
        for col, is_cts in (("dst_nic", False), ("src_nic", True)):
            sel = cts == is_cts
            out[col][sel] = self.nic(out[col][sel], e[sel])
        if view.any():
            k = -e[view]
            for col in ("src_nic", "dst_nic"):
                out[col][view] = self.nic(out[col][view], k)
            for col in ("rank_src", "rank_dst"):
                out[col][view] = self.rank(out[col][view], k)
            peer = out["peer_msg"][view]
            out["peer_msg"][view] = np.where(peer >= 0, peer + RECEIVER_VIEW, peer)
        return out

    def transfers(self, tr: dict) -> dict:
        """The whole job's RDMA transfers that a representative sends or receives, from the
        quotient's columns ``tr`` (int64 ``call``, ``src``, ``dst`` ranks (``dst`` the real
        one), ``step``, ``bytes``, ``offset``, ``snic``, ``dnic`` (the quotient's)): each
        transfer with its real receiving NIC, then the receiver's view of those that reach
        another data-parallel index (their images received by a representative)."""
        e = _replica(tr["dst"], self.stride, self.D)
        real = dict(tr, dnic=self.nic(tr["dnic"], e))
        m = e != 0
        k = -e[m]
        image = {n: v[m] for n, v in real.items()}
        image.update(src=self.rank(image["src"], k), dst=self.rank(image["dst"], k),
                     snic=self.nic(image["snic"], k), dnic=self.nic(image["dnic"], k))
        return {n: np.concatenate([real[n], image[n]]) for n in real}

    # ------------------------------------------------------------ every rank's rows
    def every_rank(self, rows: np.ndarray, cols: tuple[str, ...], order: str) -> np.ndarray:
        """``rows`` (a structured array of the representatives' rows) and their translates by
        ``σ^1 .. σ^(D-1)``, ranks in columns ``cols`` moved, sorted by column ``order`` (stable:
        a representative's rows first at equal values)."""
        parts = []
        for k in range(self.D):
            p = rows.copy()
            for c in cols:
                p[c] = self.rank(p[c].astype(np.int64), np.full(p.size, k, np.int64))
            parts.append(p)
        allr = np.concatenate(parts) if parts else rows
        return allr[np.argsort(allr[order], kind="stable")]
