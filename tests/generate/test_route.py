"""route: the files of each split (names, NICs, the routing map), and each NIC's interface
description against the address rules of config/addresses.py (RFC 2544, IEEE 802, RFC 4291)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.schedule.test_schedule import tiny_scenario
from tokenpcap.config.addresses import nic_addresses
from tokenpcap.config.profiles import load_cluster, load_scenario
from tokenpcap.generate.options import GenerateOptions
from tokenpcap.generate.route import describe_nic, file_specs
from tokenpcap.generate.select import Selection
from tokenpcap.pcap.outputset import OutputSet
from tokenpcap.records import LABELS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("cluster, ib, want", [
    ("h100-rocev2-400g", False, "198.18.3.6 02:00:00:00:03:05"),
    ("a100-hdr-ib", True, "LID 0x001e GID fe80::ff:fe00:305"),
])
def test_nic_description_node_3_nic_5(cluster, ib, want):
    """Node 3, NIC 5 (global NIC 29): the worked example of config/addresses.py's table."""
    c = load_cluster(ROOT / "profiles" / "clusters" / f"{cluster}.yaml")
    assert describe_nic(nic_addresses(c), 3 * 8 + 5, ib) == want


def test_file_names_and_routes_of_each_split(tmp_path):
    s = load_scenario(tiny_scenario(tmp_path, "tiny", dp=2, tp=2, pp=2, gbs=8))
    out = tmp_path / "out"
    out.mkdir()
    with OutputSet(out) as outset:
        opt = GenerateOptions(out_dir=out, split="nic")
        specs, route = file_specs(s, opt, np.array([5, 1, 5]), 8, "pcapng", outset)
        assert [(outset.final(f.path).name, f.nics) for f in specs] == [
            ("tiny_node01_nic0.pcapng", (1,)), ("tiny_node05_nic0.pcapng", (5,))]
        assert route.tolist() == [-1, 0, -1, -1, -1, 1, -1, -1]
        dp = LABELS.index("dp/backward/AllReduce")
        opt = GenerateOptions(out_dir=out, split="phase",
                              selection=Selection(nics=frozenset({6, 2})))
        specs, route = file_specs(s, opt, np.array([dp]), 8, "pcap", outset)
        assert [(outset.final(f.path).name, f.nics) for f in specs] == [
            ("tiny_dp-backward-AllReduce.pcap", (2, 6))]
        assert route.size == len(LABELS) and route[dp] == 0 and (np.delete(route, dp) == -1).all()
        specs, route = file_specs(s, GenerateOptions(out_dir=out, split="none"),
                                  np.array([0]), 8, "erf", outset)
        assert [(outset.final(f.path).name, f.nics) for f in specs] == [
            ("tiny.erf", tuple(range(8)))]
        assert route.tolist() == [0]
        assert all(f.path.parent != out for f in specs)        # staged, not yet in place
