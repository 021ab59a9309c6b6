"""Tests of tokenpcap.lower: C5 segmentation and PSNs, C6 wrap, QPNs/ports/AETH against the spec and
the scapy vectors, Hypothesis invariants over random workloads, and TShark as an independent decoder."""
from __future__ import annotations

import io
import json
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import CASES, needs_tshark, tshark_path
from tokenpcap.errors import InputError
from tokenpcap.lower import AETH_ACK_SYNDROME, Lowering, initial_psn, lower_messages, qpn, wire_context
from tokenpcap.records import KIND_CTS, MESSAGE_DTYPE, VERB_SEND, VERB_WRITE, VERB_WRITE_IMM
from tokenpcap.config.profiles import ClusterProfile, GenerationConfig, GpuProfile, NetworkProfile
from tokenpcap.wire import rdma
from tokenpcap.wire.builder import FrameBuilder

WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM = range(0x06, 0x0C)
SEND_FIRST, SEND_MIDDLE, SEND_LAST = 0x00, 0x01, 0x02
ACK = 0x11


def cluster(nics=4, pmtu=4096, link=400.0, ip_version=4, transport="rocev2"):
    return ClusterProfile(name="t", nodes=1, gpus_per_node=nics, nics_per_node=nics, link_gbps=link,
                          nvlink_gbps=3600, gpu=GpuProfile("H100", 989), pmtu_bytes=pmtu, transport=transport,
                          network=NetworkProfile(ip_version=ip_version))


def messages(*specs):
    """specs: (src, dst, qp, size, start[, verb[, imm]])"""
    rows = np.zeros(len(specs), MESSAGE_DTYPE)
    for i, s in enumerate(specs):
        rows[i]["src_nic"], rows[i]["dst_nic"], rows[i]["qp"], rows[i]["size_bytes"], rows[i]["start_ns"] = s[:5]
        rows[i]["verb"] = s[5] if len(s) > 5 else VERB_WRITE
        rows[i]["imm"] = s[6] if len(s) > 6 else 0
    return rows


def lowered(rows, gen=None, seed=0, cl=None, lowering=None):
    it = lower_messages(rows, cl or cluster(), gen or GenerationConfig(clear_to_send=False), seed)
    if lowering is not None:
        it._lower = lowering
    chunks = list(it)
    return np.concatenate(chunks), it.messages


class FixedPsn(Lowering):
    """Lowering whose every QP starts at a given PSN (to put a message at the 24-bit wrap)."""

    def __init__(self, first_psn, **kw):
        super().__init__(cluster(), **kw)
        self.first_psn = first_psn

    def __call__(self, tx, msgs):
        import tokenpcap.lower as lower_mod
        saved = lower_mod.initial_psn
        lower_mod.initial_psn = lambda seed, src, dst, qp, role=0: np.full(np.shape(src), self.first_psn, np.uint32)
        try:
            return super().__call__(tx, msgs)
        finally:
            lower_mod.initial_psn = saved


# -- C5 -----------------------------------------------------------------------------------------

def test_c5_write_10000_at_4096_and_next_message():
    pk, _ = lowered(messages((0, 1, 0, 10000, 0), (0, 1, 0, 8192, 0)))
    data = pk[pk["opcode"] != ACK]
    assert data["opcode"].tolist() == [WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_FIRST, WRITE_LAST]
    assert data["payload_bytes"].tolist() == [4096, 4096, 1808, 4096, 4096]
    assert data["payload_offset"].tolist() == [0, 4096, 8192, 0, 4096]
    assert data["frame_bytes"].tolist() == [4170, 4154, 1866, 4170, 4154]   # LAST has no RETH
    assert data["reth_len"].tolist() == [10000, 0, 0, 8192, 0]          # RETH only on FIRST
    assert data["ack_req"].tolist() == [0, 0, 1, 0, 1]
    p = int(data["psn"][0])
    assert data["psn"].tolist() == [(p + i) & 0xFFFFFF for i in range(5)]  # next message at p + 3
    assert p == int(initial_psn(0, 0, 1, 0)[()])


