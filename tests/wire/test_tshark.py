"""TShark (4.0) as an independent decoder: every frame decodes cleanly and its fields equal ours.

Frames go into a minimal classic pcap written here with struct (linktype 1, Ethernet), and native
InfiniBand into ERF records of type 21 under linktype 197 (C13: TShark refuses linktype 247).
TShark runs with ``--disable-heuristic rpcrdma_infiniband`` (C13) and data QPs >= 2.
"""
from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import needs_tshark, tshark_path
from tokenpcap.records import PACKET_DTYPE
from tokenpcap.wire import FrameBuilder, WireContext, build_pfc_frame, rdma
from tokenpcap.wire import headers as H
from tokenpcap.wire.decode import decode_frame

from .cases import A_TO_B, ctx4, pattern, row

pytestmark = [needs_tshark, pytest.mark.tshark]

N_NICS = 6
TSHARK_ARGS = ["--disable-heuristic", "rpcrdma_infiniband", "-o", "ip.check_checksum:TRUE",
               "-o", "udp.check_checksum:TRUE"]


def write_pcap(path: Path, frames: list[bytes], linktype: int) -> None:
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 262144, linktype))
        for i, frame in enumerate(frames):
            f.write(struct.pack("<IIII", 1700000000, i, len(frame), len(frame)) + frame)


def erf_record(packet: bytes) -> bytes:
    """ERF header (timestamp, type 21 INFINIBAND, flags: varying length, rlen, lctr, wlen) + packet."""
    return struct.pack("<Q", 0) + struct.pack(">BBHHH", 21, 0x04, 16 + len(packet), 0, len(packet)) + packet


def tshark(path: Path, *args: str) -> str:
    res = subprocess.run([tshark_path(), "-r", str(path), *TSHARK_ARGS, *args],
                         capture_output=True, text=True, timeout=120, check=True)
    return res.stdout


def tshark_fields(path: Path, fields: list[str]) -> list[dict[str, str]]:
    out = tshark(path, "-T", "fields", "-E", "separator=\t", "-E", "occurrence=f",
                 *[a for f in fields for a in ("-e", f)])
    return [dict(zip(fields, line.split("\t"))) for line in out.splitlines()]


def assert_clean(path: Path, n: int) -> None:
    """No malformed packet, no expert error or warning."""
    expert = tshark(path, "-q", "-z", "expert")
    assert "Errors (" not in expert and "Warns (" not in expert, expert
    assert tshark(path, "-Y", "_ws.malformed || _ws.expert.severity >= warning").strip() == ""
    assert len(tshark(path, "-T", "fields", "-e", "frame.number").split()) == n


def context(kind: str, rng: np.random.Generator) -> WireContext:
    mac = rng.integers(0, 256, (N_NICS, 6), dtype=np.uint8)
    mac[:, 0] = 0x02                                            # locally administered unicast
    ipv4 = np.column_stack([np.full(N_NICS, 198), np.full(N_NICS, 18), np.zeros(N_NICS),
                            np.arange(1, N_NICS + 1)]).astype(np.uint8)      # RFC 2544 range
    ipv6 = np.zeros((N_NICS, 16), np.uint8)
    ipv6[:, 0], ipv6[:, 1], ipv6[:, 15] = 0xFD, 0x00, np.arange(1, N_NICS + 1)
    lid = np.arange(1, N_NICS + 1, dtype=np.uint16)
    kw = {"ipv4": {}, "ipv6": {"ip_version": 6}, "vlan": {"vlan_id": 42, "pcp": 3},
          "ib": {"transport": "infiniband"}, "ibgrh": {"transport": "infiniband", "ib_grh": True}}[kind]
    return WireContext(mac=mac, ipv4=ipv4, ipv6=ipv6, lid=lid, payload_seed=int(rng.integers(1 << 20)), **kw)


RC_OPS = [op for op in sorted(rdma.OPCODES) if op < 0x20] + [rdma.CNP]


