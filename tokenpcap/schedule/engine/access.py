"""How the engine reads a transfer and a participation: every read of a transfer's fields, its
dependents and a participation's sends and receives goes through these functions (compiled, for
:mod:`tokenpcap.schedule.engine.kernel`) or :class:`TransferView` (numpy, for the message rows of
:mod:`tokenpcap.schedule.runner`), so the layout of the transfer tables is known here only.

Layout (:func:`tokenpcap.schedule.engine.state.build_state` fills it; the templates are those of
:mod:`tokenpcap.schedule.flatbuild`): a call ``c`` is a canonical call shape moved up by a shift
of its ranks (:func:`tokenpcap.schedule.flatbuild.canonical_shape`). The engine names transfer
``j`` of call ``c`` (``0 <= j < tr_base[c + 1] - tr_base[c]``) by the *handle* ``c·2**32 + j``
(:func:`handle`; its run-wide id is ``tr_base[c] + j``,
:meth:`TransferView.ids`): its call is the handle's high bits, so nothing is stored per
transfer to find it. It is the canonical row ``c_row[c] + j`` of ``ct`` with ranks
``+ c_shift[c]`` and NICs ``+ c_nshift[c]``; its participation ``p`` is the canonical position
``p + c_pos[c]``; the dependents of a row and the sends and receives of a position are CSR lists
of rows (a row ``r`` of call ``c`` is its transfer ``r - c_row[c]``); the QP of local index ``q``
(numbered per shape) is ``qglob[c_qbase[c] + q]``. A transfer's countdown (dependencies not yet
arrived) is word ``1 + j`` of its call's slab while the call is in flight
(:mod:`tokenpcap.schedule.engine.slabs`: :func:`hold`, :func:`release_one`).

A list walk is ``lo, hi = deps(S, x)`` then ``dep_at(S, x, i)`` for ``i`` in ``lo .. hi - 1``
(likewise :func:`sends`/:func:`send_at`, :func:`recvs`/:func:`recv_at` of a participation).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.schedule.engine.compiled import part
from tokenpcap.schedule.engine.events import A_CALL
from tokenpcap.schedule.engine.slabs import give_back, take

__all__ = ["CT_SPOS", "CT_DPOS", "CT_SRC", "CT_NIC", "CT_BYTES", "CT_QP0", "CT_QP1", "CT_SHAPE",
           "CT_SNIC", "CT_DNIC", "CT_WAIT", "CT_COLUMNS", "HANDLE_SHIFT", "handle", "hold", "is_nic", "src_rank", "size_bytes", "src_nic",
           "dst_nic", "qp_data", "qp_cts", "msg_shape", "send_index", "call_key", "src_part", "dst_part", "release_one",
           "deps", "dep_at", "sends", "send_at", "recvs", "recv_at", "TransferView"]

#: Columns of ``ct`` (int32 per canonical row, int64 when a value needs it): sender's and receiver's canonical position
#: (rows of ``send_ptr``), canonical source rank, on a NIC (1) or NVLink (0), bytes, local QP of
#: the data and of the clear-to-send write (-1 on NVLink), message shape (-1 on NVLink),
#: canonical sending and receiving NIC (an NVLink copy's: its ranks' own), the countdown a
#: transfer starts from (dependencies + 2: its two ranks' starts).
CT_SPOS, CT_DPOS, CT_SRC, CT_NIC, CT_BYTES, CT_QP0, CT_QP1, CT_SHAPE, CT_SNIC, CT_DNIC, CT_WAIT = range(11)
CT_COLUMNS = 11
#: A handle is ``call << HANDLE_SHIFT | index in the call`` (module docstring).
HANDLE_SHIFT = 32
_INDEX = (1 << HANDLE_SHIFT) - 1


@part
def handle(c, j):
    """The handle of transfer ``j`` of call ``c``."""
    return (c << HANDLE_SHIFT) | j


@part
def _call(x):
    return x >> HANDLE_SHIFT


@part
def _row(S, x):
    return (x & _INDEX) + S.c_row[x >> HANDLE_SHIFT]


@part
def is_nic(S, x):
    """True when transfer x crosses nodes (an RDMA message), False for an NVLink copy."""
    return S.ct[_row(S, x), CT_NIC] != 0


@part
def src_rank(S, x):
    return S.ct[_row(S, x), CT_SRC] + S.c_shift[_call(x)]


@part
def size_bytes(S, x):
    return S.ct[_row(S, x), CT_BYTES]


@part
def src_nic(S, x):
    return S.ct[_row(S, x), CT_SNIC] + S.c_nshift[_call(x)]


@part
def dst_nic(S, x):
    return S.ct[_row(S, x), CT_DNIC] + S.c_nshift[_call(x)]


@part
def qp_data(S, x):
    """QP id of x's data message (sender's NIC to receiver's)."""
    return S.qglob[S.c_qbase[_call(x)] + S.ct[_row(S, x), CT_QP0]]


