"""readdress: addresses, tag, marking and ports rewritten; ICRC/IPv4/UDP checksums repaired.

Oracles: scapy recomputes the ICRC and checksums of every output frame from scratch (the rebuilt
frame must equal ours byte for byte); TShark validates IP/UDP checksums and shows the new fields;
the microsecond output follows case C9.
"""
from __future__ import annotations

import ipaddress
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.analysis.trace import write_trace
from tests.conftest import needs_tshark
from tests.analysis.test_inspect import _fill, write
from tokenpcap.analysis.inspect import inspect_capture
from tokenpcap.errors import CaptureError, InputError
from tokenpcap.pcap import ErfWriter, PcapWriter
from tokenpcap.pcap.reader import open_capture
from tokenpcap.analysis.readdress import Mapping, load_mapping, readdress

scapy_all = pytest.importorskip("scapy.all")
from scapy.contrib.roce import BTH  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402


def lab_mapping() -> Mapping:
    m = Mapping(vlan=100, pcp=5, dscp=10, ecn=1, ttl=17, udp_sport_offset=5)
    for old, new in (("10.0.0.1", "192.168.77.1"), ("10.0.0.2", "192.168.77.2"),
                     ("fd00::1", "fd99::1"), ("02:00:00:00:00:0b", "b8:ce:f6:00:00:0b")):
        m.add_address(old, new)
    return m


def frames_of(path):
    cap = open_capture(path)
    return [cap.frame(r) for r in cap.read()]


@pytest.fixture
def rewritten(tmp_path, scapy_vectors):
    vec = [v for v in scapy_vectors["vectors"]]
    src = write(tmp_path / "in.pcap", [bytes.fromhex(v["hex"]) for v in vec])
    stats = readdress(src, tmp_path / "out.pcap", lab_mapping())
    return src, tmp_path / "out.pcap", vec, stats


def test_scapy_recomputes_the_same_icrc_and_checksums(rewritten):
    _, out, vec, stats = rewritten
    assert stats["packets"] == len(vec)
    for v, f in zip(vec, frames_of(out)):
        p = Ether(f)
        if BTH not in p:
            assert Ether(f).type == 0x8808            # PFC stays untagged
            continue
        old_sport = Ether(bytes.fromhex(v["hex"]))[UDP].sport
        assert p.vlan == 100 and p.prio == 5
        assert p[UDP].sport == 0xC000 + (old_sport - 0xC000 + 5) % 0x4000
        if v.get("icrc_ok") is False:                 # corruption is kept, not laundered
            continue
        q = p.copy()
        q[BTH].icrc = None
        if IP in q:
            del q[IP].chksum
            assert (p[IP].src, p[IP].tos, p[IP].ttl) in (("192.168.77.1", 41, 17),
                                                          ("192.168.77.2", 41, 17))
        if IPv6 in q:
            assert p[IPv6].src == "fd99::1" and p[IPv6].tc == 41 and p[IPv6].hlim == 17
            if p[UDP].chksum:
                del q[UDP].chksum
        assert bytes(q) == f, v["name"]


def test_inspect_before_and_after(rewritten):
    src, out, vec, _ = rewritten
    a, b = inspect_capture(src), inspect_capture(out)
    assert (a.roce["icrc_ok"], a.roce["icrc_bad"]) == (b.roce["icrc_ok"], b.roce["icrc_bad"])
    tagged_before = 1                                  # the case file's VLAN 100 frame
    assert b.packets == a.packets
    assert b.bytes == a.bytes + 4 * (a.packets - a.pfc["frames"] - tagged_before)
    assert b.roce["payload_bytes"] == a.roce["payload_bytes"]
    assert [r["time_ns"] for r in open_capture(out).read()] == \
        [r["time_ns"] for r in open_capture(src).read()]


