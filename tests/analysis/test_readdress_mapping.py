"""readdress_mapping: the mapping from YAML and the command line; every bad mapping is one line
(file, key, value got and expected), and two NICs never become one."""
from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from tests.analysis.trace import write_trace
from tokenpcap.analysis.readdress_mapping import Mapping, load_mapping, retarget_text
from tokenpcap.cli import main
from tokenpcap.errors import InputError

ROOT_DANTE = Path(__file__).resolve().parents[2] / "profiles" / "scenarios" / "dante.yaml"


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_docs_lab_yaml_maps_each_nic_ip_with_its_own_mac(tmp_path):
    """docs/analysis.md's lab.yaml (and its command line) map an IPv4
    address and a MAC together only when generate gives both to one NIC (addresses.py)."""
    import ipaddress
    import re
    from pathlib import Path

    from tokenpcap.config.addresses import nic_addresses
    from tokenpcap.config.profiles import load_scenario
    text = (Path(ROOT_DANTE).parents[2] / "docs" / "analysis.md").read_text(encoding="utf-8")
    block = re.search(r"```yaml\n# lab.yaml\n(.*?)```", text, re.S).group(1)
    (tmp_path / "lab.yaml").write_text(block, encoding="utf-8")
    m = load_mapping(tmp_path / "lab.yaml")
    line = re.search(r"tokenpcap readdress dante.pcap .*?\n```", text, re.S).group(0)
    for old, new in re.findall(r"--map (\S+)=(\S+)", line):
        m.add_address(old, new)
    a = nic_addresses(load_scenario(ROOT_DANTE).cluster)
    ip_to_mac = {int(ipaddress.IPv4Address(bytes(ip))): int.from_bytes(bytes(mac), "big")
                 for ip, mac in zip(a.ipv4, a.mac)}
    assert m.ipv4 and m.mac
    assert {ip_to_mac[ip] for ip in m.ipv4} == set(m.mac)


def test_mapping_duplicates_many_to_one_and_special_files(tmp_path):
    src = tmp_path / "in.pcap"
    write_trace(src, 4)
    out = tmp_path / "o.pcap"
    dup = tmp_path / "dup.yaml"
    dup.write_text("addresses:\n  198.18.0.1: 10.0.0.1\n  198.18.0.1: 10.0.0.2\n")
    with pytest.raises(InputError, match=r"addresses\.198\.18\.0\.1: got the key twice, at line "
                                         "2 and at line 3"):
        load_mapping(dup)
    r = _cli("readdress", src, "-o", out, "--map", dup)
    assert r.exit_code == 1 and r.output.count("\n") == 1 and "twice" in r.output
    many = tmp_path / "many.yaml"
    many.write_text("addresses:\n  198.18.0.1: 10.0.0.1\n  198.18.0.2: 10.0.0.1\n")
    with pytest.raises(InputError, match="10.0.0.1: got it as the new address of both "
                                         "198.18.0.1 and 198.18.0.2"):
        load_mapping(many)
    ok = tmp_path / "ok.yaml"
    ok.write_text("addresses:\n  198.18.0.1: 10.0.0.1\n")
    for args in (("--map", "198.18.0.1=10.0.0.1", "--map", "198.18.0.2=10.0.0.1"),
                 ("--map", ok, "--map", "198.18.0.2=10.0.0.1"),
                 ("--map", ok, "--map", "198.18.0.1=10.0.0.7")):
        r = _cli("readdress", src, "-o", out, *args)
        assert r.exit_code in (1, 2) and "Traceback" not in r.output, r.output
        assert "10.0.0." in r.output and not out.exists()
    m = Mapping()                       # a swap is one-to-one; the same pair twice is harmless
    m.add_address("198.18.0.1", "198.18.0.2")
    m.add_address("198.18.0.2", "198.18.0.1")
    m.add_address("198.18.0.2", "198.18.0.1")
    assert len(m.ipv4) == 2
    for special, kind in (("/dev/null", "a character device"), (tmp_path, "a directory")):
        r = _cli("readdress", src, "-o", out, "--map", special)
        assert r.exit_code == 1 and r.output == (
            f"error: {special}: cannot read the mapping: got {kind}, expected a regular YAML "
            "mapping file\n"), r.output
    bomb = tmp_path / "bomb.yaml"
    names = "abcdefghi"
    bomb.write_text(f"a: &a [{', '.join(['1'] * 10)}]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip(names, names[1:])))
    with pytest.raises(InputError, match="aliases expanded"):
        load_mapping(bomb)


def test_mapping_file_errors_are_one_line_and_say_what_is_wrong(tmp_path):
    """A broken YAML map is one line (file, line, column, the parser's reason), a missing map
    file is a usage error saying it does not exist (not a malformed pair), and mixed address
    kinds read 'got an IPv4 and an IPv6 address'."""
    write_trace(tmp_path / "in.pcap", 4)
    broken = tmp_path / "broken.yaml"
    broken.write_text("addresses:\n  10.0.0.1: [192.168.1.1\n")
    r = _cli("readdress", tmp_path / "in.pcap", "-o", tmp_path / "o.pcap", "--map", broken)
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert r.output.startswith(f"error: {broken}: line ") and "got invalid YAML" in r.output
    r = _cli("readdress", tmp_path / "in.pcap", "-o", tmp_path / "o.pcap", "--map",
             tmp_path / "missing.yaml")
    assert r.exit_code == 2 and "a file that does not exist" in " ".join(r.output.split())
    r = _cli("readdress", tmp_path / "in.pcap", "-o", tmp_path / "o.pcap", "--map",
             "10.0.0.1=fd00::1")
    assert "got an IPv4 and an IPv6 address" in " ".join(r.output.split())
    assert not (tmp_path / "o.pcap").exists()


_ipv4 = st.integers(0, (1 << 32) - 1).map(lambda v: str(ipaddress.IPv4Address(v)))
_mac = st.integers(0, (1 << 48) - 1).map(
    lambda v: ":".join(f"{b:02x}" for b in v.to_bytes(6, "big")))


@given(st.dictionaries(st.one_of(_ipv4, _mac), st.one_of(_ipv4, _mac), max_size=6),
       st.lists(st.one_of(_ipv4, _mac, st.sampled_from(["", "if0", "node0/nic1", "::1x"])),
                max_size=6))
def test_retarget_text_maps_each_address_word_and_its_inverse_maps_it_back(pairs, words):
    """A description's address words are replaced by their new address and nothing else
    changes; the inverse mapping gives the description back (addresses written canonically)."""
    pairs = {a: b for a, b in pairs.items()
             if (":" in a) == (":" in b) and b not in words}      # one kind; no new one present
    m, back = Mapping(), Mapping()
    try:
        for a, b in pairs.items():
            m.add_address(a, b)
            back.add_address(b, a)
    except InputError:
        return                                  # many to one: refused (tested above)
    text = " ".join(words)
    once = retarget_text(text, m)
    assert once.split(" ") == [pairs.get(w, w) for w in text.split(" ")]
    assert retarget_text(once, back) == text
