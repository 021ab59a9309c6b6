"""Timing one data-parallel replica for all of them: the quotient of a run by the translation of
the data-parallel index, when it is exact.

**The symmetry.** Let ``D = dp`` and ``stride = tp · cp`` (ranks between two neighbouring
data-parallel indices, :mod:`tokenpcap.collectives.layout`: ``rank = ((pp·dp + d)·cp + c)·tp +
t``). The translation ``σ`` moves rank ``r`` of data-parallel index ``d`` to the rank of index
``(d + 1) mod D`` with the same other coordinates. Suppose

1. the fabric is ideal (``fabric.model`` not ``queued``): a NIC's transmit port, its ACK queue
   and a GPU's NVLink are then the only shared resources, and each belongs to one rank's node;
   every NIC has the same link rate and latency (:class:`~tokenpcap.schedule.engine.frames.NicModel`
   holds one of each) and nothing in the engine draws random numbers;
2. ``stride`` is a multiple of ``gpus_per_node``, so ``σ`` moves whole nodes and a NIC ``n``
   to ``n + (stride / gpus_per_node) · nics_per_node`` (a replica is a set of whole nodes; an
   NVLink copy never leaves one);
3. every call lies inside one replica, or its group is mapped onto itself by ``σ`` (the
   gradient reductions over a data-parallel group), and the transfers of such a call are
   *equivariant*: the ``j``-th transfer a position sends and the ``j``-th one its image sends
   have the same bytes, step, channel, dependency count, the image's receiver and NICs, and
   the images' dependents (checked row by row on each canonical shape, :func:`quotient_flats`;
   this is where ring orders that are not translation-equivariant, such as a tree's or a ring
   that crosses a node boundary for some neighbours only, are refused);
4. the program of rank ``σ(r)`` is that of ``r`` with every call replaced by its image (checked
   instruction by instruction).

Then the map ``σ`` sends the run's inputs to themselves, and because the event loop's rules
(:mod:`tokenpcap.schedule.runner`) depend on ranks only through these inputs, every rank's
timeline, every NIC's frame times and every message's times equal those of its image: the run
is a fixed point of ``σ``. The representatives (data-parallel index 0) therefore see exactly
what they would see in the whole run if each transfer ``x`` from a representative ``s`` to a
rank ``t`` of index ``e`` is received by ``t``'s representative ``σ^-e(t)`` instead: the
transfer that representative really receives at that moment is ``σ^-e(x)``, whose times equal
``x``'s. Its dependents become the images (by their sender's index) of ``x``'s dependents, its
receiver's receive list the images of its real receives. The quotient times ``D`` times fewer
transfers and messages.

**The order of events at one instant.** The engine breaks ties between events of one
nanosecond by message id and by insertion (:mod:`tokenpcap.schedule.engine.events`), and ids
are dense in order of creation over the whole job, so no order of the events themselves can be
equivariant: when the arrival of a message from replica 0 to replica 1 and that of its image
from replica 1 to replica 0 fall on one nanosecond, one of them comes first everywhere. Measured
on ``gpt2-all-cross`` (dp 2, every group across nodes) in the order of events: rank 4 reaches
its data-parallel call and its pipeline send at 4,319,883 ns, as does its image, rank 6; the
rank whose event comes second launches both directions of the data-parallel ring (the
rendezvous), so NIC 4 creates its pipeline QP first and NIC 6 its data-parallel QP first, the
two NICs serve them in opposite orders, and rank 0's second backward block starts 168 ns after
that of its image. What the events *do* at one instant is order-independent except through
the transfers they launch (which QP a NIC creates first, which message id comes first, which
NVLink copy a GPU sends first): so a run that passes the checks keeps the transfers launched
at one instant until its last event before its wakes and makes them messages and copies in
the order of a key invariant under ``σ`` that tells apart any two transfers that are not
images of each other (``CANON``, :func:`tokenpcap.schedule.engine.canon.canon_less`), the
data QPs before the clear-to-send ones (a transfer and its image meet on one NIC only as one's
data and the other's clear-to-send write). The whole run is then a fixed point of ``σ``
(``tests/schedule/test_replicaview.py`` checks it rank by rank and NIC by NIC), and the quotient
is exact. Such a run is ordered canonically whether it is timed through the quotient or whole
(:class:`tokenpcap.schedule.runner.Schedule`, ``replicas``), so both give the same bytes; a run
that fails a check keeps the order of events.

**What is not translation-equivariant.** NCCL's ring AllReduce gives each rank's chunk
``alignUp(divUp(count, nranks), 16 / sizeof(T))`` elements and every rank runs all ``2(k - 1)``
steps (NCCL ``src/device/all_reduce.h``, ``runRing``: ``nelem = min(chunkCount, remCount -
chunkOffset)``, which is zero or less past the data), so an AllReduce of fewer elements than
ranks puts all its bytes in the first chunks: the rank that carries them at step ``j`` is a
fixed ring position, and its image carries an empty one. The ``update_successful``/
``grad_norm``-like AllReduces of 4 to 8 bytes over the data-parallel group (and over all ranks)
are such calls (``llama2-7b-a100-ib``: the 4-byte ``mp`` AllReduce over 32 ranks;
``llama3.1-405b-2048-interleaved``: 4 bytes over 2,048 ranks, 8 bytes over each data-parallel
group of 16; ``deepseek-v3-2048`` likewise): ring positions send different bytes (and, unless
``collectives.empty_ring_steps`` sends the empty steps as NCCL does,
:mod:`tokenpcap.collectives.empty_steps`, different numbers of transfers), so replicas really
do time differently from that call on and no quotient of the run is exact; NCCL's own tuner picks the tree for them across nodes (``nccl_forced`` in
``plan``), which is not translation-equivariant either. :func:`quotient_flats` refuses such
runs (condition 3), as it does a run whose NVLink-only calls are timed as a whole
(:class:`~tokenpcap.schedule.runner.Schedule`: their starts at one instant are not ordered
canonically).

When a condition fails, :func:`quotient_flats` returns the reason and the caller times every
rank. What the quotient's run answers for the whole job (frames with their real peers, each
end's view of a message, every rank's timeline): :mod:`tokenpcap.schedule.replicaview`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from tokenpcap.schedule.flat import Flat
from tokenpcap.schedule.flatbuild import CALL, ShapeTable

__all__ = ["ReplicaQuotient", "quotient_flats"]


@dataclass
class ReplicaQuotient:
    """What :func:`quotient_flats` made.

    ``flats``: the quotient's iterations (:class:`~tokenpcap.schedule.flat.Flat`; only the
    representatives' programs are left, calls and participations keep their indices);
    ``replicas`` ``D``; ``stride`` ranks between two data-parallel indices; ``nic_stride``
    NICs likewise; ``tables``: per distinct :class:`~tokenpcap.schedule.flatbuild.ShapeTable`
    of ``flats`` (in order of first use) ``(quotient table, real_dnic, recv_row)``: the table the
    quotient's calls use, and per row of it (int64) the receiving NIC the transfer has in the
    whole run (canonical, -1 on NVLink) and the row of the original table that the receiver's
    representative really receives at that moment (the transfer's image by its sender's
    replica index; the same row for a call inside one replica), whose columns give that
    transfer's provenance.
    """

    flats: list
    replicas: int
    stride: int
    nic_stride: int
    tables: list


def _replica(rank: np.ndarray, stride: int, D: int) -> np.ndarray:
    return rank // stride % D


def _translate(rank: np.ndarray, k: np.ndarray, stride: int, D: int) -> np.ndarray:
    """``σ^k(rank)`` (int64 arrays)."""
    d = _replica(rank, stride, D)
    return rank + ((d + k) % D - d) * stride


def quotient_flats(flats: list[Flat], layout, *, fabric_queued: bool, workload: bool
                   ) -> tuple[ReplicaQuotient | None, str]:
    """``(quotient, reason)``: the run of ``flats`` (one :class:`~tokenpcap.schedule.flat.Flat`
    per iteration) reduced to data-parallel index 0 (module docstring), or ``(None, reason)``
    naming the first condition that fails. ``reason`` says what was done either way."""
    D, stride = int(layout.dp), int(layout.tp * layout.cp)
    gpn, npn = layout.gpus_per_node, layout.nics_per_node
    if fabric_queued:
        return None, "the fabric is queued (switch queues are shared between replicas)"
    if workload:
        return None, "a microbenchmark workload has no data-parallel replicas"
    if D < 2:
        return None, "dp is 1 (one replica)"
    if stride % gpn:
        return None, (f"a replica is not whole nodes (tp·cp = {stride}, gpus_per_node = {gpn}): "
                      "its NVLink and NIC neighbours are not translated alike")
    nic_stride = stride // gpn * npn
    made: dict[int, tuple] = {}
    out = []
    for f in flats:
        tab = f.shapes
        # which shapes are the group-invariant calls' and with which shifts
        inv = np.zeros(tab.ab.size, np.bool_)
        for s in np.unique(f.call_shape):
            g = tab.rank[tab.pos_ptr[s]:tab.pos_ptr[s + 1]]
            d = _replica(g, stride, D)
            if (d == d[0]).all():
                continue
            img = np.sort(_translate(g, 1, stride, D))
            if not np.array_equal(img, np.sort(g)):
                return None, (f"a call's group spans data-parallel replicas without being "
                              f"mapped onto itself (ranks {g[:4].tolist()}...)")
            inv[s] = True
        ci = inv[f.call_shape]
        # the ranks each call really has: one replica's, or (moved by the call's shift) the
        # canonical group's replica indices, so that σ commutes with the shift
        d_part = _replica(f.part_rank, stride, D)
        lo = np.full(f.n_calls, D, np.int64)
        hi = np.full(f.n_calls, -1, np.int64)
        np.minimum.at(lo, f.part_call, d_part)
        np.maximum.at(hi, f.part_call, d_part)
        if (lo[~ci] != hi[~ci]).any():
            return None, "a call's canonical group lies in one replica but the call spans several"
        prow = (np.arange(f.part_rank.size, dtype=np.int64)
                + (tab.pos_ptr[f.call_shape] - f.part_base[:-1])[f.part_call])
        spans = ci[f.part_call]
        if (d_part[spans] != _replica(tab.rank[prow[spans]], stride, D)).any():
            return None, "a replica-spanning call's shift changes its ranks' replica indices"
        if (f.call_ab[ci] >= 0).any():
            return None, "a replica-spanning call is timed as one NVLink collective"
        key = id(tab)
        if key not in made:
            got = _quotient_table(tab, inv, stride, D, nic_stride)
            if isinstance(got, str):
                return None, got
            made[key] = got
        qtab = made[key][0]
        reason = _check_programs(f, stride, D, inv)
        if reason:
            return None, reason
        out.append(_quotient_flat(f, qtab, stride, D))
    return (ReplicaQuotient(out, D, stride, nic_stride, list(made.values())),
            f"timing data-parallel index 0 of {D} replicas for all (translation symmetry)")


def _quotient_table(tab: ShapeTable, inv: np.ndarray, stride: int, D: int, nic_stride: int):
    """``(quotient ShapeTable, real_dnic, recv_row)`` of ``tab`` whose shapes ``inv`` are the
    replica-spanning ones, or the reason the rows are not equivariant (a str)."""
    R = tab.src.size
    G = tab.rank.size
    pos_shape = np.repeat(np.arange(tab.ab.size), np.diff(tab.pos_ptr))
    row_shape = np.repeat(np.arange(tab.ab.size), np.diff(tab.tr_ptr))
    d_pos = _replica(tab.rank, stride, D)
    # rep_pos[i]: the position of σ^-d(rank) in the same shape (i itself outside inv shapes)
    rep_pos = np.arange(G, dtype=np.int64)
    inv_pos = inv[pos_shape]
    key = pos_shape * (1 << 40) + tab.rank
    order = np.argsort(key, kind="stable")
    want = pos_shape * (1 << 40) + _translate(tab.rank, -d_pos, stride, D)
    at = order[np.searchsorted(key[order], want[inv_pos])]
    rep_pos[inv_pos] = at
    n_send = np.diff(tab.send_ptr)
    if (n_send[rep_pos] != n_send).any():
        return "a replica-spanning call's positions send different numbers of transfers"
    # mirror[z]: the j-th send of the sender's representative, z being the j-th send of its sender
    mirror = np.arange(R, dtype=np.int64)
    owner = np.repeat(np.arange(G), n_send)
    j = np.arange(tab.send_list.size) - tab.send_ptr[owner]
    z = tab.send_list
    mirror[z] = np.where(inv_pos[owner], tab.send_list[tab.send_ptr[rep_pos[owner]] + j], z)
    spos_g = tab.spos + tab.pos_ptr[row_shape]
    dpos_g = tab.dpos + tab.pos_ptr[row_shape]
    dsrc = d_pos[spos_g]
    m = mirror
    for name in ("bytes", "step", "channel", "nic", "wait"):
        a = getattr(tab, name)
        if (a[m] != a).any():
            return f"a replica-spanning call's transfers differ in {name} between replicas"
    spans = inv[row_shape]
    k = np.where(spans, -dsrc, 0)
    if (tab.dst[m] != _translate(tab.dst, k, stride, D)).any():
        return "a replica-spanning call's receivers are not translated with its senders"
    for name in ("snic", "dnic"):
        a = getattr(tab, name)
        r = tab.src if name == "snic" else tab.dst
        shift = (_replica(_translate(r, k, stride, D), stride, D) - _replica(r, stride, D)) * nic_stride
        if (np.where(a >= 0, a[m] - a - shift, a[m] - a) != 0).any():
            return f"a replica-spanning call's NICs ({name}) are not translated with its ranks"
    # dependents: the images of a row's dependents equal those of its mirror's
    nd = np.diff(tab.dep_ptr)
    if (nd[m] != nd).any():
        return "a replica-spanning call's transfers have different numbers of dependents"
    dep_owner = np.repeat(np.arange(R), nd)
    mdep = mirror[tab.dep_list]
    srt = np.lexsort((mdep, dep_owner))
    mdep_sorted = mdep[srt]
    jj = np.arange(tab.dep_list.size) - tab.dep_ptr[dep_owner]
    if (mdep_sorted != mdep_sorted[tab.dep_ptr[m[dep_owner]] + jj]).any():
        return "a replica-spanning call's dependencies are not translated with its transfers"
    # the quotient rows: those sent by a representative
    keep = (d_pos[spos_g] == 0) | ~inv[row_shape]
    new = np.full(R, -1, np.int64)
    new[keep] = np.arange(int(keep.sum()))
    real_dnic = tab.dnic[keep]
    e = _replica(tab.dst, stride, D)
    dnic_q = np.where(spans & (tab.dnic >= 0), tab.dnic - e * nic_stride, tab.dnic)
    dpos_q = np.where(spans, rep_pos[dpos_g] - tab.pos_ptr[row_shape], tab.dpos)
    # receive lists of a representative: the mirrors of its real receives; others: none
    n_recv = np.diff(tab.recv_ptr)
    r_owner = np.repeat(np.arange(G), n_recv)
    r_keep = ~inv_pos[r_owner] | (d_pos[r_owner] == 0)
    recv_vals = new[mirror[tab.recv_list]]
    recv_row = np.full(int(keep.sum()), -1, np.int64)
    recv_row[recv_vals[r_keep]] = tab.recv_list[r_keep]
    s_owner = owner
    s_keep = keep[tab.send_list]
    dep_keep = keep[dep_owner]
    row_keep_ptr = np.zeros(int(keep.sum()) + 1, np.int64)
    np.cumsum(np.bincount(new[dep_owner[dep_keep]], minlength=int(keep.sum())), out=row_keep_ptr[1:])
    dep_list = new[mdep[dep_keep]]

    def csr(owner_, keep_, vals, n):
        ptr = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(owner_[keep_], minlength=n), out=ptr[1:])
        return ptr, vals[keep_]

    send_ptr, send_list = csr(s_owner, s_keep, new[tab.send_list], G)
    recv_ptr, recv_list = csr(r_owner, r_keep, recv_vals, G)
    if (send_list < 0).any() or (recv_list < 0).any() or (dep_list < 0).any():
        return "internal: a quotient list names a dropped transfer"
    # a sender's connections to different replicas must stay different QPs
    nk = keep & tab.nic.astype(bool)
    real = np.unique(np.stack([tab.snic[nk], tab.dnic[nk], tab.channel[nk]]), axis=1).shape[1]
    quot = np.unique(np.stack([tab.snic[nk], dnic_q[nk], tab.channel[nk]]), axis=1).shape[1]
    if real != quot:
        return ("a sender reaches several replicas on one channel (their connections would "
                "merge into one QP)")
    # each kept transfer is released once per dependency and received by one representative
    n_keep = int(keep.sum())
    if not np.array_equal(np.bincount(dep_list, minlength=n_keep), tab.wait[keep] - 2):
        return ("a transfer depends on two transfers of one sender position in different "
                "replicas (their images coincide)")
    recv_at = np.full(n_keep, -1, np.int64)
    recv_at[recv_list] = np.repeat(np.arange(G), np.diff(recv_ptr))
    if (np.bincount(recv_list, minlength=n_keep) != 1).any() or \
            (recv_at != (dpos_q + tab.pos_ptr[row_shape])[keep]).any():
        return ("a representative receives two transfers whose images coincide (a sender "
                "reaches several replicas on one connection)")
    tr_ptr = np.zeros(tab.ab.size + 1, np.int64)
    np.cumsum(np.bincount(row_shape[keep], minlength=tab.ab.size), out=tr_ptr[1:])
    rows = {}
    for name in ("src", "dst", "spos", "nic", "snic", "bytes", "step", "channel", "offset", "wait"):
        rows[name] = getattr(tab, name)[keep]
    rows["dpos"], rows["dnic"] = dpos_q[keep], dnic_q[keep]
    q = ShapeTable(tr_ptr=tr_ptr, pos_ptr=tab.pos_ptr, **rows, dep_ptr=row_keep_ptr,
                   dep_list=dep_list, rank=tab.rank, send_ptr=send_ptr, send_list=send_list,
                   recv_ptr=recv_ptr, recv_list=recv_list, ab=tab.ab)
    return q, real_dnic, recv_row


def _check_programs(f: Flat, stride: int, D: int, inv: np.ndarray) -> str:
    """'' when every rank's program is its representative's with each call replaced by its
    image, else the reason."""
    W = f.prog_ptr.size - 1
    r = np.arange(W, dtype=np.int64)
    rep = _translate(r, -_replica(r, stride, D), stride, D)
    ln = np.diff(f.prog_ptr)
    if (ln[rep] != ln).any():
        return "ranks of one orbit have programs of different lengths"
    owner = np.repeat(r, ln)
    i = np.arange(f.ins_kind.size) - f.prog_ptr[owner]
    at = f.prog_ptr[rep[owner]] + i
    if (f.ins_kind[at] != f.ins_kind).any() or (f.ins_b[at] != f.ins_b).any():
        return "ranks of one orbit run different programs"
    call = f.ins_kind == CALL
    if (f.ins_a[~call] != f.ins_a[at[~call]]).any():
        return "ranks of one orbit compute for different times"
    p, p0 = f.ins_a[call].astype(np.int64), f.ins_a[at[call]].astype(np.int64)
    c, c0 = f.part_call[p], f.part_call[p0]
    k = _replica(owner[call], stride, D)
    if (f.part_rank[p] != _translate(f.part_rank[p0], k, stride, D)).any():
        return "a rank's call is not its representative's call moved to its replica"
    same = (f.call_codes[c] == f.call_codes[c0]).all(axis=1)
    same &= f.calls.family_inst()[c] == f.calls.family_inst()[c0]
    same &= f.call_shape[c] == f.call_shape[c0]
    if not same.all():
        return "a rank's call differs from its representative's (collective, family or shape)"
    return ""


def _quotient_flat(f: Flat, qtab: ShapeTable, stride: int, D: int) -> Flat:
    """``f`` with the quotient table and only the representatives' programs."""
    tr_base = np.zeros(f.n_calls + 1, np.int64)
    np.cumsum(np.diff(qtab.tr_ptr)[f.call_shape], out=tr_base[1:])
    W = f.prog_ptr.size - 1
    r = np.arange(W, dtype=np.int64)
    ln = np.where(_replica(r, stride, D) == 0, np.diff(f.prog_ptr), 0)
    prog_ptr = np.zeros(W + 1, np.int64)
    np.cumsum(ln, out=prog_ptr[1:])
    owner = np.repeat(r, ln)
    at = f.prog_ptr[owner] + np.arange(int(prog_ptr[-1])) - prog_ptr[owner]
    return dataclasses.replace(f, shapes=qtab, tr_base=tr_base, prog_ptr=prog_ptr,
                               ins_kind=f.ins_kind[at], ins_a=f.ins_a[at], ins_b=f.ins_b[at],
                               direct=None)