@part
def qp_cts(S, x):
    """QP id of x's clear-to-send write (receiver's NIC to sender's)."""
    return S.qglob[S.c_qbase[_call(x)] + S.ct[_row(S, x), CT_QP1]]


@part
def msg_shape(S, x):
    """Message shape index of x (row of ``sh_n``/``sh_d``/``sh_fb``)."""
    return S.ct[_row(S, x), CT_SHAPE]


@part
def send_index(S, x):
    """x's index in its sender's send list of its call (``S.ct_j``)."""
    return S.ct_j[_row(S, x)]


@part
def call_key(S, x):
    """The key of x's call shared by every group of its collective (``S.c_key``)."""
    return S.c_key[_call(x)]


@part
def src_part(S, x):
    return S.ct[_row(S, x), CT_SPOS] - S.c_pos[_call(x)]


@part
def dst_part(S, x):
    return S.ct[_row(S, x), CT_DPOS] - S.c_pos[_call(x)]


@part
def hold(S, sc, c):
    """Call ``c``'s countdowns are held from now on (a slab, :mod:`~tokenpcap.schedule.engine.
    slabs`, filled from its template rows' ``CT_WAIT``) unless they are already or the call has
    no transfers."""
    if S.c_slab[c] >= 0:
        return
    n = S.tr_base[c + 1] - S.tr_base[c]
    if n == 0:
        return
    o = take(S, sc, c, n) + 1
    tw = S.tw
    ct = S.ct
    r = S.c_row[c]
    for j in range(n):
        tw[o + j] = ct[r + j, CT_WAIT]


@part
def release_one(S, sc, x):
    """One of x's dependencies is met (its call's countdowns held: :func:`hold`); True when it
    was the last one, and then, when x was its call's last transfer not yet launched, the
    call's slab is given back."""
    c = x >> HANDLE_SHIFT
    o = S.c_slab[c]
    tw = S.tw
    k = o + 1 + (x & _INDEX)
    tw[k] -= 1
    if tw[k] != 0:
        return False
    tw[o] -= 1
    if tw[o] == 0:
        give_back(S, sc, c, S.tr_base[c + 1] - S.tr_base[c])
    return True


@part
def deps(S, x):
    """``(lo, hi)``: x's dependents are ``dep_at(S, x, i)`` for ``lo <= i < hi``."""
    r = _row(S, x)
    return S.dep_ptr[r], S.dep_ptr[r + 1]


@part
def dep_at(S, x, i):
    c = x >> HANDLE_SHIFT
    return (c << HANDLE_SHIFT) | (S.dep_list[i] - S.c_row[c])


@part
def sends(S, p):
    q = p + S.c_pos[S.part[p, A_CALL]]
    return S.send_ptr[q], S.send_ptr[q + 1]


@part
def send_at(S, p, i):
    c = S.part[p, A_CALL]
    return (c << HANDLE_SHIFT) | (S.send_list[i] - S.c_row[c])


@part
def recvs(S, p):
    q = p + S.c_pos[S.part[p, A_CALL]]
    return S.recv_ptr[q], S.recv_ptr[q + 1]


@part
def recv_at(S, p, i):
    c = S.part[p, A_CALL]
    return (c << HANDLE_SHIFT) | (S.recv_list[i] - S.c_row[c])


