"""The quotient of a run by the translation of the data-parallel index
(:mod:`tokenpcap.schedule.replicas`): what it keeps on a job whose calls and programs are
invariant (gpt2-all-cross: dp 2, every group across nodes), counted against the whole run's
transfers; and the conditions it refuses, each on a bundled scenario that fails it."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from tokenpcap.config.profiles import load_scenario
from tokenpcap.model import scenario_shards
from tokenpcap.plan.build import build_plan
from tokenpcap.schedule.compute import stage_times
from tokenpcap.schedule.flat import flatten
from tokenpcap.schedule.replicas import quotient_flats
from tokenpcap.schedule.runner import NVLINK_LATENCY_NS

ROOT = Path(__file__).resolve().parents[2]


def _flat(name: str):
    s = load_scenario(ROOT / "profiles" / "scenarios" / f"{name}.yaml")
    plan = build_plan(s)
    times = [stage_times(s, st, 1) for st in range(s.parallelism.pp)]
    rate = Fraction(repr(float(s.cluster.nvlink_gbps)))
    nvl = ((rate.numerator, rate.denominator), NVLINK_LATENCY_NS)
    return plan, flatten(plan, 0, scenario_shards(s), times, nvl)


def test_quotient_keeps_the_representatives_sends_and_their_mirrored_receives():
    plan, f = _flat("gpt2-all-cross")
    lay = plan.layout
    stride, D = lay.tp * lay.cp, lay.dp
    q, why = quotient_flats([f], lay, fabric_queued=False, workload=False)
    assert q is not None, why
    g = q.flats[0]
    full, part = f.expand(), g.expand()
    rep = lambda r: r // stride % D == 0                      # noqa: E731
    # a call spans replicas when its ranks do; its transfers from representatives stay, 1/D of all
    ranks = np.zeros(f.n_calls, np.int64)
    np.add.at(ranks, f.part_call, rep(f.part_rank))
    span = ranks < np.bincount(f.part_call, minlength=f.n_calls)
    span &= ranks > 0
    assert span.any()
    n_full = np.bincount(full.tr_call, minlength=f.n_calls)
    n_part = np.bincount(part.tr_call, minlength=f.n_calls)
    assert np.array_equal(n_part[span] * D, n_full[span])
    assert np.array_equal(n_part[~span], n_full[~span])
    s = np.isin(part.tr_call, np.flatnonzero(span))
    assert rep(part.tr_src[s]).all()
    # the receiver is the real one's representative: dst moved back by its replica index
    recv_rank = g.part_rank[part.tr_dstp[s]]
    d = part.tr_dst[s] // stride % D
    assert np.array_equal(recv_rank, part.tr_dst[s] - d * stride)
    # a representative's part of a call sends and receives as many transfers as in the whole run
    for lst in ("send", "recv"):
        a = np.diff(getattr(full, f"{lst}_ptr"))
        b = np.diff(getattr(part, f"{lst}_ptr"))
        r = rep(f.part_rank)
        assert np.array_equal(a[r], b[r])
        assert (b[~r & span[f.part_call]] == 0).all()
    # each kept transfer waits for as many as before, and is released that many times
    assert np.array_equal(np.bincount(part.dep_list, minlength=part.tr_call.size), part.tr_wait - 2)
    # per quotient row: the real receiving NIC, and the original row the representative receives
    (qt, real_dnic, recv_row), = q.tables
    tab = f.shapes
    row_shape = np.repeat(np.arange(qt.ab.size), np.diff(qt.tr_ptr))
    receiver = qt.rank[qt.dpos + qt.pos_ptr[row_shape]]
    assert np.array_equal(tab.dst[recv_row], receiver)
    on_nic = qt.dnic >= 0
    assert np.array_equal((real_dnic - qt.dnic)[on_nic],
                          (qt.dst // stride % D * (stride // lay.gpus_per_node)
                           * lay.nics_per_node)[on_nic])
    assert np.array_equal(tab.bytes[recv_row], qt.bytes) and np.array_equal(tab.step[recv_row], qt.step)
    # only the representatives run a program, the whole run's
    W = lay.world_size
    own = np.diff(g.prog_ptr)
    assert (own[~rep(np.arange(W))] == 0).all()
    for r in np.flatnonzero(rep(np.arange(W))):
        a = slice(f.prog_ptr[r], f.prog_ptr[r + 1])
        b = slice(g.prog_ptr[r], g.prog_ptr[r + 1])
        assert np.array_equal(f.ins_kind[a], g.ins_kind[b]) and np.array_equal(f.ins_a[a], g.ins_a[b])


@pytest.mark.parametrize("name, queued, reason", [
    ("dante", False, "a replica is not whole nodes"),
    ("llama2-7b-a100-ib", False, "positions send different numbers of transfers"),
    ("gpt2-all-cross", True, "the fabric is queued"),
    ("llama3-70b-64k-cp4", False, "dp is 1"),
])
def test_quotient_is_refused_with_the_reason(name, queued, reason):
    # dante: tp 4 on 8-GPU nodes, two replicas share a node (a data-parallel ring crosses a node
    # boundary for one neighbour and not the other); llama2-7b-a100-ib: the optimizer's 4-byte
    # AllReduce over all 32 ranks leaves most ring positions without an element
    plan, f = _flat(name)
    q, why = quotient_flats([f], plan.layout, fabric_queued=queued, workload=False)
    assert q is None and reason in why