@needs_tshark
def test_tshark_validates_checksums(rewritten):
    _, out, _, _ = rewritten
    lines = subprocess.run(
        ["tshark", "-r", str(out), "-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE",
         "--disable-heuristic", "rpcrdma_infiniband", "-T", "fields", "-e", "vlan.id",
         "-e", "ip.checksum.status", "-e", "udp.checksum.status", "-e", "ip.dst", "-e", "eth.dst",
         "-E", "separator=,"], capture_output=True, text=True, check=True).stdout.splitlines()
    for line in lines:
        vid, ipst, udpst, dst, mac = line.split(",")
        if mac == "01:80:c2:00:00:01":
            assert vid == ""                             # PFC: no tag
            continue
        assert vid == "100"
        assert ipst in ("", "1")                         # 1 = good
        assert udpst in ("1", "3", "4")                  # good, absent (IPv4 0), 0 on IPv6 kept
        assert dst in ("", "192.168.77.1", "192.168.77.2")


def test_strip_tag_and_usec_rounding_c9(tmp_path, scapy_vectors):
    tagged = next(v for v in scapy_vectors["vectors"] if v["name"].startswith("vlan100"))
    f = bytes.fromhex(tagged["hex"])
    src = tmp_path / "t.pcap"
    times = np.array([1332502747_520990009, 1332502747_520990500, 1332502747_999999600],
                     np.int64)
    with PcapWriter(src) as w:
        w.write_batch(times, np.full(3, len(f)), _fill([f] * 3))
    readdress(src, tmp_path / "u.pcap", Mapping(vlan=-1), usec=True)
    raw = (tmp_path / "u.pcap").read_bytes()
    assert struct.unpack_from("<I", raw)[0] == 0xA1B2C3D4          # microsecond magic
    recs, pos = [], 24
    for _ in range(3):
        sec, usec, caplen, orig = struct.unpack_from("<IIII", raw, pos)
        recs.append((sec, usec, caplen))
        pos += 16 + caplen
    assert recs == [(1332502747, 520990, len(f) - 4), (1332502747, 520991, len(f) - 4),
                    (1332502748, 0, len(f) - 4)]
    p = Ether(frames_of(tmp_path / "u.pcap")[0])
    assert p.type == 0x0800 and inspect_capture(tmp_path / "u.pcap").roce["icrc_bad"] == 0


def test_pcapng_keeps_interfaces_and_comments(tmp_path):
    labels = ["dp/backward/AllReduce step=0"] * 64 + ["tp/forward/AllReduce"] * 64
    write_trace(tmp_path / "g.pcapng", 128, fmt="pcapng", comments=labels)
    m = Mapping()
    m.add_address("198.18.0.1", "10.9.0.1")
    readdress(tmp_path / "g.pcapng", tmp_path / "h.pcapng", m)
    a, b = inspect_capture(tmp_path / "g.pcapng"), inspect_capture(tmp_path / "h.pcapng")
    assert b.phases == a.phases and b.roce["icrc_bad"] == 0 and b.roce["icrc_ok"] == 128
    assert {n["address"] for n in b.nics} == {n["address"] for n in a.nics} - {"198.18.0.1"} \
        | {"10.9.0.1"}
    assert [i["name"] for i in b.interfaces] == [i["name"] for i in a.interfaces]


def test_usec_into_a_pcapng_name_is_refused(tmp_path):
    """--usec writes a classic microsecond pcap, so a .pcapng name is refused (usage
    error, nothing written) instead of getting a pcap that drops the comments."""
    from click.testing import CliRunner

    from tokenpcap.cli import main
    labels = ["dp/backward/AllReduce step=0"] * 16
    write_trace(tmp_path / "g.pcapng", 16, fmt="pcapng", comments=labels)
    r = CliRunner().invoke(main, ["readdress", str(tmp_path / "g.pcapng"), "-o",
                                  str(tmp_path / "u.pcapng"), "--usec"])
    assert r.exit_code == 2 and "--usec" in r.output and ".pcap name" in r.output
    assert not (tmp_path / "u.pcapng").exists()
    with pytest.raises(InputError, match="--usec: got an output named .pcapng"):
        readdress(tmp_path / "g.pcapng", tmp_path / "v.PCAPNG", Mapping(), usec=True)
    assert not (tmp_path / "v.PCAPNG").exists()
    readdress(tmp_path / "g.pcapng", tmp_path / "u.pcap", Mapping(), usec=True)
    assert (tmp_path / "u.pcap").read_bytes()[:4] == b"\xd4\xc3\xb2\xa1"   # us magic


