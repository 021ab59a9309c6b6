"""The compiled engine's state, built from the flat arrays of a run (:mod:`tokenpcap.schedule.flat`).

:func:`build_state` joins the iterations' arrays into global index spaces, gives every QP an id
(one per sending NIC, peer NIC, connection index ``dim·channels + channel`` and role: 0 data,
1 the clear-to-send writes of the same connection, as :mod:`tokenpcap.lower` numbers them),
reserves a region of the eligible-QP array per NIC, computes the packets, frame lengths and
layer-1 times of each distinct message size, and allocates the message table: one row per data
message and, with clear-to-send, one per CTS write, for the whole run (``keep_messages``), or a
ring of rows reused once a message is done and its frames handed out
(:mod:`tokenpcap.schedule.engine.ring`). Transfer and message ids, and every count of them, are
int64 (a run may hold more than 2**31 of each: what bounds it is memory,
:mod:`tokenpcap.schedule.limits`); int32 holds only values bounded by the job's structure: a
countdown and a call's transfer count (at most 2**31 - 1 transfers a call, checked), a
participation's columns, an instruction's, a canonical row's when they fit. Nothing is stored
per transfer: the engine names a transfer by its call and its index in the call (a handle,
:mod:`tokenpcap.schedule.engine.access`), reads it from its call's template, and holds the
dependency countdowns only of the calls in flight, in slabs of one pool
(:mod:`tokenpcap.schedule.engine.slabs`). Memory is then about 110 B per call (its
template's offsets and shifts, its slab, first transfer and codes), about 90 B per
canonical transfer row (``ct`` int32, its wait, its dependency list, the four provenance
columns), 136 B per kept message (``ms``; 160 B per row of a ring), 24 B per participation
(``part`` int32) and 12 B per program instruction (``ins`` int32), for the iterations of the
run, and the slabs of the calls in flight.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from tokenpcap.errors import InfeasiblePlanError, InputError
from tokenpcap.records import VERB_WRITE, VERB_WRITE_IMM
from tokenpcap.schedule.engine import kernel as K
from tokenpcap.schedule.engine import fabstate, ring, slabs
from tokenpcap.schedule.engine.compiled import CompileNotice
from tokenpcap.schedule.engine.access import (
    CT_BYTES,
    CT_COLUMNS,
    CT_DNIC,
    CT_DPOS,
    CT_NIC,
    CT_QP0,
    CT_QP1,
    CT_SHAPE,
    CT_SNIC,
    CT_SPOS,
    CT_SRC,
    CT_WAIT,
    TransferView,
)
from tokenpcap.schedule.engine.frames import NicModel
from tokenpcap.schedule.flatbuild import ShapeTable, nic_shift

__all__ = ["Engine", "build_state", "QP_STRIDE"]

#: Connection indices per peer (the lowering's QPN rule; ``dim·channels + channel`` below it).
QP_STRIDE = 256


@dataclass
class Engine:
    """Everything :func:`tokenpcap.schedule.engine.kernel.run` takes, plus what the message rows
    are made from: ``tr`` the transfers' provenance read from the templates
    (:class:`~tokenpcap.schedule.engine.access.TransferView`), ``codes`` int64 ``(C, 3)`` phase,
    dim, collective of each call of the run; ``notice`` names the compile when a call into the
    kernel compiles it (:class:`~tokenpcap.schedule.engine.compiled.CompileNotice`)."""

    S: K.State
    cf: np.ndarray
    sc: np.ndarray
    heap: np.ndarray
    acks: np.ndarray
    out: np.ndarray
    launch: np.ndarray
    tr: TransferView
    codes: np.ndarray
    nic: NicModel
    selected: np.ndarray
    notice: CompileNotice = field(default_factory=CompileNotice)
    #: what runs ``run`` and ``commit``: the compiled kernel, or the uncompiled one
    #: (:data:`~tokenpcap.schedule.engine.interpreted.KERNEL`)
    kernel: Any = K

    def run(self) -> int:
        """Process events until the output holds a chunk (1) or the run is over (0); buffers are
        grown here when the kernel asks (module :mod:`~tokenpcap.schedule.engine.kernel`).

        Raises:
            RuntimeError: an internal error of the kernel.
        """
        while True:
            with self.notice.watching(self.fabric is not None):
                status = int(self.kernel.run(self.S, self.cf, self.sc, self.heap, self.acks,
                                             self.out, self.launch, self.fabric))
            if status == 3:
                self._grow()
                continue
            if status == 2 and self.sc[K.ERR] == 5:
                i = int(np.flatnonzero(self.S.fi[:, K.I8_DROPS] > 0)[-1])
                e = i // 8
                raise InfeasiblePlanError(
                    f"fabric: switch {int(self.S.fp[e, K.FP_SW])} dropped a data packet at its "
                    f"port {int(self.S.fp[e, K.FP_NUM_ON_SW])}, priority {i % 8}, at "
                    f"{int(self.sc[K.NOW]):,} ns (its buffer was full and the priority is not "
                    "lossless): retransmission is not modelled; expected fabric.pfc.enabled with "
                    "the data priority (network.pcp) in fabric.pfc.priorities, or a larger "
                    "fabric.switch.buffer_bytes")
            if status == 2:
                raise RuntimeError(f"internal: engine error {int(self.sc[K.ERR])}")
            return status

    @property
    def fabric(self):
        """The kernel's ``fabric`` argument: ``QUEUED`` or ``None`` (an ideal fabric; module
        :mod:`~tokenpcap.schedule.engine.events`, ``QUEUED``)."""
        return K.QUEUED if self.cf[K.FAB] else None

    def _grow(self) -> None:
        sc, cf = self.sc, self.cf
        if sc[K.HN] + sc[K.NLAUNCH] + cf[K.HEAD] > self.heap.shape[0]:
            # an instant's NVLink copies are timers when its launches are flushed (cf[CANON])
            self.heap = _bigger(self.heap, sc[K.HN] + sc[K.NLAUNCH] + cf[K.HEAD])
        if sc[K.NLAUNCH] + cf[K.HEAD] > self.launch.shape[0]:     # a call's end resumed
            self.launch = _bigger(self.launch, sc[K.NLAUNCH] + cf[K.HEAD])
        if sc[K.ACKTOP] + 64 > self.acks.shape[0]:
            self.acks = _bigger(self.acks, sc[K.ACKTOP] + 64)
        if sc[K.NOUT] + cf[K.GAP] + 64 > self.out.shape[0]:
            self.out = _bigger(self.out, sc[K.NOUT] + cf[K.GAP] + 64)
        if sc[K.SLAB_TOP] + cf[K.SLAB_HEAD] > self.S.tw.shape[0]:
            self.S = self.S._replace(tw=slabs.grow(self.S.tw, int(sc[K.SLAB_TOP]),
                                                   int(sc[K.SLAB_TOP] + cf[K.SLAB_HEAD])))
        if sc[K.MNEED] > 0:
            ms = ring.grow(self.S.ms, int(sc[K.MNEED]))
            self.S = self.S._replace(ms=ms)
            sc[K.MMASK] = ms.shape[0] - 1
            sc[K.MNEED] = 0
        if cf[K.FAB]:
            S = self.S
            if sc[K.PKUSED] + cf[K.HEAD] > S.pk.shape[0]:
                S = S._replace(pk=fabstate.grow_pool(S.pk, sc, int(sc[K.PKUSED] + cf[K.HEAD])))
            if sc[K.NLGP] + 1024 > S.lgp.shape[0]:
                S = S._replace(lgp=_bigger(S.lgp, int(sc[K.NLGP]) + 1024))
            if sc[K.NLGQ] + 1024 > S.lgq.shape[0]:
                S = S._replace(lgq=_bigger(S.lgq, int(sc[K.NLGQ]) + 1024))
            if sc[K.NLGN] + 1024 > S.lgn.shape[0]:
                S = S._replace(lgn=_bigger(S.lgn, int(sc[K.NLGN]) + 1024))
            if sc[K.NLGR] + 1024 > S.lgr.shape[0]:
                S = S._replace(lgr=_bigger(S.lgr, int(sc[K.NLGR]) + 1024))
            self.S = S

    def handed_out(self, front: int) -> None:
        """Every frame before ``front`` (ns) has been handed out and read: the message rows
        only those frames needed may be reused (:mod:`tokenpcap.schedule.engine.ring`)."""
        self.sc[K.HANDED] = front
        self.sc[K.HAND_ID] = self.sc[K.NMSG]

    def commit(self, limit: int) -> None:
        """Commit every selected NIC's frames that start before ``limit`` (ns)."""
        room = int(self.cf[K.GAP]) + int(self.sc[K.ACKTOP]) + 64
        if self.cf[K.FAB] and self.sc[K.PKUSED] + self.cf[K.HEAD] > self.S.pk.shape[0]:
            self._grow()
        for port in self.selected.tolist():
            if self.sc[K.NOUT] + room > self.out.shape[0]:
                self.out = _bigger(self.out, int(self.sc[K.NOUT]) + room)
            with self.notice.watching(self.fabric is not None):
                self.kernel.commit(self.S, self.cf, self.sc, self.heap, self.acks, self.out, port,
                                   limit, self.fabric)
        if self.sc[K.ERR]:
            raise RuntimeError(f"internal: engine error {int(self.sc[K.ERR])}")


