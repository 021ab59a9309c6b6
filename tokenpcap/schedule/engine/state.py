"""The compiled engine's state, built from the flat arrays of a run (:mod:`tokenpcap.schedule.flat`).

:func:`build_state` joins the iterations' arrays into global index spaces, gives every QP an id
(one per sending NIC, peer NIC, connection index ``dim·channels + channel`` and role: 0 data,
1 the clear-to-send writes of the same connection, as :mod:`tokenpcap.lower` numbers them),
reserves a region of the eligible-QP array per NIC, computes the packets, frame lengths and
layer-1 times of each distinct message size, and allocates the message table: one row per data
message and, with clear-to-send, one per CTS write, for the whole run (``keep_messages``), or a
ring of rows reused once a message is done and its frames handed out
(:mod:`tokenpcap.schedule.engine.ring`). Memory is about 136 B per message (``ms``; 160 B per
row of a ring), 96 B per transfer (``trs`` and its lists), 40 B per participation (``part``
int32 and its CSR pointers), 12 B per program instruction (``ins`` int32) and 16 B per call, for the
iterations of the run.
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from tokenpcap.errors import InputError
from tokenpcap.records import VERB_WRITE, VERB_WRITE_IMM
from tokenpcap.schedule.engine import kernel as K
from tokenpcap.schedule.engine import ring
from tokenpcap.schedule.engine.frames import NicModel

__all__ = ["Engine", "build_state", "QP_STRIDE"]

#: Connection indices per peer (the lowering's QPN rule; ``dim·channels + channel`` below it).
QP_STRIDE = 256


@dataclass
class Engine:
    """Everything :func:`tokenpcap.schedule.engine.kernel.run` takes, plus the per-transfer
    provenance the message rows are made from (``tr``: call, src, dst, step, conn, tok0, tok1,
    bytes; int64 ``(T,)`` each)."""

    S: K.State
    cf: np.ndarray
    sc: np.ndarray
    heap: np.ndarray
    acks: np.ndarray
    out: np.ndarray
    launch: np.ndarray
    tr: dict
    nic: NicModel
    selected: np.ndarray

    def run(self) -> int:
        """Process events until the output holds a chunk (1) or the run is over (0); buffers are
        grown here when the kernel asks (module :mod:`~tokenpcap.schedule.engine.kernel`).

        Raises:
            RuntimeError: an internal error of the kernel.
        """
        while True:
            status = int(K.run(self.S, self.cf, self.sc, self.heap, self.acks, self.out, self.launch))
            if status == 3:
                self._grow()
                continue
            if status == 2:
                raise RuntimeError(f"internal: engine error {int(self.sc[K.ERR])}")
            return status

    def _grow(self) -> None:
        sc, cf = self.sc, self.cf
        if sc[K.HN] + cf[K.HEAD] > self.heap.shape[0]:
            self.heap = _bigger(self.heap, sc[K.HN] + cf[K.HEAD])
        if cf[K.HEAD] > self.launch.shape[0]:
            self.launch = _bigger(self.launch, cf[K.HEAD])
        if sc[K.ACKTOP] + 64 > self.acks.shape[0]:
            self.acks = _bigger(self.acks, sc[K.ACKTOP] + 64)
        if sc[K.NOUT] + cf[K.GAP] + 64 > self.out.shape[0]:
            self.out = _bigger(self.out, sc[K.NOUT] + cf[K.GAP] + 64)
        if sc[K.MNEED] > 0:
            ms = ring.grow(self.S.ms, int(sc[K.MNEED]))
            self.S = self.S._replace(ms=ms)
            sc[K.MMASK] = ms.shape[0] - 1
            sc[K.MNEED] = 0

    def handed_out(self, front: int) -> None:
        """Every frame before ``front`` (ns) has been handed out and read: the message rows
        only those frames needed may be reused (:mod:`tokenpcap.schedule.engine.ring`)."""
        self.sc[K.HANDED] = front
        self.sc[K.HAND_ID] = self.sc[K.NMSG]

    def commit(self, limit: int) -> None:
        """Commit every selected NIC's frames that start before ``limit`` (ns)."""
        room = int(self.cf[K.GAP]) + int(self.sc[K.ACKTOP]) + 64
        for port in self.selected.tolist():
            if self.sc[K.NOUT] + room > self.out.shape[0]:
                self.out = _bigger(self.out, int(self.sc[K.NOUT]) + room)
            K.commit(self.S, self.cf, self.sc, self.heap, self.acks, self.out, port, limit)
        if self.sc[K.ERR]:
            raise RuntimeError(f"internal: engine error {int(self.sc[K.ERR])}")