class TransferView:
    """The transfers' provenance read from the templates (module docstring), for any rows.

    Args:
        S: the kernel's :class:`~tokenpcap.schedule.engine.events.State`.
        dst, step, channel, offset: int64 ``(R,)`` columns of the canonical rows ``ct`` was made
            from (:class:`~tokenpcap.schedule.flatbuild.ShapeTable`), which the kernel does not
            read: canonical receiving rank, algorithm step, channel, byte offset in the buffer.
        dim: int64 ``(C,)`` each call's dimension index; channels: connections per dimension.
    """

    def __init__(self, S, dst: np.ndarray, step: np.ndarray, channel: np.ndarray,
                 offset: np.ndarray, dim: np.ndarray, channels: int):
        self.S, self.dim, self.channels = S, dim, channels
        self.dst, self.step, self.channel, self.offset = dst, step, channel, offset

    @property
    def tr_base(self) -> np.ndarray:
        """int64 ``(C + 1,)``: each call's first transfer id (the last: the run's transfers)."""
        return self.S.tr_base

    def ids(self, x) -> np.ndarray:
        """int64 run-wide ids ``tr_base[c] + j`` of the handles ``x`` (int array, any shape)."""
        x = np.asarray(x, np.int64)
        return self.S.tr_base[x >> HANDLE_SHIFT] + (x & _INDEX)

    def handles(self, ids) -> np.ndarray:
        """int64 handles of the run-wide transfer ids ``ids`` (the inverse of :meth:`ids`)."""
        ids = np.asarray(ids, np.int64)
        c = np.searchsorted(self.S.tr_base, ids, side="right") - 1
        return (c << HANDLE_SHIFT) | (ids - self.S.tr_base[c])

    def canonical(self, names, rows=None) -> dict[str, np.ndarray]:
        """int64 columns of the canonical rows ``rows`` (int array; None: every row), not moved
        by any call's shift: any of ``src``, ``dst`` (ranks), ``snic``, ``dnic`` (NICs),
        ``nic`` (1 between nodes)."""
        ct = self.S.ct
        rows = slice(None) if rows is None else np.asarray(rows, np.int64)
        col = {"src": CT_SRC, "snic": CT_SNIC, "dnic": CT_DNIC, "nic": CT_NIC}
        out = {}
        for n in names:
            if n == "dst":
                out[n] = self.dst[rows]
            elif n in col:
                out[n] = ct[rows, col[n]].astype(np.int64)
            else:
                raise KeyError(n)
        return out

    def columns(self, x, names) -> dict[str, np.ndarray]:
        """int64 columns of the transfers of handles ``x`` (int array, any shape; result of the
        same shape; a run-wide id's handle: :meth:`handles`): any of ``call``, ``src``, ``dst`` (global ranks), ``step``, ``conn``
        (``dim·channels + channel``), ``bytes``, ``offset`` (byte offset in the call's buffer),
        ``nic`` (1 between nodes), ``snic``, ``dnic`` (global NICs)."""
        S = self.S
        x = np.asarray(x, np.int64)
        c = x >> HANDLE_SHIFT
        row = (x & _INDEX) + S.c_row[c]
        out = {}
        for n in names:
            if n == "call":
                v = c
            elif n == "src":
                v = S.ct[row, CT_SRC] + S.c_shift[c]
            elif n == "dst":
                v = self.dst[row] + S.c_shift[c]
            elif n == "conn":
                v = self.dim[c] * self.channels + self.channel[row]
            elif n in ("snic", "dnic"):
                v = S.ct[row, CT_SNIC if n == "snic" else CT_DNIC] + S.c_nshift[c]   # int64
            elif n == "nic":
                v = S.ct[row, CT_NIC].astype(np.int64)
            elif n == "bytes":
                v = S.ct[row, CT_BYTES].astype(np.int64)
            elif n == "step":
                v = self.step[row]
            elif n == "offset":
                v = self.offset[row]
            else:
                raise KeyError(n)
            out[n] = v
        return out
