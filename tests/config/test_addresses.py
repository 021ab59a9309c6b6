"""Tests of tokenpcap.config.addresses against the standard library's ipaddress and published examples."""
from __future__ import annotations

import dataclasses
import ipaddress
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.config.addresses import IB_UNICAST_LID_MAX, nic_addresses, switch_port_macs
from tokenpcap.errors import InfeasiblePlanError, InputError, ProfileError
from tokenpcap.config.profiles import ClusterProfile, GpuProfile, NetworkProfile


def cluster(nodes=4, per=8, **net):
    return ClusterProfile(name="c", nodes=nodes, gpus_per_node=per, nics_per_node=per, link_gbps=400,
                          nvlink_gbps=3600, gpu=GpuProfile("H100", 989), network=NetworkProfile(**net))


def test_node3_nic5_defaults():
    a = nic_addresses(cluster())
    g = 3 * 8 + 5
    assert ":".join(f"{b:02x}" for b in a.mac[g]) == "02:00:00:00:03:05"
    assert str(ipaddress.IPv4Address(bytes(a.ipv4[g]))) == "198.18.3.6"
    assert ipaddress.IPv6Address(bytes(a.ipv6[g])) == ipaddress.IPv6Address("2001:2:0:3::6")
    assert int(a.lid[g]) == 30
    assert ipaddress.IPv6Address(bytes(a.gid[g])) == ipaddress.IPv6Address("fe80::ff:fe00:305")


def test_shapes_dtypes_readonly():
    a = nic_addresses(cluster())
    assert (a.mac.shape, a.ipv4.shape, a.ipv6.shape, a.lid.shape, a.gid.shape) == (
        (32, 6), (32, 4), (32, 16), (32,), (32, 16))
    assert all(x.dtype == np.uint8 for x in (a.mac, a.ipv4, a.ipv6, a.gid)) and a.lid.dtype == np.uint16
    assert len(a) == 32
    with pytest.raises(ValueError):
        a.mac[0, 0] = 1


def test_modified_eui64_rfc4291_example():
    # RFC 4291 appendix A / the common example: MAC 00:25:96:12:34:56 -> fe80::225:96ff:fe12:3456
    a = nic_addresses(cluster(nodes=0x34 + 1, per=0x56 + 1, mac_prefix="00:25:96:12"))
    g = 0x34 * (0x56 + 1) + 0x56
    assert ":".join(f"{b:02x}" for b in a.mac[g]) == "00:25:96:12:34:56"
    assert ipaddress.IPv6Address(bytes(a.gid[g])) == ipaddress.IPv6Address("fe80::225:96ff:fe12:3456")


@settings(max_examples=50, deadline=None)
@given(nodes=st.integers(1, 40), per=st.integers(1, 16))
def test_same_nic_same_address_and_all_distinct(nodes, per):
    a = nic_addresses(cluster(nodes=nodes, per=per))
    b = nic_addresses(cluster(nodes=nodes + 3, per=per))
    n = nodes * per
    for arr_a, arr_b in ((a.mac, b.mac), (a.ipv4, b.ipv4), (a.ipv6, b.ipv6), (a.lid, b.lid), (a.gid, b.gid)):
        assert np.array_equal(arr_a, arr_b[:n])          # more nodes do not move the existing ones
        assert len({bytes(r) for r in np.atleast_2d(arr_a.T).T.reshape(n, -1)}) == n
    net = ipaddress.ip_network("198.18.0.0/15")
    v6net = ipaddress.ip_network("2001:2::/48")
    for g in range(n):
        node, nic = divmod(g, per)
        v4 = ipaddress.IPv4Address(bytes(a.ipv4[g]))
        assert v4 in net and v4 == ipaddress.IPv4Address("198.18.0.0") + 256 * node + nic + 1
        assert v4.packed[3] not in (0, 255)
        v6 = ipaddress.IPv6Address(bytes(a.ipv6[g]))
        assert v6 in v6net and v6 == ipaddress.IPv6Address("2001:2::") + (node << 64) + nic + 1
        assert a.mac[g, 0] == 0x02 and a.mac[g, 5] == nic and (a.mac[g, 3] << 8 | a.mac[g, 4]) == node
        assert 1 <= a.lid[g] <= IB_UNICAST_LID_MAX


