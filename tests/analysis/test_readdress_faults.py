"""readdress and plot on inputs that are valid but unusual, or that contradict themselves: one
clear line and no output file, or a correct output; never a traceback, never a wrong file.

Captures are spelled out by hand from the specs (tests/pcap/helpers.py: draft-ietf-opsawg-pcap,
draft-ietf-opsawg-pcapng, Endace ERF) or written with our writers; native InfiniBand frames are
the hardware frames of tests/cases/hw-frames.json.
"""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tests.analysis.test_inspect import write
from tests.analysis.trace import write_trace
from tests.pcap.helpers import block, erf_record, hand_pcap, idb, pad4, shb
from tokenpcap.analysis.plot import capture_series, plot_all
from tokenpcap.analysis.readdress import Mapping, readdress
from tokenpcap.cli import main
from tokenpcap.errors import CaptureError, InputError, OutputError
from tokenpcap.pcap import ErfWriter, Interface, PcapngWriter
from tokenpcap.pcap.reader import open_capture


def _ib_frames(hw_frames) -> list[bytes]:
    return [bytes.fromhex(x["hex"]) for x in hw_frames["native_ib"]]


def _roce_frames(tmp_path, n: int = 6) -> list[bytes]:
    src = tmp_path / "roce.pcap"
    write_trace(src, n)
    cap = open_capture(src)
    return [bytes(cap.frame(r)) for r in cap.read()]


@pytest.mark.parametrize("container", ["pcap", "pcapng", "erf", "pcapng-mixed"])
def test_native_infiniband_is_refused_in_every_container_and_nothing_is_written(
        tmp_path, hw_frames, container):
    """IB frames in an ERF-in-pcap (197), a pcapng whose IDBs are read only as the file is
    walked, a raw ERF, and a pcapng whose first interface is Ethernet: each is refused naming
    the first IB record; with --vlan too (no tag pushed into an LRH)."""
    ib = _ib_frames(hw_frames)
    src = tmp_path / f"ib.{container.split('-')[0]}"
    if container == "pcap":
        write(src, ib, link="infiniband")
    elif container == "pcapng":
        write(src, ib, writer=PcapngWriter, interfaces=[Interface(name="ib0", link="infiniband")])
    elif container == "erf":
        write(src, ib, writer=ErfWriter)
    else:
        eth = _roce_frames(tmp_path, 2)
        with PcapngWriter(src, [Interface(name="eth0"), Interface(name="ib0", link="infiniband")]
                          ) as w:
            frames = eth + ib[:1]
            w.write_batch(np.arange(3, dtype=np.int64) * 1000 + 10**18,
                          np.array([len(f) for f in frames], np.int64),
                          lambda out, off, cl: [out.__setitem__(slice(o, o + c), np.frombuffer(
                              f[:c], np.uint8)) for f, o, c in zip(frames, off.tolist(),
                                                                     cl.tolist())],
                          interface=np.array([0, 0, 1], np.int32))
    first = 2 if container == "pcapng-mixed" else 0
    for m in (Mapping(), Mapping(vlan=100)):
        dst = tmp_path / "out.pcapng"
        with pytest.raises(InputError, match=rf"^{src}: record {first} at byte offset [\d,]+: "
                                             r"got a native InfiniBand frame, expected Ethernet"):
            readdress(src, dst, m)
        assert not dst.exists() and not list(tmp_path.glob(".out*"))


def test_ethernet_erf_is_readdressed_like_the_same_frames_in_a_pcap(tmp_path):
    """ERF type 2 (Ethernet, 2-byte pad) was refused as 'native InfiniBand': its frames are
    rewritten exactly as the same frames from a classic pcap."""
    frames = _roce_frames(tmp_path)
    erf = tmp_path / "eth.erf"
    t0 = 1_700_000_000 << 32
    erf.write_bytes(b"".join(erf_record(t0 + (i << 20), 2, f, len(f) + 4)
                             for i, f in enumerate(frames)))
    pcap = write(tmp_path / "eth.pcap", frames)
    m = Mapping(vlan=7, dscp=26)
    m.add_address("198.18.0.1", "10.9.0.1")
    a = readdress(erf, tmp_path / "a.pcap", m)
    b = readdress(pcap, tmp_path / "b.pcap", m)
    assert a["packets"] == b["packets"] == len(frames) and a["icrc_updated"] == b["icrc_updated"] > 0
    fa = [bytes(open_capture(tmp_path / "a.pcap").frame(r)) for r in
          open_capture(tmp_path / "a.pcap").read()]
    fb = [bytes(open_capture(tmp_path / "b.pcap").frame(r)) for r in
          open_capture(tmp_path / "b.pcap").read()]
    assert fa == fb


