"""ECMP hashes against independent sources: HPCC ns-3's ``SwitchNode::EcmpHash`` transcribed
line by line from ``switch-node.cc`` (an oracle over the byte buffer, as the C++ reads it), and
``zlib.crc32``; the choice is deterministic for a seed, spreads with the seed and is uniform
over many flows within a binomial bound."""
from __future__ import annotations

import math
import struct
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.schedule.engine.ecmp import (ECMP_DEST_QP, ECMP_FIVE_TUPLE, ECMP_HASHES,
                                            ECMP_MODES, ECMP_SPRAY, HASH_CRC32, HASH_HPCC,
                                            crc32_five_tuple, crc32_qpn, ecmp_index,
                                            hpcc_ecmp_hash, hpcc_node_ip)

M = 0xFFFFFFFF
u32 = st.integers(0, M)
u16 = st.integers(0, 0xFFFF)


def ns3_ecmp_hash(key: bytes, seed: int) -> int:
    """``uint32_t SwitchNode::EcmpHash(const uint8_t* key, size_t len, uint32_t seed)`` of
    HPCC ns-3 ``switch-node.cc``, statement by statement (uint32_t wrap-around as ``& M``)."""
    length = len(key)
    h = seed & M
    pos = 0
    if length > 3:
        i = length >> 2
        while True:
            k = struct.unpack_from("<I", key, pos)[0]        # *key_x4++ on a little-endian host
            pos += 4
            k = (k * 0xcc9e2d51) & M
            k = ((k << 15) | (k >> 17)) & M
            k = (k * 0x1b873593) & M
            h ^= k
            h = ((h << 13) | (h >> 19)) & M
            h = (h + (h << 2) + 0xe6546b64) & M
            i -= 1
            if not i:
                break
    if length & 3:
        i = length & 3
        k = 0
        j = pos + i - 1                                      # key = &key[i - 1]
        while True:
            k = (k << 8) & M
            k |= key[j]
            j -= 1
            i -= 1
            if not i:
                break
        k = (k * 0xcc9e2d51) & M
        k = ((k << 15) | (k >> 17)) & M
        k = (k * 0x1b873593) & M
        h ^= k
    h ^= length
    h ^= h >> 16
    h = (h * 0x85ebca6b) & M
    h ^= h >> 13
    h = (h * 0xc2b2ae35) & M
    h ^= h >> 16
    return h


def ns3_get_out_dev_buffer(sip: int, dip: int, sport: int, dport: int) -> bytes:
    """``GetOutDev``'s union: u32[0] = sip, u32[1] = dip, u32[2] = sport | dport << 16."""
    return struct.pack("<III", sip, dip, sport | (dport << 16))


def test_the_oracle_is_murmur3_x86_32():
    """The transcription is MurmurHash3_x86_32 (Appleby's SMHasher reference values)."""
    assert ns3_ecmp_hash(b"", 0) == 0
    assert ns3_ecmp_hash(b"", 1) == 0x514E28B7
    assert ns3_ecmp_hash(b"\xff\xff\xff\xff", 0) == 0x76293B50
    assert ns3_ecmp_hash(b"\x21\x43\x65\x87", 0) == 0xF55B516B
    assert ns3_ecmp_hash(b"\x21\x43\x65", 0) == 0x7E4A8634
    assert ns3_ecmp_hash(b"Hello, world!", 0x9747B28C) == 0x24884CBA


@settings(max_examples=300, deadline=None)
@given(sip=u32, dip=u32, sport=u16, dport=u16, seed=u32)
def test_hpcc_hash_is_ns3s(sip, dip, sport, dport, seed):  # type: ignore[no-untyped-def]
    want = ns3_ecmp_hash(ns3_get_out_dev_buffer(sip, dip, sport, dport), seed)
    assert hpcc_ecmp_hash(sip, dip, sport, dport, seed) == want


def test_hpcc_hash_of_ns3_addresses_and_len_12():
    # third.cc node_id_to_ip: host 0 is 11.0.0.1, host 257 is 11.1.1.1
    assert hpcc_node_ip(0) == 0x0B000001 and hpcc_node_ip(257) == 0x0B010101
    sip, dip = int(hpcc_node_ip(3)), int(hpcc_node_ip(17))
    key = ns3_get_out_dev_buffer(sip, dip, 10000, 100)
    assert len(key) == 12
    assert hpcc_ecmp_hash(sip, dip, 10000, 100, 40) == ns3_ecmp_hash(key, 40)
    # the length goes into the hash: 12 bytes differ from the same words hashed as 13
    assert ns3_ecmp_hash(key, 40) != ns3_ecmp_hash(key + b"\0", 40)