def test_output_format_follows_the_name(tmp_path):
    """A pcap read into a .pcapng name becomes pcapng (ns, if_tsresol 9), a pcapng read into a
    .pcap name a nanosecond pcap; capinfos agrees on the format written."""
    write_trace(tmp_path / "a.pcap", 8)
    readdress(tmp_path / "a.pcap", tmp_path / "b.pcapng", Mapping())
    write_trace(tmp_path / "c.pcapng", 8, fmt="pcapng")
    readdress(tmp_path / "c.pcapng", tmp_path / "d.pcap", Mapping())
    assert (tmp_path / "b.pcapng").read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"
    assert (tmp_path / "d.pcap").read_bytes()[:4] == b"\x4d\x3c\xb2\xa1"    # ns magic
    a, b = inspect_capture(tmp_path / "a.pcap"), inspect_capture(tmp_path / "b.pcapng")
    assert (b.format, b.packets, b.first_ns, b.roce["icrc_ok"]) == \
        ("pcapng", 8, a.first_ns, 8)
    if shutil.which("capinfos"):
        for name, kind in (("b.pcapng", "pcapng"), ("d.pcap", "nanosecond pcap")):
            out = subprocess.run(["capinfos", "-t", str(tmp_path / name)], capture_output=True,
                                 text=True, check=True).stdout
            assert kind in out


def test_errors(tmp_path, hw_frames):
    with pytest.raises(InputError, match="expected a MAC"):
        Mapping().add_address("not-an-address", "10.0.0.1")
    with pytest.raises(InputError, match="one kind"):
        Mapping().add_address("10.0.0.1", "fd00::1")
    bad = tmp_path / "m.yaml"
    bad.write_text("addresses: {10.0.0.1: 10.0.0.2}\nvlan: 5000\n")
    with pytest.raises(InputError, match="vlan: got 5000, expected an integer 0..4095"):
        load_mapping(bad)
    bad.write_text("adresses: {}\n")
    with pytest.raises(InputError, match="'adresses': got unknown"):
        load_mapping(bad)
    ib = [bytes.fromhex(x["hex"]) for x in hw_frames["native_ib"]]
    write(tmp_path / "ib.erf", ib, writer=ErfWriter)
    with pytest.raises(InputError, match="InfiniBand"):
        readdress(tmp_path / "ib.erf", tmp_path / "x.pcap", Mapping())
    (tmp_path / "junk.pcap").write_bytes(b"\xd4\xc3\xb2\xa1" + b"\0" * 10)
    with pytest.raises(CaptureError):
        readdress(tmp_path / "junk.pcap", tmp_path / "y.pcap", Mapping())
    assert not (tmp_path / "y.pcap").exists()


def test_cli_readdress(tmp_path, scapy_vectors):
    from click.testing import CliRunner

    from tokenpcap.cli import main
    src = write(tmp_path / "in.pcap", [bytes.fromhex(v["hex"]) for v in scapy_vectors["vectors"]])
    yml = tmp_path / "lab.yaml"
    yml.write_text("addresses:\n  10.0.0.1: 192.168.1.1\ndscp: 46\n")
    r = CliRunner().invoke(main, ["readdress", str(src), "-o", str(tmp_path / "o.pcap"), "--map",
                                  str(yml), "--map", "10.0.0.2=192.168.1.2", "--vlan", "7"])
    assert r.exit_code == 0, r.output
    assert "12 ICRCs updated" in r.output          # the 12 IPv4 RoCE frames; IPv6 kept
    rep = inspect_capture(tmp_path / "o.pcap")
    assert {n["address"] for n in rep.nics} == {"192.168.1.1", "192.168.1.2", "fd00::1"}
    assert rep.roce["icrc_bad"] == 1                   # the case file's deliberately bad one
    r = CliRunner().invoke(main, ["readdress", str(src), "-o", str(tmp_path / "p.pcap"),
                                  "--map", "10.0.0.1"])
    assert r.exit_code == 2 and "expected OLD=NEW" in r.output