def packets(rng: np.random.Generator, n: int) -> np.ndarray:
    p = np.zeros(n, PACKET_DTYPE)
    op = rng.choice(RC_OPS, n).astype(np.uint8)
    pay = np.where(rng.random(n) < 0.3, rng.integers(0, 20, n), rng.integers(0, 4097, n))
    pay = np.where(rdma.HAS_PAYLOAD[op], pay, 0)
    p["opcode"], p["payload_bytes"], p["pad"] = op, pay, (-pay) & 3
    p["psn"] = rng.integers(0, 1 << 24, n)
    p["dest_qp"] = rng.integers(2, 1 << 24, n)          # QP 0/1 are management (C13)
    p["src_qp"] = rng.integers(2, 1 << 24, n)
    p["udp_sport"] = rng.integers(0xC000, 0x10000, n)    # above 4791, as NICs choose (C13)
    p["ip_id"] = rng.integers(0, 1 << 16, n)
    p["reth_va"] = rng.integers(0, 1 << 48, n)
    p["reth_rkey"], p["reth_len"] = rng.integers(0, 1 << 32, n), rng.integers(0, 1 << 31, n)
    p["imm"] = rng.integers(0, 1 << 32, n)
    p["aeth"] = rng.integers(0, 1 << 24, n)              # syndrome 0: ACK
    p["ack_req"], p["solicited"] = rng.integers(0, 2, n), rng.integers(0, 2, n)
    p["nic"] = rng.integers(0, N_NICS, n)
    p["peer_nic"] = (p["nic"] + rng.integers(1, N_NICS, n)) % N_NICS
    return p


FIELDS = ["frame.len", "infiniband.bth.opcode", "infiniband.bth.psn", "infiniband.bth.destqp",
          "infiniband.bth.padcnt", "infiniband.bth.a", "infiniband.bth.se", "infiniband.bth.p_key",
          "infiniband.reth.dmalen", "infiniband.reth.va", "infiniband.reth.r_key", "infiniband.aeth.msn",
          "infiniband.aeth.syndrome", "infiniband.invariant.crc", "infiniband.variant.crc",
          "infiniband.lrh.pktlen", "infiniband.lrh.dlid", "infiniband.lrh.slid", "infiniband.grh.paylen",
          "ip.len", "ip.id", "ip.checksum.status", "ip.dsfield.dscp", "ip.dsfield.ecn", "ip.flags.df",
          "ipv6.plen", "ipv6.tclass", "ipv6.flow", "udp.srcport", "udp.length", "udp.checksum.status",
          "vlan.priority", "vlan.id"]


def _num(text: str) -> int:
    return int(text, 0)


