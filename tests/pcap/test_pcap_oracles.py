"""Our files read by independent readers (tshark, capinfos, tcpdump/libpcap, dpkt, scapy), and
files written by an independent writer (editcap) read by ours."""
from __future__ import annotations

import subprocess
from decimal import Decimal
from fractions import Fraction

import pytest

from tests.conftest import needs_tshark
from tokenpcap.pcap.reader import open_capture

from .helpers import have, make_frames, tshark_fields
from .test_pcap_writer import C8, write

needs_tcpdump = pytest.mark.skipif(not have("tcpdump"), reason="tcpdump is not installed")
needs_editcap = pytest.mark.skipif(not have("editcap"), reason="editcap (wireshark-common) missing")
needs_capinfos = pytest.mark.skipif(not have("capinfos"), reason="capinfos (wireshark-common) missing")

LENGTHS = [60, 1514, 4170, 9000, 9216, 62]             # jumbo frames up to 9 KiB stay whole
TIMES = C8.tolist() + [1700000002_999999999, 1700000003_000000000, 1700000003_123456789]
COMMENTS = ["dp/backward/AllReduce", "tp/forward/AllReduce", None, "pp/forward/SendRecv",
            "dp/backward/AllReduce", "ep/forward/AllToAll"]


def _epoch(ns: int) -> str:
    return f"{ns // 10**9}.{ns % 10**9:09d}"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("oracle")
    frames = make_frames(LENGTHS, seed=7)
    out = {}
    for kind, order in [("pcap", "<"), ("pcap", ">"), ("pcapng", "<"), ("pcapng", ">"),
                        ("pcap-ib", "<"), ("pcapng-ib", ">"), ("erf", "<")]:
        path = d / f"{kind}{'-be' if order == '>' else ''}.{kind.split('-')[0]}"
        write(kind, path, TIMES, frames, order=order, iface=[0, 1, 0, 2, 1, 0], batches=2,
              comments=COMMENTS if kind.startswith("pcapng") else None)
        out[path.name] = path
    return out, frames


@needs_tshark
def test_tshark_reads_times_lengths_interfaces_comments(files):
    paths, frames = files
    for name, path in paths.items():
        rows = tshark_fields(path, "frame.time_epoch", "frame.len", "frame.cap_len",
                             "frame.interface_name", "frame.comment", "frame.protocols")
        assert [r[0] for r in rows] == [_epoch(t) for t in TIMES], name
        assert [int(r[1]) for r in rows] == LENGTHS and [int(r[2]) for r in rows] == LENGTHS
        ib = "ib" in name or name.endswith(".erf")
        assert all(r[5].startswith("erf:infiniband" if ib else "eth") for r in rows), name
        if name.startswith("pcapng"):
            prefix = "hca" if ib else "nic"
            assert [r[3] for r in rows] == [f"{prefix}{i}" for i in [0, 1, 0, 2, 1, 0]]
            assert [r[4] or None for r in rows] == COMMENTS


@needs_tshark
def test_tshark_hex_dump_equals_our_frames(files):
    paths, frames = files
    for name in ("pcap.pcap", "pcapng-be.pcapng"):
        text = subprocess.run(["tshark", "-r", str(paths[name]), "-x"], capture_output=True,
                              text=True, check=True).stdout
        dumps = [b"".join(bytes.fromhex(line[6:53].replace(" ", "")) for line in block.splitlines()
                          if len(line) > 6 and line[4:6] == "  ")
                 for block in text.strip().split("\n\n")]
        assert dumps == frames, name


@needs_tshark
def test_tshark_decodes_real_infiniband_frames_from_erf(tmp_path, hw_frames):
    frames = [bytes.fromhex(f["hex"]) for f in hw_frames["native_ib"]]
    t = [1, 2, 3]
    for kind in ("pcap-ib", "pcapng-ib", "erf"):
        path = tmp_path / f"hw.{kind}"
        write(kind, path, t, frames, comments=["a", "b", "c"] if kind == "pcapng-ib" else None)
        rows = tshark_fields(path, "infiniband.lrh.dlid", "infiniband.lrh.slid",
                             "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.bth.psn",
                             "_ws.malformed")
        for f, r in zip(frames, rows):
            grh = 40 if f[1] & 3 == 3 else 0                       # LRH LNH=3: a GRH follows
            bth = f[8 + grh:20 + grh]
            want = [int.from_bytes(f[2:4], "big"), int.from_bytes(f[6:8], "big"), bth[0],
                    int.from_bytes(bth[5:8], "big"), int.from_bytes(bth[9:12], "big") & 0xFFFFFF]
            assert [int(r[0]), int(r[1]), int(r[2]), int(r[3], 16), int(r[4])] == want, kind
            assert r[5] == ""