@pytest.mark.parametrize("args, option", [
    (["--pcp", "9"], "--pcp"), (["--dscp", "64"], "--dscp"), (["--ecn", "5"], "--ecn"),
    (["--ttl", "0"], "--ttl"), (["--ttl", "256"], "--ttl"), (["--vlan", "5000"], "--vlan"),
    (["--vlan", "abc"], "--vlan"), (["--sport-offset", "-1"], "--sport-offset"),
    (["--map", "10.0.0.1"], "--map"), (["--map", "10.0.0.1=zz"], "--map"),
    (["--map", "10.0.0.1=fd00::1"], "--map"), (["--map", "a=b=c"], "--map")])
def test_bad_option_values_are_usage_errors(tmp_path, args, option):
    """An out-of-range or malformed option value exits 2 (usage error,
    as generate's), names the option as spelled, and writes nothing."""
    write_trace(tmp_path / "in.pcap", 4)
    r = _cli("readdress", tmp_path / "in.pcap", "-o", tmp_path / "o.pcap", *args)
    assert r.exit_code == 2, r.output
    assert f"'{option}'" in r.output and "udp-sport" not in r.output
    assert not (tmp_path / "o.pcap").exists()


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "40")), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["ipv4", "ipv6", "vlan", "pfc"]),
                          st.binary(max_size=120), st.integers(0, 0xFFFF)), min_size=1,
                max_size=8))
def test_hostile_frames_are_copied_not_crashed_on(tmp_path_factory, frames):
    """Frames whose lengths lie or whose headers are cut short go through readdress without an
    error, one record out per record in, and the well-formed ones keep a good ICRC."""
    d = tmp_path_factory.mktemp("fz")
    out = []
    for kind, rest, word in frames:
        w = word.to_bytes(2, "big")
        out.append({"ipv4": bytes(12) + b"\x08\x00\x45\x00" + w + bytes(5) + b"\x11" +
                    bytes(10) + b"\xc0\x00\x12\xb7" + w,
                    "ipv6": bytes(12) + b"\x86\xdd\x60\x00\x00\x00" + w + b"\x11\x40" +
                    bytes(32) + b"\xc0\x00\x12\xb7" + w,
                    "vlan": bytes(12) + b"\x81\x00" + w + b"\x08\x00\x45" + bytes(8) + b"\x11",
                    "pfc": bytes(12) + b"\x88\x08\x01\x01" + w}[kind] + rest)
    src = write(d / "in.pcap", out)
    m = lab_mapping()
    m.add_address("0.0.0.0", "10.1.1.1")
    stats = readdress(src, d / "out.pcap", m)
    rep = inspect_capture(d / "out.pcap")
    assert stats["packets"] == rep.packets == len(out)
    before = inspect_capture(src).roce
    assert (rep.roce["icrc_ok"], rep.roce["icrc_bad"]) == (before["icrc_ok"], before["icrc_bad"])


def _scapy_ipv4_checksum_ok(frame: bytes) -> bool:
    """scapy recomputes the IPv4 header checksum of a (possibly cut) frame from scratch."""
    ip = Ether(frame)[IP]
    head = bytes(ip)[:ip.ihl * 4]
    again = IP(head)
    del again.chksum
    return IP(bytes(again)).chksum == ip.chksum


def _cli(*args):
    from click.testing import CliRunner

    from tokenpcap.cli import main
    return CliRunner().invoke(main, [str(a) for a in args])