def test_c5_pad_only_and_128_packets():
    pk, _ = lowered(messages((0, 1, 0, 1025, 0)), cl=cluster(pmtu=1024))
    d = pk[pk["opcode"] != ACK]
    assert d["opcode"].tolist() == [WRITE_FIRST, WRITE_LAST]
    assert d["payload_bytes"].tolist() == [1024, 1]
    assert d["pad"].tolist() == [0, 3]
    pk, _ = lowered(messages((0, 1, 0, 512 * 1024, 0), (0, 2, 0, 4096, 0), (0, 3, 0, 0, 0)))
    d = pk[pk["opcode"] != ACK]
    assert (d["msg"] == 0).sum() == 128
    assert d["opcode"][d["msg"] == 1].tolist() == [WRITE_ONLY]
    assert d["opcode"][d["msg"] == 2].tolist() == [WRITE_ONLY]
    assert d["payload_bytes"][d["msg"] == 2].tolist() == [0]


def test_write_imm_and_send_opcodes():
    pk, _ = lowered(messages((0, 1, 0, 9000, 0, VERB_WRITE_IMM, 0xABCD), (0, 2, 0, 100, 0, VERB_WRITE_IMM, 7),
                             (0, 3, 0, 9000, 0, VERB_SEND)))
    d = pk[pk["opcode"] != ACK]
    assert d["opcode"][d["msg"] == 0].tolist() == [WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST_IMM]
    assert d["imm"][d["msg"] == 0].tolist() == [0, 0, 0xABCD]              # ImmDt only on the last
    assert d["opcode"][d["msg"] == 1].tolist() == [WRITE_ONLY_IMM]
    assert d["imm"][d["msg"] == 1].tolist() == [7] and d["reth_len"][d["msg"] == 1].tolist() == [100]
    assert d["opcode"][d["msg"] == 2].tolist() == [SEND_FIRST, SEND_MIDDLE, SEND_LAST]
    assert d["reth_len"][d["msg"] == 2].tolist() == [0, 0, 0]               # SEND has no RETH


# -- C6 -----------------------------------------------------------------------------------------

def test_c6_psn_wrap():
    pk, _ = lowered(messages((0, 1, 0, 10000, 0), (0, 1, 0, 100, 0)), lowering=FixedPsn(0xFFFFFE))
    d = pk[pk["opcode"] != ACK]
    assert d["psn"].tolist() == [0xFFFFFE, 0xFFFFFF, 0x000000, 0x000001]
    acks = pk[pk["opcode"] == ACK]
    assert acks["psn"].tolist() == [0x000000, 0x000001]                    # they acknowledge the LASTs
    assert (pk["psn"] <= 0xFFFFFF).all()


# -- ACK, QPNs, ports ---------------------------------------------------------------------------

def test_ack_aeth_matches_scapy_vector_and_msn_counts_messages():
    vec = {v["name"]: v for v in json.loads((CASES / "scapy-roce-vectors.json").read_text())["vectors"]}
    raw = bytes.fromhex(vec["rc_ack_psn_000000"]["hex"])
    aeth_vector = int.from_bytes(raw[14 + 20 + 8 + 12: 14 + 20 + 8 + 12 + 4], "big")   # after Eth/IP/UDP/BTH
    assert aeth_vector >> 24 == AETH_ACK_SYNDROME and aeth_vector & 0xFFFFFF == 1
    pk, _ = lowered(messages((0, 1, 0, 5000, 0), (0, 1, 0, 10, 0), (0, 1, 0, 10, 0)))
    acks = pk[pk["opcode"] == ACK]
    assert acks["aeth"].tolist() == [aeth_vector, (0x1F << 24) | 2, (0x1F << 24) | 3]
    assert (acks["payload_bytes"] == 0).all() and (acks["ack_req"] == 0).all()
    assert (acks["nic"] == 1).all() and (acks["peer_nic"] == 0).all()


