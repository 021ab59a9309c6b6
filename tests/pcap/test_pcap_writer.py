"""Writers: exact bytes against hand-spelled headers, round trips, atomic output, bad input."""
from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.errors import EncodeError, OutputError
from tokenpcap.pcap import Comments, ErfWriter, Interface, PcapngWriter, PcapWriter
from tokenpcap.pcap.reader import open_capture

from .helpers import frames_fill, make_frames

C8 = np.array([1700000000_000000000, 1700000000_000000100, 1700000001_000000001])


def write(kind: str, path, t, frames, *, order="<", iface=0, comments=None, snaplen=262144,
          batches=1, **kw):
    t = np.asarray(t, np.int64)
    fb = np.array([len(f) for f in frames], np.int64)
    if kind == "pcapng":
        names = [Interface(f"nic{i}", f"NIC {i}", 400 * 10**9 * (i + 1)) for i in range(4)]
        w = PcapngWriter(path, names, byte_order=order, snaplen=snaplen, **kw)
    elif kind == "pcapng-ib":
        w = PcapngWriter(path, [Interface(f"hca{i}", link="infiniband") for i in range(4)],
                         byte_order=order, snaplen=snaplen, **kw)
    elif kind == "erf":
        w = ErfWriter(path, snaplen=snaplen, **kw)
    else:
        w = PcapWriter(path, link="infiniband" if kind == "pcap-ib" else "ethernet",
                       byte_order=order, snaplen=snaplen, **kw)
    iface = np.broadcast_to(np.asarray(iface), t.shape)
    with w:
        cuts = np.linspace(0, t.size, batches + 1).astype(int)
        for a, b in zip(cuts[:-1], cuts[1:]):
            w.write_batch(t[a:b], fb[a:b], frames_fill(frames[a:b]), iface[a:b].copy(),
                          None if comments is None else comments[a:b])
    return w


def test_c8_and_c10_nanosecond_pcap_bytes(tmp_path):
    frames = make_frames([60, 61, 62])
    write("pcap", tmp_path / "a.pcap", C8, frames)
    raw = (tmp_path / "a.pcap").read_bytes()
    assert struct.unpack("<IHHiIII", raw[:24]) == (0xA1B23C4D, 2, 4, 0, 0, 262144, 1)
    assert struct.unpack("<IIII", raw[24:40]) == (1700000000, 0, 60, 60)
    assert raw[40:100] == frames[0]
    assert struct.unpack("<IIII", raw[100:116]) == (1700000000, 100, 61, 61)
    assert open_capture(tmp_path / "a.pcap").read()["time_ns"].tolist() == C8.tolist()


def test_c9_microsecond_file_rounds_and_carries(tmp_path):
    t = [1332502747_520990009, 1_999_999_500]
    write("pcap", tmp_path / "u.pcap", t, make_frames([60, 60]), nanosecond=False)
    raw = (tmp_path / "u.pcap").read_bytes()
    assert struct.unpack("<I", raw[:4])[0] == 0xA1B2C3D4
    assert struct.unpack("<II", raw[24:32]) == (1332502747, 520990)
    assert struct.unpack("<II", raw[100:108]) == (2, 0)


def test_c11_big_endian_pcapng_bytes_and_value(tmp_path):
    t = [1573830016444223380]
    write("pcapng", tmp_path / "b.pcapng", t, make_frames([64]), order=">")
    raw = (tmp_path / "b.pcapng").read_bytes()
    assert raw[:4] == b"\x0a\x0d\x0d\x0a" and raw[8:12] == b"\x1a\x2b\x3c\x4d"
    shb_len = struct.unpack(">I", raw[4:8])[0]
    p = shb_len
    while struct.unpack(">I", raw[p:p + 4])[0] != 6:
        p += struct.unpack(">I", raw[p + 4:p + 8])[0]
    hi, lo = struct.unpack(">II", raw[p + 12:p + 20])
    assert (hi << 32 | lo) == 1573830016444223380
    assert open_capture(tmp_path / "b.pcapng").read()["time_ns"][0] == 1573830016444223380


