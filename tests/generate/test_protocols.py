"""NCCL's LL and LL128 on the wire: a small AllReduce (LL) and a 1 MiB AllGather (LL128) on 16
H100s of 2 nodes, as NCCL's tuner picks them (``NCCL_PROTO: auto``).

Oracles: the classic pcap read here by hand (``struct``; no tokenpcap reader), the line layouts
of NCCL's ``prims_ll.h`` (``storeLL``: data1, flag1, data2, flag2) and ``prims_ll128.h`` (flag in
word 15 of every 128-byte line), the wire sizes of NCCL's ``waitSend`` (LL: 16 bytes per 8 data
bytes; LL128: 2048 per 1920), and ``inspect --against`` (capture = plan per NIC, to the byte).
"""
from __future__ import annotations

import json
import struct
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from tokenpcap.cli import main

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "profiles" / "clusters" / "h100-rocev2-400g.yaml"
RANKS = list(range(16))
WRITE_OPS = {0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B}      # RDMA WRITE First .. Only with Immediate
RETH_OPS = {0x06, 0x0A, 0x0B}


def _scenario(tmp: Path, kind: str, nbytes: int, extra: str = "") -> Path:
    p = tmp / f"{kind}.yaml"
    p.write_text(f"name: {kind}-proto\ncluster: {CLUSTER}\n"
                 f"workload: {{kind: {kind}, bytes: {nbytes}, ranks: {RANKS}}}\n"
                 f"collectives: {{algorithm: ring, channels: auto, NCCL_PROTO: auto{extra}}}\n"
                 f"generation: {{seed: 0, iterations: 1}}\n")
    return p


def _frames(pcap: Path):
    """(frame bytes) of a classic little-endian pcap, read with struct."""
    b = pcap.read_bytes()
    assert struct.unpack_from("<I", b, 0)[0] in (0xA1B2C3D4, 0xA1B23C4D)     # us or ns
    off = 24
    while off < len(b):
        _, _, incl, _ = struct.unpack_from("<IIII", b, off)
        yield b[off + 16:off + 16 + incl]
        off += 16 + incl


def _data_payloads(pcap: Path):
    """(qp, opcode, payload) of every RDMA WRITE packet that is not a 64-byte clear-to-send
    (Ethernet 14, IPv4 20, UDP 8, BTH 12, RETH 16 on First/Only; ImmDt 4 on ... Immediate)."""
    for f in _frames(pcap):
        if struct.unpack_from(">H", f, 12)[0] != 0x0800 or struct.unpack_from(">H", f, 36)[0] != 4791:
            continue
        op = f[42]
        if op not in WRITE_OPS:
            continue
        pad = (f[43] >> 4) & 3
        hdr = 54 + (16 if op in RETH_OPS else 0) + (4 if op in (0x09, 0x0B) else 0)
        payload = f[hdr:len(f) - 4 - pad]
        if op == 0x0A and len(payload) == 64:
            continue                                        # clear-to-send
        dest_qp = struct.unpack_from(">I", f, 46)[0] & 0xFFFFFF
        yield dest_qp, op, payload


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("proto")
    out = {}
    for kind, nbytes in (("allreduce", 65536), ("allgather", 1 << 20)):
        s = _scenario(tmp, kind, nbytes)
        r = CliRunner().invoke(main, ["generate", str(s), "-o", str(tmp / kind), "--format", "pcap",
                                      "--split", "none", "-j", "1"])
        assert r.exit_code == 0, r.output
        plan = json.loads(CliRunner().invoke(main, ["plan", str(s), "--json"]).output)
        out[kind] = (s, next((tmp / kind).glob("*.pcap")), plan["phases"][0])
    return out


def test_the_tuner_picks_ll_and_ll128_and_says_the_ring_was_forced(runs):
    ar, ag = runs["allreduce"][2], runs["allgather"][2]
    assert ar["protocols"] == {"LL": 1} and ar["nccl_forced"] == {"Tree/LL": 1}
    assert ag["protocols"] == {"LL128": 1} and ag["nccl_forced"] == {}
    # LL: 16 wire bytes per 8 data bytes; LL128: a 2048-byte slice per 1920 data bytes
    assert ar["nic_bytes"] == 2 * ar["nic_payload_bytes"]
    # ring AllGather of 1 MiB over 16 ranks on 2 nodes: 15 steps, 2 hops between nodes each,
    # a 64 KiB chunk over 16 channels = 4096 bytes each, one message: ceil(4096 / 1920) = 3 slices
    assert ag["nic_payload_bytes"] == 15 * 2 * 65536
    assert ag["nic_bytes"] == 15 * 2 * 16 * 3 * 2048