def _contradicting_pcap(tmp_path, frames, *, caplen_over: int, snaplen: int) -> object:
    """Records whose caplen exceeds orig_len by ``caplen_over`` (or the file's snaplen)."""
    recs = [(1_700_000_000, i, f, len(f) - caplen_over) for i, f in enumerate(frames)]
    p = tmp_path / f"bad-{caplen_over}-{snaplen}.pcap"
    p.write_bytes(hand_pcap(recs, snaplen=snaplen))
    return p


@pytest.mark.parametrize("over,snaplen,what", [
    (40, 262144, "orig_len"),               # caplen > orig_len
    (1, 262144, "orig_len"),
    (0, 64, "the interface's snaplen 64"),  # caplen > the file's snaplen
])
def test_records_contradicting_their_header_are_an_error_naming_record_and_offset(
        tmp_path, over, snaplen, what):
    """readdress --vlan on such records crashed with an IndexError or wrote a file capinfos
    cannot read; now: CaptureError naming record and offset, no output, with any option."""
    frames = _roce_frames(tmp_path, 3)
    src = _contradicting_pcap(tmp_path, frames, caplen_over=over, snaplen=snaplen)
    for m in (Mapping(), Mapping(vlan=100), Mapping(vlan=-1)):
        for dst in (tmp_path / "o.pcap", tmp_path / "o.pcapng"):
            with pytest.raises(CaptureError, match=rf"^{src}: record 0 at byte offset 24: caplen "
                                                   rf"got \d+, expected at most {what}"):
                readdress(src, dst, m)
            assert not dst.exists()


def _spb_pcapng(path, frames, *, with_epb: bool) -> object:
    """A valid pcapng (draft-ietf-opsawg-pcapng sec. 4.4): SHB, IDB (snaplen 0), then Simple
    Packet Blocks (orig_len, data: no interface, no timestamp), after one EPB if asked."""
    o = "<"
    out = [shb(o), idb(o, 1, 0)]
    if with_epb:
        f = frames[0]
        body = struct.pack(o + "IIIII", 0, 0x00061A80, 0, len(f), len(f))
        out.append(block(o, 6, body + pad4(f)))
    for f in frames:
        out.append(block(o, 3, struct.pack(o + "I", len(f)) + pad4(f)))
    path.write_bytes(b"".join(out))
    return path


def test_simple_packet_blocks_plot_without_time_and_readdress_refuses_with_one_line(tmp_path):
    frames = _roce_frames(tmp_path, 5)
    src = _spb_pcapng(tmp_path / "spb.pcapng", frames, with_epb=True)
    s = capture_series(src, bins=10)
    assert s["untimed"] == 5                              # counted, in no time bin
    assert sum(s["frame_sizes"].values()) == 6
    assert sum(int(v.sum()) for v in s["throughput"].values()) == len(frames[0])
    pngs = plot_all(src, tmp_path / "png")
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in pngs)
    only = _spb_pcapng(tmp_path / "only-spb.pcapng", frames, with_epb=False)
    assert capture_series(only)["untimed"] == 5
    with pytest.raises(InputError, match=rf"^{src}: record 1 at byte offset [\d,]+: got a "
                                         "Simple Packet Block \\(no timestamp\\)"):
        readdress(src, tmp_path / "o.pcapng", Mapping())
    assert not (tmp_path / "o.pcapng").exists()


def _cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_an_output_that_cannot_fit_is_refused_before_writing(tmp_path, monkeypatch):
    import shutil

    src = tmp_path / "in.pcap"
    write_trace(src, 50)
    need = 24 + sum(int(r["caplen"].sum()) + 16 * r.size for r in open_capture(src).batches())

    class Usage:
        free = need - 1

    monkeypatch.setattr(shutil, "disk_usage", lambda _: Usage())
    with pytest.raises(OutputError, match=rf"free space got {need - 1:,} bytes, expected at least "
                                          rf"the {need:,} bytes"):
        readdress(src, tmp_path / "o.pcap", Mapping())
    assert not list(tmp_path.glob("o.pcap")) and not list(tmp_path.glob(".o.pcap*"))
    Usage.free = need
    readdress(src, tmp_path / "o.pcap", Mapping())
    assert (tmp_path / "o.pcap").stat().st_size == need        # a classic pcap: the bound


