"""The engine's reads of transfers through the templates (tokenpcap.schedule.engine.access):
every accessor, for every transfer and participation of a run of two iterations, equals the
per-transfer columns of the flat arrays expanded one by one (tokenpcap.schedule.flat.Flat.expand,
itself equal to the straightforward build in test_flat.py), and the QP ids equal those numbered
over every transfer (the rank of its code among all codes, as the lowering names QPs)."""
from __future__ import annotations

import functools
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from tokenpcap.config.profiles import load_scenario
from tokenpcap.model import scenario_shards
from tokenpcap.plan.build import build_plan
from tokenpcap.schedule.compute import stage_times
from tokenpcap.schedule.engine import access as A
from tokenpcap.schedule.engine.state import QP_STRIDE
from tokenpcap.schedule.flat import flatten
from tokenpcap.schedule.runner import NVLINK_COPIES_PER_COPY, NVLINK_LATENCY_NS, Schedule
from tests.schedule.test_schedule import VARIANTS, tiny_scenario


@njit(cache=False)
def _read_all(S, hs, P, out, dep, snd, rcv):
    for k in range(hs.size):
        x = hs[k]
        out[k, 0] = A.is_nic(S, x)
        out[k, 1] = A.src_rank(S, x)
        out[k, 2] = A.size_bytes(S, x)
        out[k, 3] = A.src_nic(S, x)
        out[k, 4] = A.dst_nic(S, x)
        out[k, 5] = A.src_part(S, x)
        out[k, 6] = A.dst_part(S, x)
        if out[k, 0]:
            out[k, 7] = A.qp_data(S, x)
            out[k, 8] = A.qp_cts(S, x)
            out[k, 9] = A.msg_shape(S, x)
        lo, hi = A.deps(S, x)
        for i in range(lo, hi):
            dep[k, i - lo] = A.dep_at(S, x, i)
    for p in range(P):
        lo, hi = A.sends(S, p)
        for i in range(lo, hi):
            snd[p, i - lo] = A.send_at(S, p, i)
        lo, hi = A.recvs(S, p)
        for i in range(lo, hi):
            rcv[p, i - lo] = A.recv_at(S, p, i)


def _lists(ptr, lst, width):
    out = np.full((ptr.size - 1, width), -1, np.int64)
    for i in range(ptr.size - 1):
        out[i, : ptr[i + 1] - ptr[i]] = lst[ptr[i]: ptr[i + 1]]
    return out


def _expanded(sched):
    """The run's transfers one by one: the iterations' expanded columns joined."""
    its = range(sched.iterations)
    s, plan = sched.scenario, sched.plan
    times = [stage_times(s, st, plan.scale) for st in range(s.parallelism.pp)]
    rate = Fraction(repr(float(s.cluster.nvlink_gbps)))
    flats = [flatten(plan, it, scenario_shards(s), times,
                     ((rate.numerator, rate.denominator), NVLINK_LATENCY_NS), NVLINK_COPIES_PER_COPY)
             for it in its]
    ex = [f.expand() for f in flats]
    T = np.cumsum([0] + [e.tr_call.size for e in ex])
    P = np.cumsum([0] + [f.part_rank.size for f in flats])
    C = np.cumsum([0] + [f.n_calls for f in flats])
    cat = {}
    for k, shift in (("tr_call", C), ("tr_src", None), ("tr_dst", None), ("tr_nic", None),
                     ("tr_bytes", None), ("tr_srcp", P), ("tr_dstp", P), ("tr_snic", None),
                     ("tr_dnic", None), ("tr_channel", None), ("tr_step", None)):
        cat[k] = np.concatenate([getattr(e, k) + (0 if shift is None else shift[i])
                                 for i, e in enumerate(ex)])
    for k in ("dep", "send", "recv"):
        lens = np.concatenate([np.diff(getattr(e, f"{k}_ptr")) for e in ex])
        ptr = np.zeros(lens.size + 1, np.int64)
        np.cumsum(lens, out=ptr[1:])
        cat[f"{k}_ptr"] = ptr
        cat[f"{k}_list"] = np.concatenate([getattr(e, f"{k}_list") + T[i] for i, e in enumerate(ex)])
    cat["codes"] = np.concatenate([f.call_codes for f in flats])
    return cat