def test_generated_snaplen_pcapng_is_readdressed_and_kept_cut(tmp_path):
    """A ``generate --snaplen 64`` pcapng (its records cut at 64, any
    IDB snaplen) is readdressed: same caplen/wire length per record, the IPv4 address mapped and
    the header checksum right (scapy), the bytes past the headers untouched, and the summary
    says the cut frames' ICRC cannot be recomputed. A tag added and stripped again gives the
    input's records back byte for byte (an added tag grows the snaplen, no byte is lost)."""
    from tokenpcap.pcap.reader import open_capture as oc
    r = _cli("generate", ROOT_DANTE, "-o", tmp_path / "g", "--scale", 64, "--snaplen", 64,
             "--ranks", 0, "--jobs", 1)
    assert r.exit_code == 0, r.output
    src = sorted((tmp_path / "g").glob("*.pcapng"))[0]
    r = _cli("readdress", src, "-o", tmp_path / "lab.pcapng", "--map", "198.18.0.1=10.0.0.1")
    assert r.exit_code == 0, r.output
    assert "cannot be recomputed" in r.output and "truncated" in r.output
    a, b = oc(src), oc(tmp_path / "lab.pcapng")
    ra, rb = a.read(), b.read()
    assert (ra["caplen"] == rb["caplen"]).all() and (ra["orig_len"] == rb["orig_len"]).all()
    assert (ra["caplen"] < ra["orig_len"]).sum() > 0 and ra["caplen"].max() == 64
    mapped = 0
    for r, x, y in zip(ra, (a.frame(r) for r in ra), (b.frame(r) for r in rb)):
        assert _scapy_ipv4_checksum_ok(y)
        px, py = Ether(x)[IP], Ether(y)[IP]
        assert (py.src, py.dst) == tuple("10.0.0.1" if v == "198.18.0.1" else v
                                         for v in (px.src, px.dst))
        mapped += px.src == "198.18.0.1"
        if r["caplen"] < r["orig_len"]:
            assert y[34:] == x[34:]                 # UDP, BTH, ...: nothing else to change
        else:
            assert y[34:-4] == x[34:-4]             # whole frames: a new ICRC
    assert mapped > 0 and inspect_capture(tmp_path / "lab.pcapng").roce["icrc_bad"] == 0
    _cli("readdress", src, "-o", tmp_path / "t.pcapng", "--vlan", 9)
    _cli("readdress", tmp_path / "t.pcapng", "-o", tmp_path / "u.pcapng", "--vlan", "none")
    rt, ru = oc(tmp_path / "t.pcapng").read(), oc(tmp_path / "u.pcapng")
    assert (rt["caplen"] == ra["caplen"] + 4).all()
    assert [ru.frame(r) for r in ru.read()] == [a.frame(r) for r in ra]


ROOT_DANTE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                          "profiles", "scenarios", "dante.yaml")


@pytest.mark.skipif(shutil.which("editcap") is None, reason="editcap is not installed")
def test_editcap_cut_pcapng_is_readdressed(tmp_path):
    """A foreign file cut by ``editcap -s 64 -F pcapng`` reads back with our mapping applied and
    a right IPv4 checksum (scapy), records still 64 bytes of their wire length."""
    write_trace(tmp_path / "full.pcap", 32)
    subprocess.run(["editcap", "-s", "64", "-F", "pcapng", str(tmp_path / "full.pcap"),
                    str(tmp_path / "cut.pcapng")], check=True, capture_output=True)
    m = Mapping()
    m.add_address("198.18.0.1", "10.0.0.1")
    stats = readdress(tmp_path / "cut.pcapng", tmp_path / "lab.pcapng", m)
    assert stats["truncated"] == stats["packets"] == 32 and stats["icrc_updated"] == 0
    cap = open_capture(tmp_path / "lab.pcapng")
    rec = cap.read()
    assert (rec["caplen"] == 64).all() and (rec["orig_len"] > 64).all()
    frames = [cap.frame(r) for r in rec]
    assert all(_scapy_ipv4_checksum_ok(f) for f in frames)
    assert {Ether(f)[IP].src for f in frames} >= {"10.0.0.1"}
    assert "198.18.0.1" not in {Ether(f)[IP].src for f in frames} | \
        {Ether(f)[IP].dst for f in frames}


