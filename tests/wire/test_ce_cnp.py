"""CE-marked data frames and CNPs on the wire, against oracles that share no code with the
builders: scapy (test-only) parses every field and computes the ICRC and IPv4 checksum; the
plain-Python RFC 1071 checksum and zlib ICRC of ``tests/analysis/test_readdress_patch.py``
(themselves held against the scapy vectors there); the scapy-built CNP vector of
``tests/cases``; TShark (skipped with its reason when absent) decodes the frames without a
malformed packet and verifies the IPv4 checksum.

Facts checked: a switch's CE mark changes exactly the two ECN bits and, over IPv4, the header
checksum (RFC 3168 5, RFC 1624), never the ICRC (it masks TOS/traffic class: IBTA 7.8.1,
A17.4.1.3; case C1 of tests/cases); a CNP is opcode 0x81, BECN set (BTH byte 4 = 0x40), PSN 0,
DestQP = the reaction point's QPN, 16 zero bytes, a correct ICRC, DSCP/PCP as configured, 74
bytes over IPv4 (IBTA A17.9.3).
"""
from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.analysis.test_readdress_patch import icrc, ipv4_checksum, l3_offset
from tests.conftest import needs_tshark
from tokenpcap.errors import EncodeError
from tokenpcap.records import PACKET_DTYPE
from tokenpcap.wire import FrameBuilder, WireContext, build_frame, rdma
from tokenpcap.wire.cnp import cnp_frame_bytes, cnp_packets
from tokenpcap.wire.decode import decode_frame

from .cases import B_TO_A, QPN_A, QPN_B, SPORT, ctx4
from .test_tshark import N_NICS, context, packets, write_pcap

scapy_l2 = pytest.importorskip("scapy.layers.l2")
from scapy.contrib.roce import BTH, CNPPadding  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Dot1Q, Ether  # noqa: E402

#: opcodes of data and ACK frames (the ones a switch queue marks or forwards)
DATA_OPS = [op for op in sorted(rdma.OPCODES) if op < 0x20]


def _data(rng: np.random.Generator, n: int) -> np.ndarray:
    """Random RC rows of at least 8 payload bytes (frames above the 60-byte minimum, so the ICRC
    is the frame's last 4 bytes)."""
    p = packets(rng, n)
    p = p[np.isin(p["opcode"], DATA_OPS)]
    pay = np.where(rdma.HAS_PAYLOAD[p["opcode"]], np.maximum(p["payload_bytes"], 8), 0)
    p["payload_bytes"], p["pad"] = pay, (-pay) & 3
    return p


def _tc(pkt) -> int:
    return pkt[IP].tos if IP in pkt else pkt[IPv6].tc


@pytest.mark.parametrize("kind", ["ipv4", "ipv6", "vlan"])
def test_a_ce_mark_changes_the_ecn_bits_and_the_ipv4_checksum_only(kind):
    rng = np.random.default_rng(7 + len(kind))
    ctx = context(kind, rng)
    plain = _data(rng, 300)
    marked = plain.copy()
    marked["ce"] = 1
    fb = FrameBuilder(ctx)
    before, after = fb.frames(plain), fb.frames(marked)
    for r, b, a in zip(marked, before, after):
        assert a == build_frame(r, ctx)                       # the scalar reference agrees
        pa, pb = Ether(a), Ether(b)
        assert (_tc(pa) & 3, _tc(pb) & 3) == (3, ctx.ecn)     # CE; the NIC's ECT(0) before
        assert _tc(pa) >> 2 == _tc(pb) >> 2 == ctx.dscp       # DSCP untouched
        l3 = l3_offset(a)
        changed = {i for i in range(len(a)) if a[i] != b[i]}
        if IP in pa:
            assert changed <= {l3 + 1, l3 + 10, l3 + 11}
            assert struct.unpack(">H", a[l3 + 10:l3 + 12])[0] == ipv4_checksum(a[l3:l3 + 20])
            redo = pa[IP].copy()
            del redo.chksum
            assert IP(bytes(redo)).chksum == pa[IP].chksum    # scapy's checksum too
        else:
            assert changed == {l3 + 1}                        # TC's low nibble shares byte 1
            assert pa[UDP].chksum == pb[UDP].chksum           # TC is not in the pseudo-header
        assert a[-4:] == b[-4:] == icrc(a)                    # ICRC unchanged and correct
        assert BTH(bytes(pa[BTH])).icrc == pa[BTH].icrc
        if Dot1Q in pa:
            assert pa[Dot1Q].prio == ctx.pcp