def test_range_limits():
    nic_addresses(cluster(nodes=512, per=8))                 # 198.18.0.0/15 holds 512 nodes
    with pytest.raises(InfeasiblePlanError, match="ipv4_base"):
        nic_addresses(cluster(nodes=513, per=8))
    with pytest.raises(InfeasiblePlanError, match="ipv4_base"):
        nic_addresses(cluster(nodes=1, per=255))
    with pytest.raises(InfeasiblePlanError, match="ipv4_base"):
        nic_addresses(cluster(nodes=2, per=8, ipv4_base="198.19.255.0"))
    # RFC 1918's 10.0.0.0/8 holds 2**24 / 256 nodes of /24s: the 2,048 nodes of 16,384 GPUs fit
    with pytest.raises(InfeasiblePlanError, match=r"the 512 nodes 198\.18\.0\.0/15 holds after "
                       r"the base; network\.ipv4_base 10\.0\.0\.0 .* holds 65,536 nodes"):
        nic_addresses(cluster(nodes=2048, per=8))
    last = nic_addresses(cluster(nodes=2048, per=8, ipv4_base="10.0.0.0")).ipv4[-1]
    assert ipaddress.IPv4Address(bytes(last)) == ipaddress.IPv4Address("10.0.0.0") + 256 * 2047 + 8
    nic_addresses(cluster(nodes=65536, per=1, ipv4_base="10.0.0.0"))
    with pytest.raises(InfeasiblePlanError, match=r"the 65,535 nodes 10\.0\.0\.0/8"):
        nic_addresses(cluster(nodes=65536, per=1, ipv4_base="10.0.1.0"))
    with pytest.raises(InfeasiblePlanError, match=r"the 16 nodes 172\.16\.0\.0/12"):
        nic_addresses(cluster(nodes=17, per=1, ipv4_base="172.31.240.0"))
    with pytest.raises(InfeasiblePlanError, match="mac_prefix"):
        nic_addresses(cluster(nodes=2, per=8, mac_prefix="02:00:00:00:00"))
    nic_addresses(cluster(nodes=511, per=96))                # 49056 NICs: LIDs up to 0xBFA0
    with pytest.raises(InfeasiblePlanError, match="unicast LIDs"):   # 49152 > 0xBFFF
        nic_addresses(dataclasses.replace(cluster(nodes=512, per=96), transport="infiniband"))
    assert not nic_addresses(cluster(nodes=512, per=96)).lid.any()   # RoCEv2 frames carry no LID


@pytest.mark.parametrize("key,value", [
    ("mac_prefix", "03:00:00"), ("mac_prefix", "zz:00"), ("mac_prefix", "02:00:00:00:00:00"),
    ("ipv4_base", "198.18.0.1"), ("ipv4_base", "2001:2::"), ("ipv4_base", "no"),
    ("ipv6_base", "198.18.0.0"),
])
def test_malformed_bases(key, value):
    with pytest.raises(ProfileError, match=f"network.{key}"):
        nic_addresses(cluster(**{key: value}))


def test_switch_port_macs_rule():
    """06:00 + the port id, 32 bits big-endian (module docstring), spelled out by hand."""
    got = switch_port_macs([0, 5, 0x01020304, 0xFFFFFFFF])
    assert [":".join(f"{b:02x}" for b in m) for m in got] == [
        "06:00:00:00:00:00", "06:00:00:00:00:05", "06:00:01:02:03:04", "06:00:ff:ff:ff:ff"]
    assert got.dtype == np.uint8 and got.shape == (4, 6)
    first = int(got[0, 0])
    assert first & 1 == 0 and first & 2 == 2          # unicast, locally administered (IEEE 802 8.2)
    with pytest.raises(InputError, match="switch port id: got -1"):
        switch_port_macs([3, -1])
    with pytest.raises(InputError, match="switch port id: got 4294967296"):
        switch_port_macs([1 << 32])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 255), min_size=1, max_size=5).filter(lambda p: p[0] % 2 == 0),
       st.integers(1, 6), st.integers(1, 8))
def test_no_nic_mac_is_a_switch_port_mac(prefix, nodes, per):
    """Every prefix nic_addresses accepts gives MACs that never start 06:00; the others are refused."""
    text = ":".join(f"{b:02x}" for b in prefix)
    c = cluster(nodes=nodes, per=per, mac_prefix=text)
    could_collide = prefix[0] == 6 and (len(prefix) == 1 or prefix[1] == 0)
    if could_collide:
        with pytest.raises(ProfileError, match="cannot start with 06:00"):
            nic_addresses(c)
        return
    try:
        mac = nic_addresses(c).mac
    except InfeasiblePlanError:
        return
    assert not ((mac[:, 0] == 6) & (mac[:, 1] == 0)).any()


def test_generate_refuses_a_cluster_beyond_its_addresses_before_planning(tmp_path, monkeypatch):
    """``generate`` checks the cluster's address ranges before it plans: a 4-node cluster whose
    ``ipv4_base`` leaves room for one node is refused with the key and the block, and the plan is
    never built (nothing written)."""
    from click.testing import CliRunner

    import tokenpcap.generate.run as run_mod
    from tokenpcap.cli import main

    def no_planning(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("planned before the addresses were checked")

    monkeypatch.setattr(run_mod, "prepare", no_planning)
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["generate", str(root / "profiles/scenarios/dante.yaml"), "-o",
                                  str(out), "--set", "cluster.network.ipv4_base=198.19.255.0"])
    assert r.exit_code == 1, r.output
    assert "network.ipv4_base: got '198.19.255.0' for 4 nodes" in r.output
    assert "the 1 node 198.18.0.0/15 holds" in r.output and not out.exists()