@pytest.mark.parametrize("cut", [14, 16, 30, 64, 100])
def test_cut_frames_equal_the_full_rewrite_cut(tmp_path, scapy_vectors, cut):
    """Every frame cut at ``cut`` bytes becomes the full frame's rewrite cut there, where the
    headers are whole (MACs always; IP, UDP when they end by ``cut``), and keeps the input's
    bytes in a header cut short; an IPv6 UDP checksum may differ (it covers the ICRC). No write
    spills into the next record: every record keeps its own length and its bytes."""
    frames = [bytes.fromhex(v["hex"]) for v in scapy_vectors["vectors"]]
    m = Mapping(dscp=10, ecn=1, ttl=17, udp_sport_offset=5)
    for old, new in (("10.0.0.1", "192.168.77.1"), ("fd00::1", "fd99::1"),
                     ("02:00:00:00:00:0b", "b8:ce:f6:00:00:0b")):
        m.add_address(old, new)
    full = write(tmp_path / "full.pcap", frames)
    short = write(tmp_path / "cut.pcap", frames, snaplen=cut)
    readdress(full, tmp_path / "a.pcap", m)
    stats = readdress(short, tmp_path / "b.pcap", m)
    a, b = frames_of(tmp_path / "a.pcap"), frames_of(tmp_path / "b.pcap")
    assert [len(f) for f in b] == [min(len(f), cut) for f in frames]
    assert stats["truncated"] == sum(len(f) > cut for f in frames)
    for x, y, z in zip(frames, a, b):
        l2 = 18 if x[12:14] == b"\x81\x00" else 14
        ip_end = l2 + {b"\x08\x00": 20, b"\x86\xdd": 40}.get(x[l2 - 2:l2], 0)
        want = bytearray(y[:cut] if cut >= ip_end else y[:12] + x[12:cut])
        got = bytearray(z)
        if x[l2 - 2:l2] == b"\x86\xdd" and cut >= ip_end + 8:
            got[ip_end + 6:ip_end + 8] = want[ip_end + 6:ip_end + 8] = b"\0\0"
        if len(x) > cut:                           # an ICRC cut short stays as it was
            icrc = slice(len(x) - 4, cut)
            got[icrc] = want[icrc] = bytes(len(got[icrc]))
        assert got == want


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "40")), deadline=None)
@given(st.lists(st.sampled_from(range(16)), min_size=2, max_size=12), st.integers(1, 140),
       st.sampled_from([None, 7, -1]))
def test_cut_records_rewrite_alone_as_in_a_batch(scapy_vectors, tmp_path_factory, pick, cut,
                                                 vlan):
    """Records cut anywhere (tag added, kept or stripped) come out the same whether rewritten in
    one batch or one by one: no write lands outside its own record."""
    d = tmp_path_factory.mktemp("cut")
    frames = [bytes.fromhex(scapy_vectors["vectors"][i]["hex"]) for i in pick]
    src = write(d / "in.pcap", frames, snaplen=cut)
    m = lab_mapping()
    m.vlan = vlan
    readdress(src, d / "batch.pcap", m)
    readdress(src, d / "one.pcap", m, batch=1)
    assert frames_of(d / "batch.pcap") == frames_of(d / "one.pcap")
    got = open_capture(d / "batch.pcap").read()
    grow = 4 if vlan == 7 else 0
    assert (got["caplen"] <= np.minimum(got["orig_len"], cut + grow)).all()


