"""Readers against files spelled out by hand from the specs, hostile files and fuzzing."""
from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tokenpcap.errors import BadMagic, CaptureError, TruncatedFile
from tokenpcap.pcap.chain import walk
from tokenpcap.pcap.reader import open_capture
from tokenpcap.pcap.timestamps import NO_TIME

from .helpers import (
    block, comment_options, epb, erf_record, hand_pcap, idb, make_frames, option, pad4, shb)


def _open(tmp_path, raw: bytes, name="f", **kw):
    path = tmp_path / name
    path.write_bytes(raw)
    return open_capture(path, **kw)


@pytest.mark.parametrize("order", "<>")
@pytest.mark.parametrize("nsec", [True, False])
def test_classic_pcap_both_orders_both_magics(tmp_path, order, nsec):
    frames = make_frames([60, 0, 1514])
    frac = [118831273, 5, 999999999] if nsec else [118831, 5, 999999]
    raw = hand_pcap([(0x60C24237, f, d, len(d) + 4) for f, d in zip(frac, frames)],
                    order=order, nsec=nsec, snaplen=65535)
    cap = _open(tmp_path, raw)
    rec = cap.read()
    mult = 1 if nsec else 1000
    # C10: ts_sec 0x60C24237 with fraction 118831273 under the ns magic is 1623343671.118831273
    assert rec["time_ns"].tolist() == [1623343671 * 10**9 + f * mult for f in frac]
    assert rec["time_ns"][0] == (1623343671118831273 if nsec else 1623343671118831000)
    assert rec["orig_len"].tolist() == [64, 4, 1518]
    assert [cap.frame(r) for r in rec] == frames
    assert cap.byte_order == order and cap.nanosecond == nsec and cap.snaplen == 65535


def _section(order, recs, *, tsresol=None, tsoffset=None, extra=b""):
    """One section: SHB, an NRB-like unknown block, IDB, then EPBs with ticks."""
    out = shb(order, option(order, 4, b"hand") + struct.pack(order + "HH", 0, 0))
    out += block(order, 4, b"\x00\x00\x00\x00")                          # NRB: skipped
    out += idb(order, 1, 0, tsresol=tsresol, tsoffset=tsoffset, name=f"if{tsresol}")
    for ticks, data, opts in recs:
        out += epb(order, 0, ticks, data, options=opts) + extra
    return out


def test_pcapng_sections_resolutions_offsets_both_orders(tmp_path):
    d = make_frames([60, 61, 62, 63, 64, 65, 66])
    raw = (_section("<", [(1573830016444223380, d[0], b"")], tsresol=9)
           + _section(">", [(1573830016444223, d[1], comment_options(">", "a"))])   # default 10^-6
           + _section(">", [(3 * 2**20 + 2**19, d[2], b"")], tsresol=0x94, tsoffset=100)
           + _section("<", [(15, d[3], b"")], tsresol=1, tsoffset=-2)             # 1.5 s - 2 s
           + _section("<", [(1234567890123, d[4], b"")], tsresol=12)              # ps: round
           + _section(">", [(1234567890500, d[5], b"")], tsresol=12))             # half up
    cap = _open(tmp_path, raw)
    rec = cap.read()
    assert rec["time_ns"].tolist() == [1573830016444223380, 1573830016444223000,
                                       103_500_000_000, -500_000_000, 1234567890, 1234567891]
    assert [s["byte_order"] for s in cap.sections] == ["<", ">", ">", "<", "<", ">"]
    assert [i.tsresol for i in cap.interfaces] == [9, 6, 0x94, 1, 12, 12]
    assert rec["interface"].tolist() == [0, 1, 2, 3, 4, 5]
    assert cap.comments[rec["comment"][1]] == "a" and (rec["comment"][[0, 2]] == -1).all()
    assert [cap.frame(r) for r in rec] == d[:6]
    assert cap.sections[0]["options"]["shb_userappl"] == "hand"


