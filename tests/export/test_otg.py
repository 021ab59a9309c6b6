"""export --to otg: the OTG configuration passes snappi's own validation and round-trips through
its serializer, and its devices, QPs, message sizes and addresses are those of the capture
``generate`` writes for the same run (frames decoded by tokenpcap's reader: every packet's
addresses, UDP source port, DSCP and first PSN per QP; every message's RETH length)."""
from __future__ import annotations

import csv
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tokenpcap.analysis.decode import KIND_ROCEV2, decode_batch
from tokenpcap.cli import main
from tokenpcap.config.profiles import load_scenario
from tokenpcap.export.otg import otg_size
from tokenpcap.generate.run import GenerateOptions, generate
from tokenpcap.pcap.reader import open_capture

snappi = pytest.importorskip("snappi", reason="snappi (the OTG model) is not installed")

ROOT = Path(__file__).resolve().parents[2]
DANTE = ROOT / "profiles" / "scenarios" / "dante.yaml"
DCQCN = ROOT / "profiles" / "scenarios" / "incast-8x1m-hpcc-ns3-dcqcn.yaml"
_UNIT = {"bytes": 1, "kb": 1 << 10, "mb": 1 << 20, "gb": 1 << 30}


@pytest.fixture(scope="module")
def dante_otg(tmp_path_factory):
    out = tmp_path_factory.mktemp("otg") / "dante.json"
    r = CliRunner().invoke(main, ["export", str(DANTE), "--scale", "64", "--to", "otg",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    return out


def test_the_configuration_validates_and_round_trips_through_snappi(dante_otg):
    text = dante_otg.read_text()
    cfg = snappi.api().config()
    cfg.deserialize(text)                           # snappi's schema checks while it reads
    assert json.loads(cfg.serialize(encoding=cfg.JSON)) == json.loads(text)
    doc = json.loads(text)
    assert len(doc["ports"]) == len(doc["devices"]) == len(doc["options"]["per_port_options"])


def _ends(doc: dict) -> dict:
    """QP name -> (device IP, device MAC, peer IP, its fields)."""
    out = {}
    for d in doc["devices"]:
        eth = d["ethernets"][0]
        ip = eth["ipv4_addresses"][0]["address"]
        for iface in d["rocev2"]["ipv4_interfaces"]:
            for peer in iface["peers"]:
                for qp in peer["qps"]:
                    rc = qp["connection_type"]["reliable_connection"]
                    out[qp["qp_name"]] = (ip, eth["mac"], peer["destination_ip_address"], rc)
    return out


def _partner(name: str) -> str:
    nic, peer, conn, role = name.split("-")
    return f"{peer}-{nic}-{conn}-{'tx' if role == 'rx' else 'rx'}"


def _ip(v: int) -> str:
    return ".".join(str((v >> s) & 0xFF) for s in (24, 16, 8, 0))


def test_qps_sizes_and_addresses_are_the_captures(dante_otg, tmp_path):
    doc = json.loads(dante_otg.read_text())
    ends = _ends(doc)
    by_qpn = {int(rc["source_qp_number"]): name for name, (_, _, _, rc) in ends.items()}
    res = generate(load_scenario(DANTE), GenerateOptions(out_dir=tmp_path, fmt="pcap",
                                                         split="none", scale=64, snaplen=128))
    cap = open_capture(res.files[0][0])
    first_psn, sizes, seen = {}, defaultdict(set), set()
    for rec in cap.batches():
        d = decode_batch(cap.data, rec, cap.views)
        for i in np.flatnonzero(d["kind"] == KIND_ROCEV2):
            sender = _partner(by_qpn[int(d["destqp"][i])])     # the end whose packets these are
            ip, mac, peer_ip, rc = ends[sender]
            got = (_ip(int(d["src_lo"][i])), int(d["smac"][i]), _ip(int(d["dst_lo"][i])),
                   int(d["sport"][i]), int(d["dscp"][i]))
            want = (ip, int(mac.replace(":", ""), 16), peer_ip, rc["udp_source_port"],
                    rc["dscp"])
            assert got == want, (sender, got, want)
            seen.add(sender)
            if d["opcode"][i] != 0x11:                  # not an ACK: the end's own PSNs
                first_psn.setdefault(sender, int(d["psn"][i]))
            if d["dmalen"][i] >= 0:
                sizes[sender].add(int(d["dmalen"][i]))
    assert seen and all(first_psn[n] == int(ends[n][3]["initial_psn"]) for n in first_psn)
    flows = defaultdict(set)
    for fl in doc["stateful_flows"]["rocev2"][0]["tx_ports"]:
        for f in fl["transmit_type"]["target_line_rate"]["flows"]:
            flows[f["tx_endpoint"]].add(f["message_size"] * _UNIT[f["message_size_unit"]])
    assert dict(flows) == dict(sizes)
    with open(dante_otg.with_name(dante_otg.name + ".expected.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["qp_name"] for r in rows} == set(flows)
    assert all(r["otg_size_error_bytes"] == "0" for r in rows)


def test_the_fabric_profiles_dcqcn_in_otgs_units(tmp_path):
    out = tmp_path / "incast.json"
    r = CliRunner().invoke(main, ["export", str(DCQCN), "--to", "otg", "-o", str(out)])
    assert r.exit_code == 0, r.output
    s = load_scenario(DCQCN)
    d, gbps = s.cluster.fabric.dcqcn, s.cluster.link_gbps
    opt = json.loads(out.read_text())["options"]["per_port_options"][0]["protocols"][0]["rocev2"]
    q = opt["dcqcn_settings"]
    assert q["enable_dcqcn"] is True and int(q["rate_increment_time"]) == d.rpg_time_reset
    assert int(q["alpha_g"]) == d.dce_tcp_g and int(q["alpha_update_period"]) == d.dce_tcp_rtt
    assert int(q["initial_alpha"]) == min(d.initial_alpha_value, 1023)     # OTG's range
    assert q["additive_increment_rate"] == pytest.approx(100 * d.rpg_ai_rate / (gbps * 1000))
    assert opt["cnp"]["ip_dscp"]["value"] == s.cluster.fabric.np.cnp_dscp


@pytest.mark.parametrize("size,want", [(10338, (10338, "bytes", 0)), (1 << 17, (128, "kb", 0)),
                                       (1 << 20, (1, "mb", 0)), (3 << 30, (3, "gb", 0)),
                                       (70000, (69, "kb", 69 * 1024 - 70000))])
def test_a_size_is_exact_in_the_largest_unit_or_rounded_up_in_the_smallest(size, want):
    assert otg_size(size) == want


def test_ipv6_is_refused_in_one_line(tmp_path):
    r = CliRunner().invoke(main, ["export", str(DANTE), "--scale", "64", "--to", "otg", "-o",
                                  str(tmp_path / "x.json"), "--set", "cluster.network.ip_version=6"])
    assert r.exit_code == 1 and r.stderr.count("\n") == 1
    assert "expected RoCEv2 over IPv4" in r.stderr and not list(tmp_path.iterdir())