def test_ack_every_n_packets_msn_before_and_after():
    gen = GenerationConfig(clear_to_send=False, ack_every_packets=2)
    pk, _ = lowered(messages((0, 1, 0, 5 * 4096, 0)), gen)
    d = pk[pk["opcode"] != ACK]
    assert d["ack_req"].tolist() == [0, 1, 0, 1, 1]
    acks = pk[pk["opcode"] == ACK]
    assert (acks["psn"].astype(np.int64) - int(d["psn"][0])).tolist() == [1, 3, 4]
    assert (acks["aeth"] & 0xFFFFFF).tolist() == [0, 0, 1]                 # MSN: completed messages


def test_qpns_ports_and_directions():
    gen = GenerationConfig(clear_to_send=True)
    pk, msgs = lowered(messages((0, 1, 0, 10000, 0), (1, 0, 0, 10000, 0), (0, 1, 1, 10, 0), (2, 1, 0, 10, 0)), gen)
    assert (pk["src_qp"] >= 2).all() and (pk["dest_qp"] >= 2).all() and (pk["dest_qp"] < 1 << 24).all()
    assert ((pk["udp_sport"] >= 0xC000) & (pk["udp_sport"] <= 0xFFFF)).all()
    # connection (0 -> 1, channel 0) owns one QP pair: 0's sender QP and 1's receiver QP. Its data,
    # its CTS (msg 4, the reverse way on 1's QP) and the ACKs of both use those two QPNs only
    s01, r10 = int(qpn(0, 0, 1, 0, 0)[()]), int(qpn(0, 1, 0, 0, 1)[()])
    s10, r01 = int(qpn(0, 1, 0, 0, 0)[()]), int(qpn(0, 0, 1, 0, 1)[()])
    assert len({s01, r10, s10, r01}) == 4
    for ids, (a, b) in (([0, 4], (s01, r10)), ([1, 5], (s10, r01))):
        conn = pk[np.isin(pk["msg"], ids)]
        assert set(map(tuple, conn[["src_qp", "dest_qp"]].tolist())) == {(a, b), (b, a)}
        assert len(set(conn["udp_sport"].tolist())) == 1
        assert int(conn["udp_sport"][0]) == int(rdma.rocev2_udp_sport(a, b)[()])
    cts_pk = pk[(pk["msg"] == 4) & (pk["opcode"] != ACK)]
    assert cts_pk["src_qp"].tolist() == [r10] and cts_pk["dest_qp"].tolist() == [s01]
    # the receiver's QPN is the sender rule's number plus half the space (2**23 - 1), mod 2**24 - 2
    assert (r10 - 2 - (int(qpn(0, 1, 0, 0)[()]) - 2)) % ((1 << 24) - 2) == (1 << 23) - 1
    # CTS writes go from receiver to sender before the data; data ends in WRITE with immediate
    cts = msgs[msgs["kind"] == KIND_CTS]
    assert cts["src_nic"].tolist() == [1, 0, 1, 1] and cts["size_bytes"].tolist() == [64] * 4
    first_data = pk[(pk["msg"] == 0) & (pk["opcode"] != ACK)]["time_ns"].min()
    assert pk[(pk["msg"] == 4) & (pk["opcode"] != ACK)]["time_ns"].max() < first_data
    assert pk[(pk["msg"] == 0) & (pk["opcode"] != ACK)]["opcode"].tolist()[-1] == WRITE_LAST_IMM
    # QPNs on one NIC are distinct for distinct (peer, channel); the seed changes them
    q = qpn(5, np.zeros(1200, np.int64), np.repeat(np.arange(1, 301), 4), np.tile([0, 1, 0, 1], 300),
            np.tile([0, 0, 1, 1], 300))
    assert len(set(q.tolist())) == 1200 and (q >= 2).all()
    assert not np.array_equal(qpn(5, 0, 1, 0), qpn(6, 0, 1, 0))