#: Columns of the flats' :class:`~tokenpcap.schedule.flatbuild.ShapeTable` that the state
#: holds only as copies (``ct``, ``tw``); the others it keeps as they are.
_COPIED_ROWS = ("src", "spos", "dpos", "nic", "snic", "dnic", "bytes", "wait", "rank")


def _release(obj, names) -> None:
    """Drop ``obj``'s arrays ``names`` once the state holds what it needs of them (the flats
    given to :func:`build_state` are used up), so that the build does not hold both."""
    for name in names:
        setattr(obj, name, None)


def _bigger(a: np.ndarray, need: int) -> np.ndarray:
    g = np.empty((max(int(need), 2 * a.shape[0]),) + a.shape[1:], a.dtype)
    g[: a.shape[0]] = a
    return g


def _number_qps(table, row_shape, snic, dnic, shape, shift, dim, channels: int, N: int,
                gpn: int, npn: int):
    """QP ids without a pass over every transfer: the distinct (sending NIC, peer NIC, channel,
    role) of each canonical shape are numbered locally, then each distinct (shape, shift,
    dimension) of the calls maps its shape's local QPs to the global codes
    ``((nic·N + peer)·QP_STRIDE + dim·channels + channel)·2 + role``, whose rank among all the
    codes is the QP id.

    Returns ``(qp0 (R,), qp1 (R,), c_qbase (C,), qglob, qcodes)``: each row's local QP of the
    data and of the clear-to-send write (-1 on NVLink), each call's first entry of ``qglob``,
    the global id of each (distinct triple, local QP), and the sorted global codes.

    """
    S = int(table.ab.size)
    if S * N * N * QP_STRIDE * 2 >= 1 << 63:
        raise RuntimeError(f"internal: {S} call shapes and {N} NICs overflow the QP codes")
    nx = np.flatnonzero(table.nic)
    k = nx.size
    # local code (shape, nic, peer, channel, role) of each row's two QPs, as one int64
    sh, ch = row_shape[nx], table.channel[nx]
    both = np.concatenate([((((sh * N + snic[nx]) * N + dnic[nx]) * QP_STRIDE + ch) * 2),
                           ((((sh * N + dnic[nx]) * N + snic[nx]) * QP_STRIDE + ch) * 2 + 1)])
    lq, inv = np.unique(both, return_inverse=True)
    inv = inv.reshape(-1)
    role, rest = lq % 2, lq // 2
    lch, rest = rest % QP_STRIDE, rest // QP_STRIDE
    lb, rest = rest % N, rest // N
    la, lsh = rest % N, rest // N
    lq_ptr = np.searchsorted(lsh, np.arange(S + 1))
    local = inv - lq_ptr[np.concatenate([sh, sh])]
    qp0 = np.full(table.src.size, -1, np.int64)
    qp1 = np.full(table.src.size, -1, np.int64)
    qp0[nx], qp1[nx] = local[:k], local[k:]
    # each distinct (shape, shift, dim) of the calls: its shape's local QPs moved to global codes
    span = int(shift.max(initial=0)) + 1
    nd = int(dim.max(initial=0)) + 1
    trip, tinv = np.unique((shape * span + shift) * nd + dim, return_inverse=True)
    t_shape, t_shift, t_dim = trip // nd // span, trip // nd % span, trip % nd
    count = np.diff(lq_ptr)[t_shape]
    qbase = np.zeros(trip.size + 1, np.int64)
    np.cumsum(count, out=qbase[1:])
    e = np.repeat(np.arange(trip.size), count)
    q = lq_ptr[t_shape[e]] + np.arange(int(qbase[-1])) - qbase[e]
    ns = nic_shift(t_shift[e], gpn, npn)
    conn = t_dim[e] * channels + lch[q]
    qcodes, qglob = np.unique((((la[q] + ns) * N + lb[q] + ns) * QP_STRIDE + conn) * 2 + role[q],
                              return_inverse=True)
    return qp0, qp1, qbase[tinv.reshape(-1)], qglob.reshape(-1).astype(np.int64), qcodes