def test_marks_in_a_mixed_batch_and_cut_frames_agree_with_the_scalar_builder():
    """Some rows marked, some not, in one batch; and with a snaplen of 64 (the headers-only
    path that stores words directly) the kept bytes are the full frames' first 64."""
    rng = np.random.default_rng(3)
    ctx = context("ipv4", rng)
    p = _data(rng, 400)
    p["ce"] = rng.integers(0, 2, p.size)
    fb = FrameBuilder(ctx)
    full = fb.frames(p)
    assert full == [build_frame(r, ctx) for r in p]
    assert fb.frames(p, snaplen=64) == [f[:64] for f in full]
    ecn = np.array([Ether(f)[IP].tos & 3 for f in full])
    assert ecn.tolist() == np.where(p["ce"] == 1, 3, ctx.ecn).tolist()


ROW = st.fixed_dictionaries({
    "opcode": st.sampled_from(DATA_OPS), "psn": st.integers(0, (1 << 24) - 1),
    "dest_qp": st.integers(2, (1 << 24) - 1), "src_qp": st.integers(2, (1 << 24) - 1),
    "udp_sport": st.integers(0xC000, 0xFFFF), "ip_id": st.integers(0, 0xFFFF),
    "payload_bytes": st.integers(8, 512), "ce": st.integers(0, 1),
    "nic": st.integers(0, 1)})


@settings(max_examples=60, deadline=None)
@given(rows=st.lists(ROW, min_size=1, max_size=12), v6=st.booleans(), ecn=st.sampled_from([1, 2]),
       addrs=st.lists(st.binary(min_size=16, max_size=16), min_size=2, max_size=2, unique=True),
       macs=st.lists(st.binary(min_size=6, max_size=6), min_size=2, max_size=2))
def test_any_marked_frame_round_trips_through_scapy_with_its_checksums(rows, v6, ecn, addrs,
                                                                       macs):
    """Random QPNs, PSNs, addresses, ECT codepoint and marks: scapy reads back every field, the
    ECN is CE exactly on the marked rows, the ICRC and IPv4 checksum equal the oracles'."""
    ipv6 = np.frombuffer(b"".join(addrs), np.uint8).reshape(2, 16).copy()
    ctx = WireContext(ip_version=6 if v6 else 4, ecn=ecn, ipv4=ipv6[:, :4].copy(), ipv6=ipv6,
                      mac=np.frombuffer(b"".join(macs), np.uint8).reshape(2, 6).copy())
    p = np.zeros(len(rows), PACKET_DTYPE)
    for i, r in enumerate(rows):
        for k, v in r.items():
            p[i][k] = v
    p["payload_bytes"] = np.where(rdma.HAS_PAYLOAD[p["opcode"]], p["payload_bytes"], 0)
    p["pad"] = (-p["payload_bytes"].astype(np.int64)) & 3
    p["peer_nic"] = 1 - p["nic"]
    for r, f in zip(p, FrameBuilder(ctx).frames(p)):
        pkt = Ether(f)
        bth = pkt[BTH]
        assert (bth.opcode, bth.psn, bth.dqpn) == (r["opcode"], r["psn"], r["dest_qp"])
        assert pkt[UDP].sport == r["udp_sport"] and pkt[UDP].dport == 4791
        assert _tc(pkt) & 3 == (3 if r["ce"] else ecn)
        assert f[-4:] == icrc(f)
        l3 = l3_offset(f)
        if not v6:
            assert pkt[IP].src == ".".join(map(str, ctx.ipv4[r["nic"]]))
            assert struct.unpack(">H", f[l3 + 10:l3 + 12])[0] == ipv4_checksum(f[l3:l3 + 20])


@pytest.mark.parametrize("ctx_kw,ce,match", [
    ({"transport": "infiniband", "lid": np.arange(1, 3, dtype=np.uint16)}, 1,
     r"packets\[0\]\.ce: got 1, expected 0 under transport 'infiniband'"),
    ({"ecn": 0}, 1, r"packets\[0\]\.ce: got 1, expected 0 for Not-ECT packets"),
    ({}, 2, r"packets\[0\]\.ce: got 2, expected 0 or 1"),
])
def test_a_mark_the_wire_cannot_carry_is_refused(ctx_kw, ce, match):
    kw = {"mac": np.zeros((2, 6), np.uint8), "ipv4": np.zeros((2, 4), np.uint8), **ctx_kw}
    ctx = WireContext(**kw)
    p = np.zeros(1, PACKET_DTYPE)
    p[0]["opcode"], p[0]["peer_nic"], p[0]["dest_qp"], p[0]["ce"] = rdma.ACKNOWLEDGE, 1, 5, ce
    with pytest.raises(EncodeError, match=match):
        FrameBuilder(ctx).frames(p)
    with pytest.raises(EncodeError, match=match.replace(r"packets\[0\]", r"packets\[\d+\]")):
        build_frame(p[0], ctx)


