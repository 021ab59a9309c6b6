"""tokenpcap.wire.qpn: the QPN rule as its docstring states it (a plain-integer transcription),
Linux's flow-label and UDP-source-port derivation for ``flow_udp_sport``, the same numbers
lowering writes into the frames, and ``tokenpcap.lower`` re-exporting the very functions."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tokenpcap.lower as lower
from tokenpcap.config.profiles import ClusterProfile, GenerationConfig, GpuProfile
from tokenpcap.records import KIND_CTS, MESSAGE_DTYPE, VERB_WRITE
from tokenpcap.wire import qpn as q

M64 = (1 << 64) - 1


def splitmix_chain(seed: int, salt: int, *keys: int) -> int:
    """SplitMix64 (Steele, Lea, Flood 2014): x = seed * golden + salt, then per key
    ``x ^= key; x += golden; finalize``, in plain Python integers."""
    x = (seed * 0x9E3779B97F4A7C15 + salt) & M64
    for k in keys:
        x = ((x ^ (k & M64)) + 0x9E3779B97F4A7C15) & M64
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
        x ^= x >> 31
    return x


def qpn_oracle(seed: int, nic: int, peer: int, c: int, role: int) -> int:
    """``2 + (base(seed, nic) + role * (2**23 - 1) + 256 * peer + c) mod (2**24 - 2)``."""
    space = (1 << 24) - 2
    base = splitmix_chain(seed, 1, nic) % space
    return 2 + (base + role * (space // 2) + 256 * peer + c) % space


def sport_oracle(a: int, b: int) -> int:
    """Linux ``rdma_calc_flow_label`` then ``rdma_flow_label_to_udp_sport`` (ib_verbs.h)."""
    v = (a * b) & M64
    v ^= v >> 20
    v ^= v >> 40
    fl = v & 0xFFFFF
    return 0xC000 | ((fl & 0x3FFF) ^ ((fl & 0xFC000) >> 14))


nics = st.integers(0, 32766)
conns = st.integers(0, q.QP_STRIDE - 1)
seeds = st.integers(0, (1 << 63) - 1)


@settings(max_examples=200, deadline=None)
@given(seed=seeds, nic=nics, peer=nics, c=conns, role=st.integers(0, 1))
def test_qpn_is_the_documented_rule(seed, nic, peer, c, role):  # type: ignore[no-untyped-def]
    got = int(q.qpn(seed, np.array([nic]), np.array([peer]), np.array([c]), np.array([role]))[0])
    assert got == qpn_oracle(seed, nic, peer, c, role) and 2 <= got < (1 << 24)


@settings(max_examples=200, deadline=None)
@given(seed=seeds, nic=nics, peer=nics, c=conns)
def test_flow_udp_sport_is_linuxs_port_of_the_pair(seed, nic, peer, c):  # type: ignore[no-untyped-def]
    a, b = qpn_oracle(seed, nic, peer, c, 0), qpn_oracle(seed, peer, nic, c, 1)
    got = q.flow_udp_sport(seed, np.array([nic]), np.array([peer]), np.array([c]))
    assert got.dtype == np.uint16 and int(got[0]) == sport_oracle(a, b)


def test_lower_reexports_the_same_functions():
    assert lower.qpn is q.qpn and lower.initial_psn is q.initial_psn
    assert lower.QP_STRIDE == q.QP_STRIDE == 256
    assert "qpn" in lower.__all__ and "initial_psn" in lower.__all__


def test_every_lowered_frame_carries_flow_udp_sport_of_its_connection():
    """Data, ACKs and clear-to-send writes (and theirs) of connection (S -> R, c) all carry
    ``flow_udp_sport(seed, S, R, c)``, as lowering computes it."""
    cl = ClusterProfile(name="t", nodes=1, gpus_per_node=4, nics_per_node=4, link_gbps=400.0,
                        nvlink_gbps=900.0, gpu=GpuProfile("g", 1.0))
    specs = [(0, 1, 0, 10_000), (1, 0, 0, 5_000), (2, 3, 5, 4_096), (3, 1, 2, 100)]
    rows = np.zeros(len(specs), MESSAGE_DTYPE)
    for i, (s, d, c, size) in enumerate(specs):
        rows[i]["src_nic"], rows[i]["dst_nic"], rows[i]["qp"] = s, d, c
        rows[i]["size_bytes"], rows[i]["start_ns"], rows[i]["verb"] = size, 1000 * i, VERB_WRITE
    seed = 12345
    it = lower.lower_messages(rows, cl, GenerationConfig(clear_to_send=True), seed)
    pk = np.concatenate(list(it))
    m = it.messages[pk["msg"]]
    cts = m["kind"] == KIND_CTS
    assert cts.any()
    sender = np.where(cts, m["dst_nic"], m["src_nic"]).astype(np.int64)     # the data's sender
    receiver = np.where(cts, m["src_nic"], m["dst_nic"]).astype(np.int64)
    want = q.flow_udp_sport(seed, sender, receiver, m["qp"].astype(np.int64))
    assert (pk["udp_sport"] == want).all()