def build_state(flats, layout, nic: NicModel, *, channels: int, nvlink_gbps: float,
                nvlink_latency_ns: int, nics=None,
                chunk_rows: int = 1 << 16, keep_history: bool = True,
                keep_nvlink: bool = True, keep_messages: bool = True,
                ring_rows: int = 1 << 16, topology=None, point: str = "nic-tx",
                flow_keys=None, canonical: bool = False) -> Engine:
    """The engine of the iterations ``flats`` (:class:`tokenpcap.schedule.flat.Flat` per
    iteration, in order) on ``layout`` and ``nic``. The flats are used up: the arrays the state
    holds as copies (participations, instructions, the shape table's per-row columns other
    than ``dst``, ``step``, ``channel``, ``offset`` and its lists) are dropped from them as
    they are copied, so that a large run's build does not hold both.

    Args:
        channels: NCCL-like channels (connection index ``dim·channels + channel``).
        nvlink_gbps, nvlink_latency_ns: NVLink copies take ``ceil(bytes·8/nvlink_gbps)`` ns each,
            one after another per GPU, and arrive ``nvlink_latency_ns`` after their last byte.
        nics: NICs whose frames are materialized (None: all).
        chunk_rows: rows of frames handed out at a time.
        keep_history, keep_nvlink: record the timeline / NVLink copies.
        keep_messages: one row per message of the run, kept (else a ring of rows, first
            ``ring_rows``, a power of two, grown as the messages in progress need).
        topology: the fabric's :class:`~tokenpcap.schedule.engine.topology.Topology` when the
            cluster's fabric is queued (None: an ideal fabric, as before).
        point: capture point with a queued fabric (``nic-tx``, ``nic-rx``, ``switch:NAME:PORT``):
            which frames ``nics`` selects (:mod:`tokenpcap.schedule.engine.fabric`).
        flow_keys: ``flow_keys(nic, peer, conn, role) -> (udp_sport, dest_qpn)`` of QPs, for
            ECMP (:mod:`tokenpcap.schedule.engine.fabstate`).
        canonical: the transfers launched at one instant become messages in the order of a key
            invariant under the translation of the data-parallel index, after the instant's
            last event (``CANON``, :mod:`tokenpcap.schedule.engine.events`), instead of after
            each event in the order it launched them.

    Raises:
        InputError: a connection index >= :data:`QP_STRIDE`; a message of 2**24 packets or more;
            ``ring_rows`` not a power of two; 2**31 participations or instructions or more (the
            int32 columns of ``part``, ``ins``); a call of 2**31 transfers or more, or 2**31
            calls (:func:`~tokenpcap.schedule.engine.slabs.slab_words`).
    """
    if ring_rows < 1 or ring_rows & (ring_rows - 1):
        raise InputError(f"ring_rows: got {ring_rows}, expected a power of two")
    W = layout.world_size
    N = nic.n_nics
    gpn, npn = layout.gpus_per_node, layout.nics_per_node
    T = np.cumsum([0] + [f.n_transfers for f in flats])
    P = np.cumsum([0] + [len(f.part_rank) for f in flats])
    Ic = np.cumsum([0] + [len(f.ins_kind) for f in flats])
    table, first = ShapeTable.join([f.shapes for f in flats])
    shape = np.concatenate([f.call_shape + first[i] for i, f in enumerate(flats)])
    shift = np.concatenate([f.call_shift for f in flats])
    tr_base = np.concatenate([f.tr_base[:-1] + T[i] for i, f in enumerate(flats)])
    call_pbase = np.concatenate([f.part_base[:-1] + P[i] for i, f in enumerate(flats)] + [[P[-1]]])
    codes = np.concatenate([f.call_codes for f in flats]).astype(np.int64)
    nshift = nic_shift(shift, gpn, npn)
    c_row = table.tr_ptr[shape]                     # each call's first canonical row
    c_pos = table.pos_ptr[shape] - call_pbase[:-1]
    ntr = np.diff(table.tr_ptr)[shape]
    row_shape = np.repeat(np.arange(table.ab.size, dtype=np.int64), np.diff(table.tr_ptr))
    # every canonical row is used by some call: the set of messages' sizes and QPs is the run's
    calls_of = np.bincount(shape, minlength=table.ab.size)
    nic_rows = table.nic.astype(bool)
    # a transfer between nodes leaves and enters on the NICs its channel uses
    # (collectives.rails); an NVLink copy keeps its ranks' own NICs
    snic = np.where(nic_rows, table.snic, layout.nic_array(table.src)).astype(np.int64)
    dnic = np.where(nic_rows, table.dnic, layout.nic_array(table.dst)).astype(np.int64)
    # the connection index of every transfer, NVLink copies included, is below QP_STRIDE
    top = np.full(table.ab.size, -1, np.int64)
    np.maximum.at(top, row_shape, table.channel)
    conn = np.where(top[shape] >= 0, codes[:, 1] * channels + top[shape], -1)
    if conn.size and conn.max() >= QP_STRIDE:
        raise InputError(f"message qp: got {int(conn.max())}, expected 0 .. {QP_STRIDE - 1}")
    qp0, qp1, c_qbase, qglob, qcodes = _number_qps(table, row_shape, snic, dnic, shape, shift,
                                                  codes[:, 1], channels, N, gpn, npn)
    nq = qcodes.size
    q_port = qcodes // (2 * QP_STRIDE * N)
    per_port = np.bincount(q_port, minlength=N).astype(np.int64)
    act_lo = np.zeros(N, np.int64)
    act_lo[1:] = np.cumsum(per_port)[:-1]
    cts = nic.clear_to_send
    sizes = np.unique(table.bytes[nic_rows])
    sh_n, sh_d, sh_fb = nic.shapes(np.concatenate([sizes, [nic.cts_bytes]]),
                                   np.concatenate([np.full(sizes.size, VERB_WRITE_IMM if cts else VERB_WRITE),
                                                   [VERB_WRITE]]))
    if topology is not None:
        fab = fabstate.build_fabric(nic.cluster, topology, nic,
                                    sizes=np.concatenate([sizes, [nic.cts_bytes]]), sh_n=sh_n,
                                    sh_fb=sh_fb, qcodes=qcodes, qp_stride=QP_STRIDE,
                                    flow_keys=flow_keys, point=point, nics=nics)
        if fab.sh_d is not None:
            sh_d = fab.sh_d
    else:
        fab = fabstate.placeholder()
    if (sh_n >= (1 << 24)).any():
        raise InputError(f"collectives.slice_bytes: got messages of {int(sh_n.max()):,} packets, "
                         "expected fewer than 2**24 (smaller slices)")
    # int32 when every value fits (a transfer's bytes are at most a slice: they do at any sane
    # slice_bytes), halving the template rows
    top = max(int(table.pos_ptr[-1]), int(table.src.max(initial=0)), int(table.bytes.max(initial=0)),
              int(qp0.max(initial=0)), int(qp1.max(initial=0)), sizes.size, N)
    ct = np.full((table.src.size, CT_COLUMNS), -1, np.int32 if top < 1 << 31 else np.int64)
    ct[:, CT_SPOS] = table.spos + table.pos_ptr[row_shape]
    ct[:, CT_DPOS] = table.dpos + table.pos_ptr[row_shape]
    ct[:, CT_SRC] = table.src
    ct[:, CT_NIC] = nic_rows
    ct[:, CT_BYTES] = table.bytes
    ct[:, CT_QP0], ct[:, CT_QP1] = qp0, qp1
    ct[nic_rows, CT_SHAPE] = np.searchsorted(sizes, table.bytes[nic_rows])
    ct[:, CT_SNIC], ct[:, CT_DNIC] = snic, dnic
    ct[:, CT_WAIT] = table.wait
    n_nic = int(calls_of @ np.bincount(row_shape[nic_rows], minlength=table.ab.size))
    del snic, dnic, qp0, qp1, row_shape            # per canonical row, copied into ct
    T_ = int(T[-1])
    _release(table, _COPIED_ROWS)
    call_ab = np.concatenate([f.call_ab for f in flats])
    C = np.cumsum([0] + [f.n_calls for f in flats])
    if max(int(P[-1]), int(Ic[-1])) >= 1 << 31:
        raise InputError(f"participations, instructions: got {int(P[-1]):,}, {int(Ic[-1]):,}, "
                         "expected fewer than 2**31 (fewer iterations or a smaller job)")
    moves = np.diff(table.send_ptr) + np.diff(table.recv_ptr)     # per canonical position
    part = np.full((int(P[-1]), 6), -1, np.int32)
    part[:, K.A_STARTED] = 0
    # every transfer a rank sends or receives, over the iterations (the heap's bound below)
    per_rank = np.zeros(W, np.int64)
    # the countdown slabs of every call a rank takes part in (module slabs, slab_words)
    words = slabs.slab_words(ntr)
    slab_rank = np.zeros(W, np.int64)
    for i, f in enumerate(flats):                   # iteration by iteration: no (P,) int64 copies
        at = slice(int(P[i]), int(P[i + 1]))
        part[at, K.A_RANK] = f.part_rank
        part[at, K.A_CALL] = f.part_call
        part[at, K.A_CALL] += C[i]
        prow = np.arange(int(P[i]), int(P[i + 1]), dtype=np.int64) + c_pos[part[at, K.A_CALL]]
        part[at, K.A_PENDING] = moves[prow] + (f.call_ab[f.part_call] >= 0)
        per_rank += np.bincount(f.part_rank, weights=moves[prow], minlength=W).astype(np.int64)
        slab_rank += np.bincount(f.part_rank, weights=words[part[at, K.A_CALL]],
                                 minlength=W).astype(np.int64)
        _release(f, ("part_rank", "part_call"))
    ins = np.zeros((int(Ic[-1]), 3), np.int32)
    for i, f in enumerate(flats):
        at = slice(int(Ic[i]), int(Ic[i + 1]))
        ins[at, 0] = f.ins_kind
        ins[at, 1] = f.ins_a
        ins[at, 1][f.ins_kind == K.I_CALL] += P[i]
        ins[at, 2] = f.ins_b
        _release(f, ("ins_kind", "ins_a", "ins_b"))
    prog_ptr = np.concatenate([f.prog_ptr[:-1] + Ic[i] for i, f in enumerate(flats)] + [[Ic[-1]]])
    rk = np.full((W, 13), -1, np.int64)
    rk[:, K.R_PC], rk[:, K.R_END] = prog_ptr[:W], prog_ptr[1:W + 1]
    rk[:, [K.R_IT, K.R_BLOCKED, K.R_SBUSY, K.R_SWAIT, K.R_NVL]] = 0
    rk[:, K.R_MARK:] = 0
    qp = np.full((nq, K.Q_COLS), -1, np.int64)
    qp[:, K.Q_PORT] = q_port
    qp[:, [K.Q_PSN, K.Q_COUNT, K.Q_BYTES, K.Q_CE, K.Q_CNPRX]] = 0
    pt = np.full((N, K.P_COLS), -1, np.int64)
    pt[:, [K.P_CREATED, K.P_NACT, K.P_NACK, K.P_SEL, K.P_ROUND]] = 0
    pt[:, K.P_ACT_LO] = act_lo
    pt[:, K.P_WAKE] = K.NEVER
    if fab.settings.get(K.F_POINT, 0) != 0:
        pass                        # frames are taken inside the fabric (module fabric)
    elif nics is None:
        pt[:, K.P_SEL] = 1
    else:
        pt[np.asarray(sorted(nics), np.int64), K.P_SEL] = 1
    ax = np.full((max(1, nq), K.X_COLS), -1, np.int64)
    ax[:, [K.X_ON, K.X_NA, K.X_RATE]] = 0
    M = n_nic * (2 if cts else 1)
    ms = ring.table(M, ring=False) if keep_messages else ring.table(int(ring_rows))
    n_marks = int(((ins[:, 0] == K.I_MARK) & (ins[:, 2] % 2 == 0)).sum()) if keep_history else 0
    slab_head = 2 * int(slab_rank.max(initial=0))
    S = K.State(ms=ms, tw=slabs.pool(2 * slab_head), c_slab=np.full(shape.size, -1, np.int64),
                tr_base=np.append(tr_base, T[-1]).astype(np.int64), ct=ct, c_row=c_row, c_pos=c_pos, c_shift=shift,
                c_nshift=nshift, c_qbase=c_qbase, qglob=qglob, dep_ptr=table.dep_ptr,
                dep_list=table.dep_list, part=part, send_ptr=table.send_ptr,
                send_list=table.send_list, recv_ptr=table.recv_ptr, recv_list=table.recv_list,
                prog_ptr=prog_ptr, ins=ins,
                rk=rk, qp=qp, pt=pt, ax=ax, sh_n=sh_n,
                sh_d=np.ascontiguousarray(sh_d), sh_fb=np.ascontiguousarray(sh_fb),
                tl=np.zeros((n_marks, 6), np.int64),
                nv=np.zeros((T_ - n_nic if keep_nvlink else 0, 3), np.int64),
                call_ab=call_ab, call_nst=np.zeros(call_ab.size, np.int32),
                call_pbase=call_pbase.astype(np.int32), c_key=np.zeros(1, np.int64),
                ct_j=np.zeros(1, np.int32), **fab.arrays)
    if canonical:
        # per call: its iteration and family instance (shared by the groups of one collective);
        # per canonical row: its index in its sender position's send list (canon.canon_less)
        c_key = np.concatenate([f.calls.family_inst() + (i << 40) for i, f in enumerate(flats)])
        owner = np.repeat(np.arange(table.send_ptr.size - 1), np.diff(table.send_ptr))
        ct_j = np.zeros(table.dep_ptr.size - 1, np.int32)
        ct_j[table.send_list] = np.arange(table.send_list.size) - table.send_ptr[owner]
        S = S._replace(c_key=c_key.astype(np.int64), ct_j=ct_j)
    rate = Fraction(repr(float(nvlink_gbps)))
    # most events one event can push: every transfer a rank sends or receives in an iteration
    # (a program step may start several calls), a transfer's dependents, twice over
    head = 2 * int(per_rank.max(initial=0)) + 2 * int(np.diff(table.dep_ptr).max(initial=0)) + 2 * W + 1024
    gap = min(4096, max(64, chunk_rows // 2))
    cf = np.zeros(K.NCF, np.int64)
    cf[[K.LAT, K.ACKDELAY, K.ACK_NS, K.ACK_FB, K.EVERY, K.CTS, K.CTS_BYTES, K.CTS_SHAPE, K.ITERS,
        K.WORLD, K.NVL_NUM, K.NVL_DEN, K.NVL_LAT, K.GAP, K.CHUNK, K.KEEP_HIST, K.KEEP_NV, K.NPORTS,
        K.HEAD]] = (
        nic.latency_ns, nic.ack_delay_ns, nic.ack_ns, nic.ack_bytes, nic.ack_every, int(cts),
        nic.cts_bytes, sizes.size, len(flats), W, rate.numerator, rate.denominator,
        nvlink_latency_ns, gap, chunk_rows, int(keep_history), int(keep_nvlink), N, head)
    for slot, value in fab.settings.items():
        cf[slot] = value
    if fab.ack_ns is not None:
        cf[K.ACK_NS] = fab.ack_ns
    cf[[K.CANON, K.C_STRIDE, K.C_DP]] = int(canonical), layout.tp * layout.cp, layout.dp
    cf[K.SLAB_HEAD] = slab_head
    sc = np.zeros(K.NSC, np.int64)
    sc[K.SLAB_FREE:] = -1
    sc[K.ACKFREE] = -1
    sc[K.AB_CALL] = -1
    sc[K.MMASK] = -1 if keep_messages else ms.shape[0] - 1
    eng = Engine(S, cf, sc, np.zeros((2 * head, 5), np.int64), np.zeros((1024, 3), np.int64),
                 np.zeros((chunk_rows + 4 * gap + 1024, 7), np.int64), np.zeros(head, np.int64),
                 TransferView(S, table.dst, table.step, table.channel, table.offset, codes[:, 1],
                              channels), codes, nic,
                 np.flatnonzero(pt[:, K.P_SEL]))
    for r in range(W):
        K.push(eng.heap, sc, 0, K.EV_TIMER, 0, 0, r)
    return eng