def test_same_seed_same_packets_other_seed_other_numbers():
    rows = messages((0, 1, 0, 20000, 0), (2, 3, 1, 5000, 100), (1, 2, 0, 3000, 50))
    a, _ = lowered(rows, seed=3)
    b, _ = lowered(rows, seed=3)
    c, _ = lowered(rows, seed=4)
    assert a.tobytes() == b.tobytes()
    assert not np.array_equal(a["psn"], c["psn"]) and np.array_equal(a["time_ns"], c["time_ns"])


def test_bad_qp_and_bad_messages():
    with pytest.raises(InputError, match="qp"):
        lowered(messages((0, 1, 256, 10, 0)))
    with pytest.raises(InputError, match="dst_nic"):
        lowered(messages((0, 0, 0, 10, 0)))
    with pytest.raises(InputError, match="src_nic"):
        lowered(messages((9, 0, 0, 10, 0)))


def test_nic_limit_of_the_qpn_rule():
    # 256 connection indices per peer and two roles in 2**24 - 2 QPNs: at most 32767 NICs
    def cl(nodes):
        return ClusterProfile(name="t", nodes=nodes, gpus_per_node=1, nics_per_node=1, link_gbps=400.0,
                              nvlink_gbps=3600, gpu=GpuProfile("H100", 989), pmtu_bytes=4096)
    Lowering(cl(32767))
    with pytest.raises(InputError, match="32767"):
        Lowering(cl(32768))


# -- the QP model: one RC QP pair per connection (NCCL net_ib) ----------------------------------

def _connection(pk, msgs):
    """(data sender, data receiver, connection index) of every packet: a data packet's own, a CTS
    packet's (it runs the other way), an ACK's: the connection of the message it acknowledges."""
    m = msgs[pk["msg"]]
    cts = m["kind"] == KIND_CTS
    snd = np.where(cts, m["dst_nic"], m["src_nic"]).astype(np.int64)
    rcv = np.where(cts, m["src_nic"], m["dst_nic"]).astype(np.int64)
    return snd, rcv, m["qp"].astype(np.int64)


def _one_connection_per_qp_direction(pk, msgs):
    """Every QP direction (sending NIC, source QPN) and (receiving NIC, DestQP) carries packets of
    one connection only."""
    conn = np.stack(_connection(pk, msgs), axis=1)
    for a, b in (("nic", "src_qp"), ("peer_nic", "dest_qp")):
        owner: dict[tuple[int, int], tuple] = {}
        for key, c in zip(zip(pk[a].tolist(), pk[b].tolist()), map(tuple, conn.tolist())):
            assert owner.setdefault(key, c) == c, (a, b, key, owner[key], c)


def _contiguous_psns(pk):
    """Requests (not ACKs) of each QP direction, in transmit order, step by +1 modulo 2**24."""
    req = pk[pk["opcode"] != ACK]
    key = req["nic"].astype(np.int64) << 32 | req["src_qp"]
    gaps = 0
    for k in np.unique(key):
        p = req["psn"][key == k].astype(np.int64)
        gaps += int((np.diff(p) % (1 << 24) != 1).sum())
    return gaps


def test_cts_travels_on_the_receivers_qp_of_its_connection_and_phases_stay_contiguous():
    # phase 0 sends 0 -> 1, phase 1 sends 1 -> 0, on the same connection index, interleaved in
    # time; phase 2 shares the connection of phase 0 afterwards. With CTS on, restricting the
    # packets to one phase (its data and its CTS) leaves every QP direction's PSNs contiguous.
    specs = [(0, 1, 0, 9000, 0), (1, 0, 0, 5000, 100), (0, 1, 0, 3000, 2000), (1, 0, 0, 9000, 2500),
             (0, 2, 1, 100, 0), (2, 0, 1, 4096, 50)]
    rows = messages(*specs)
    rows["phase"] = [0, 1, 0, 1, 0, 1]
    tail = messages((0, 1, 0, 7000, 40000))
    tail["phase"] = 2
    rows = np.concatenate([rows, tail])
    pk, msgs = lowered(rows, GenerationConfig(clear_to_send=True, ack_every_packets=2), seed=7, cl=cluster(pmtu=1024))
    _one_connection_per_qp_direction(pk, msgs)
    phase = msgs["phase"][pk["msg"]]
    for ph in (0, 1):
        assert _contiguous_psns(pk[phase == ph]) == 0, ph
    assert _contiguous_psns(pk) == 0
    # MSN of an ACK counts the requests of the acknowledging QP's peer stream: CTS writes and data
    # are separate streams (1-based message numbers on each)
    acks = pk[pk["opcode"] == ACK]
    cts_of = msgs["peer_msg"]
    for mid, want in ((0, 1), (2, 2), (int(cts_of[0]), 1), (int(cts_of[2]), 2), (6, 3)):
        a = acks[acks["msg"] == mid]
        assert (int(a["aeth"][-1]) & 0xFFFFFF) == want, mid