def test_pcapng_comment_not_first_option_and_spb_opb(tmp_path):
    o = "<"
    opts = comment_options(o, "phase one", "second ignored",
                           before=option(o, 2, struct.pack("<I", 1)) + option(o, 0x2BAC, b"xyz"))
    spb = block(o, 3, struct.pack("<I", 100) + pad4(b"\x11" * 100))
    opb = block(o, 2, struct.pack("<HHIIII", 0, 0, 0, 1000, 4, 4) + b"\x22" * 4)
    isb = block(o, 5, struct.pack("<III", 0, 0, 0))
    raw = (shb(o) + idb(o, 1, 64, tsresol=3) + epb(o, 0, 7, b"\x33" * 10, 20, opts)
           + spb + opb + isb + block(o, 0xBAD, b"\x00" * 8))
    cap = _open(tmp_path, raw)
    rec = cap.read()
    assert rec["time_ns"].tolist() == [7_000_000, NO_TIME, 1_000_000_000]    # ms ticks
    assert rec["caplen"].tolist() == [10, 64, 4] and rec["orig_len"].tolist() == [20, 100, 4]
    assert [cap.frame(r) for r in rec] == [b"\x33" * 10, b"\x11" * 64, b"\x22" * 4]
    assert cap.comments == ["phase one"] and rec["comment"].tolist() == [0, -1, -1]


def test_raw_erf_ethernet_infiniband_extension_headers_and_pad(tmp_path):
    eth, ib = make_frames([60, 30])
    raw = (erf_record(5 << 32 | 1 << 31, 2, eth + b"FCS!", 64, pad_to=88)
           + erf_record(6 << 32, 21, ib, 30, flags=4 | 2, ext=[b"\x80" + bytes(7), bytes(8)])
           + erf_record(0, 48, b"", 0, pad_to=24))                           # PAD: skipped
    cap = _open(tmp_path, raw, "x.erf")
    rec = cap.read()
    assert cap.format == "erf"
    assert rec["time_ns"].tolist() == [5_500_000_000, 6_000_000_000]
    assert rec["linktype"].tolist() == [1, 247] and rec["interface"].tolist() == [0, 2]
    assert rec["caplen"].tolist() == [64, 30] and rec["orig_len"].tolist() == [64, 30]
    assert cap.frame(rec[0]) == eth + b"FCS!" and cap.frame(rec[1]) == ib


def test_linktype_197_pcap_uses_the_erf_timestamp_like_wireshark(tmp_path):
    ib = make_frames([30])[0]
    raw = hand_pcap([(1, 0, erf_record(7 << 32, 21, ib, 30), 46)], linktype=197)
    rec = _open(tmp_path, raw).read()
    assert rec["time_ns"].tolist() == [7 * 10**9] and rec["linktype"].tolist() == [247]
    assert rec["offset"][0] == 24 + 16 + 16 and rec["caplen"][0] == 30


def test_empty_erf_named_file_is_empty_capture(tmp_path):
    assert _open(tmp_path, b"", "e.erf").read().size == 0
    with pytest.raises(BadMagic, match="empty file"):
        _open(tmp_path, b"", "e.pcap")


# -- hostile files: each error names the offset --------------------------------------------------
GOOD = hand_pcap([(1, 2, b"\x01" * 40, 40), (1, 3, b"\x02" * 40, 40)])


