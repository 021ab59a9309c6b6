"""DCQCN's notification point, the receiving NIC (part of :mod:`tokenpcap.schedule.engine.kernel`
with a queued fabric): what it does with a CE-marked data packet.

Every CE-marked arrival is counted per NIC (``fn[nic, FN_CE]``) and per QP of the data
(``qp[q, Q_CE]``). With DCQCN on (``cf[F_CC] == 1``) the NIC answers with a CNP for the QP unless
it sent that QP one less than ``cf[F_CNP_GAP]`` ns ago (NVIDIA ``min_time_between_cnps``,
ConnectX default 4 us; 0: one per marked packet, as HPCC ns-3). The CNP is queued in the NIC's
ACK queue (strict priority over data, FIFO with the ACKs, the fabric's control class), as a
frame of its own (``AQ_CNP``: RoCEv2 BTH opcode 0x81, timed by its frame bytes
``cf[F_CNP_FB]``), or, with ``cf[F_CNP_INACK]`` (HPCC ns-3 ``rdma-hw.cc`` ``ReceiveUdp``:
``seqh.SetCnp()`` when the data's ECN bits are set), as the CNP flag of the ACK the marked packet
asks for (``AQ_CNPACK``; a marked packet without AckReq then notifies nothing, as in ns-3).
A queued CNP holds its message's row like an ACK (module ring). The reaction point's side is
:mod:`~tokenpcap.schedule.engine.rpoint`.
"""
from __future__ import annotations


from tokenpcap.schedule.engine.compiled import part
from tokenpcap.schedule.engine.events import *  # noqa: F401,F403 - columns and constants
from tokenpcap.schedule.engine.fabric import deliver
from tokenpcap.schedule.engine.link import advance, queue_ack, rewake

__all__ = ["np_ce"]


@part
def np_ce(S, cf, sc, h, a, o, nic, k, t):
    """CE-marked data descriptor ``k`` (freed here) reaches its destination NIC ``nic`` at
    ``t``: counted, answered with a CNP when due (module docstring), then delivered."""
    pk = S.pk
    q = pk[k, PK_QP]
    S.fn[nic, FN_CE] += 1
    S.qp[q, Q_CE] += 1
    aflags = 0
    if cf[F_CC]:
        last = S.qp[q, Q_NPLAST]
        due = last < 0 or t - last >= cf[F_CNP_GAP]
        if due and cf[F_CNP_INACK]:
            if pk[k, PK_FLAGS] & PK_ACKREQ:
                aflags = AQ_CNPACK
            else:
                due = False
        if due:
            S.qp[q, Q_NPLAST] = t
            S.fn[nic, FN_CNPTX] += 1
            sc[NCNP] += 1
            if not aflags:
                msg = pk[k, PK_MSG]
                advance(S, cf, sc, h, a, o, nic, t, QUEUED)
                queue_ack(S, cf, sc, a, nic, msg, pk[k, PK_IDX] + (AQ_CNP << 24), t)
                if sc[MMASK] >= 0:
                    S.ms[msg & sc[MMASK], M_NACK] += 1      # the CNP holds the row (module ring)
                rewake(S, cf, sc, h, nic, QUEUED)
    deliver(S, cf, sc, h, nic, k, t, aflags)