def _cnps(rng: np.random.Generator, n: int, ctx: WireContext, sport: int = 0) -> np.ndarray:
    nic = rng.integers(0, N_NICS, n)
    peer = (nic + rng.integers(1, N_NICS, n)) % N_NICS
    return cnp_packets(np.arange(n, dtype=np.int64) * 100, nic, peer,
                       rng.integers(2, 1 << 24, n), rng.integers(2, 1 << 24, n),
                       rng.integers(0, 1000, n), sport, cnp_frame_bytes(ctx.ip_version, ctx.vlan))


def test_cnp_packets_build_the_scapy_vector_byte_for_byte(scapy_vectors):
    """``cnp_b_to_a`` (scapy 2.8's RoCE layer): B answers A's QP with a CNP; our rows with its
    parameters (DestQP QPN A, UDP port 0xd7f8, IP ID 0x0102) build exactly its 74 bytes."""
    vec = {v["name"]: v for v in scapy_vectors["vectors"]}["cnp_b_to_a"]
    p = cnp_packets(np.zeros(1, np.int64), np.array([B_TO_A["nic"]]), np.array([B_TO_A["peer_nic"]]),
                    np.array([QPN_A]), np.array([QPN_B]), np.zeros(1, np.int64), SPORT, 74)
    p["ip_id"] = 0x0102
    frame = FrameBuilder(ctx4()).frames(p)[0]
    assert frame.hex() == vec["hex"] and len(frame) == vec["len"] == cnp_frame_bytes() == 74


@pytest.mark.parametrize("kind,length", [("ipv4", 74), ("ipv6", 94), ("vlan", 78)])
def test_every_cnp_field_as_rocev2_defines_it(kind, length):
    rng = np.random.default_rng(11 + len(kind))
    ctx = context(kind, rng)
    assert cnp_frame_bytes(ctx.ip_version, ctx.vlan) == length
    p = _cnps(rng, 200, ctx)
    frames = FrameBuilder(ctx).frames(p)
    for r, f in zip(p, frames):
        assert f == build_frame(r, ctx) and len(f) == length
        pkt = Ether(f)
        bth = pkt[BTH]
        assert (bth.opcode, bth.psn, bth.dqpn, bth.becn, bth.fecn, bth.ackreq, bth.pkey) == (
            0x81, 0, r["dest_qp"], 1, 0, 0, 0xFFFF)
        b = bytes(bth)
        assert b[4] == 0x40                                     # BECN alone in byte 4
        assert CNPPadding in pkt and b[12:28] == bytes(16)      # 16 reserved zero bytes
        assert f[-4:] == icrc(f) and bth.compute_icrc(None) == bth.icrc.to_bytes(4, "big")
        assert (pkt[UDP].sport, pkt[UDP].dport, pkt[UDP].len) == (0, 4791, 40)
        assert _tc(pkt) == (ctx.cnp_dscp << 2) | ctx.ecn == (48 << 2) | 2
        if IP in pkt:
            assert pkt[IP].len == 60 and pkt[IP].id == 0
            assert pkt[IP].chksum == ipv4_checksum(f[l3_offset(f):l3_offset(f) + 20])
        if Dot1Q in pkt:
            assert pkt[Dot1Q].prio == ctx.cnp_pcp == 6
        assert (pkt.src, pkt.dst) == (":".join(f"{x:02x}" for x in ctx.mac[r["nic"]]),
                                      ":".join(f"{x:02x}" for x in ctx.mac[r["peer_nic"]]))


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 10), data=st.data(), v6=st.booleans(),
       vlan=st.one_of(st.none(), st.integers(0, 4095)), dscp=st.integers(0, 63),
       pcp=st.integers(0, 7),
       # 0 (ConnectX) or NIC-style ephemeral ports: scapy, like TShark (C13), dissects UDP by
       # the lower port first and would parse e.g. port 137 as NetBIOS
       sport=st.one_of(st.just(0), st.integers(0xC000, 0xFFFF)),
       addrs=st.lists(st.binary(min_size=16, max_size=16), min_size=2, max_size=2, unique=True))