@pytest.mark.parametrize("kind", ["ipv4", "ipv6", "vlan", "ib", "ibgrh"])
def test_tshark_decodes_every_frame_and_agrees(tmp_path, kind):
    rng = np.random.default_rng(sum(map(ord, kind)))
    ctx = context(kind, rng)
    p = packets(rng, 300)
    frames = FrameBuilder(ctx).frames(p)
    path = tmp_path / f"{kind}.pcap"
    ib = ctx.transport == "infiniband"
    write_pcap(path, [erf_record(f) for f in frames] if ib else frames, 197 if ib else 1)
    assert_clean(path, len(frames))
    got = tshark_fields(path, FIELDS)
    assert len(got) == len(frames)
    for r, frame, t in zip(p, frames, got):
        d = decode_frame(frame, "infiniband" if ib else "ethernet")
        bth = d["BTH"]
        assert _num(t["infiniband.bth.opcode"]) == bth["OpCode"] == r["opcode"]
        assert _num(t["infiniband.bth.psn"]) == r["psn"]
        assert _num(t["infiniband.bth.destqp"]) == r["dest_qp"]
        assert _num(t["infiniband.bth.padcnt"]) == r["pad"]
        assert _num(t["infiniband.bth.p_key"]) == 0xFFFF
        if r["opcode"] != rdma.CNP:       # TShark shows CNP as an unknown opcode (C13)
            assert (t["infiniband.bth.a"] in ("1", "True")) == bool(r["ack_req"])
            assert (t["infiniband.bth.se"] in ("1", "True")) == bool(r["solicited"])
        if "RETH" in d:
            assert _num(t["infiniband.reth.dmalen"]) == r["reth_len"]
            assert _num(t["infiniband.reth.va"]) == r["reth_va"]
            assert _num(t["infiniband.reth.r_key"]) == r["reth_rkey"]
        else:
            assert t["infiniband.reth.dmalen"] == ""
        if "AETH" in d:
            assert _num(t["infiniband.aeth.msn"]) == r["aeth"] & 0xFFFFFF
        known = r["opcode"] != rdma.CNP      # TShark decodes nothing after an unknown opcode
        if known:
            assert _num(t["infiniband.invariant.crc"]) == int.from_bytes(frame_icrc(frame, d), "big")
        if ib:
            assert _num(t["infiniband.lrh.pktlen"]) * 4 + 2 == len(frame)
            assert _num(t["infiniband.lrh.dlid"]) == ctx.lid[r["peer_nic"]]
            assert _num(t["infiniband.lrh.slid"]) == ctx.lid[r["nic"]]
            if known:
                assert _num(t["infiniband.variant.crc"]) == int.from_bytes(frame[-2:], "big")
            if ctx.grh:
                assert _num(t["infiniband.grh.paylen"]) == len(frame) - 8 - 40 - 2
            continue
        assert _num(t["frame.len"]) == len(frame)
        assert _num(t["udp.srcport"]) == r["udp_sport"]
        udp_len = _num(t["udp.length"])
        assert udp_len - 8 - 12 - rdma.EXT_BYTES[r["opcode"]] - r["pad"] - 4 == r["payload_bytes"]   # C7
        if ctx.ip_version == 4:
            assert _num(t["ip.len"]) == udp_len + 20 and _num(t["ip.id"]) == r["ip_id"]
            assert t["ip.checksum.status"] == "1"                   # verified good
            assert t["ip.flags.df"] in ("1", "True")
            dscp = ctx.cnp_dscp if r["opcode"] == rdma.CNP else ctx.dscp
            assert (_num(t["ip.dsfield.dscp"]), _num(t["ip.dsfield.ecn"])) == (dscp, ctx.ecn)
        else:
            assert _num(t["ipv6.plen"]) == udp_len
            assert _num(t["ipv6.flow"]) == int(rdma.rocev2_flow_label(r["src_qp"], r["dest_qp"]))
            assert t["udp.checksum.status"] == "1"                  # verified good
        if ctx.vlan:
            pcp = ctx.cnp_pcp if r["opcode"] == rdma.CNP else ctx.pcp
            assert (_num(t["vlan.priority"]), _num(t["vlan.id"])) == (pcp, 42)


def frame_icrc(frame: bytes, d) -> bytes:
    """The 4 ICRC bytes as they sit in the frame (TShark shows them as a big-endian number)."""
    return d["ICRC"]["ICRC"].to_bytes(4, "little")


def test_tshark_c3_reports_five_payload_bytes(tmp_path):
    frame = FrameBuilder(ctx4(pattern(b"abcde"))).frames(np.array([row(opcode=0x04, payload_bytes=5,
                                                                        **A_TO_B)]))[0]
    path = tmp_path / "c3.pcap"
    write_pcap(path, [frame], 1)
    assert_clean(path, 1)
    t = tshark_fields(path, ["data.data", "data.len", "infiniband.bth.padcnt", "udp.length", "ip.len"])[0]
    # TShark 4.0 shows payload and pad together as data; the payload is data.len - PadCnt.
    assert bytes.fromhex(t["data.data"]) == b"abcde\0\0\0"
    assert int(t["data.len"]) - int(t["infiniband.bth.padcnt"]) == 5
    assert (t["infiniband.bth.padcnt"], t["udp.length"], t["ip.len"]) == ("3", "32", "52")