def test_c11_sections_of_both_byte_orders_in_one_file(tmp_path):
    frames = make_frames([60, 70, 80, 90, 100, 110])
    t = C8.tolist() + [x + 5 for x in C8.tolist()]
    with PcapngWriter(tmp_path / "m.pcapng", [Interface("a")], byte_order="<") as w:
        w.write_batch(np.array(t[:2]), np.array([60, 70]), frames_fill(frames[:2]), comments=["x", "y"])
        w.new_section([Interface("b"), Interface("c")], byte_order=">")
        w.write_batch(np.array(t[2:4]), np.array([80, 90]), frames_fill(frames[2:4]),
                      np.array([1, 0]), ["z", None])
        w.new_section([Interface("d")], byte_order="<")
        w.write_batch(np.array(t[4:]), np.array([100, 110]), frames_fill(frames[4:]))
    cap = open_capture(tmp_path / "m.pcapng")
    rec = cap.read()
    assert [s["byte_order"] for s in cap.sections] == ["<", ">", "<"]
    assert [i.name for i in cap.interfaces] == ["a", "b", "c", "d"]
    assert rec["time_ns"].tolist() == t and rec["interface"].tolist() == [0, 0, 2, 1, 3, 3]
    assert [cap.comments[c] if c >= 0 else None for c in rec["comment"]] == \
        ["x", "y", "z", None, None, None]
    assert [cap.frame(r) for r in rec] == frames


def test_c13_infiniband_goes_into_erf_linktype_197_never_247(tmp_path):
    w = write("pcap-ib", tmp_path / "ib.pcap", C8, make_frames([30, 94, 134]))
    raw = (tmp_path / "ib.pcap").read_bytes()
    assert struct.unpack("<I", raw[20:24])[0] == 197 == w.linktype
    assert raw[24 + 16 + 8] == 21                                   # ERF type INFINIBAND
    assert struct.unpack(">HHH", raw[24 + 16 + 10:24 + 16 + 16]) == (16 + 30, 0, 30)
    for bad in ("ib", 247, "infiniband247"):
        with pytest.raises(EncodeError, match="linktype 197"):
            PcapWriter(tmp_path / "x.pcap", link=bad)
    assert not (tmp_path / "x.pcap").exists()


def test_snaplen_cuts_frames_keeps_orig_len(tmp_path):
    frames = make_frames([40, 64, 65, 9000])
    for kind in ("pcap", "pcapng", "erf", "pcap-ib", "pcapng-ib"):
        path = tmp_path / f"s.{kind}"
        write(kind, path, [1, 2, 3, 4], frames, snaplen=64)
        rec = open_capture(path).read()
        assert rec["caplen"].tolist() == [40, 64, 64, 64], kind
        assert rec["orig_len"].tolist() == [40, 64, 65, 9000], kind
        assert [open_capture(path).frame(r) for r in rec] == [f[:64] for f in frames]


def test_comments_object_and_strings_write_identical_bytes(tmp_path):
    frames = make_frames([60] * 5)
    labels = ["dp/backward/AllReduce", None, "tp/forward/AllReduce"]
    codes = np.array([0, 0, 1, 2, -1])
    write("pcapng", tmp_path / "a.pcapng", range(5), frames, comments=Comments(labels, codes))
    write("pcapng", tmp_path / "b.pcapng", range(5), frames,
          comments=[labels[c] if c >= 0 else None for c in codes])
    assert (tmp_path / "a.pcapng").read_bytes() == (tmp_path / "b.pcapng").read_bytes()


def test_same_input_gives_byte_identical_files(tmp_path):
    frames = make_frames([60, 4170, 62])
    for name in ("a", "b"):
        write("pcapng", tmp_path / name, C8, frames, comments=["x", "y", "x"], batches=2)
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


# -- atomic output ---------------------------------------------------------------------------
def _leftovers(d):
    return sorted(p.name for p in d.iterdir())