def test_what_a_killed_readdress_leaves_is_removed_by_the_next(tmp_path):
    """SIGKILL cannot be handled: the temporary file stays until the next readdress to the
    same output removes it (its writer's pid is gone)."""
    import subprocess
    import sys

    src = tmp_path / "in.pcap"
    write_trace(src, 20_000)
    out = tmp_path / "o.pcap"
    script = ("import os, signal\n"
              "from tokenpcap.pcap import output\n"
              "real = output.AtomicOutput.close\n"
              "def die(self): os.kill(os.getpid(), signal.SIGKILL)\n"
              "output.AtomicOutput.close = die\n"
              "from tokenpcap.analysis.readdress import Mapping, readdress\n"
              f"readdress({str(src)!r}, {str(out)!r}, Mapping())\n")
    r = subprocess.run([sys.executable, "-c", script], cwd=Path(__file__).parents[2])
    assert r.returncode == -9
    assert not out.exists() and len(list(tmp_path.glob(".o.pcap.*.part"))) == 1
    readdress(src, out, Mapping())
    assert out.exists() and not list(tmp_path.glob(".o.pcap.*.part"))


def test_a_device_or_fifo_is_neither_read_nor_replaced(tmp_path):
    """``-o`` naming a device (here a link to /dev/null) is refused before writing, so the
    final rename cannot replace the device; a FIFO as input is refused instead of blocking."""
    import os

    src = tmp_path / "in.pcap"
    write_trace(src, 4)
    os.symlink("/dev/null", tmp_path / "null.pcap")
    r = _cli("readdress", src, "-o", tmp_path / "null.pcap", "--map", "198.18.0.1=10.0.0.1")
    assert r.exit_code == 1 and r.output == (
        f"error: {tmp_path / 'null.pcap'}: got a character device, expected a regular file or a "
        "new path (the output replaces it)\n"), r.output
    assert os.path.islink(tmp_path / "null.pcap") and not os.path.isfile("/dev/null")
    os.mkfifo(tmp_path / "fifo.pcap")
    r = _cli("readdress", tmp_path / "fifo.pcap", "-o", tmp_path / "o.pcap", "--map",
             "198.18.0.1=10.0.0.1")
    assert r.exit_code == 1 and "got a FIFO (named pipe), expected a regular capture file" in \
        r.output and not (tmp_path / "o.pcap").exists()


def test_the_output_directory_is_made_as_generate_and_export_make_theirs(tmp_path):
    """``readdress IN -o lab/nic0.pcapng`` into a directory that does not exist yet makes it
    (``mkdir -p``, as ``generate -o``, ``export -o`` and ``plot -o`` do), and the output is the
    same file as into an existing directory. A refused run leaves no directory behind; a file
    in the way is one line naming it."""
    src = tmp_path / "in.pcap"
    write_trace(src, 12)
    r = _cli("readdress", src, "-o", tmp_path / "lab" / "deep" / "nic0.pcap", "--map",
             "198.18.0.1=10.0.0.1")
    assert r.exit_code == 0, r.output
    m = Mapping()
    m.add_address("198.18.0.1", "10.0.0.1")
    readdress(src, tmp_path / "same.pcap", m)
    assert (tmp_path / "lab" / "deep" / "nic0.pcap").read_bytes() == \
        (tmp_path / "same.pcap").read_bytes()
    (tmp_path / "junk.pcap").write_bytes(b"\xd4\xc3\xb2\xa1" + b"\0" * 10)
    with pytest.raises(CaptureError):
        readdress(tmp_path / "junk.pcap", tmp_path / "new" / "y.pcap", Mapping())
    assert not (tmp_path / "new").exists()
    (tmp_path / "afile").write_text("x")
    r = _cli("readdress", src, "-o", tmp_path / "afile" / "o.pcap")
    assert r.exit_code == 1 and r.output == (
        f"error: {tmp_path / 'afile'}: output directory: got a file ({tmp_path / 'afile'}), "
        "expected a directory\n"), r.output
