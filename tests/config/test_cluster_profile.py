"""Cluster profiles: every bundled cluster loads; every kind of bad value names the file, the
key, the value and what was expected; the MAC prefix takes the 1-5 octets the addressing uses."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.test_profiles import PROFILES, cluster_dict, expect_profile_error, write
from tokenpcap.config.profiles import load_cluster


@pytest.mark.parametrize("path", sorted((PROFILES / "clusters").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_cluster_loads(path: Path):
    c = load_cluster(path)
    assert c.name == path.stem and c.nodes * c.gpus_per_node >= 8


@pytest.mark.parametrize("over,key,got,expected", [
    ({"nodes": 0}, "nodes", "0", "an integer in [1, 32,768]"),
    ({"link_gbps": 0}, "link_gbps", "0", "a finite number >= 1 and <= 1,000,000"),
    ({"link_gbps": -400}, "link_gbps", "-400", "a finite number >= 1 and <= 1,000,000"),
    ({"transport": "iwarp"}, "transport", "'iwarp'", "one of 'rocev2', 'infiniband'"),
    ({"pmtu_bytes": 9000}, "pmtu_bytes", "9000", "one of 256, 512, 1024, 2048, 4096"),
    ({"nics_per_node": 16}, "nics_per_node", "16", "<= gpus_per_node 8"),
    ({"gpu": {"name": "H100"}}, "gpu.peak_tflops", "missing", "required key"),
    ({"network": {"dscp": 64}}, "network.dscp", "64", "an integer in [0, 63]"),
    ({"network": {"ipv4_base": "1.2.3"}}, "network.ipv4_base", "'1.2.3'", "an IPv4 address"),
    ({"network": {"mac_prefix": "02:00:00:00:00:00"}}, "network.mac_prefix",
     "'02:00:00:00:00:00'", "1 to 5 hex octets"),
    ({"network": {"ip_version": 5}}, "network.ip_version", "5", "one of 4, 6"),
    ({"network": {"qos": 1}}, "network.qos", "'qos'", "a known key"),
])
def test_cluster_errors(tmp_path: Path, over, key, got, expected):  # type: ignore[no-untyped-def]
    f = write(tmp_path / "c.yaml", cluster_dict(**over))
    expect_profile_error(lambda: load_cluster(f), f, key, got, expected)


@pytest.mark.parametrize("prefix", ["02", "02:00:00", "0a:bc:de:f0", "02:00:00:00:00"])
def test_mac_prefix_of_one_to_five_octets_as_docs_lower_md_says(tmp_path: Path, prefix: str):
    """docs/lower.md and tokenpcap.config.addresses take 1-5 octets; the loader used to insist on 3."""
    from tokenpcap.config.addresses import nic_addresses

    c = load_cluster(write(tmp_path / "c.yaml", cluster_dict(nodes=1, network={
        "mac_prefix": prefix.upper()})))
    assert c.network.mac_prefix == prefix
    mac = nic_addresses(c).mac
    octets = bytes(int(x, 16) for x in prefix.split(":"))
    assert bytes(mac[0, : len(octets)]) == octets and not mac[0, 0] & 1


@pytest.mark.parametrize("bad", ["", "02:00:00:00:00:00", "2:00:00", "02:0g:00", "02-00-00",
                                 "+2:00", "03:00:00"])
def test_mac_prefix_errors(tmp_path: Path, bad: str):
    f = write(tmp_path / "c.yaml", cluster_dict(network={"mac_prefix": bad}))
    expect_profile_error(lambda: load_cluster(f), f, "network.mac_prefix", repr(bad),
                         "unicast" if bad == "03:00:00" else "1 to 5 hex octets")
