"""The running aggregates of inspect (:mod:`tokenpcap.analysis.batch`): which writes are
tallied as control-sized WRITE ONLY packets and which as data messages ending with immediate."""
from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.analysis.trace import packets, write_trace
from tokenpcap.analysis.batch import SMALL_WRITE_BYTES
from tokenpcap.analysis.inspect import inspect_capture
from tokenpcap.records import CTS_BYTES
from tokenpcap.wire.rdma import WRITE_ONLY, WRITE_ONLY_IMM

_SIZES = st.one_of(st.just(CTS_BYTES), st.integers(1, SMALL_WRITE_BYTES + 64))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=st.lists(st.tuples(st.sampled_from([WRITE_ONLY, WRITE_ONLY_IMM]), _SIZES),
                       min_size=1, max_size=60),
       max_records=st.sampled_from([7, 1 << 20]))
def test_small_writes_are_write_only_without_immediate_whatever_the_size(
        tmp_path, writes, max_records):
    """WRITE ONLY packets with and without immediate, of random sizes (the CTS size often),
    spread over four flows: ``small_writes`` holds exactly the packets without immediate of at
    most ``SMALL_WRITE_BYTES``, by size, and ``imm_messages`` exactly those with immediate,
    however the capture is cut into batches. The packet table written is the oracle."""
    n = len(writes)
    p = packets(n, qps=4)
    op = np.array([w[0] for w in writes], np.uint8)
    size = np.array([w[1] for w in writes], np.int64)
    p["opcode"], p["payload_bytes"], p["reth_len"] = op, size, size
    p["payload_offset"], p["ack_req"] = 0, True
    p["psn"] = np.arange(n) // 4
    p["pad"] = (-size) & 3
    p["imm"] = np.where(op == WRITE_ONLY_IMM, 7, 0)
    path = tmp_path / f"w{max_records}.pcap"
    write_trace(path, n, pkts=p)
    rep = inspect_capture(path, max_records=max_records)
    got = Counter()
    for (_, _, _, s), c in rep.small_writes.items():
        got[s] += c
    want = Counter(int(s) for o, s in zip(op, size) if o == WRITE_ONLY and s <= SMALL_WRITE_BYTES)
    assert got == want
    assert sum(f["imm_messages"] for f in rep.flows) == int((op == WRITE_ONLY_IMM).sum())
    assert rep.roce["icrc_bad"] == 0 and rep.roce["psn_gaps"] == 0