@needs_capinfos
def test_capinfos_counts_precision_interfaces(files):
    paths, _ = files
    res = subprocess.run(["capinfos", "-M", str(paths["pcapng.pcapng"])], capture_output=True,
                         text=True, check=True).stdout
    assert "Number of packets:   6" in res and "nanoseconds (9)" in res
    assert "Name = nic1" in res and "Description = NIC 1" in res and "Speed = 800000000000" in res
    res = subprocess.run(["capinfos", "-T", "-r", "-c", "-a", "-e", "-S", "-l", "-E",
                          str(paths["pcap.pcap"])], capture_output=True, text=True, check=True)
    fields = res.stdout.strip().split("\t")       # name, encapsulation, snaplen ..., count, first, last
    assert fields[1:3] == ["ether", "262144"]
    assert fields[-3:] == ["6", _epoch(TIMES[0]), _epoch(TIMES[-1])]


@needs_tcpdump
def test_libpcap_reads_every_frame_whole(files, tmp_path):
    paths, frames = files
    for name in ("pcap.pcap", "pcap-be.pcap", "pcapng.pcapng", "pcap-ib.pcap"):
        out = tmp_path / f"re-{name}"
        res = subprocess.run(["tcpdump", "--time-stamp-precision=nano", "-r", str(paths[name]),
                              "-w", str(out)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        rec = open_capture(out).read()
        cap = open_capture(out)
        assert rec["caplen"].tolist() == LENGTHS, name
        assert rec["time_ns"].tolist() == TIMES, name
        assert [cap.frame(r) for r in rec] == frames, name


def test_dpkt_reads_our_pcap_and_pcapng(files):
    dpkt = pytest.importorskip("dpkt")
    paths, frames = files
    for name in ("pcap.pcap", "pcap-be.pcap"):
        with open(paths[name], "rb") as f:
            got = list(dpkt.pcap.Reader(f))
        assert [bytes(b) for _, b in got] == frames
        assert [Decimal(ts) for ts, _ in got] == [Decimal(_epoch(t)) for t in TIMES]  # exact
    with open(paths["pcapng.pcapng"], "rb") as f:
        got = list(dpkt.pcapng.Reader(f))
    assert [bytes(b) for _, b in got] == frames


def test_scapy_reads_exact_times_comments_interfaces(files):
    su = pytest.importorskip("scapy.utils")
    pytest.importorskip("scapy.layers.l2")           # registers linktype 1 for PcapNgReader
    paths, frames = files
    for name in ("pcap.pcap", "pcap-be.pcap"):
        with su.RawPcapReader(str(paths[name])) as r:
            got = list(r)
        assert [d for d, _ in got] == frames
        assert [m.sec * 10**9 + m.usec for _, m in got] == TIMES      # usec holds ns here
    for name in ("pcapng.pcapng", "pcapng-be.pcapng"):
        with su.RawPcapNgReader(str(paths[name])) as r:
            got = list(r)
        assert [d for d, _ in got] == frames
        ticks = [Fraction((m.tshigh << 32) | m.tslow, m.tsresol) * 10**9 for _, m in got]
        assert ticks == TIMES and [m.wirelen for _, m in got] == LENGTHS
        assert [m.comments[0].decode() if m.comments else None for _, m in got] == COMMENTS
        assert [m.ifname.decode() for _, m in got] == [f"nic{i}" for i in [0, 1, 0, 2, 1, 0]]
    with su.PcapNgReader(str(paths["pcapng-be.pcapng"])) as r:
        pkts = list(r)
    assert [p.time for p in pkts] == [Decimal(_epoch(t)) for t in TIMES]


@needs_editcap
@pytest.mark.parametrize("fmt, nsec", [("pcap", False), ("nsecpcap", True), ("pcapng", True)])
def test_files_written_by_editcap_read_by_us(files, tmp_path, fmt, nsec):
    paths, frames = files
    out = tmp_path / f"conv.{fmt}"
    subprocess.run(["editcap", "-F", fmt, str(paths["pcap.pcap"]), str(out)], check=True,
                   capture_output=True)
    cap = open_capture(out)
    rec = cap.read()
    want = TIMES if nsec else [t // 1000 * 1000 for t in TIMES]      # editcap truncates to us
    assert rec["time_ns"].tolist() == want and rec["orig_len"].tolist() == LENGTHS
    assert [cap.frame(r) for r in rec] == frames
    assert rec["linktype"].tolist() == [1] * len(frames)
