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


@given(caplen=st.lists(st.integers(0, 9000), min_size=0, max_size=200),
       frame_bytes=st.integers(1, 40000))
def test_pieces_cut_the_rows_in_order_into_pieces_of_about_frame_bytes(caplen, frame_bytes):
    """The pieces are the rows 0..n-1 in order, none empty; a piece's bytes after its first row
    stay below ``frame_bytes`` (so a piece holds at most that much plus one frame)."""
    from tokenpcap.analysis.batch import pieces
    from tokenpcap.pcap.capture import RECORD_DTYPE
    rec = np.zeros(len(caplen), RECORD_DTYPE)
    rec["caplen"] = caplen
    got = pieces(rec, frame_bytes)
    assert [i for a, b in got for i in range(a, b)] == list(range(len(caplen)))
    assert all(b > a for a, b in got)
    assert all(sum(caplen[a + 1:b]) < frame_bytes for a, b in got)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 300), frame_bytes=st.sampled_from([1, 5000, 100_000, 1 << 26]),
       snaplen=st.sampled_from([74, 262144]))
def test_decode_and_crc_piece_by_piece_equal_the_whole_batch(tmp_path, n, frame_bytes, snaplen):
    """Decoding and checking the CRCs of a batch piece by piece, releasing each piece, gives the
    rows :func:`decode_batch` and :func:`check_crcs` give for the whole batch at once."""
    from tokenpcap.analysis import batch as batch_mod
    from tokenpcap.analysis.crc import check_crcs
    from tokenpcap.analysis.decode import decode_batch
    from tokenpcap.pcap.reader import open_capture
    path = tmp_path / f"d{n}_{snaplen}.pcap"
    write_trace(path, n, snaplen=snaplen)
    cap = open_capture(path)
    rec = cap.read()
    whole = decode_batch(cap.data, rec, cap.views)
    want = check_crcs(cap.data, rec["offset"], whole)
    real = batch_mod.pieces
    try:
        batch_mod.pieces = lambda r: real(r, frame_bytes)
        dec = batch_mod._decoded(cap, rec)
        got = batch_mod._crcs(cap, rec, dec)
    finally:
        batch_mod.pieces = real
    assert (dec.to_records() == whole.to_records()).all()
    assert all((g == w).all() for g, w in zip(got, want))
    assert snaplen < 262144 or (got[0] == 1).all()