def test_dante_pp_forward_capture_has_contiguous_psns():
    # A capture of pp/forward only (its data and its CTS writes) has no PSN gap: each CTS travels
    # on the receiver's QP of its own data's connection, not on the QP of pp/backward data
    # (which would leave gaps in this selection).
    from pathlib import Path

    from tokenpcap.records import DIMS, PHASES
    from tokenpcap.plan.build import build_plan
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.schedule.runner import Schedule

    s = load_scenario(Path(__file__).resolve().parent.parent / "profiles" / "scenarios" / "dante.yaml")
    sched = Schedule(build_plan(s))
    low = Lowering(s.cluster, s.generation.seed, s.generation.ack_every_packets)
    pk = np.concatenate([low(tx, sched.messages) for tx in sched.run()])
    msgs = sched.messages
    _one_connection_per_qp_direction(pk, msgs)
    m = msgs[pk["msg"]]
    fwd = pk[(m["dim"] == DIMS.index("pp")) & (m["phase"] == PHASES.index("forward"))]
    bwd = pk[(m["dim"] == DIMS.index("pp")) & (m["phase"] == PHASES.index("backward"))]
    assert (fwd["opcode"] == WRITE_ONLY).sum() > 0 and bwd.size > 0      # CTS writes are in the capture
    assert _contiguous_psns(fwd) == 0 and _contiguous_psns(bwd) == 0 and _contiguous_psns(pk) == 0


# -- invariants ---------------------------------------------------------------------------------

spec = st.tuples(st.integers(0, 3), st.integers(1, 3), st.integers(0, 2), st.integers(0, 30000),
                 st.integers(0, 20000), st.sampled_from([VERB_WRITE, VERB_WRITE_IMM, VERB_SEND]))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(spec, min_size=1, max_size=12), cts=st.booleans(), every=st.integers(0, 3),
       pmtu=st.sampled_from([256, 1024, 4096]), seed=st.integers(0, 2**32))
def test_invariants(specs, cts, every, pmtu, seed):
    specs = [(s, (s + d) % 4, q, size, t, v) for s, d, q, size, t, v in specs]
    gen = GenerationConfig(clear_to_send=cts, ack_every_packets=every)
    pk, msgs = lowered(messages(*specs), gen, seed, cl=cluster(pmtu=pmtu))
    data = pk[pk["opcode"] != ACK]
    # per QP (sender NIC, its QPN) PSNs step by one modulo 2**24 in transmit order
    for key in set(zip(data["nic"].tolist(), data["src_qp"].tolist())):
        sel = data[(data["nic"] == key[0]) & (data["src_qp"] == key[1])]
        assert (np.diff(sel["psn"].astype(np.int64)) % (1 << 24) == 1).all()
    # payload per message sums to its size, offsets tile the message, RETH length = size
    for m in msgs:
        sel = data[data["msg"] == m["msg_id"]]
        assert int(sel["payload_bytes"].sum()) == int(m["size_bytes"])
        assert np.array_equal(sel["payload_offset"], np.arange(sel.size) * pmtu)
        assert (sel["reth_len"][rdma.HAS_RETH[sel["opcode"]]] == m["size_bytes"]).all()
        assert (sel["time_ns"] >= m["start_ns"]).all()
    assert ((data["payload_bytes"].astype(np.int64) + data["pad"]) % 4 == 0).all()
    # every ACK answers a packet with AckReq of the same QP, from the other side
    want = set(zip(data["msg"][data["ack_req"] == 1].tolist(), data["psn"][data["ack_req"] == 1].tolist()))
    acks = pk[pk["opcode"] == ACK]
    assert set(zip(acks["msg"].tolist(), acks["psn"].tolist())) == want and len(acks) == len(want)
    # frame lengths agree with the wire builder's
    ctx = wire_context(cluster(pmtu=pmtu))
    assert np.array_equal(FrameBuilder(ctx).frame_bytes(pk), pk["frame_bytes"].astype(np.int64))