@pytest.mark.parametrize("kind", ["pcap", "pcapng", "erf"])
def test_exception_while_writing_leaves_no_output_and_no_temp(tmp_path, kind):
    def bad_fill(out, offsets, caplen):
        raise RuntimeError("frame builder failed")
    with pytest.raises(RuntimeError):
        with (PcapngWriter(tmp_path / "x", [Interface("a")]) if kind == "pcapng" else
              ErfWriter(tmp_path / "x") if kind == "erf" else PcapWriter(tmp_path / "x")) as w:
            w.write_batch(np.array([1]), np.array([60]), frames_fill(make_frames([60])))
            w.write_batch(np.array([2]), np.array([60]), bad_fill)
    assert _leftovers(tmp_path) == []


def test_failure_keeps_the_previous_file_untouched(tmp_path):
    (tmp_path / "x.pcap").write_bytes(b"old")
    with pytest.raises(KeyError):
        with PcapWriter(tmp_path / "x.pcap") as w:
            w.write_batch(np.array([1]), np.array([60]), frames_fill(make_frames([60])))
            raise KeyError("stop")
    assert _leftovers(tmp_path) == ["x.pcap"] and (tmp_path / "x.pcap").read_bytes() == b"old"


def test_write_error_becomes_output_error_and_removes_temp(tmp_path, monkeypatch):
    w = PcapWriter(tmp_path / "x.pcap", threaded=False)
    real = os.write

    def full(fd, data):
        if fd == w._out._fd:
            raise OSError(28, "No space left on device")
        return real(fd, data)
    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OutputError, match="x.pcap: write failed: No space left"):
        w.write_batch(np.array([1]), np.array([60]), frames_fill(make_frames([60])))
    assert _leftovers(tmp_path) == []


def test_output_errors_name_the_path(tmp_path):
    with pytest.raises(OutputError, match=r"got a missing directory \(.*nope\), expected an "):
        PcapWriter(tmp_path / "nope" / "x.pcap")
    (tmp_path / "afile").write_text("")
    with pytest.raises(OutputError, match=r"output directory: got a file \(.*afile\), expected"):
        PcapWriter(tmp_path / "afile" / "sub" / "x.pcap")
    (tmp_path / "x.pcap").write_bytes(b"")
    with pytest.raises(OutputError, match="existing file"):
        PcapWriter(tmp_path / "x.pcap", overwrite=False)
    with pytest.raises(OutputError, match="a directory"):
        PcapWriter(tmp_path)


def test_bad_batches_raise_encode_error_naming_index(tmp_path):
    fill = frames_fill(make_frames([60]))
    with PcapWriter(tmp_path / "x.pcap") as w:
        with pytest.raises(EncodeError, match="time_ns: got dtype float64"):
            w.write_batch(np.array([1.5]), np.array([60]), fill)
        with pytest.raises(EncodeError, match=r"time_ns\[0\]: got -1"):
            w.write_batch(np.array([-1]), np.array([60]), fill)
        with pytest.raises(EncodeError, match=r"time_ns\[0\]: got 4294967296000000000"):
            w.write_batch(np.array([1 << 32]) * 10**9, np.array([60]), fill)
        with pytest.raises(EncodeError, match="frame_bytes: got shape"):
            w.write_batch(np.array([1, 2]), np.array([60]), fill)
    with ErfWriter(tmp_path / "x.erf") as w:
        with pytest.raises(EncodeError, match=r"frame_bytes\[0\]: got 70000, expected 0..65519"):
            w.write_batch(np.array([1]), np.array([70000]), fill)
    with PcapngWriter(tmp_path / "x.pcapng", [Interface("a")]) as w:
        with pytest.raises(EncodeError, match="interface: got 1, expected 0..0"):
            w.write_batch(np.array([1]), np.array([60]), fill, interface=1)
        with pytest.raises(EncodeError, match="comments: got 2 entries, expected 1"):
            w.write_batch(np.array([1]), np.array([60]), fill, comments=["a", "b"])
    with pytest.raises(EncodeError, match="snaplen: got 0"):
        PcapWriter(tmp_path / "y.pcap", snaplen=0)