def test_any_cnp_round_trips_through_scapy_and_our_decoder(n, data, v6, vlan, dscp, pcp, sport,
                                                           addrs):
    """Random QPNs, addresses, DSCP/PCP, VLAN and UDP port: scapy and
    :func:`tokenpcap.wire.decode.decode_frame` read back DestQP, BECN, PSN 0, the 16 zero bytes
    and a verifying ICRC; the frame is ``cnp_frame_bytes`` long."""
    ipv6 = np.frombuffer(b"".join(addrs), np.uint8).reshape(2, 16).copy()
    ctx = WireContext(ip_version=6 if v6 else 4, vlan_id=vlan, cnp_dscp=dscp, cnp_pcp=pcp,
                      ipv4=ipv6[:, :4].copy(), ipv6=ipv6, mac=np.zeros((2, 6), np.uint8))
    qp = st.integers(2, (1 << 24) - 1)
    dq = np.array(data.draw(st.lists(qp, min_size=n, max_size=n)))
    sq = np.array(data.draw(st.lists(qp, min_size=n, max_size=n)))
    nic = np.array(data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)))
    p = cnp_packets(np.zeros(n, np.int64), nic, 1 - nic, dq, sq, np.zeros(n, np.int64), sport,
                    cnp_frame_bytes(ctx.ip_version, ctx.vlan))
    for r, f in zip(p, FrameBuilder(ctx).frames(p)):
        assert len(f) == cnp_frame_bytes(ctx.ip_version, ctx.vlan) == 74 + 20 * v6 + 4 * (vlan is not None)
        pkt = Ether(f)
        assert (pkt[BTH].dqpn, pkt[BTH].becn, pkt[BTH].psn, pkt[BTH].opcode) == (r["dest_qp"], 1, 0, 0x81)
        assert pkt[UDP].sport == sport and _tc(pkt) == (dscp << 2) | ctx.ecn
        assert f[-4:] == icrc(f)
        d = decode_frame(f)
        assert (d["BTH"]["OpCode"], d["BTH"]["DestQP"], d["BTH"]["BECN"], d["BTH"]["PSN"]) == (
            0x81, r["dest_qp"], 1, 0)
        assert "CNP" in d and d.icrc_ok and d.payload_bytes == 0
        if vlan is not None:
            assert pkt[Dot1Q].prio == pcp and pkt[Dot1Q].vlan == vlan


def test_cnp_rows_refuse_a_qpn_over_24_bits_and_a_bad_port():
    one = np.zeros(1, np.int64)
    with pytest.raises(EncodeError, match=r"dest_qp: got 16777216, expected 0..16777215"):
        cnp_packets(one, one, one + 1, np.array([1 << 24]), one + 2, one, 0, 74)
    with pytest.raises(EncodeError, match=r"udp_sport: got 65536"):
        cnp_packets(one, one, one + 1, one + 2, one + 2, one, 65536, 74)


@needs_tshark
def test_tshark_decodes_ce_frames_and_cnps_cleanly(tmp_path):
    """TShark 4.0 (C13: it shows opcode 0x81 as unknown, so the filter is the check): no
    malformed frame or expert warning, the IPv4 checksum of every marked frame verified, ECN 3
    on exactly the marked ones, one 0x81 per CNP."""
    from .test_tshark import assert_clean, tshark, tshark_fields

    rng = np.random.default_rng(5)
    ctx = context("vlan", rng)
    data = _data(rng, 200)
    data["ce"] = rng.integers(0, 2, data.size)
    cnp = _cnps(rng, 50, ctx)
    rows = np.concatenate([data, cnp])
    frames = FrameBuilder(ctx).frames(rows)
    path = tmp_path / "ce-cnp.pcap"
    write_pcap(path, frames, 1)
    assert_clean(path, len(frames))
    got = tshark_fields(path, ["ip.dsfield.ecn", "ip.checksum.status", "infiniband.bth.opcode",
                               "vlan.priority", "ip.dsfield.dscp"])
    want_ecn = np.where(rows["ce"] == 1, 3, ctx.ecn)
    assert [int(t["ip.dsfield.ecn"]) for t in got] == want_ecn.tolist()
    assert {t["ip.checksum.status"] for t in got} == {"1"}
    is_cnp = [int(t["infiniband.bth.opcode"], 0) == 0x81 for t in got]
    assert is_cnp == (rows["opcode"] == rdma.CNP).tolist()
    assert all((int(t["vlan.priority"]), int(t["ip.dsfield.dscp"])) == (6, 48)
               for t, c in zip(got, is_cnp) if c)
    n = tshark(path, "-Y", "infiniband.bth.opcode == 0x81", "-T", "fields", "-e", "frame.number")
    assert len(n.split()) == cnp.size