# -- TShark as the decoder ----------------------------------------------------------------------

def _pcap(frames, times):
    import dpkt
    buf = io.BytesIO()
    w = dpkt.pcap.Writer(buf, snaplen=262144, nano=True)
    for f, t in zip(frames, times):
        w.writepkt(f, ts=t / 1e9)
    return buf.getvalue()


@needs_tshark
@pytest.mark.tshark
def test_tshark_decodes_lowered_fields(tmp_path):
    gen = GenerationConfig(clear_to_send=True, ack_every_packets=3)
    pk, _ = lowered(messages((0, 1, 0, 9000, 0), (1, 2, 1, 100, 0), (0, 1, 0, 5000, 10), (2, 0, 0, 12000, 0)),
                    gen, seed=11, cl=cluster(pmtu=1024))
    frames = FrameBuilder(wire_context(cluster(pmtu=1024))).frames(pk)
    path = tmp_path / "l.pcap"
    path.write_bytes(_pcap(frames, pk["time_ns"].tolist()))
    fields = ["infiniband.bth.opcode", "infiniband.bth.psn", "infiniband.bth.destqp", "infiniband.bth.a",
              "infiniband.reth.dmalen", "infiniband.aeth.msn", "udp.srcport", "infiniband.bth.padcnt",
              "infiniband.reth.va", "infiniband.reth.r_key", "infiniband.aeth.syndrome", "_ws.expert"]
    cmd = [tshark_path(), "-r", str(path), "--disable-heuristic", "rpcrdma_infiniband", "-T", "fields",
           "-E", "separator=,", "-E", "occurrence=f"] + [a for f in fields for a in ("-e", f)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()
    assert len(out) == pk.size
    for row, line in zip(pk, out):
        op, psn, dqp, ackreq, dmalen, msn, sport, pad, va, rkey, syndrome, expert = line.split(",")
        assert int(op) == row["opcode"] and int(psn) == row["psn"] and int(dqp, 0) == row["dest_qp"]
        assert int(sport) == row["udp_sport"] and int(pad) == row["pad"] and expert == ""
        assert (ackreq in ("1", "True")) == bool(row["ack_req"])
        if rdma.HAS_RETH[row["opcode"]]:
            assert (int(dmalen), int(va, 0), int(rkey, 0)) == (row["reth_len"], row["reth_va"], row["reth_rkey"])
        if row["opcode"] == ACK:
            assert (int(syndrome, 0), int(msn)) == (row["aeth"] >> 24, row["aeth"] & 0xFFFFFF)


@pytest.mark.parametrize("transport,ip_version,vlan,grh", [
    ("rocev2", 6, None, False), ("rocev2", 4, 100, False), ("infiniband", 4, None, False),
    ("infiniband", 4, None, True)])
def test_engine_frame_lengths_equal_the_builders(transport, ip_version, vlan, grh):
    cl = ClusterProfile(name="t", nodes=2, gpus_per_node=2, nics_per_node=2, link_gbps=100.0, nvlink_gbps=900,
                        gpu=GpuProfile("H100", 989), pmtu_bytes=1024, transport=transport,
                        network=NetworkProfile(ip_version=ip_version, vlan_id=vlan))
    rows = messages((0, 1, 0, 5000, 0, VERB_WRITE_IMM, 9), (2, 3, 1, 3, 0, VERB_SEND), (3, 0, 0, 0, 0))
    it = lower_messages(rows, cl, GenerationConfig(clear_to_send=True, ack_every_packets=2), ib_grh=grh)
    pk = np.concatenate(list(it))
    ctx = wire_context(cl, ib_grh=grh)
    assert np.array_equal(FrameBuilder(ctx).frame_bytes(pk), pk["frame_bytes"].astype(np.int64))
    assert len(FrameBuilder(ctx).frames(pk)) == pk.size


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.integers(0, 2**40), max_size=60), dense=st.booleans())
def test_distinct_ids_is_numpys_unique(ids, dense):
    """``distinct_ids`` (a table over the span for dense ids, a sort otherwise) against
    ``np.unique``, the oracle: the same sorted values and an inverse that rebuilds the ids."""
    from tokenpcap.lower import distinct_ids

    a = np.asarray(ids, np.int64)
    if dense:
        a = a % 97 + 1000
    u, inv = distinct_ids(a)
    want_u, want_inv = np.unique(a, return_inverse=True)
    assert u.tolist() == want_u.tolist() and inv.tolist() == want_inv.reshape(-1).tolist()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(specs=st.lists(spec, min_size=1, max_size=8), seed=st.integers(0, 2**32),
       cut=st.integers(0, 2**16))
