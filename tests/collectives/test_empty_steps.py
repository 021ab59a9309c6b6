"""A ring AllReduce's empty steps (``collectives.empty_ring_steps``) against NCCL's own rules.

The oracle is NCCL's source (NVIDIA/nccl 5067397c), restated here independently of the model:
``src/device/all_reduce.h`` ``runRing`` runs all ``2(N - 1)`` sending steps on every rank of a
channel with elements; ``prims_ll.h`` / ``prims_ll128.h`` clamp an empty step to 0 bytes and
still post it (``waitSend``), reading no line; ``prims_simple.h`` waits for the peer's step
counter on an empty slice; ``net.cc`` ``sendProxyProgress`` isends it with ``size`` 0 and
``net_ib/p2p.cc`` ``ncclIbMultiSend`` posts a WRITE with immediate with no scatter entry.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from tokenpcap.collectives.layout import RankLayout
from tokenpcap.collectives.traffic import CallShape
from tokenpcap.collectives.transfers import transfers


def _call(n: int, elems: int, e: int = 4, gpus_per_node: int = 1):
    lay = RankLayout(dp=n, tp=1, pp=1, gpus_per_node=gpus_per_node, nics_per_node=1)
    return CallShape("AllReduce", tuple(range(n)), elems * e, e), lay


def _sent_by(n: int, elems: int, p: int, k: int) -> bool:
    """The step ``k`` send of ring position ``p`` carries elements, in the model's chunks
    (even dealing: chunk ``c`` holds an element iff ``c < elems``) and ring order (reduce-scatter
    sends chunk ``p - k``, all-gather chunk ``p + 1 - (k - (n - 1))``)."""
    c = (p - k) % n if k < n - 1 else (p + 1 - (k - (n - 1))) % n
    return c < elems


@settings(max_examples=40, deadline=None)
@given(n=st.integers(2, 9), elems=st.integers(1, 12), proto=st.sampled_from(["LL", "LL128", "Simple"]))
def test_every_rank_sends_every_step_once_and_the_bytes_stay(n, elems, proto):
    call, lay = _call(n, elems)
    off = transfers(call, "ring", lay, 1, 1 << 20, proto, None, 8)
    on = transfers(call, "ring", lay, 1, 1 << 20, proto, None, 8, empty_steps=True)
    t = on.table
    # runRing: one send per (rank, step) of the 2(N-1) steps, every rank (ranks on own nodes)
    got = sorted(zip(t["src"].tolist(), t["step"].tolist()))
    if elems < n:
        assert got == sorted((p, k) for p in range(n) for k in range(2 * (n - 1)))
        zero = t["bytes"] == 0
        want_zero = np.array([not _sent_by(n, elems, p, k) for p, k in
                              zip(t["src"].tolist(), t["step"].tolist())])
        assert np.array_equal(zero, want_zero)
    else:                                          # every chunk holds data: nothing added
        assert len(on) == len(off)
    # 0-byte messages add messages, not bytes: the payload and wire bytes are the same
    assert int(t["bytes"].sum()) == int(off.table["bytes"].sum())
    assert np.array_equal(np.sort(t["bytes"][t["bytes"] > 0]), np.sort(off.table["bytes"]))


def _rows(t):
    return {(int(s), int(k)): i for i, (s, k) in enumerate(zip(t.table["src"], t.table["step"]))}


@settings(max_examples=30, deadline=None)
@given(n=st.integers(3, 9), elems=st.integers(1, 8))
def test_ll_empty_step_waits_for_what_the_last_data_step_waited_for(n, elems):
    """LL (``LLGenericOp``): an empty step reads no line, so it waits only for the rank's
    program order: the receive its last earlier step with elements waited for (that step's own
    dependency), nothing before the first such step."""
    call, lay = _call(n, min(elems, n - 1))
    t = transfers(call, "ring", lay, 1, 1 << 20, "LL", None, 0, empty_steps=True)
    at = _rows(t)
    for (p, k), i in at.items():
        if t.table["bytes"][i]:
            continue
        data_before = [kk for kk in range(k) if t.table["bytes"][at[p, kk]]]
        want = () if not data_before else t.deps[at[p, max(data_before)]]
        assert t.deps[i] == want, (p, k)


@settings(max_examples=30, deadline=None)
@given(half=st.integers(2, 5), elems=st.integers(1, 8))
def test_simple_empty_step_waits_for_its_predecessor(half, elems):
    """Simple (``genericOp`` -> ``waitPeer``): an empty slice waits for the peer's step counter:
    step ``k`` of position ``p`` after step ``k - 1`` of ``p - 1``, on NVLink too."""
    n = 2 * half
    call, lay = _call(n, min(elems, n - 1), gpus_per_node=2)
    t = transfers(call, "ring", lay, 1, 1 << 20, "Simple", None, 0, empty_steps=True)
    at = _rows(t)
    assert len(at) == 2 * n * (n - 1)                    # NVLink hops included under Simple
    for (p, k), i in at.items():
        if t.table["bytes"][i]:
            continue
        assert t.deps[i] == (() if k == 0 else (at[(p - 1) % n, k - 1],)), (p, k)


def test_ll_empty_steps_stay_off_nvlink():
    """LL and LL128 write nothing to an NVLink peer for an empty step: only network hops get
    one (two ranks per node: every other hop is NVLink)."""
    call, lay = _call(4, 1, gpus_per_node=2)
    t = transfers(call, "ring", lay, 1, 1 << 20, "LL", None, 0, empty_steps=True).table
    zero = t["bytes"] == 0
    assert zero.any() and t["nic"][zero].all()


def test_off_by_default_and_other_algorithms_untouched():
    call, lay = _call(8, 1)
    assert (transfers(call, "ring", lay, 1, 1 << 20, "LL").table["bytes"] > 0).all()
    tree = transfers(call, "tree", lay, 1, 1 << 20, "LL", empty_steps=True).table
    assert (tree["bytes"] > 0).all()


def test_only_channels_with_elements_run():
    """``runRing``'s loop runs only while ``elemOffset < channelCount``: a channel without
    elements sends nothing, empty steps included."""
    call, lay = _call(8, 1)
    t = transfers(call, "ring", lay, 4, 1 << 20, "LL", None, 0, empty_steps=True).table
    assert set(t["channel"].tolist()) == {0}
    assert len(t) == 2 * 8 * 7