def test_empty_batches_and_empty_file(tmp_path):
    with PcapngWriter(tmp_path / "e.pcapng", [Interface("a")]) as w:
        w.write_batch(np.zeros(0, np.int64), np.zeros(0, np.int64), frames_fill([]))
    cap = open_capture(tmp_path / "e.pcapng")
    assert cap.read().size == 0 and cap.interfaces[0].name == "a"


# -- round trips (Hypothesis) -------------------------------------------------------------------
KINDS = [("pcap", "<"), ("pcap", ">"), ("pcapng", "<"), ("pcapng", ">"), ("erf", "<"),
         ("pcap-ib", "<"), ("pcap-ib", ">"), ("pcapng-ib", "<"), ("pcapng-ib", ">")]
TEXT = st.one_of(st.none(), st.sampled_from(["dp/backward/AllReduce", "pp/forward/SendRecv"]),
                 st.text(max_size=30))


@given(kind=st.sampled_from(KINDS), data=st.data(), batches=st.integers(1, 3),
       snaplen=st.sampled_from([262144, 64, 1]))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_round_trip_every_format(tmp_path, kind, data, batches, snaplen):
    name, order = kind
    n = data.draw(st.integers(0, 25))
    t = data.draw(st.lists(st.integers(0, (1 << 32) * 10**9 - 1), min_size=n, max_size=n))
    lengths = data.draw(st.lists(st.one_of(st.integers(0, 200), st.just(9000)), min_size=n, max_size=n))
    iface = data.draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    comments = data.draw(st.lists(TEXT, min_size=n, max_size=n))
    frames = make_frames(lengths, seed=n)
    path = tmp_path / f"r.{name}"
    ng = name.startswith("pcapng")
    write(name, path, t, frames, order=order, iface=iface, snaplen=snaplen, batches=batches,
          comments=comments if ng else None)
    cap = open_capture(path)
    rec = cap.read()
    assert rec["time_ns"].tolist() == t
    assert rec["orig_len"].tolist() == lengths
    assert [cap.frame(r) for r in rec] == [f[:snaplen] for f in frames]
    assert rec["linktype"].tolist() == [247 if name.endswith("ib") or name == "erf" else 1] * n
    if ng:
        assert rec["interface"].tolist() == iface
        assert [cap.comments[c] if c >= 0 else None for c in rec["comment"]] == \
            comments
    elif name == "erf":
        assert rec["interface"].tolist() == iface       # ERF port, flags bits 0-1


def test_finished_file_has_umask_permissions_not_tempfile_0600(tmp_path):
    write("pcap", tmp_path / "p.pcap", [1], make_frames([60]))
    mask = os.umask(0o022)
    os.umask(mask)
    assert (tmp_path / "p.pcap").stat().st_mode & 0o777 == 0o666 & ~mask


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_a_device_or_fifo_is_never_replaced_by_an_output(tmp_path):
    """Renaming the finished file over ``/dev/null`` (here through a link to it) or a FIFO would
    replace it for every program: refused before anything is written, the node left as it was."""
    os.symlink("/dev/null", tmp_path / "null.pcap")
    os.mkfifo(tmp_path / "fifo.pcapng")
    for name, kind in (("null.pcap", "a character device"), ("fifo.pcapng", "a FIFO")):
        with pytest.raises(OutputError, match=rf"{name}: got {kind}.*, expected a regular file "
                                              "or a new path"):
            (PcapWriter if name.endswith(".pcap") else
             lambda p: PcapngWriter(p, [Interface(name="eth0")]))(tmp_path / name)
    assert os.path.realpath(tmp_path / "null.pcap") == "/dev/null"
    assert os.stat("/dev/null").st_rdev == os.makedev(1, 3) or not os.path.isfile("/dev/null")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.pcapng", "null.pcap"]