@settings(max_examples=300, deadline=None)
@given(sip=u32, dip=u32, sport=u16, dport=u16, seed=u32)
def test_crc32_five_tuple_is_zlibs(sip, dip, sport, dport, seed):  # type: ignore[no-untyped-def]
    data = struct.pack(">IIHHB", sip, dip, sport, dport, 17)
    assert len(data) == 13
    assert crc32_five_tuple(sip, dip, sport, dport, seed) == zlib.crc32(data, seed)


@settings(max_examples=200, deadline=None)
@given(qpn=st.integers(0, 0xFFFFFF), seed=u32)
def test_dest_qp_hash_is_the_crc_of_the_three_qpn_bytes(qpn, seed):  # type: ignore[no-untyped-def]
    assert crc32_qpn(qpn, seed) == zlib.crc32(qpn.to_bytes(3, "big"), seed)
    n = 7
    assert ecmp_index(ECMP_DEST_QP, HASH_HPCC, 1, 2, 3, 4, qpn, 9, seed, n) == \
        zlib.crc32(qpn.to_bytes(3, "big"), seed) % n


def test_codes_and_names():
    assert ECMP_MODES == {"five-tuple": 0, "dest-qp": 1, "spray": 2}
    assert ECMP_HASHES == {"crc32": 0, "hpcc-murmur3": 1}
    assert (ECMP_FIVE_TUPLE, ECMP_DEST_QP, ECMP_SPRAY, HASH_CRC32, HASH_HPCC) == (0, 1, 2, 0, 1)


@settings(max_examples=200, deadline=None)
@given(sip=u32, dip=u32, sport=u16, dport=u16, seed=u32, n=st.integers(1, 64),
       pkt=st.integers(0, 1 << 20))
def test_five_tuple_is_the_hash_mod_n_and_ignores_the_packet(sip, dip, sport, dport, seed, n,
                                                             pkt):  # type: ignore[no-untyped-def]
    five = ecmp_index(ECMP_FIVE_TUPLE, HASH_CRC32, sip, dip, sport, dport, 5, pkt, seed, n)
    assert five == zlib.crc32(struct.pack(">IIHHB", sip, dip, sport, dport, 17), seed) % n
    assert five == ecmp_index(ECMP_FIVE_TUPLE, HASH_CRC32, sip, dip, sport, dport, 6, 0, seed, n)
    h = ecmp_index(ECMP_FIVE_TUPLE, HASH_HPCC, sip, dip, sport, dport, 5, pkt, seed, n)
    assert h == ns3_ecmp_hash(ns3_get_out_dev_buffer(sip, dip, sport, dport), seed) % n
    for mode in (ECMP_FIVE_TUPLE, ECMP_DEST_QP, ECMP_SPRAY):   # deterministic for a seed
        a = ecmp_index(mode, HASH_CRC32, sip, dip, sport, dport, 5, pkt, seed, n)
        assert a == ecmp_index(mode, HASH_CRC32, sip, dip, sport, dport, 5, pkt, seed, n)
        assert 0 <= a < n


def _binomial_ok(counts: np.ndarray, trials: int, n: int, z: float = 5.0) -> bool:
    p = 1.0 / n
    sd = math.sqrt(trials * p * (1 - p))
    return bool((np.abs(counts - trials * p) <= z * sd).all())


@pytest.mark.parametrize("func", [HASH_CRC32, HASH_HPCC])
@pytest.mark.parametrize("n", [2, 3, 8, 16])
def test_flows_spread_uniformly_within_a_binomial_bound(func: int, n: int):
    """RoCEv2 flows of one NIC pair differ only in the UDP source port (0xC000-0xFFFF)."""
    flows = 8192
    counts = np.zeros(n, np.int64)
    for sport in range(0xC000, 0xC000 + flows):
        counts[ecmp_index(ECMP_FIVE_TUPLE, func, 0xC6120001, 0xC6120101, sport, 4791, 0, 0,
                          12345, n)] += 1
    assert _binomial_ok(counts, flows, n), counts
    qp = np.zeros(n, np.int64)
    for q in range(2, 2 + flows):
        qp[ecmp_index(ECMP_DEST_QP, func, 1, 2, 3, 4791, q * 4099 % (1 << 24), 0, 99, n)] += 1
    assert _binomial_ok(qp, flows, n), qp
    spray = np.zeros(n, np.int64)
    for pkt in range(flows):
        spray[ecmp_index(ECMP_SPRAY, func, 1, 2, 0xC001, 4791, 0, pkt, 7, n)] += 1
    assert _binomial_ok(spray, flows, n), spray


def test_different_seeds_spread_one_flow_over_the_candidates():
    """One flow at many switches (seeds): the choices cover every candidate evenly."""
    n, seeds = 8, 4096
    for func in (HASH_CRC32, HASH_HPCC):
        counts = np.bincount([ecmp_index(ECMP_FIVE_TUPLE, func, 0x0B000001, 0x0B000101, 10000,
                                         100, 0, 0, s, n) for s in range(seeds)], minlength=n)
        assert _binomial_ok(counts, seeds, n), counts
