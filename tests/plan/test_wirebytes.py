"""The plan's bytes on the wire of a call, computed once per canonical group and moved to the
call (:mod:`tokenpcap.plan.wirebytes`), against the sums over the call's own transfers
(:func:`tokenpcap.collectives.transfers.transfers` of its group, not moved): per rank on the
NICs and on NVLink, per rank and local NIC, and the NIC messages' sizes; on layouts where the
local-index shift applies and where it must not (``tests/schedule/test_flatbuild.py``'s groups)."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.schedule.test_flatbuild import layouts_and_groups
from tokenpcap.collectives.algorithms import selectable_algorithms
from tokenpcap.collectives.hops import group_positions
from tokenpcap.collectives.layout import RankLayout
from tokenpcap.collectives.p2p_chunks import P2pNet
from tokenpcap.collectives.traffic import CallShape, effective_algorithm
from tokenpcap.collectives.transfers import P2P_ALGORITHMS, transfers
from tokenpcap.plan.wirebytes import p2p_wire_bytes, protocol_wire_bytes


def _sums(table, group, npn):
    """(NIC bytes, NVLink bytes, bytes by local NIC, NIC message sizes) of a transfer table."""
    src = group_positions(group, table["src"])
    n, nic, b = len(group), table["nic"], table["bytes"].astype(np.int64)
    by_nic = np.zeros((n, npn), np.int64)
    np.add.at(by_nic, (src[nic], table["src_nic"][nic].astype(np.int64) % npn), b[nic])
    sizes, counts = np.unique(b[nic], return_counts=True)
    return (np.bincount(src[nic], b[nic], minlength=n),
            np.bincount(src[~nic], b[~nic], minlength=n),
            by_nic, tuple(zip(sizes.tolist(), counts.tolist())))


def _assert_equal(w, want):
    assert np.array_equal(w.nic_bytes, want[0])
    assert np.array_equal(w.nvlink_bytes, want[1])
    assert np.array_equal(w.by_nic, want[2])
    assert w.nic_message_sizes == want[3]


@settings(max_examples=100, deadline=None)
@given(layouts_and_groups(), st.sampled_from(selectable_algorithms()), st.integers(1, 4),
       st.sampled_from(["Simple", "LL", "LL128"]), st.booleans())
def test_wire_bytes_of_a_call_are_its_own_transfers_sums(lg, alg, chunks, protocol, p2p):
    gpn, npn, nodes, coll, group = lg
    lay = RankLayout(dp=gpn * nodes, tp=1, pp=1, gpus_per_node=gpn, nics_per_node=npn)
    e = 2
    call = CallShape(coll, group, chunks * 3 * len(group) * e + e * (chunks % 2), e)
    net = P2pNet() if p2p else None
    own = transfers(call, alg, lay, 3, 5 * e, protocol, net, cached=False).table
    _assert_equal(protocol_wire_bytes(call, alg, lay, 3, 5 * e, protocol, net),
                  _sums(own, group, npn))
    if net is not None and protocol == "Simple" and \
            effective_algorithm(coll, alg) in P2P_ALGORITHMS:
        _assert_equal(p2p_wire_bytes(call, alg, lay, 3, net), _sums(own, group, npn))