def _bigger(a: np.ndarray, need: int) -> np.ndarray:
    g = np.empty((max(int(need), 2 * a.shape[0]),) + a.shape[1:], a.dtype)
    g[: a.shape[0]] = a
    return g


def _cat(flats, name, shift=None) -> np.ndarray:
    return np.concatenate([getattr(f, name) if shift is None else getattr(f, name) + shift[i]
                           for i, f in enumerate(flats)])


def _csr(flats, pname, lname, shift) -> tuple[np.ndarray, np.ndarray]:
    lens = np.concatenate([np.diff(getattr(f, pname)) for f in flats])
    ptr = np.zeros(lens.size + 1, np.int64)
    np.cumsum(lens, out=ptr[1:])
    return ptr, _cat(flats, lname, shift)


def build_state(flats, layout, nic: NicModel, *, channels: int, nvlink_gbps: float,
                nvlink_latency_ns: int, tok: tuple[np.ndarray, np.ndarray], nics=None,
                chunk_rows: int = 1 << 16, keep_history: bool = True,
                keep_nvlink: bool = True, keep_messages: bool = True,
                ring_rows: int = 1 << 16) -> Engine:
    """The engine of the iterations ``flats`` (:class:`tokenpcap.schedule.flat.Flat` per
    iteration, in order) on ``layout`` and ``nic``.

    Args:
        channels: NCCL-like channels (connection index ``dim·channels + channel``).
        nvlink_gbps, nvlink_latency_ns: NVLink copies take ``ceil(bytes·8/nvlink_gbps)`` ns each,
            one after another per GPU, and arrive ``nvlink_latency_ns`` after their last byte.
        tok: token range (start, end) per transfer of the joined iterations.
        nics: NICs whose frames are materialized (None: all).
        chunk_rows: rows of frames handed out at a time.
        keep_history, keep_nvlink: record the timeline / NVLink copies.
        keep_messages: one row per message of the run, kept (else a ring of rows, first
            ``ring_rows``, a power of two, grown as the messages in progress need).

    Raises:
        InputError: a connection index >= :data:`QP_STRIDE`; a message of 2**24 packets or more;
            ``ring_rows`` not a power of two; 2**31 participations or instructions or more (the
            int32 columns of ``part``, ``ins``).
    """
    if ring_rows < 1 or ring_rows & (ring_rows - 1):
        raise InputError(f"ring_rows: got {ring_rows}, expected a power of two")
    W = layout.world_size
    N = nic.n_nics
    T = np.cumsum([0] + [len(f.tr_call) for f in flats])
    P = np.cumsum([0] + [len(f.part_rank) for f in flats])
    Ic = np.cumsum([0] + [len(f.ins_kind) for f in flats])
    C = np.cumsum([0] + [f.n_calls for f in flats])
    tr_call = _cat(flats, "tr_call", C)
    tr_src, tr_dst = _cat(flats, "tr_src"), _cat(flats, "tr_dst")
    tr_nic = _cat(flats, "tr_nic")
    tr_bytes = _cat(flats, "tr_bytes")
    codes = np.concatenate([f.call_codes for f in flats]).astype(np.int64)
    conn = codes[tr_call, 1] * channels + _cat(flats, "tr_channel")
    if conn.size and conn.max() >= QP_STRIDE:
        raise InputError(f"message qp: got {int(conn.max())}, expected 0 .. {QP_STRIDE - 1}")
    # a transfer between nodes leaves and enters on the NICs its channel uses
    # (collectives.rails); an NVLink copy keeps its ranks' own NICs
    snic = np.where(tr_nic, _cat(flats, "tr_snic"), layout.nic_array(tr_src)).astype(np.int64)
    dnic = np.where(tr_nic, _cat(flats, "tr_dnic"), layout.nic_array(tr_dst)).astype(np.int64)
    nx = np.flatnonzero(tr_nic)
    code0 = ((snic[nx] * N + dnic[nx]) * QP_STRIDE + conn[nx]) * 2
    code1 = ((dnic[nx] * N + snic[nx]) * QP_STRIDE + conn[nx]) * 2 + 1
    qcodes, inv = np.unique(np.concatenate([code0, code1]), return_inverse=True)
    inv = inv.reshape(-1)
    nq = qcodes.size
    q_port = qcodes // (2 * QP_STRIDE * N)
    per_port = np.bincount(q_port, minlength=N).astype(np.int64)
    act_lo = np.zeros(N, np.int64)
    act_lo[1:] = np.cumsum(per_port)[:-1]
    cts = nic.clear_to_send
    sizes = np.unique(tr_bytes[nx])
    sh_n, sh_d, sh_fb = nic.shapes(np.concatenate([sizes, [nic.cts_bytes]]),
                                   np.concatenate([np.full(sizes.size, VERB_WRITE_IMM if cts else VERB_WRITE),
                                                   [VERB_WRITE]]))
    if (sh_n >= (1 << 24)).any():
        raise InputError(f"collectives.slice_bytes: got messages of {int(sh_n.max()):,} packets, "
                         "expected fewer than 2**24 (smaller slices)")
    T_ = tr_call.size
    trs = np.full((T_, 12), -1, np.int64)
    trs[:, K.T_WAIT] = _cat(flats, "tr_wait")
    trs[:, K.T_SRCP] = _cat(flats, "tr_srcp", P)
    trs[:, K.T_DSTP] = _cat(flats, "tr_dstp", P)
    trs[:, K.T_SRC] = tr_src
    trs[:, K.T_NIC] = tr_nic
    trs[:, K.T_BYTES] = tr_bytes
    trs[nx, K.T_QPID0] = inv[: nx.size]
    trs[nx, K.T_QPID1] = inv[nx.size:]
    trs[nx, K.T_SHAPE] = np.searchsorted(sizes, tr_bytes[nx])
    trs[:, K.T_SNIC], trs[:, K.T_DNIC] = snic, dnic
    dep_ptr, dep_list = _csr(flats, "dep_ptr", "dep_list", T)
    send_ptr, send_list = _csr(flats, "send_ptr", "send_list", T)
    recv_ptr, recv_list = _csr(flats, "recv_ptr", "recv_list", T)
    call_ab = np.concatenate([f.call_ab for f in flats])
    if max(int(P[-1]), int(Ic[-1])) >= 1 << 31:
        raise InputError(f"participations, instructions: got {int(P[-1]):,}, {int(Ic[-1]):,}, "
                         "expected fewer than 2**31 (fewer iterations or a smaller job)")
    part = np.full((int(P[-1]), 6), -1, np.int32)
    part[:, K.A_STARTED] = 0
    for i, f in enumerate(flats):                   # iteration by iteration: no (P,) int64 copies
        at = slice(int(P[i]), int(P[i + 1]))
        part[at, K.A_RANK] = f.part_rank
        part[at, K.A_PENDING] = (np.diff(f.send_ptr) + np.diff(f.recv_ptr)
                                 + (f.call_ab[f.part_call] >= 0))
        part[at, K.A_CALL] = f.part_call
        part[at, K.A_CALL] += C[i]
    call_pbase = np.concatenate([f.part_base[:-1] + P[i] for i, f in enumerate(flats)]
                                + [[P[-1]]]).astype(np.int32)
    ins = np.zeros((int(Ic[-1]), 3), np.int32)
    for i, f in enumerate(flats):
        at = slice(int(Ic[i]), int(Ic[i + 1]))
        ins[at, 0] = f.ins_kind
        ins[at, 1] = f.ins_a
        ins[at, 1][f.ins_kind == K.I_CALL] += P[i]
        ins[at, 2] = f.ins_b
    prog_ptr = np.concatenate([f.prog_ptr[:-1] + Ic[i] for i, f in enumerate(flats)] + [[Ic[-1]]])
    rk = np.full((W, 13), -1, np.int64)
    rk[:, K.R_PC], rk[:, K.R_END] = prog_ptr[:W], prog_ptr[1:W + 1]
    rk[:, [K.R_IT, K.R_BLOCKED, K.R_SBUSY, K.R_SWAIT, K.R_NVL]] = 0
    rk[:, K.R_MARK:] = 0
    qp = np.full((nq, 8), -1, np.int64)
    qp[:, K.Q_PORT] = q_port
    qp[:, [K.Q_PSN, K.Q_COUNT, K.Q_BYTES]] = 0
    pt = np.full((N, 13), -1, np.int64)
    pt[:, [K.P_CREATED, K.P_NACT, K.P_NACK, K.P_SEL, K.P_ROUND]] = 0
    pt[:, K.P_ACT_LO] = act_lo
    pt[:, K.P_WAKE] = K.NEVER
    if nics is None:
        pt[:, K.P_SEL] = 1
    else:
        pt[np.asarray(sorted(nics), np.int64), K.P_SEL] = 1
    ax = np.full((max(1, nq), 10), -1, np.int64)
    ax[:, K.X_ON] = 0
    M = nx.size * (2 if cts else 1)
    ms = ring.table(M, ring=False) if keep_messages else ring.table(int(ring_rows))
    n_marks = int(((ins[:, 0] == K.I_MARK) & (ins[:, 2] % 2 == 0)).sum()) if keep_history else 0
    S = K.State(ms=ms, trs=trs, dep_ptr=dep_ptr, dep_list=dep_list, part=part, send_ptr=send_ptr,
                send_list=send_list, recv_ptr=recv_ptr, recv_list=recv_list, prog_ptr=prog_ptr, ins=ins,
                rk=rk, qp=qp, pt=pt, ax=ax, sh_n=sh_n,
                sh_d=np.ascontiguousarray(sh_d), sh_fb=np.ascontiguousarray(sh_fb),
                tl=np.zeros((n_marks, 6), np.int64),
                nv=np.zeros((int((tr_nic == 0).sum()) if keep_nvlink else 0, 3), np.int64),
                call_ab=call_ab, call_nst=np.zeros(call_ab.size, np.int32), call_pbase=call_pbase)
    rate = Fraction(repr(float(nvlink_gbps)))
    # most events one event can push: every transfer a rank sends or receives in an iteration
    # (a program step may start several calls), a transfer's dependents, twice over
    per_rank = np.bincount(part[:, K.A_RANK], weights=np.diff(send_ptr) + np.diff(recv_ptr),
                           minlength=W)
    head = 2 * int(per_rank.max(initial=0)) + 2 * int(np.diff(dep_ptr).max(initial=0)) + 2 * W + 1024
    gap = min(4096, max(64, chunk_rows // 2))
    cf = np.zeros(19, np.int64)
    cf[[K.LAT, K.ACKDELAY, K.ACK_NS, K.ACK_FB, K.EVERY, K.CTS, K.CTS_BYTES, K.CTS_SHAPE, K.ITERS,
        K.WORLD, K.NVL_NUM, K.NVL_DEN, K.NVL_LAT, K.GAP, K.CHUNK, K.KEEP_HIST, K.KEEP_NV, K.NPORTS,
        K.HEAD]] = (
        nic.latency_ns, nic.ack_delay_ns, nic.ack_ns, nic.ack_bytes, nic.ack_every, int(cts),
        nic.cts_bytes, sizes.size, len(flats), W, rate.numerator, rate.denominator,
        nvlink_latency_ns, gap, chunk_rows, int(keep_history), int(keep_nvlink), N, head)
    sc = np.zeros(K.NSC, np.int64)
    sc[K.ACKFREE] = -1
    sc[K.MMASK] = -1 if keep_messages else ms.shape[0] - 1
    eng = Engine(S, cf, sc, np.zeros((2 * head, 5), np.int64), np.zeros((1024, 3), np.int64),
                 np.zeros((chunk_rows + 4 * gap + 1024, 7), np.int64), np.zeros(head, np.int64),
                 dict(call=tr_call, src=tr_src, dst=tr_dst, step=_cat(flats, "tr_step"), conn=conn,
                      tok0=tok[0], tok1=tok[1], bytes=tr_bytes, codes=codes), nic,
                 np.flatnonzero(pt[:, K.P_SEL]))
    for r in range(W):
        K.push(eng.heap, sc, 0, K.EV_TIMER, 0, 0, r)
    return eng