def test_ll_frames_carry_lines_with_flags(runs):
    _, pcap, row = runs["allreduce"]
    total, flags_by_qp = 0, defaultdict(set)
    for qp, _, pay in _data_payloads(pcap):
        assert len(pay) % 16 == 0
        total += len(pay)
        for i in range(0, len(pay), 16):
            _, f1, _, f2 = struct.unpack_from("<IIII", pay, i)
            assert f1 == f2 >= 1
            flags_by_qp[qp].add(f1)
    assert total == row["nic_bytes"]
    # one flag per message, step + 1 counted per connection: 1, 2, ... on every QP
    for flags in flags_by_qp.values():
        assert flags == set(range(1, len(flags) + 1))


def test_ll128_frames_carry_a_flag_in_every_line(runs):
    _, pcap, row = runs["allgather"]
    total = 0
    for _, _, pay in _data_payloads(pcap):
        assert len(pay) % 128 == 0
        total += len(pay)
        flags = {struct.unpack_from("<Q", pay, i + 120)[0] for i in range(0, len(pay), 128)}
        assert len(flags) == 1 and min(flags) >= 1
    assert total == row["nic_bytes"]


@pytest.mark.parametrize("kind", ["allreduce", "allgather"])
def test_inspect_against_matches_to_the_byte(runs, kind):
    s, pcap, _ = runs[kind]
    r = CliRunner().invoke(main, ["inspect", str(pcap), "--against", str(s), "--strict", "--json"])
    assert r.exit_code == 0, r.output
    checks = {c["name"]: c for c in json.loads(r.output)["checks"]}
    assert checks["against"]["ok"] and checks["icrc"]["ok"]


def test_forcing_simple_gives_todays_bytes(tmp_path):
    s = _scenario(tmp_path, "allreduce", 65536).read_text().replace("NCCL_PROTO: auto",
                                                                    "NCCL_PROTO: Simple")
    (tmp_path / "simple.yaml").write_text(s)
    row = json.loads(CliRunner().invoke(main, ["plan", str(tmp_path / "simple.yaml"),
                                               "--json"]).output)["phases"][0]
    assert "protocols" not in row or not row["protocols"]
    assert row["nic_bytes"] == 245760          # 2 nodes' ring hops: the payload itself


def test_a_bundled_scenario_under_nccls_choice_matches_its_plan_per_phase_and_nic(tmp_path):
    """Dante (ring, NCCL_PROTO auto, p2p LL up to 16 KiB per channel) at --scale 64: pcapng
    with phase comments, `inspect --against` per phase and NIC."""
    dante = (ROOT / "profiles" / "scenarios" / "dante.yaml").read_text()
    s = dante.replace("collectives: {algorithm: hierarchical, channels: 2}",
                      "collectives: {algorithm: ring, channels: 2, NCCL_PROTO: auto, "
                      "NCCL_P2P_LL_THRESHOLD: 16384}")
    for rel, where in (("../../samples/", ROOT / "samples"), ("../models/", ROOT / "profiles/models"),
                       ("../clusters/", ROOT / "profiles/clusters")):
        s = s.replace(rel, f"{where}/")
    assert s != dante
    path = tmp_path / "dante-nccl.yaml"
    path.write_text(s)
    plan = json.loads(CliRunner().invoke(main, ["plan", str(path), "--json", "--scale", "64"]).output)
    assert any(r.get("protocols") for r in plan["phases"])
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(tmp_path / "out"), "--scale", "64",
                                  "--split", "none", "-j", "1"])
    assert r.exit_code == 0, r.output
    cap = next((tmp_path / "out").glob("*.pcapng"))
    r = CliRunner().invoke(main, ["inspect", str(cap), "--against", str(path), "--strict", "--json",
                                  "--no-crc"])
    assert r.exit_code == 0, r.output
    j = json.loads(r.output)
    assert {c["name"]: c["ok"] for c in j["checks"]}["against"]


def test_channels_nccl_trims_a_small_collective_as_topo_get_algo_info_does(tmp_path):
    """8 KiB ring AllReduce, LL, 16 ranks: enqueue.cc trims nc while nBytes < nc * 512 threads *
    (8 * nRanks) (ring LL threshold x nRanks): 8192 < 1 * 512 * 128, so one channel: every
    connection between two NICs is one QP."""
    s = _scenario(tmp_path, "allreduce", 8192).read_text().replace("channels: auto",
                                                                   "channels: nccl")
    path = tmp_path / "nccl-channels.yaml"
    path.write_text(s)
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(tmp_path / "out"), "--format",
                                  "pcap", "--split", "none", "-j", "1"])
    assert r.exit_code == 0, r.output
    pcap = next((tmp_path / "out").glob("*.pcap"))
    qps = {qp for qp, _, _ in _data_payloads(pcap)}
    assert len(qps) == 2                     # the two ring hops between the nodes, one channel
    r = CliRunner().invoke(main, ["inspect", str(pcap), "--against", str(path), "--strict"])
    assert r.exit_code == 0, r.output