def test_tshark_reads_pfc_frames(tmp_path):
    src = bytes([2, 0, 0, 0, 0, 0x0B])
    frames = [build_pfc_frame(src, 1 << 3, [0, 0, 0, 0xFFFF, 0, 0, 0, 0]),
              build_pfc_frame(src, 0xFF, [k * 100 for k in range(8)])]
    path = tmp_path / "pfc.pcap"
    write_pcap(path, frames, 1)
    assert_clean(path, 2)
    got = tshark_fields(path, ["macc.opcode", "macc.cbfc.enbv", "macc.cbfc.pause_time.c3",
                               "macc.cbfc.pause_time.c7"])
    assert [(_num(g["macc.opcode"]), _num(g["macc.cbfc.enbv"]), _num(g["macc.cbfc.pause_time.c3"]),
             _num(g["macc.cbfc.pause_time.c7"])) for g in got] == [(0x101, 8, 0xFFFF, 0), (0x101, 0xFF, 300, 700)]


def test_our_tshark_names_exist():
    out = subprocess.run([tshark_path(), "-G", "fields"], capture_output=True, text=True, check=True).stdout
    known = {line.split("\t")[2] for line in out.splitlines() if line.startswith("F\t")}
    ours = {name for h in H.HEADERS.values() for name in h.tshark_fields().values()}
    assert ours <= known, sorted(ours - known)


def test_tshark_reads_the_builders_pfc_rows_among_roce_frames(tmp_path):
    """Every PFC row the vectorized builder turns into a frame, mixed with RoCE rows: TShark
    decodes it as MAC control opcode 0x0101 with our vector and pause times, and nothing is
    malformed or flagged."""
    from tokenpcap.config.addresses import switch_port_macs
    from tokenpcap.records import OPCODE_PFC

    rng = np.random.default_rng(31)
    base = context("ipv4", rng)
    ctx = WireContext(mac=base.mac, ipv4=base.ipv4, payload_seed=base.payload_seed,
                      switch_port_macs=switch_port_macs)
    n = 40
    pfc = np.zeros(n, PACKET_DTYPE)
    pfc["opcode"] = OPCODE_PFC
    pfc["nic"] = -1 - rng.integers(0, 5000, n)
    pfc["imm"] = rng.integers(1, 256, n)
    pfc["imm"][0] = 1 << 3
    pfc["msg"] = np.where(np.arange(n) % 3 == 0, 0, rng.integers(1, 1 << 16, n))
    pfc["msg"][0] = 0xFFFF
    mixed = np.concatenate([packets(rng, 60), pfc])
    frames = FrameBuilder(ctx).frames(mixed)
    path = tmp_path / "mixed.pcap"
    write_pcap(path, frames, 1)
    assert_clean(path, len(mixed))
    fields = ["macc.opcode", "macc.cbfc.enbv", "eth.src", "eth.dst"] + \
        [f"macc.cbfc.pause_time.c{p}" for p in range(8)]
    got = [g for g in tshark_fields(path, fields) if g["macc.opcode"]]
    assert len(got) == n
    for g, r in zip(got, pfc):
        v, q = int(r["imm"]), int(r["msg"])
        assert _num(g["macc.opcode"]) == 0x0101 and _num(g["macc.cbfc.enbv"]) == v
        assert g["eth.dst"] == "01:80:c2:00:00:01"
        assert g["eth.src"] == ":".join(f"{b:02x}" for b in switch_port_macs([-1 - int(r["nic"])])[0])
        assert [_num(g[f"macc.cbfc.pause_time.c{p}"]) for p in range(8)] == \
            [q if v >> p & 1 else 0 for p in range(8)]
    assert _num(got[0]["macc.cbfc.pause_time.c3"]) == 0xFFFF
