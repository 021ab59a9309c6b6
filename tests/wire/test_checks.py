"""The builder's compiled row check (``checks._rows_ok``, ``checks.row_ok`` per row) accepts
exactly the rows the numpy checks accept (``check_rows`` with a ``skip`` of zeros runs the
numpy checks alone): it may never let a bad row through, and a good batch must not need the
numpy pass (a PFC row it leaves to the numpy checks always; these batches have none)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.errors import EncodeError
from tokenpcap.wire import FrameBuilder
from tokenpcap.wire import checks

from .test_builder import CONTEXTS, make_ctx, make_packets

#: (field, values that break it) - one field of one row is set to one of them
BREAK = {"opcode": [0x1F, 0x7E], "payload_bytes": [5000, 8], "pad": [3], "psn": [1 << 24],
         "dest_qp": [1 << 24], "src_qp": [1 << 25], "ack_req": [2], "solicited": [5],
         "becn": [2], "ce": [1, 2], "nic": [-1, 10**6], "peer_nic": [10**6]}


def _numpy_ok(ctx, hb, p, caplen) -> bool:
    try:
        checks.check_rows(ctx, hb, p, caplen, 0, np.zeros(len(p), np.int64))
    except EncodeError:
        return False
    return True


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 40),
       which=st.integers(0, len(CONTEXTS) - 1), field=st.sampled_from(sorted(BREAK) + [None]),
       k=st.integers(0, 1), longer=st.booleans())
def test_the_compiled_check_agrees_with_the_numpy_checks(seed, n, which, field, k, longer):
    rng = np.random.default_rng(seed)
    ctx = make_ctx(rng, **CONTEXTS[which])
    p = make_packets(rng, n)
    b = FrameBuilder(ctx)
    caplen = np.minimum(b.frame_bytes(p), 74) + (1 if longer else 0)   # one byte too many
    if field is not None:
        vals = BREAK[field]
        p[field][int(rng.integers(0, n))] = vals[k % len(vals)]
    fast = checks._rows_ok(p, caplen, checks.row_tables(ctx, b.header_bytes_by_opcode))
    assert fast == _numpy_ok(ctx, b._hb, p, caplen)
    if not fast:                # the public check names the row the numpy checks name
        with pytest.raises(EncodeError):
            checks.check_rows(ctx, b._hb, p, caplen, 0, None)
