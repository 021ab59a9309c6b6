"""The compiled fold of a batch's RDMA rows (analysis/fold.py) against the numpy aggregation
(analysis/batch.py ``_summed``, the reference that test_inspect.py checks against scapy and
tshark): on random decoded batches (malformed rows, unsorted times and ties, records without a
time, flows beyond the table's limit, phase label codes, CRC verdicts or none) every per-flow
column, histogram, total and returned array is equal, batch after batch."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.analysis.batch import Acc, _folded, _summed
from tokenpcap.analysis.columns import Decoded
from tokenpcap.pcap.timestamps import NO_TIME

_OPS = st.sampled_from([0x00, 0x01, 0x02, 0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x10, 0x11,
                        0x12, 0x64, 0x81, 0xFF])
ROW = st.tuples(st.integers(0, 7), _OPS, st.booleans(), st.integers(-1, 400),
                st.integers(60, 4200), st.integers(0, 3), st.integers(0, 6),
                st.integers(0, 1), st.integers(0, 1),
                st.one_of(st.integers(0, 50), st.just(NO_TIME)),
                st.integers(0, 0xFFFF), st.integers(-1, 1), st.integers(-1, 1), st.integers(-1, 2))


def _batch(rows):
    d = Decoded.zeros(len(rows))
    for k, name in enumerate(("fid", "opcode", "malformed", "payload", "orig_len", "ecn", "ipver",
                              "fecn", "becn", "time_ns", "sport")):
        if name != "fid":
            d[name][:] = [r[k] for r in rows]
    d["payload"][d["malformed"]] = -1
    fid = np.array([r[0] for r in rows], np.int64)
    icrc = np.array([r[11] for r in rows], np.int8)
    vcrc = np.array([r[12] for r in rows], np.int8)
    codes = np.array([r[13] for r in rows], np.int64)
    return d, fid, icrc, vcrc, codes


@settings(max_examples=120, deadline=None)
@given(batches=st.lists(st.lists(ROW, min_size=1, max_size=60), min_size=1, max_size=4),
       tracked=st.integers(1, 8), crc=st.booleans())
def test_compiled_fold_equals_numpy_sums(batches, tracked, crc):
    accs = [Acc(crc), Acc(crc)]
    for acc in accs:
        acc.grow(8)
    for rows in batches:
        d, fid, icrc, vcrc, codes = _batch(rows)
        fid = np.minimum(fid, tracked)           # ids from ``tracked`` on: the "other" flow
        got = []
        for acc, sums in zip(accs, (_summed, _folded)):
            got.append(sums(acc, d, fid, tracked, icrc if crc else None, vcrc if crc else None,
                            codes, 4))
        for a, b in zip(*got):
            assert np.array_equal(np.asarray(a, np.int64), np.asarray(b, np.int64)), (a, b)
    for k in accs[0].f:
        assert np.array_equal(accs[0].f[k], accs[1].f[k]), k
    assert accs[0].n == accs[1].n
    assert np.array_equal(accs[0].opcodes, accs[1].opcodes)
    assert np.array_equal(accs[0].ecn, accs[1].ecn)


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(st.tuples(st.one_of(st.integers(0, 2**62), st.just(NO_TIME)),
                               st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
                               st.sampled_from([1, 197, 247, 105])), min_size=1, max_size=50))
def test_compiled_record_totals_equal_numpy_totals(rows):
    """The capinfos-like sums of a record batch (lengths up to 2**32 - 1, Ethernet and other
    link types, records without a time) are the same by the compiled pass and by numpy."""
    from tokenpcap.analysis.inspect import _totals, _totals_compiled
    from tokenpcap.pcap.capture import RECORD_DTYPE
    rec = np.zeros(len(rows), RECORD_DTYPE)
    for k, name in enumerate(("time_ns", "orig_len", "caplen", "linktype")):
        rec[name] = [r[k] for r in rows]
    assert _totals(rec) == _totals_compiled(rec)