@pytest.mark.parametrize("variant", ["zero3", "moe-tp", "cp", "hier", "ib-sp-tree"])
def test_every_accessor_reads_the_expanded_columns(tmp_path, variant):
    kw = dict(VARIANTS[variant])
    path = tiny_scenario(tmp_path, variant, kw.pop("dp"), kw.pop("tp"), kw.pop("pp"), kw.pop("gbs"), **kw)
    sched = Schedule(build_plan(load_scenario(path), scale=8), iterations=2)
    S = sched._eng.S
    e = _expanded(sched)
    T, P = e["tr_call"].size, e["send_ptr"].size - 1
    # nothing is stored per transfer: a transfer's handle names its call (module access)
    assert S.tr_base[-1] == T and S.c_slab.size == S.tr_base.size - 1
    hs = sched._eng.tr.handles(np.arange(T))
    assert np.array_equal(hs >> A.HANDLE_SHIFT, e["tr_call"])
    assert np.array_equal(sched._eng.tr.ids(hs), np.arange(T))
    w = max(1, int(max(np.diff(e[f"{k}_ptr"]).max(initial=0) for k in ("dep", "send", "recv"))))
    out = np.full((T, 10), -1, np.int64)
    dep, snd, rcv = (np.full((n, w), -1, np.int64) for n in (T, P, P))
    _read_all(S, hs, P, out, dep, snd, rcv)
    # the lists name handles: as run-wide ids they are the expanded lists
    tr = sched._eng.tr
    dep, snd, rcv = (np.where(a >= 0, tr.ids(np.maximum(a, 0)), -1) for a in (dep, snd, rcv))
    nic = e["tr_nic"]
    lay = sched.layout
    assert np.array_equal(out[:, 0], nic) and nic.any()
    assert np.array_equal(out[:, 1], e["tr_src"])
    assert np.array_equal(out[:, 2], e["tr_bytes"])
    assert np.array_equal(out[:, 3], np.where(nic, e["tr_snic"], lay.nic_array(e["tr_src"])))
    assert np.array_equal(out[:, 4], np.where(nic, e["tr_dnic"], lay.nic_array(e["tr_dst"])))
    assert np.array_equal(out[:, 5], e["tr_srcp"]) and np.array_equal(out[:, 6], e["tr_dstp"])
    # QP ids numbered over every transfer: the rank of (nic, peer, conn, role) among all codes
    N = sched.engine.n_nics
    conn = e["codes"][e["tr_call"], 1] * sched.scenario.collectives.channels + e["tr_channel"]
    x = np.flatnonzero(nic)
    s_, d_ = out[x, 3], out[x, 4]
    code0 = ((s_ * N + d_) * QP_STRIDE + conn[x]) * 2
    code1 = ((d_ * N + s_) * QP_STRIDE + conn[x]) * 2 + 1
    _, inv = np.unique(np.concatenate([code0, code1]), return_inverse=True)
    assert np.array_equal(out[x, 7], inv.reshape(-1)[: x.size])
    assert np.array_equal(out[x, 8], inv.reshape(-1)[x.size:])
    sizes = np.unique(e["tr_bytes"][x])
    assert np.array_equal(out[x, 9], np.searchsorted(sizes, e["tr_bytes"][x]))
    for k, got in (("dep", dep), ("send", snd), ("recv", rcv)):
        assert np.array_equal(got, _lists(e[f"{k}_ptr"], e[f"{k}_list"], w)), k
    # the Python view reads the same rows
    cols = sched._eng.tr.columns(hs, ("call", "src", "dst", "step", "conn", "nic", "snic"))
    assert np.array_equal(cols["dst"], e["tr_dst"]) and np.array_equal(cols["step"], e["tr_step"])
    assert np.array_equal(cols["conn"], conn) and np.array_equal(cols["snic"], out[:, 3])
    assert np.array_equal(cols["call"], e["tr_call"])


@settings(max_examples=20, deadline=None)
@given(rows=st.integers(1, 400), its=st.sampled_from([[0], [1], [0, 1]]))
def test_nic_transfers_in_pieces_are_the_whole_in_order(rows, its):
    """Pieces of whole calls of any size concatenate to :meth:`Schedule.nic_transfers`, and the
    whole is the expanded NIC transfers sorted by call id (an order the pieces must keep)."""
    sched, e = _dante()
    whole = sched.nic_transfers(its)
    pieces = list(sched.nic_transfer_chunks(its, rows=rows))
    for k, v in whole.items():
        assert np.array_equal(np.concatenate([p[k] for p in pieces]), v), k
    ca = sched._call_attr
    x = np.flatnonzero(e["tr_nic"] & np.isin(ca[e["tr_call"], 0], its))
    x = x[np.argsort(ca[e["tr_call"][x], 3], kind="stable")]
    assert np.array_equal(whole["rank_src"], e["tr_src"][x])
    assert np.array_equal(whole["size_bytes"], e["tr_bytes"][x])
    assert np.array_equal(whole["call_id"], ca[e["tr_call"][x], 3])


@functools.cache
def _dante():
    root = Path(__file__).resolve().parents[3]
    sched = Schedule(build_plan(load_scenario(root / "profiles" / "scenarios" / "dante.yaml"), scale=64),
                     iterations=2)
    return sched, _expanded(sched)


@functools.cache
def _dante_run():
    sched, e = _dante()
    for _ in sched.run():
        pass
    return sched, e


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_message_rows_of_any_ids_are_the_table_rows(data):
    """Rows read per id array (any shape, any order, repeats) from the templates equal the rows of
    the whole table, whose data messages carry the expanded NIC transfers' ranks, bytes and steps."""
    sched, e = _dante_run()
    n = sched.n_messages
    shape = data.draw(st.sampled_from([(7,), (3, 4), (1,), (0,)]))
    ids = np.asarray(data.draw(st.lists(st.integers(0, n - 1), min_size=int(np.prod(shape)),
                                        max_size=int(np.prod(shape)))), np.int64).reshape(shape)
    whole = sched.messages
    rows = sched.message_rows(ids)
    assert rows.shape == ids.shape and rows.tobytes() == whole[ids].tobytes()
    # every data message is one NIC transfer of the expanded columns, each once
    d = whole[whole["kind"] == 0]
    nic = np.flatnonzero(e["tr_nic"])
    want = np.stack([e["tr_src"][nic], e["tr_dst"][nic], e["tr_bytes"][nic], e["tr_step"][nic]])
    got = np.stack([d["rank_src"], d["rank_dst"], d["size_bytes"], d["step"]]).astype(np.int64)
    assert np.array_equal(got[:, np.lexsort(got)], want[:, np.lexsort(want)])
