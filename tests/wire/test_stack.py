"""The wire contexts' one table (tokenpcap.wire.stack) against the spec's own words.

Cases C1-C4 (IBTA vol.1 7.8.1, RoCEv2 Annex A17.4.1.3) list the masked bytes by position; the
masks here are derived from the header declarations, so this checks the declarations' flags."""
from __future__ import annotations

import numpy as np
import pytest

from tokenpcap.errors import EncodeError
from tokenpcap.wire import headers as H
from tokenpcap.wire import rdma
from tokenpcap.wire.stack import STACKS, stack


def ones(size: int, spans) -> np.ndarray:  # type: ignore[no-untyped-def]
    out = np.zeros(size, np.uint8)
    for start, length, value in spans:
        out[start:start + length] = value
    return out


def test_rocev2_ipv4_masks_tos_ttl_checksums_and_bth_byte_4():
    # C1: IPv4 TOS (byte 1), TTL (8), header checksum (10-11); UDP checksum (20+6..7); BTH byte 4.
    expected = ones(40, [(1, 1, 0xFF), (8, 1, 0xFF), (10, 2, 0xFF), (26, 2, 0xFF), (32, 1, 0xFF)])
    for name in ("rocev2-ipv4", "rocev2-ipv4-vlan"):
        assert np.array_equal(STACKS[name].icrc_mask(), expected)
        assert STACKS[name].icrc_prefix == b"\xff" * 8
    assert STACKS["rocev2-ipv4"].icrc_start == 14 and STACKS["rocev2-ipv4-vlan"].icrc_start == 18


def test_ipv6_and_grh_mask_traffic_class_flow_label_hop_limit():
    # C2: the first 4 bits are the version (kept), then 8 bits TC + 20 bits flow label; hop limit.
    v6 = ones(40, [(0, 1, 0x0F), (1, 3, 0xFF), (7, 1, 0xFF)])
    assert np.array_equal(STACKS["rocev2-ipv6"].icrc_mask(),
                          np.concatenate([v6, ones(8, [(6, 2, 0xFF)]), ones(12, [(4, 1, 0xFF)])]))
    assert np.array_equal(STACKS["rocev1"].icrc_mask(),
                          np.concatenate([v6, ones(12, [(4, 1, 0xFF)])]))


def test_native_ib_local_masks_the_vl_and_global_the_whole_lrh():
    # C4: LNH=2 masks only the VL nibble of the LRH; with a GRH the whole LRH plus the GRH fields.
    bth = ones(12, [(4, 1, 0xFF)])
    assert np.array_equal(STACKS["ib-local"].icrc_mask(),
                          np.concatenate([ones(8, [(0, 1, 0xF0)]), bth]))
    assert np.array_equal(STACKS["ib-global"].icrc_mask(), np.concatenate(
        [np.full(8, 0xFF, np.uint8), ones(40, [(0, 1, 0x0F), (1, 3, 0xFF), (7, 1, 0xFF)]), bth]))
    assert STACKS["ib-local"].icrc_prefix == b"" and STACKS["ib-global"].trailer == (H.ICRC, H.VCRC)


@pytest.mark.parametrize("kw,before,first_frame", [
    ({}, 42, 4170), ({"vlan": True}, 46, 4174), ({"ip_version": 6}, 62, 4190),
    ({"transport": "infiniband"}, 8, 4138), ({"transport": "infiniband", "grh": True}, 48, 4178),
])
def test_header_bytes_and_frame_lengths_follow_the_stack(kw, before, first_frame):
    # C5: an IPv4 WRITE FIRST of 4096 bytes is a 4170-byte frame (RETH 16, ICRC 4); IB adds VCRC 2.
    st = stack(**kw)
    assert st.before_bth_bytes == before
    assert st.offset(H.BTH) == before
    assert int(rdma.frame_bytes(rdma.WRITE_FIRST, 4096, **kw)) == first_frame


def test_unknown_contexts_and_headers_are_refused():
    with pytest.raises(EncodeError, match="ip_version: got 5"):
        stack(ip_version=5)
    with pytest.raises(EncodeError, match="transport: got 'tcp'"):
        stack("tcp")
    with pytest.raises(EncodeError, match="no GRH header"):
        STACKS["rocev2-ipv4"].offset(H.GRH)