def test_pcapng_interface_descriptions_name_the_new_addresses(tmp_path):
    """Each pcapng interface description names the lab's addresses the rewritten frames carry,
    not the generated ones (docs/analysis.md: it names both)."""
    from tests.schedule.test_schedule import tiny_scenario
    from tokenpcap.config.addresses import nic_addresses
    from tokenpcap.generate.run import GenerateOptions, generate
    from tokenpcap.pcap.reader import open_capture
    from tokenpcap.config.profiles import load_scenario

    s = load_scenario(tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8))
    res = generate(s, GenerateOptions(out_dir=tmp_path, scale=64, jobs=1, split="none"))
    src = res.files[0][0]
    addr = nic_addresses(s.cluster)
    ip0 = ".".join(str(b) for b in addr.ipv4[0].tolist())
    mac0 = ":".join(f"{b:02x}" for b in addr.mac[0].tolist())

    def descriptions(path):  # type: ignore[no-untyped-def]
        cap = open_capture(path)
        for _ in cap.batches(1 << 16):     # interfaces are read as the file is walked
            pass
        return [i.description for i in cap.interfaces]

    before = descriptions(src)[0]
    assert ip0 in before.split() and mac0 in before.split()      # as generate describes NIC 0
    r = _cli("readdress", src, "-o", tmp_path / "lab.pcapng", "--map", f"{ip0}=10.9.8.7",
             "--map", f"{mac0}=b8:ce:f6:12:34:00")
    assert r.exit_code == 0, r.output
    after = descriptions(tmp_path / "lab.pcapng")
    assert after[0] == before.replace(ip0, "10.9.8.7").replace(mac0, "b8:ce:f6:12:34:00")
    assert after[1:] == descriptions(src)[1:] and len(after) > 1
    rep = inspect_capture(tmp_path / "lab.pcapng")
    assert "10.9.8.7" in {n["address"] for n in rep.nics} and rep.roce["icrc_bad"] == 0


def test_mapped_addresses_no_frame_carries_are_named(tmp_path, scapy_vectors):
    """A --map address that no frame carries (a typo, another host) is reported, not silently
    left alone; the addresses frames do carry are found by scapy's own decode."""
    raw = [bytes.fromhex(v["hex"]) for v in scapy_vectors["vectors"]]
    src = write(tmp_path / "in.pcap", raw)
    present = set()
    for b in raw:
        p = Ether(b)
        present |= {p.src, p.dst}
        for layer in (IP, IPv6):
            if layer in p:
                present |= {str(ipaddress.ip_address(p[layer].src)),
                            str(ipaddress.ip_address(p[layer].dst))}
    m = lab_mapping()
    m.add_address("02:00:00:00:00:77", "02:00:00:00:00:78")    # absent: a typo
    m.add_address("10.9.9.9", "10.0.0.9")
    stats = readdress(src, tmp_path / "out.pcap", m)
    olds = ["02:00:00:00:00:0b", "02:00:00:00:00:77", "10.0.0.1", "10.0.0.2", "10.9.9.9",
            "fd00::1"]
    assert stats["unmatched"] == [a for a in olds if a not in present]
    assert {"02:00:00:00:00:77", "10.9.9.9"} <= set(stats["unmatched"])
    assert "10.0.0.1" in present and "10.0.0.1" not in stats["unmatched"]
    r = _cli("readdress", src, "-o", tmp_path / "o.pcap", "--map", "10.9.9.9=10.0.0.9")
    assert r.exit_code == 0 and "no frame" in r.output and "10.9.9.9" in r.output, r.output


def test_the_provenance_comment_is_kept_so_inspect_against_still_reads_the_run(tmp_path):
    """A generated pcapng names its run in its section's comment (scenario, scale, iterations,
    selection); readdressing it into a ``.pcapng`` keeps that comment, so ``inspect --against``
    of the lab's copy compares it with the plan of the run that made it, as of the original."""
    from tokenpcap.pcap.reader import open_capture as oc
    r = _cli("generate", ROOT_DANTE, "-o", tmp_path / "g", "--scale", 64, "--iterations", 2,
             "--nics", 0, "--snaplen", 96, "--jobs", 1)
    assert r.exit_code == 0, r.output
    src = sorted((tmp_path / "g").glob("*.pcapng"))[0]
    r = _cli("readdress", src, "-o", tmp_path / "lab.pcapng", "--dscp", 10)
    assert r.exit_code == 0, r.output
    before = [s["options"].get("opt_comment") for s in oc(src).sections]
    assert before[0].startswith("tokenpcap ")
    cap = oc(tmp_path / "lab.pcapng")
    cap.read()
    assert [s["options"].get("opt_comment") for s in cap.sections] == before
    r = _cli("inspect", tmp_path / "lab.pcapng", "--against", ROOT_DANTE, "--strict")
    assert r.exit_code == 0, r.output
    assert "scale 64, 2 iterations; scale and iterations from the provenance comment" in r.output