@pytest.mark.parametrize("raw, cls, match", [
    (b"GIF89a" + bytes(40), BadMagic, "magic got 47494638"),
    (GOOD[:20], TruncatedFile, "got 20 bytes, expected 24"),
    (GOOD[:-1], TruncatedFile, "pcap record at byte offset 80: needs 56 bytes, got 55"),
    (GOOD[:90], TruncatedFile, "pcap record header at byte offset 80: needs 16 bytes, got 10"),
    (GOOD[:32] + struct.pack("<I", 0xFFFFFFF0) + GOOD[36:], CaptureError, "caplen got 4294967280.*offset 24"),
    (GOOD[:4] + struct.pack("<H", 3) + GOOD[6:], CaptureError, "version_major: got 3"),
    (shb("<")[:-4] + b"\x00" * 4, CaptureError, "SHB trailing"),
    (shb("<")[:8] + b"\xde\xad\xbe\xef" + shb("<")[12:], CaptureError, "byte-order magic: got 0xefbeadde"),
    (shb("<") + struct.pack("<II", 6, 30) + bytes(22), CaptureError, "block_length: got 30.*offset 28"),
    (shb("<") + struct.pack("<II", 6, 0) + bytes(8), CaptureError, "block_length: got 0.*offset 28"),
    (shb("<") + struct.pack("<II", 6, 4000) + bytes(8), TruncatedFile, "block at byte offset 28: needs 4000"),
    (shb("<") + epb("<", 0, 1, b"x"), CaptureError, "interface_id got 0, expected < 0"),
    (shb("<") + idb("<") + block("<", 6, struct.pack("<IIIII", 0, 0, 0, 900, 900)),
     CaptureError, "caplen got 900"),
    (shb("<") + idb("<") + epb("<", 0, 1, b"x", options=struct.pack("<HH", 1, 99) + b"abcd"),
     CaptureError, "option runs past"),
    (shb("<") + idb("<") + block("<", 6, bytes(20))[:-4] + struct.pack("<I", 0), CaptureError,
     "trailing block_length"),
    (erf_record(1 << 32, 21, b"x" * 8, 8)[:10] + b"\x00\x00" + bytes(20), BadMagic, "magic"),
    (erf_record(1 << 32, 21, b"x" * 8, 8) + erf_record(1 << 32, 21, b"", 0)[:10] + b"\x00\x00" + bytes(4),
     CaptureError, "rlen got 0.*offset 24"),
])
def test_hostile_files_raise_capture_errors_naming_offsets(tmp_path, raw, cls, match):
    with pytest.raises(cls, match=match) as err:
        _open(tmp_path, raw, "h.erf" if raw[8:9] == b"\x15" else "h").read()
    assert isinstance(err.value, CaptureError) and "offset" in str(err.value)


def test_truncated_last_record_can_stop_cleanly(tmp_path):
    cap = _open(tmp_path, GOOD[:-10], on_truncation="stop")
    rec = cap.read()
    assert rec.size == 1 and cap.truncated_at == 80