def test_rdma_rows_of_a_subset_equal_the_whole_chunks_rows(specs, seed, cut):
    """Rows lowered from the distinct messages of a part of a chunk (as generate passes them)
    are the rows of the whole chunk's lowering at the same places: what a row says depends on
    its message and itself, never on which other rows share the chunk."""
    from tokenpcap.lower import distinct_ids

    specs = [(s, (s + d) % 4, q, size, t, v) for s, d, q, size, t, v in specs]
    ml = lower_messages(messages(*specs), cluster(), GenerationConfig(), seed)
    tx = np.concatenate(list(ml.engine.run()))
    low = Lowering(cluster(), seed)
    whole = low(tx, ml.messages)
    keep = (np.arange(tx.size) * 2654435761 + cut) % 3 != 0          # an arbitrary subset
    u, inv = distinct_ids(tx["msg"][keep])
    part = low.rdma_rows(tx[keep], ml.messages[u], inv)
    assert part.tobytes() == whole[keep].tobytes()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**63 - 1), chunks=st.lists(st.integers(1, 40), min_size=1, max_size=6),
       kept=st.sampled_from([4, 64, 1 << 20]))
def test_per_qp_values_kept_across_chunks_equal_the_qpn_rule(monkeypatch, seed, chunks, kept):
    """The QP values a Lowering keeps from chunk to chunk are those of the seeded rule
    (tokenpcap.wire.qpn, and Linux's UDP source port of the two QPNs) for every QP of every
    chunk, whether the QP was met before, is new, or the kept QPs were dropped (a small
    ``_KEPT_QPS``)."""
    import tokenpcap.lower as L
    from tokenpcap.wire.qpn import _rkey_va
    monkeypatch.setattr(L, "_KEPT_QPS", kept)
    low = Lowering(cluster(nics=8), seed=seed)
    rng = np.random.default_rng(seed % 2**32)
    for n in chunks:            # n distinct QPs (src, dst, connection, role) of 8 * 8 * 4 * 2
        key = rng.choice(8 * 8 * 4 * 2, n, replace=False)
        cs, cd, cq, cr = key // 64, key // 8 % 8, key // 2 % 4, key % 2
        got = low._qp_values(cs, cd, cq, cr)
        qs, qd = qpn(seed, cs, cd, cq, cr), qpn(seed, cd, cs, cq, 1 - cr)
        want = [qs, qd, rdma.rocev2_udp_sport(qs, qd), initial_psn(seed, cs, cd, cq, cr),
                *_rkey_va(seed, cs, cd, cq, cr)]
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and np.array_equal(g, w)
