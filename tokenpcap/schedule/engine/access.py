"""How the compiled engine reads a transfer and a participation (part of
:mod:`tokenpcap.schedule.engine.kernel`): every read of a transfer's fields, its dependents and a
participation's sends and receives goes through these functions, so the layout of the transfer
tables (:class:`~tokenpcap.schedule.engine.events.State`) is known here only.

Transfer ``x`` is an index into the run's transfers (:mod:`tokenpcap.schedule.flat`), ``p`` a
participation. A list walk is ``lo, hi = deps(S, x)`` then ``dep_at(S, x, i)`` for ``i`` in
``lo .. hi - 1`` (likewise :func:`sends`/:func:`send_at`, :func:`recvs`/:func:`recv_at`).
"""
from __future__ import annotations

from numba import njit

from tokenpcap.schedule.engine.events import (
    T_BYTES,
    T_DNIC,
    T_DSTP,
    T_NIC,
    T_QPID0,
    T_QPID1,
    T_SHAPE,
    T_SNIC,
    T_SRC,
    T_SRCP,
    T_WAIT,
)

__all__ = ["is_nic", "src_rank", "size_bytes", "src_nic", "dst_nic", "qp_data", "qp_cts",
           "msg_shape", "src_part", "dst_part", "release_one", "deps", "dep_at", "sends",
           "send_at", "recvs", "recv_at"]


@njit(cache=True, _nrt=False)
def is_nic(S, x):
    """True when transfer x crosses nodes (an RDMA message), False for an NVLink copy."""
    return S.trs[x, T_NIC] != 0


@njit(cache=True, _nrt=False)
def src_rank(S, x):
    return S.trs[x, T_SRC]


@njit(cache=True, _nrt=False)
def size_bytes(S, x):
    return S.trs[x, T_BYTES]


@njit(cache=True, _nrt=False)
def src_nic(S, x):
    return S.trs[x, T_SNIC]


@njit(cache=True, _nrt=False)
def dst_nic(S, x):
    return S.trs[x, T_DNIC]


@njit(cache=True, _nrt=False)
def qp_data(S, x):
    """QP id of x's data message (sender's NIC to receiver's)."""
    return S.trs[x, T_QPID0]


@njit(cache=True, _nrt=False)
def qp_cts(S, x):
    """QP id of x's clear-to-send write (receiver's NIC to sender's)."""
    return S.trs[x, T_QPID1]


@njit(cache=True, _nrt=False)
def msg_shape(S, x):
    """Message shape index of x (row of ``sh_n``/``sh_d``/``sh_fb``)."""
    return S.trs[x, T_SHAPE]


@njit(cache=True, _nrt=False)
def src_part(S, x):
    return S.trs[x, T_SRCP]


@njit(cache=True, _nrt=False)
def dst_part(S, x):
    return S.trs[x, T_DSTP]


@njit(cache=True, _nrt=False)
def release_one(S, x):
    """One of x's dependencies is met; True when it was the last one."""
    S.trs[x, T_WAIT] -= 1
    return S.trs[x, T_WAIT] == 0


@njit(cache=True, _nrt=False)
def deps(S, x):
    """``(lo, hi)``: x's dependents are ``dep_at(S, x, i)`` for ``lo <= i < hi``."""
    return S.dep_ptr[x], S.dep_ptr[x + 1]


@njit(cache=True, _nrt=False)
def dep_at(S, x, i):
    return S.dep_list[i]


@njit(cache=True, _nrt=False)
def sends(S, p):
    return S.send_ptr[p], S.send_ptr[p + 1]


@njit(cache=True, _nrt=False)
def send_at(S, p, i):
    return S.send_list[i]


@njit(cache=True, _nrt=False)
def recvs(S, p):
    return S.recv_ptr[p], S.recv_ptr[p + 1]


@njit(cache=True, _nrt=False)
def recv_at(S, p, i):
    return S.recv_list[i]
