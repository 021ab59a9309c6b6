"""802.1Qbb PFC frames a batch at a time (tokenpcap.wire.pfc) and as PACKET_DTYPE rows of the
frame builder: the scalar reference build_pfc_frame (itself checked against scapy's vectors in
test_frame.py), scapy's MACControlClassBasedFlowControl as an independent builder, and a
Hypothesis round trip through the decoders."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.config.addresses import switch_port_macs
from tokenpcap.errors import DecodeError, EncodeError
from tokenpcap.records import OPCODE_PFC, PACKET_DTYPE
from tokenpcap.wire import FrameBuilder, WireContext, build_pfc_frame, rdma
from tokenpcap.wire.decode import decode_frame
from tokenpcap.wire.pfc import PFC_FRAME_BYTES, build_pfc_frames, decode_pfc_frames, pause_times

from .test_tshark import context, packets

macs = st.lists(st.integers(0, 255), min_size=6, max_size=6)
frames_st = st.lists(st.tuples(macs, st.integers(0, 255), st.lists(st.integers(0, 0xFFFF), min_size=8,
                                                                    max_size=8)), min_size=1, max_size=20)


@settings(max_examples=60, deadline=None)
@given(frames_st)
def test_decode_of_build_is_the_fields_and_equals_the_scalar_reference(rows):
    mac = np.array([r[0] for r in rows], np.uint8)
    cev = np.array([r[1] for r in rows])
    q = np.array([r[2] for r in rows])
    built = build_pfc_frames(mac, cev, q)
    assert built.shape == (len(rows), PFC_FRAME_BYTES)
    d = decode_pfc_frames(built)
    assert (d.src_mac == mac).all() and (d.class_enable == cev).all() and (d.pause_quanta == q).all()
    for r, f in zip(rows, built):
        assert f.tobytes() == build_pfc_frame(bytes(r[0]), r[1], r[2])
        dec = decode_frame(f.tobytes())
        assert dec["PFC"]["ClassEnableVector"] == r[1]
        assert [dec["PFC"][f"Time{p}"] for p in range(8)] == r[2]
        assert dec.payload_offset == -1 and dec.icrc is None          # no BTH, no ICRC


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 255), st.integers(0, 0xFFFF)), min_size=1, max_size=30))
def test_one_time_for_every_enabled_priority(rows):
    cev = np.array([r[0] for r in rows])
    q = np.array([r[1] for r in rows])
    t = pause_times(cev, q)
    for (v, quanta), times in zip(rows, t.tolist()):
        assert times == [quanta if v >> p & 1 else 0 for p in range(8)]


def test_scapy_builds_the_same_bytes():
    mc = pytest.importorskip("scapy.contrib.mac_control")
    from scapy.layers.l2 import Ether

    rng = np.random.default_rng(7)
    ports = rng.integers(0, 1 << 32, 50)
    mac = switch_port_macs(ports)
    cev = rng.integers(0, 256, 50)
    q = rng.integers(0, 1 << 16, (50, 8))
    q[:5] = 0                                                          # XON frames
    ours = build_pfc_frames(mac, cev, q)
    for i in range(50):
        kw = {f"c{p}_enabled": int(cev[i]) >> p & 1 for p in range(8)}
        kw.update({f"c{p}_pause_time": int(q[i, p]) for p in range(8)})
        src = ":".join(f"{b:02x}" for b in mac[i])
        theirs = bytes(Ether(dst="01:80:c2:00:00:01", src=src) / mc.MACControlClassBasedFlowControl(**kw))
        theirs += b"\0" * (PFC_FRAME_BYTES - len(theirs))
        assert ours[i].tobytes() == theirs
        back = Ether(ours[i].tobytes())[mc.MACControlClassBasedFlowControl]
        assert [back.getfieldval(f"c{p}_pause_time") for p in range(8)] == q[i].tolist()


def test_bad_fields_name_the_row():
    mac = np.zeros((2, 6), np.uint8)
    with pytest.raises(EncodeError, match=r"pfc\[1\] PFC.ClassEnableVector: got 256"):
        build_pfc_frames(mac, [1, 256], [0, 0])
    with pytest.raises(EncodeError, match=r"pfc\[0\] PFC.Time: got 65536"):
        build_pfc_frames(mac, [1, 1], [65536, 0])
    with pytest.raises(EncodeError, match="src_mac"):
        build_pfc_frames(np.zeros((2, 5), np.uint8), [1, 1], [0, 0])
    f = build_pfc_frames(mac, [1, 1], [0, 0])
    f[1, 14] = 0x00                                                   # opcode 0x0001: PAUSE
    with pytest.raises(DecodeError, match="pfc frame 1: PFC.Opcode: got 0x1, expected 0x101"):
        decode_pfc_frames(f)


def pfc_rows(rng: np.random.Generator, n: int, n_nics: int) -> np.ndarray:
    p = np.zeros(n, PACKET_DTYPE)
    p["opcode"] = OPCODE_PFC
    p["nic"] = -1 - rng.integers(0, 1000, n)
    p["peer_nic"] = rng.integers(0, n_nics, n)
    p["msg"] = np.where(rng.random(n) < 0.3, 0, rng.integers(1, 1 << 16, n))
    p["imm"] = rng.integers(0, 256, n)
    p["frame_bytes"] = PFC_FRAME_BYTES
    return p


@pytest.mark.parametrize("kind", ["ipv4", "ipv6", "vlan"])
@pytest.mark.parametrize("snaplen", [None, 64, 40, 7])
def test_builder_puts_pfc_rows_among_roce_rows(kind, snaplen):
    rng = np.random.default_rng(len(kind) + (snaplen or 0))
    base = context(kind, rng)
    ctx = WireContext(**{k: getattr(base, k) for k in ("mac", "ipv4", "ipv6", "lid", "payload_seed",
                                                       "vlan_id", "pcp", "ip_version")},
                      switch_port_macs=switch_port_macs)
    roce = packets(rng, 300)
    pfc = pfc_rows(rng, 60, ctx.n_nics)
    mixed = np.concatenate([roce, pfc])[rng.permutation(360)]
    b = FrameBuilder(ctx)
    fb = b.frame_bytes(mixed)
    is_pfc = mixed["opcode"] == OPCODE_PFC
    assert (fb[is_pfc] == 60).all()
    assert (fb[~is_pfc] == FrameBuilder(ctx).frame_bytes(mixed[~is_pfc])).all()
    got = b.frames(mixed, snaplen)
    alone = iter(FrameBuilder(ctx).frames(mixed[~is_pfc], snaplen))
    for r, f in zip(mixed, got):
        if r["opcode"] == OPCODE_PFC:
            q = int(r["msg"])
            ref = build_pfc_frame(bytes(switch_port_macs([-1 - int(r["nic"])])[0]), int(r["imm"]),
                                  [q if int(r["imm"]) >> p & 1 else 0 for p in range(8)])
            assert f == ref[:snaplen]                                 # never tagged, 60 bytes
        else:
            assert f == next(alone)                                   # RoCE frames unchanged
    at, hole = b.payload_holes(mixed, np.minimum(fb, snaplen or 1 << 20))
    assert (hole[is_pfc] == 0).all()


def test_builder_refuses_pfc_rows_it_cannot_build():
    rng = np.random.default_rng(3)
    p = pfc_rows(rng, 4, 6)
    with pytest.raises(EncodeError, match="switch_port_macs is None"):
        FrameBuilder(context("ipv4", rng)).frames(p)
    ib = WireContext(transport="infiniband", lid=np.arange(1, 7, dtype=np.uint16),
                     switch_port_macs=switch_port_macs)
    with pytest.raises(EncodeError, match="InfiniBand has credit-based link flow control"):
        FrameBuilder(ib).frames(p)
    ctx = WireContext(mac=np.zeros((6, 6), np.uint8), ipv4=np.zeros((6, 4), np.uint8),
                      switch_port_macs=switch_port_macs)
    bad = p.copy()
    bad["msg"][2] = 1 << 16
    with pytest.raises(EncodeError, match=r"packets\[2\].msg: got 65536, expected 0..65535"):
        FrameBuilder(ctx).frames(bad)
    bad = p.copy()
    bad["nic"][1] = 0
    with pytest.raises(EncodeError, match=r"packets\[1\].nic: got 0, expected -1 - P"):
        FrameBuilder(ctx).frames(bad)
    bad = p.copy()
    bad["opcode"][0] = 0xFE
    with pytest.raises(EncodeError, match=r"packets\[0\].opcode: got 254"):
        FrameBuilder(ctx).frames(bad)
    assert rdma.EXT_BYTES[OPCODE_PFC] < 0                    # never a BTH opcode we generate