# -- the lockstep walker equals the scalar walk -----------------------------------------------------
def _big_pcap(lengths, payload_fill) -> bytes:
    recs = []
    for i, n in enumerate(lengths):
        recs.append((1700000000 + i // 1000, i % 1000, payload_fill(i, n), n + 4))
    return hand_pcap(recs)


@given(st.lists(st.sampled_from([0, 16, 62, 64, 80, 200, 1500]), min_size=1, max_size=8),
       st.integers(0, 2**32 - 1), st.sampled_from(["zeros", "fake", "random"]))
@example(pattern=[0, 0, 0, 0, 200], seed=66, kind="zeros")   # a last record at end - 16
@example(pattern=[0, 0, 0, 0, 200], seed=66, kind="random")
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_lockstep_walk_equals_scalar_walk_even_with_fake_headers(tmp_path, pattern, seed, kind):
    rng = np.random.default_rng(seed)
    n = 9000
    lengths = [pattern[i] for i in rng.integers(0, len(pattern), n)]
    fake = struct.pack("<IIII", 1700000000, 5, 16, 16) * 100      # payload full of plausible headers

    def payload(i, m):
        if kind == "zeros":
            return bytes(m)
        if kind == "fake":
            return (fake[(i * 4) % 64:] + fake)[:m]
        return rng.integers(0, 256, m, dtype=np.uint8).tobytes()
    cap = _open(tmp_path, _big_pcap(lengths, payload))
    chain = cap._chain
    fast, p, _ = walk(chain, 24, cap.size, steps=16)
    slow, q, _ = chain.scalar(24, cap.size, 1 << 62)
    assert fast.tolist() == slow and p == q == cap.size
    assert cap.read()["orig_len"].tolist() == [m + 4 for m in lengths]


# -- fuzz: any damage gives a CaptureError, never another exception, hang or huge allocation -------
def _samples():
    d = make_frames([60, 0, 13, 200], seed=3)
    ng = shb("<") + idb("<", 1, 0, tsresol=9) + b"".join(
        epb("<", 0, i, f, options=comment_options("<", "c%d" % i)) for i, f in enumerate(d))
    return {
        "pcap": hand_pcap([(1, i, f, len(f)) for i, f in enumerate(d)]),
        "pcap-be": hand_pcap([(1, i, f, len(f)) for i, f in enumerate(d)], order=">"),
        "pcapng": ng,
        "pcapng-be": shb(">") + idb(">", 197, 0) + epb(">", 0, 5, erf_record(1 << 32, 21, d[0], 60)),
        "erf": b"".join(erf_record(i << 32, 21, f, len(f)) for i, f in enumerate(d)),
        "pcap-erf": hand_pcap([(1, 0, erf_record(1 << 32, 2, d[0], 60), 78)], linktype=197),
    }


SAMPLES = _samples()


@given(st.sampled_from(sorted(SAMPLES)), st.data())
@settings(max_examples=400, deadline=2000,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_fuzzed_files_raise_only_capture_errors(tmp_path, name, data):
    raw = bytearray(SAMPLES[name])
    for _ in range(data.draw(st.integers(0, 4))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= 1 << data.draw(st.integers(0, 7))
    if data.draw(st.booleans()):
        raw = raw[:data.draw(st.integers(0, len(raw)))]
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(raw)))
        raw[i:i] = struct.pack("<I", data.draw(st.sampled_from([0, 1, 12, 0xFFFFFFFF, 0x7FFFFFFF])))
    try:
        cap = _open(tmp_path, bytes(raw), "z.erf" if name == "erf" else "z")
        for rec in cap.batches():
            assert (rec["offset"] + rec["caplen"] <= cap.size).all()
    except CaptureError:
        pass


@pytest.mark.parametrize("collide", [False, True])
def test_many_distinct_comments_and_hash_collisions_stay_exact(tmp_path, monkeypatch, collide):
    from tokenpcap.pcap import comments
    if collide:                                    # every text hashes alike: exact fallback
        monkeypatch.setattr(comments, "_MULT", np.zeros(4, np.uint64))
    texts = [f"dp/backward/AllReduce step={i % 50}" for i in range(300)] + ["é", "", "ab", "x" * 300]
    raw = shb("<") + idb("<", 1, 0, tsresol=9) + b"".join(
        epb("<", 0, i, b"\x00" * 4, options=comment_options("<", t)) for i, t in enumerate(texts))
    cap = _open(tmp_path, raw)
    rec = cap.read()
    assert [cap.comments[c] for c in rec["comment"]] == texts
    assert len(cap.comments) == 54


def test_truncated_pcapng_can_stop_cleanly_and_close_releases(tmp_path):
    raw = shb("<") + idb("<", 1, 0, tsresol=9) + epb("<", 0, 1, b"a" * 8) + epb("<", 0, 2, b"b" * 8)
    cap = _open(tmp_path, raw[:-5], on_truncation="stop")
    rec = cap.read()
    assert rec["time_ns"].tolist() == [1] and cap.truncated_at == len(raw) - 40
    cap.close()
    assert cap.data.size == 0
    with pytest.raises(TruncatedFile, match=f"offset {len(raw) - 40}"):
        _open(tmp_path, raw[:-5]).read()


def test_unopenable_paths_raise_capture_error(tmp_path):
    with pytest.raises(CaptureError, match="cannot open: No such file"):
        open_capture(tmp_path / "missing.pcap")
    with pytest.raises(CaptureError, match="got a directory, expected a regular capture file"):
        open_capture(tmp_path)


def test_package_exports_the_reader_and_writers():
    import tokenpcap.pcap as P
    assert set(P.__all__) == {"PcapWriter", "PcapngWriter", "ErfWriter", "Interface", "Comments",
                              "open_capture", "Capture", "InterfaceInfo", "RECORD_DTYPE", "NO_TIME"}
    assert all(hasattr(P, name) for name in P.__all__)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_a_fifo_or_device_is_refused_without_blocking(tmp_path):
    """Opening a FIFO for reading blocks until a writer comes; a device reads as empty or
    endless bytes: both are refused from their stat, in one line naming what they are."""
    import signal

    os.mkfifo(tmp_path / "fifo.pcap")
    signal.alarm(20)                                     # a blocked open fails the test
    try:
        with pytest.raises(CaptureError, match=r"fifo\.pcap: got a FIFO \(named pipe\), "
                                               "expected a regular capture file"):
            open_capture(tmp_path / "fifo.pcap")
    finally:
        signal.alarm(0)
    with pytest.raises(CaptureError, match="^/dev/zero: got a character device"):
        open_capture("/dev/zero")


@pytest.mark.parametrize("ns_first", [True, False])
def test_sections_keep_their_own_tsresol_on_every_walk(tmp_path, ns_first):
    """Two one-packet sections, one with if_tsresol 9 (ns) and one with 6 (us), 5,000 ns
    apart, in both orders: every walk over the file (plot walks it twice) gives the same times
    and the same two interfaces (a second walk mapped every packet to the last section's
    interface: us ticks read as ns, ns ticks as us)."""
    t0 = 1_700_000_000 * 10**9
    frame = make_frames([60])[0]
    ns = shb("<") + idb("<", 1, tsresol=9) + epb("<", 0, t0, frame)
    us = shb(">") + idb(">", 1, tsresol=6) + epb(">", 0, t0 // 1000 + 5, frame)
    cap = _open(tmp_path, ns + us if ns_first else us + ns)
    want = [t0, t0 + 5000] if ns_first else [t0 + 5000, t0]
    for _ in range(3):
        assert [b["time_ns"].tolist() for b in cap.batches()] == [[w] for w in want]
        assert [i.tsresol for i in cap.interfaces] == ([9, 6] if ns_first else [6, 9])
        assert [b["interface"].tolist() for b in cap.batches()] == [[0], [1]]
        assert len(cap.sections) == 2


class _Slices(list):
    """A list that counts the items its slices hand out (the work spent on it)."""
    handed = 0

    def __getitem__(self, i):
        out = super().__getitem__(i)
        if isinstance(i, slice):
            _Slices.handed += len(out)
        return out


def test_each_section_costs_its_own_interfaces_on_every_walk(tmp_path):
    """2,000 one-packet sections (SHB, IDB, EPB each), walked twice: the reader looks at each
    section's own interfaces only, a bounded number of list items per section on both walks
    (the second walk read from the last section's first interface to the end of a list that
    grew again by one interface per section: quadratic)."""
    n = 2000
    frame = make_frames([60])[0]
    raw = b"".join(shb("<") + idb("<", 1, tsresol=9) + epb("<", 0, 10**18 + i, frame)
                   for i in range(n))
    cap = _open(tmp_path, raw)
    cap.interfaces = _Slices(cap.interfaces)
    _Slices.handed = 0
    for _ in range(2):
        assert np.concatenate(list(cap.batches()))["time_ns"].tolist() == \
            [10**18 + i for i in range(n)]
    assert len(cap.interfaces) == n and _Slices.handed <= 2 * 4 * n
