"""inspect: decode, payload (C7), ICRC/VCRC (C1-C4), PSN (C6), flows, PFC, per-phase, errors.

Oracles: the case files (scapy 2.8 / hardware frames, their ICRC verdicts), scapy building and
parsing frames (test-only), TShark's decode and capinfos' totals of the very same files.
"""
from __future__ import annotations

import ipaddress
import json
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import needs_tshark
from tokenpcap.analysis.inspect import inspect_capture
from tokenpcap.analysis.crc import check_crcs
from tokenpcap.analysis.decode import KIND_PFC, KIND_ROCEV2, decode_batch
from tokenpcap.analysis.flows import PsnTracker, psn_step
from tokenpcap.errors import CaptureError, TruncatedFile
from tokenpcap.pcap import ErfWriter, PcapngWriter, PcapWriter
from tokenpcap.pcap.reader import open_capture

scapy_all = pytest.importorskip("scapy.all")
from scapy.contrib.roce import BTH  # noqa: E402
from scapy.layers.inet import IP, TCP, UDP  # noqa: E402
from scapy.layers.l2 import ARP, Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402
from scapy.utils import wrpcap  # noqa: E402

T0 = 1_700_000_000 * 10**9


def _fill(frames):
    def fill(out, offsets, caplen):
        for f, o, c in zip(frames, offsets, caplen):
            out[o:o + c] = np.frombuffer(f[:c], np.uint8)
    return fill


def write(path, frames, *, writer=PcapWriter, step_ns=1000, **kw):
    """Write ``frames`` (bytes) with our writer, one every ``step_ns``; returns path."""
    with writer(path, **kw) as w:
        w.write_batch(T0 + np.arange(len(frames), dtype=np.int64) * step_ns,
                      np.array([len(f) for f in frames], np.int64), _fill(frames))
    return path


def decoded(path):
    cap = open_capture(path)
    rec = cap.read()
    dec = decode_batch(cap.data, rec, cap.views)
    icrc, vcrc = check_crcs(cap.data, rec["offset"], dec)
    return dec, icrc, vcrc


@pytest.fixture
def vectors_pcap(tmp_path, scapy_vectors):
    frames = [bytes.fromhex(v["hex"]) for v in scapy_vectors["vectors"]]
    return write(tmp_path / "vectors.pcap", frames), scapy_vectors["vectors"]


def test_case_vectors_icrc_verdicts(vectors_pcap):
    path, vectors = vectors_pcap
    dec, icrc, _ = decoded(path)
    for v, row, ok in zip(vectors, dec, icrc):
        if "icrc_ok" in v:
            assert row["kind"] == KIND_ROCEV2, v["name"]
            assert ok == (1 if v["icrc_ok"] else 0), v["name"]
        else:
            assert row["kind"] == KIND_PFC and ok == -1, v["name"]


def test_case_vectors_against_scapy_parse(vectors_pcap):
    path, vectors = vectors_pcap
    dec, _, _ = decoded(path)
    pkts = scapy_all.rdpcap(str(path))
    for row, p in zip(dec, pkts):
        if BTH not in p:
            continue
        b = p[BTH]
        assert (row["opcode"], row["psn"], row["destqp"], row["padcnt"], row["becn"],
                row["ackreq"]) == (b.opcode, b.psn, b.dqpn, b.padcount, b.becn, b.ackreq)
        assert row["sport"] == p[UDP].sport


def test_c7_payload_and_c6_psn_values(vectors_pcap):
    path, vectors = vectors_pcap
    dec, _, _ = decoded(path)
    by = {v["name"]: r for v, r in zip(vectors, dec)}
    assert by["rc_ack_psn_000000"]["payload"] == 0                  # C7: an ACK carries 0 bytes
    assert by["rc_write_only_imm_pad3_se"]["padcnt"] == 3
    assert by["rc_write_first_psn_fffffe"]["psn"] == 0xFFFFFE       # C6 frames as captured
    assert by["rc_write_last_psn_000000_ackreq"]["psn"] == 0
    assert psn_step(np.array([0, 1]), np.array([0xFFFFFF, 0xFFFFFF])).tolist() == [1, 2]


def test_the_icrc_check_says_when_it_checked_nothing(vectors_pcap):
    """Skipped (``crc=False``) the ICRC line says none was checked, not "0 bad of 0"; with the
    check, the case vectors' bad ICRC is counted against the ones scapy's vectors mark."""
    path, vectors = vectors_pcap
    off = {c["name"]: c for c in inspect_capture(path, crc=False).checks()}["icrc"]
    assert off["detail"].startswith("none checked") and off["ok"]
    on = {c["name"]: c for c in inspect_capture(path).checks()}["icrc"]
    bad = sum(1 for v in vectors if v.get("icrc_ok") is False)
    assert on["detail"] == f"{bad} bad of {sum(1 for v in vectors if 'icrc_ok' in v)} checked"


@needs_tshark
def test_decode_equals_tshark(vectors_pcap):
    path, _ = vectors_pcap
    dec, _, _ = decoded(path)
    out = subprocess.run(
        ["tshark", "-r", str(path), "--disable-heuristic", "rpcrdma_infiniband", "-T", "fields",
         "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.psn", "-e", "infiniband.bth.destqp",
         "-e", "infiniband.bth.padcnt", "-e", "data.len", "-e", "ip.dsfield.ecn",
         "-e", "macc.cbfc.enbv", "-E", "separator=,"],
        capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == dec.size
    for row, line in zip(dec, out):
        op, psn, qp, pad, dlen, ecn, enbv = line.split(",")
        if row["kind"] == KIND_PFC:
            assert int(enbv, 16) == row["pfc_cev"]
            continue
        assert (int(op), int(psn), int(qp, 16), int(pad)) == (
            row["opcode"], row["psn"], row["destqp"], row["padcnt"])
        # TShark's data.len counts the pad bytes too; C7 payload excludes them
        assert row["payload"] == (int(dlen) - int(pad) if dlen else 0)
        if ecn:
            assert int(ecn) == row["ecn"]


def test_hw_frames_rocev1_and_native_ib(tmp_path, hw_frames, scapy_vectors):
    ib = [bytes.fromhex(x["hex"]) for x in hw_frames["native_ib"]]
    ib.append(bytes.fromhex(scapy_vectors["native_ib_generated"]["hex"]))
    dec, icrc, vcrc = decoded(write(tmp_path / "ib.erf", ib, writer=ErfWriter))
    assert icrc.tolist() == [1] * len(ib) and vcrc.tolist() == [1] * len(ib)
    if shutil.which("tshark"):       # TShark decodes LRH/BTH in ERF (C13): same fields as ours
        out = subprocess.run(
            ["tshark", "-r", str(tmp_path / "ib.erf"), "-T", "fields", "-e",
             "infiniband.bth.opcode", "-e", "infiniband.bth.psn", "-e", "infiniband.bth.destqp",
             "-e", "infiniband.lrh.slid", "-E", "separator=,"],
            capture_output=True, text=True, check=True).stdout.split()
        got = [f"{r['opcode']},{r['psn']},0x{r['destqp']:06x},{r['src_lo']}" for r in dec]
        assert out == got
    bad = [bytearray(f) for f in ib]
    for f in bad:
        f[-8] ^= 0x01                    # a payload/ICRC byte: both CRCs must notice
    _, icrc, vcrc = decoded(write(tmp_path / "ib_bad.erf", [bytes(f) for f in bad],
                                  writer=ErfWriter))
    assert icrc.tolist() == [0] * len(ib) and vcrc.tolist() == [0] * len(ib)
    v1 = [bytes.fromhex(hw_frames[k]["hex"]) for k in ("rocev1_rc_write_only", "rocev1_rc_ack")]
    _, icrc, _ = decoded(write(tmp_path / "v1.pcap", v1))
    assert icrc.tolist() == [1, 1]


def _scapy_frame(sport, qp, psn, opcode, payload, ecn=2, ttl=64, v6=False):
    from scapy.layers.inet6 import IPv6
    ip = (IPv6(src="fd00::1", dst="fd00::2", tc=(26 << 2) | ecn, hlim=ttl) if v6 else
          IP(src="198.18.0.1", dst="198.18.0.2", tos=(26 << 2) | ecn, ttl=ttl, flags="DF"))
    pad = (-len(payload)) & 3
    return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / ip /
                 UDP(sport=sport, dport=4791, chksum=0) /
                 BTH(opcode=opcode, migreq=1, padcount=pad, dqpn=qp, psn=psn) /
                 Raw(payload + b"\0" * pad))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.binary(min_size=0, max_size=600), st.integers(0, 0xFFFFFF),
                          st.integers(0, 3), st.integers(1, 64), st.booleans()),
                min_size=1, max_size=6), st.data())
def test_icrc_matches_scapy_for_random_frames(tmp_path_factory, frames, data):
    """ICRC verdicts equal scapy's ICRC for random SEND ONLY frames; one flipped covered byte
    (not a masked one: C1) must be detected, a changed ECN/TTL must not."""
    raw = [_scapy_frame(0xC000 + i, 2 + i, psn, 0x04, pay, ecn, 64, v6)
           for i, (pay, psn, ecn, _, v6) in enumerate(frames)]
    d = tmp_path_factory.mktemp("icrc")
    _, icrc, _ = decoded(write(d / "ok.pcap", raw))
    assert icrc.tolist() == [1] * len(raw)
    i = data.draw(st.integers(0, len(raw) - 1))
    f = bytearray(raw[i])
    l3 = 14
    pos = data.draw(st.integers(l3 + (60 if frames[i][4] else 40), len(f) - 1))
    f[pos] ^= 1 << data.draw(st.integers(0, 7))
    marked = bytearray(raw[i])
    if frames[i][4]:
        marked[l3 + 1] |= 0x30           # IPv6 traffic class ECN bits -> CE
        marked[l3 + 7] = 3               # hop limit
    else:
        marked[l3 + 1] |= 0x03           # IPv4 ECN -> CE
        marked[l3 + 8] = 7               # TTL (the IPv4 checksum is masked too)
    _, icrc, _ = decoded(write(d / "bad.pcap", [bytes(f), bytes(marked)]))
    assert icrc.tolist() == [0, 1]


def _reference_psn(flows, psns):
    """Plain Python reference of the PsnTracker definitions (module docstring)."""
    state, gaps, missing, late = {}, {}, {}, {}
    for f, p in zip(flows, psns):
        if f not in state:
            state[f] = (p, p, p)
            gaps[f] = missing[f] = late[f] = 0
            continue
        last, u, top = state[f]
        step = (p - last) % (1 << 24)
        if step >= 1 << 23:
            step -= 1 << 24
        u += step
        if u > top + 1:
            gaps[f] += 1
            missing[f] += u - top - 1
        elif u <= top:
            late[f] += 1
        state[f] = (p, u, max(top, u))
    return gaps, missing, late


@pytest.mark.parametrize("compiled", [False, True])
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from(
    [0, 1, 2, 3, 0x7FFFFF, 0x800000, 0xFFFFFD, 0xFFFFFE, 0xFFFFFF])), max_size=60),
    st.integers(1, 7))
def test_psn_tracker_equals_plain_reference(compiled, seq, batch):
    """Both ways of following PSNs (numpy passes, the compiled loop) give the plain reference's
    counts."""
    t = PsnTracker()
    flows = np.array([f for f, _ in seq], np.int64)
    psns = np.array([p for _, p in seq], np.int64)
    for i in range(0, len(seq), batch):             # state must carry across batches
        t.update(flows[i:i + batch], psns[i:i + batch], compiled=compiled)
    gaps, missing, late = _reference_psn(flows.tolist(), psns.tolist())
    for f in gaps:
        assert (t.gaps[f], t.missing[f], t.reordered[f]) == (gaps[f], missing[f], late[f])


@pytest.mark.parametrize("compiled", [False, True])
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5), st.integers(1, 40),
                          st.sampled_from([0, 0xFFFFF0, 0xFFFFFE, 0x7FFFF0])),
                min_size=1, max_size=12),
       st.integers(0, 4), st.integers(0, 3), st.integers(1, 9), st.randoms())
def test_psn_tracker_in_order_runs_equal_plain_reference(compiled, runs, swaps, dups, batch,
                                                         rnd):
    """Runs of consecutive PSNs per flow (some wrapping through FFFFFF, some starting past a
    hole), the flows interleaved at random, then ``swaps`` neighbours swapped and ``dups``
    packets sent twice in a row (a retransmission): batches in order inside every flow, batches
    with a gap at a flow's first packet, and batches with late packets (a batch may start with
    a copy of the previous batch's last packet) all match the plain reference, counts of
    packets followed included."""
    queues: dict[int, list[int]] = {}
    nxt: dict[int, int] = {}
    for f, skip, length, base in runs:
        start = nxt.get(f, base) + (skip if skip < 3 else 0)     # skip 1, 2: a hole
        queues.setdefault(f, []).extend((start + i) % (1 << 24) for i in range(length))
        nxt[f] = start + length
    seq = []
    while queues:                      # interleave, each flow's own order kept
        f = rnd.choice(sorted(queues))
        seq.append((f, queues[f].pop(0)))
        if not queues[f]:
            del queues[f]
    for _ in range(swaps):
        if len(seq) > 1:
            i = rnd.randrange(len(seq) - 1)
            seq[i], seq[i + 1] = seq[i + 1], seq[i]
    for _ in range(dups):
        i = rnd.randrange(len(seq))
        seq.insert(i + 1, seq[i])
    t = PsnTracker()
    flows = np.array([f for f, _ in seq], np.int64)
    psns = np.array([p for _, p in seq], np.int64)
    for i in range(0, len(seq), batch):
        t.update(flows[i:i + batch], psns[i:i + batch], compiled=compiled)
    gaps, missing, late = _reference_psn(flows.tolist(), psns.tolist())
    for f in gaps:
        assert (t.gaps[f], t.missing[f], t.reordered[f], t.seen[f]) == \
            (gaps[f], missing[f], late[f], int((flows == f).sum()))


def test_c6_wrap_through_a_file(tmp_path):
    """FFFFFE FFFFFF 000000 000001 is clean; FFFFFF then 000001 is exactly one missing PSN."""
    clean = [_scapy_frame(0xC001, 5, p, 0x04, b"x" * 8) for p in (0xFFFFFE, 0xFFFFFF, 0, 1)]
    rep = inspect_capture(write(tmp_path / "clean.pcap", clean))
    assert (rep.roce["psn_gaps"], rep.roce["psn_reordered"]) == (0, 0) and rep.ok
    holed = [_scapy_frame(0xC001, 5, p, 0x04, b"x" * 8) for p in (0xFFFFFE, 0xFFFFFF, 1)]
    rep = inspect_capture(write(tmp_path / "holed.pcap", holed))
    assert (rep.roce["psn_gaps"], rep.roce["psn_missing"]) == (1, 1) and not rep.ok


def test_foreign_mixed_capture_written_by_scapy(tmp_path):
    """A microsecond pcap written by scapy with TCP, ARP and plain UDP between RoCE frames:
    only the RoCE frames count as RDMA, totals equal capinfos."""
    roce = [_scapy_frame(0xC002, 9, 100 + i, 0x04, bytes(range(40))) for i in range(3)]
    mac = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:09")      # no ARP look-ups
    other = [bytes(Ether(**mac) / IP(src="198.18.0.1", dst="198.18.0.9") / TCP(dport=80) /
                   Raw(b"GET /")),
             bytes(Ether(**mac) / ARP(psrc="198.18.0.1", pdst="198.18.0.9")),
             bytes(Ether(**mac) / IP(src="198.18.0.1", dst="198.18.0.9") / UDP(dport=53))]
    pkts = [Ether(f) for pair in zip(roce, other) for f in pair]
    for i, p in enumerate(pkts):
        p.time = 1_600_000_000 + i / 1000
    path = tmp_path / "mixed.pcap"
    wrpcap(str(path), pkts)
    rep = inspect_capture(path)
    assert rep.packets == 6 and rep.kinds == {"RoCEv2": 3, "other": 3}
    assert rep.roce["payload_bytes"] == 120 and rep.roce["icrc_bad"] == 0
    assert len(rep.flows) == 1 and rep.flows[0]["dest_qp"] == 9
    assert rep.bytes == sum(len(f) for f in (*roce, *other))
    if shutil.which("capinfos"):
        cols = subprocess.run(["capinfos", "-M", "-T", "-r", "-c", "-d", "-a", "-e", "-S",
                               str(path)], capture_output=True, text=True, check=True
                              ).stdout.split("\t")
        assert int(cols[1]) == rep.packets and int(cols[2]) == rep.bytes
        first_s, first_f = cols[3].split(".")
        assert rep.first_ns == int(first_s) * 10**9 + int(first_f.ljust(9, "0")[:9])


def test_snaplen_truncated_frames_are_not_checkable(tmp_path, scapy_vectors):
    frames = [bytes.fromhex(v["hex"]) for v in scapy_vectors["vectors"][:3]]
    rep = inspect_capture(write(tmp_path / "snap.pcap", frames, snaplen=64))
    assert rep.roce["icrc_unchecked"] == 3 and rep.roce["icrc_checked"] == 0
    assert rep.roce["payload_bytes"] == 256 + 256 + 8       # C7 from the lengths, not the bytes
    assert rep.captured_bytes == 3 * 64 and rep.bytes == sum(map(len, frames))


def test_phases_from_pcapng_comments(tmp_path):
    frames = [_scapy_frame(0xC003, 7, i, 0x04, b"y" * (16 * (i + 1))) for i in range(4)]
    labels = ["dp/backward/AllReduce layer=3 step=0", "dp/backward/AllReduce layer=3 step=1",
              "tp/forward/AllReduce mb=0", "not a phase"]
    from tokenpcap.pcap import Interface
    with PcapngWriter(tmp_path / "p.pcapng", [Interface(name="node0/nic0")]) as w:
        w.write_batch(T0 + np.arange(4, dtype=np.int64), np.array([len(f) for f in frames]),
                      _fill(frames), comments=labels)
    rep = inspect_capture(tmp_path / "p.pcapng")
    got = {p["name"]: p["payload_bytes"] for p in rep.phases}
    assert got == {"dp/backward/AllReduce": 16 + 32, "tp/forward/AllReduce": 48,
                   "(no phase)": 64}


def test_errors_name_the_offset(tmp_path, scapy_vectors):
    frames = [bytes.fromhex(v["hex"]) for v in scapy_vectors["vectors"][:4]]
    path = write(tmp_path / "t.pcap", frames)
    data = path.read_bytes()
    cut = tmp_path / "cut.pcap"
    cut.write_bytes(data[:-10])
    rep = inspect_capture(cut)                      # default: report what is complete
    assert rep.packets == 3 and rep.truncated_at is not None and not rep.ok
    with pytest.raises(TruncatedFile) as e:
        inspect_capture(cut, on_truncation="error")
    assert e.value.offset == rep.truncated_at and str(rep.truncated_at) in str(e.value)
    bad = bytearray(data)
    struct.pack_into("<I", bad, 24 + 8, 0x7FFFFFFF)   # first record's caplen
    (tmp_path / "bad.pcap").write_bytes(bytes(bad))
    with pytest.raises(CaptureError, match="byte offset 24"):
        inspect_capture(tmp_path / "bad.pcap")
    (tmp_path / "junk.pcap").write_bytes(b"hello world, not a capture")
    with pytest.raises(CaptureError, match="byte offset 0"):
        inspect_capture(tmp_path / "junk.pcap")


def test_json_report_keys(vectors_pcap):
    path, vectors = vectors_pcap
    j = json.loads(json.dumps(inspect_capture(path).to_json()))
    for k in ("packets", "bytes", "first_ns", "last_ns", "flows"):
        assert k in j
    for k in ("icrc_bad", "psn_gaps", "cnp", "payload_bytes"):
        assert isinstance(j["roce"][k], int)
    assert j["roce"]["cnp"] == 1 and j["roce"]["icrc_bad"] == 1 and j["pfc"]["xoff"] == 1
    lens = [int(v["len"]) for v in vectors]                  # the case file's frame lengths
    assert (j["frame_bytes_min"], j["frame_bytes_max"]) == (min(lens), max(lens))


OPS = {0x04: (b"", True), 0x06: (b"RETH", True), 0x0B: (b"RETH+IMM", True),
       0x0C: (b"RETH", False), 0x11: (b"AETH", False), 0x81: (b"CNP", False)}


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_decode_round_trip_against_scapy_built_frames(tmp_path_factory, data):
    """Random header values built into frames by scapy (an independent builder, ICRC included)
    come back from the vectorized decoder field by field."""
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Dot1Q
    draw = data.draw
    n = draw(st.integers(1, 5))
    frames, want = [], []
    for _ in range(n):
        op = draw(st.sampled_from(sorted(OPS)))
        ext, has_payload = OPS[op]
        pay = draw(st.binary(max_size=300)) if has_payload else b""
        dmalen = draw(st.integers(0, 2**32 - 1))
        extb = {b"": b"", b"RETH": bytes(12) + dmalen.to_bytes(4, "big"),
                b"RETH+IMM": bytes(12) + dmalen.to_bytes(4, "big") + b"\x01\x02\x03\x04",
                b"AETH": b"\x00\x00\x00\x07", b"CNP": bytes(16)}[ext]
        v6, vlan = draw(st.booleans()), draw(st.one_of(st.none(), st.integers(0, 4095)))
        dscp, ecn, sport = draw(st.integers(0, 63)), draw(st.integers(0, 3)), \
            draw(st.integers(0xC000, 0xFFFF))
        src, dst = draw(st.integers(1, 2**32 - 2)), draw(st.integers(1, 2**32 - 2))
        bth = dict(opcode=op, solicited=draw(st.integers(0, 1)), migreq=1,
                   padcount=(-len(pay)) & 3, pkey=draw(st.integers(0, 0xFFFF)),
                   fecn=draw(st.integers(0, 1)), becn=draw(st.integers(0, 1)),
                   dqpn=draw(st.integers(2, 0xFFFFFF)), ackreq=draw(st.integers(0, 1)),
                   psn=draw(st.integers(0, 0xFFFFFF)))
        v6a = [str(ipaddress.IPv6Address((0xFD00 << 112) | a)) for a in (src, dst)]
        ip = (IPv6(src=v6a[0], dst=v6a[1], tc=(dscp << 2) | ecn) if v6 else
              IP(src=str(ipaddress.IPv4Address(src)), dst=str(ipaddress.IPv4Address(dst)),
                 tos=(dscp << 2) | ecn, flags="DF"))
        eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")   # no ARP look-up
        l2 = eth / Dot1Q(vlan=vlan, prio=vlan % 8) if vlan is not None else eth
        frames.append(bytes(l2 / ip / UDP(sport=sport, dport=4791, chksum=0) / BTH(**bth) /
                            Raw(extb + pay + bytes(bth["padcount"]))))
        want.append(dict(op=op, pay=len(pay), dmalen=dmalen if b"RETH" in ext else -1, v6=v6,
                         vlan=-1 if vlan is None else vlan, dscp=dscp, ecn=ecn, sport=sport,
                         src=src, dst=dst, **bth))
    d = tmp_path_factory.mktemp("rt")
    dec, icrc, _ = decoded(write(d / "rt.pcap", frames))
    assert icrc.tolist() == [1] * n
    for w, r in zip(want, dec):
        assert r["kind"] == KIND_ROCEV2 and r["ipver"] == (6 if w["v6"] else 4)
        assert (r["vlan"], r["dscp"], r["ecn"], r["sport"]) == (w["vlan"], w["dscp"], w["ecn"],
                                                                 w["sport"])
        assert (r["src_lo"] & 0xFFFFFFFF, r["dst_lo"] & 0xFFFFFFFF) == (w["src"], w["dst"])
        assert (r["opcode"], r["padcnt"], r["pkey"], r["fecn"], r["becn"], r["destqp"],
                r["ackreq"], r["psn"]) == (w["op"], w["padcount"], w["pkey"], w["fecn"],
                                           w["becn"], w["dqpn"], w["ackreq"], w["psn"])
        assert (r["payload"], r["dmalen"]) == (w["pay"], w["dmalen"]) and not r["malformed"]


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")), deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["eth", "ipv4", "ipv6", "vlan", "ib"]),
                          st.binary(min_size=0, max_size=200), st.integers(0, 0xFFFF)),
                min_size=1, max_size=12))
def test_hostile_frames_never_crash(tmp_path_factory, frames):
    """Frames with RoCE-looking prefixes and random rest (lengths that lie, truncated headers,
    unknown opcodes, IB PktLen 0 ...) are counted, never a crash; checks simply fail."""
    d = tmp_path_factory.mktemp("fuzz")
    eth, ib = [], []
    for kind, rest, word in frames:
        w = word.to_bytes(2, "big")
        prefix = {"eth": b"",
                  "ipv4": bytes(12) + b"\x08\x00\x45\x00" + w + bytes(5) + b"\x11" + bytes(10)
                  + b"\xc0\x00\x12\xb7" + w,
                  "ipv6": bytes(12) + b"\x86\xdd\x60\x00\x00\x00" + w + b"\x11\x40" + bytes(32)
                  + b"\xc0\x00\x12\xb7" + w,
                  "vlan": bytes(12) + b"\x81\x00" + w + b"\x08\x00\x45" + bytes(8) + b"\x11",
                  "ib": w + w + b"\x00\x01" + w}[kind]
        (ib if kind == "ib" else eth).append(prefix + rest)
    for name, group, writer in (("e.pcap", eth, PcapWriter), ("i.erf", ib, ErfWriter)):
        if not group:
            continue
        rep = inspect_capture(write(d / name, group, writer=writer))
        assert rep.packets == len(group)
        assert rep.roce["payload_bytes"] >= 0 and isinstance(rep.ok, bool)
        json.dumps(rep.to_json())


def test_repeated_payloads_share_one_crc_but_every_byte_counts(tmp_path):
    """Full-size frames whose payloads repeat (as generated ones do) are verified through one
    CRC per distinct payload; a byte flipped away from the sampled words of one payload, or in
    one ICRC, is still caught (the payload is compared byte for byte with its group's)."""
    from tests.analysis.trace import write_trace
    path = tmp_path / "t.pcap"
    write_trace(path, 300)
    data = bytearray(path.read_bytes())
    cap = open_capture(path)
    rec = cap.read()
    o, c = int(rec["offset"][100]), int(rec["caplen"][100])
    data[o + c // 3] ^= 0x40                         # inside the payload of frame 100
    o, c = int(rec["offset"][200]), int(rec["caplen"][200])
    data[o + c - 2] ^= 0x01                          # the ICRC of frame 200
    bad = tmp_path / "bad.pcap"
    bad.write_bytes(bytes(data))
    _, icrc, _ = decoded(bad)
    assert np.flatnonzero(icrc != 1).tolist() == [100, 200]
    assert decoded(path)[1].tolist() == [1] * 300


def test_flow_ids_survive_hash_collisions(monkeypatch):
    """Flow ids equal a plain dict's first-seen numbering, also when every key hashes alike
    (the multipliers zeroed: the exact fallback must take over); the compiled factorization
    numbers the flows as the numpy one does."""
    from tokenpcap.analysis import flows as analysis_flows
    from tokenpcap.analysis.columns import Decoded
    rng = np.random.default_rng(7)
    n = 5000
    d = Decoded.zeros(n)
    d["kind"][:] = 1
    d["src_lo"][:] = rng.integers(0, 5, n)
    d["dst_lo"][:] = rng.integers(0, 3, n)
    d["destqp"][:] = rng.integers(2, 6, n)
    keys = list(zip(d["src_lo"].tolist(), d["dst_lo"].tolist(), d["destqp"].tolist()))
    want = {}
    expected = [want.setdefault(k, len(want)) for k in keys]
    for mix in (analysis_flows._MIX, [np.uint64(0)] * len(analysis_flows._MIX)):
        monkeypatch.setattr(analysis_flows, "_MIX", mix)
        monkeypatch.setattr(analysis_flows, "_MIX_ARRAY", np.array(mix, np.uint64))
        both = []
        for compiled in (False, True):      # numpy passes, the compiled hash table: same ids
            table = analysis_flows.FlowTable()
            both.append(np.concatenate([table.ids(d[np.arange(a, min(a + 700, n))], compiled)
                                        for a in range(0, n, 700)]))
        got = both[0]
        assert np.array_equal(both[1], got)
        # ids are dense and consistent: the same key always the same id, distinct keys apart
        pairs = set(zip(keys, got.tolist()))
        assert len(pairs) == len(want) == len(set(got.tolist()))
        assert sorted(k for k, _ in pairs) == sorted(want)
        assert len(expected) == got.size


def test_many_sections_cost_the_analysis_once_per_batch_not_per_section(tmp_path, monkeypatch):
    """2,000 one-packet pcapng sections (each SHB + IDB + EPB with its own comment): the same
    report as the same packets in one section, with the per-batch analysis run once for all
    of them and each comment's label parsed once (was: once per section, and the whole
    interface and comment lists again for every section)."""
    from tests.analysis.trace import write_trace
    from tests.pcap.helpers import comment_options, epb, idb, shb
    from tokenpcap.analysis import batch, inspect as inspect_mod

    n = 2000
    labels = [f"dp/backward/AllReduce step={i % 7}" for i in range(n)]
    one = tmp_path / "one.pcapng"
    write_trace(one, n, fmt="pcapng", comments=labels)
    cap = open_capture(one)
    rec = cap.read()
    o = "<"
    parts = []
    for i, r in enumerate(rec):
        t = int(r["time_ns"])
        parts += [shb(o), idb(o, 1, 0, tsresol=9),
                  epb(o, 0, t, cap.frame(r), options=comment_options(o, labels[i]))]
    many = tmp_path / "many.pcapng"
    many.write_bytes(b"".join(parts))
    calls = {"add_batch": 0, "parse": 0}
    real_add, real_parse = inspect_mod.add_batch, batch.parse_phase_label

    def add(*a, **k):  # type: ignore[no-untyped-def]
        calls["add_batch"] += 1
        return real_add(*a, **k)

    def parse(text):  # type: ignore[no-untyped-def]
        calls["parse"] += 1
        return real_parse(text)

    monkeypatch.setattr(inspect_mod, "add_batch", add)
    monkeypatch.setattr(batch, "parse_phase_label", parse)
    a, b = inspect_capture(one).to_json(), inspect_capture(many).to_json()
    assert calls["add_batch"] == 2 and calls["parse"] <= len(set(labels)) + n
    for k in ("packets", "bytes", "roce", "flows", "phases", "nics", "first_ns", "last_ns"):
        assert a[k] == b[k], k
    assert len(b["interfaces"]) == n


def test_flows_are_columns_and_json_streams_the_same_text(tmp_path):
    """Flows are kept as columns and made into dicts on demand; ``inspect --json`` writes the
    same text as json.dumps(indent=2) without building it whole (250,000 one-packet flows
    took 1.3 GB: benchmarks/README.md)."""
    import io

    from tests.analysis.trace import write_trace
    from tokenpcap.analysis.result import FlowRows
    from tokenpcap.cli.inspect_cmd import write_json

    write_trace(tmp_path / "f.pcap", 3000, qps=1500)
    rep = inspect_capture(tmp_path / "f.pcap")
    assert isinstance(rep.flows, FlowRows) and len(rep.flows) == 1500
    lazy = rep.to_json(lazy_flows=True)
    assert lazy["flows"] is rep.flows
    full = rep.to_json()
    assert full["flows"] == [rep.flows[i] for i in range(1500)] == rep.flows[:]
    assert rep.flows[-1] == full["flows"][-1] and set(full["flows"][0]) >= {
        "transport", "src", "dst", "dest_qp", "udp_sport", "packets", "bytes", "cut"}
    out = io.StringIO()
    write_json(lazy, out)
    assert out.getvalue() == json.dumps(full, indent=2) + "\n"
    big = rep.flows.largest(3)
    assert [f["bytes"] for f in big] == sorted((f["bytes"] for f in full["flows"]),
                                               reverse=True)[:3]


def test_a_nic_that_sends_only_control_packets_is_named_with_the_reason(tmp_path):
    """198.18.0.1 sends two data writes and 198.18.0.2 only the clear-to-send write and the ACK
    of the data it receives (comments 'cts ...'/'ack ...'); a declared interface (node0/nic2)
    sends nothing: inspect names both, each with its reason, and the data NIC not at all."""
    from scapy.layers.inet import IP
    from tokenpcap.pcap import Interface

    def frame(src, dst, opcode, payload):
        pad = (-len(payload)) & 3
        return bytes(Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") /
                     IP(src=src, dst=dst, tos=(26 << 2) | 2, ttl=64, flags="DF") /
                     UDP(sport=0xC003, dport=4791, chksum=0) /
                     BTH(opcode=opcode, migreq=1, padcount=pad, dqpn=7, psn=0) /
                     Raw(payload + b"\0" * pad))

    frames = [frame("198.18.0.1", "198.18.0.2", 0x0A, b"d" * 64),
              frame("198.18.0.1", "198.18.0.2", 0x0A, b"d" * 128),
              frame("198.18.0.2", "198.18.0.1", 0x0A, b"c" * 64)]
    labels = ["dp/backward/AllReduce it 0", "dp/backward/AllReduce it 0",
              "cts dp/backward/AllReduce it 0"]
    ifaces = [Interface(name=f"node0/nic{i}", description=f"198.18.0.{i + 1} 02:00:00:00:00:0{i}")
              for i in range(3)]
    with PcapngWriter(tmp_path / "p.pcapng", ifaces) as w:
        w.write_batch(T0 + np.arange(3, dtype=np.int64), np.array([len(f) for f in frames]),
                      _fill(frames), comments=labels)
    rep = inspect_capture(tmp_path / "p.pcapng")
    idle = {(e["address"], e["reason"]) for e in rep.idle_nics}
    assert idle == {("198.18.0.2", "control_only"), ("198.18.0.3", "no_packet")}
    data = {e["address"]: (e["data_payload_bytes"], e["payload_bytes"]) for e in rep.nics}
    assert data["198.18.0.2"][0] == 0 < data["198.18.0.2"][1]           # CTS payload only
    assert data["198.18.0.1"][0] == data["198.18.0.1"][1] > 0           # all of it data
    assert any(n.startswith("why a NIC carries no data") for n in rep.notes)


def test_every_batch_is_released_after_it_is_read(tmp_path, monkeypatch):
    """The frames of a batch are read (decode, CRC) after the reader has walked on and released
    their region, so add_batch releases every byte of the batch itself, piece by piece, before
    it returns; without that, resident memory grows with the file (docs/analysis.md). Small
    batches, regions and pieces make a file of several of each."""
    from tests.analysis.trace import write_trace
    from tokenpcap.analysis import batch as batch_mod
    from tokenpcap.analysis import inspect as inspect_mod
    from tokenpcap.pcap import capture as capture_mod
    path = tmp_path / "t.pcap"
    write_trace(path, 600)
    monkeypatch.setattr(capture_mod, "REGION", 1 << 16)
    monkeypatch.setattr(inspect_mod, "CHUNK", 64)
    real_pieces = batch_mod.pieces
    monkeypatch.setattr(batch_mod, "pieces", lambda rec: real_pieces(rec, 1 << 15))
    released = []
    release = capture_mod.Capture.release
    monkeypatch.setattr(capture_mod.Capture, "release",
                        lambda self, lo, hi: (release(self, lo, hi), released.append((lo, hi)))[0])
    spans = []
    add = inspect_mod.add_batch

    def add_batch(acc, cap, rec):
        first = len(released)
        add(acc, cap, rec)
        spans.append((rec, sorted(released[first:])))
    monkeypatch.setattr(inspect_mod, "add_batch", add_batch)
    rep = inspect_capture(path, max_records=64)
    assert rep.packets == 600 and len(spans) > 2
    for rec, done in spans:
        lo, hi = int(rec["record"].min()), int((rec["offset"] + rec["caplen"]).max())
        assert len(done) > 1                              # piece by piece
        reach = lo
        for a, b in done:                                 # the pieces cover [lo, hi) whole
            assert a <= reach
            reach = max(reach, b)
        assert done[0][0] <= lo and reach >= hi


def test_comment_table_is_bounded_by_a_batch_not_the_file(tmp_path, monkeypatch):
    """pcapng comments are distinct per call and step: inspect starts the capture's comment
    table afresh after every batch, so it holds about one batch's comments, and the phases
    are the same as when the whole file is one batch (where nothing is forgotten before the
    end)."""
    from tests.analysis.trace import write_trace
    from tokenpcap.pcap import capture as capture_mod
    n = 2000
    labels = [("cts " if i % 5 == 0 else "") +
              f"{'dp/backward' if i % 2 else 'tp/forward'}/AllReduce it 0 call {i // 4} step 0"
              for i in range(n)]
    path = tmp_path / "c.pcapng"
    write_trace(path, n, fmt="pcapng", comments=labels)
    held = []
    forget = capture_mod.Capture.forget_comments
    monkeypatch.setattr(capture_mod.Capture, "forget_comments",
                        lambda self: (held.append(len(self.comments)), forget(self))[1])
    whole = inspect_capture(path).to_json()
    assert held == [len(set(labels))]
    held.clear()
    small = inspect_capture(path, max_records=100).to_json()
    assert len(held) >= n // 100 and 0 < max(held) <= 200 < len(set(labels))
    assert small["phases"] == whole["phases"] and len(whole["phases"]) == 4
    assert {p["name"]: p["packets"] for p in whole["phases"]} == {
        "dp/backward/AllReduce": 800, "dp/backward/AllReduce [cts]": 200,
        "tp/forward/AllReduce": 800, "tp/forward/AllReduce [cts]": 200}


def test_flows_beyond_the_limit_are_summed_as_other_in_a_capped_table(tmp_path, monkeypatch):
    """3,000 packets of 1,500 one-QP flows read with a limit of 100 flows: the per-flow tables
    never hold more than 100 flows plus the 'other' row (they held one entry per flow: about
    1.1 KB each, 2.2 GB for 2 M flows), the report says so, and every total, phase and NIC
    packet count still adds up to the uncapped report's."""
    from tests.analysis.trace import write_trace
    from tokenpcap.analysis import inspect as inspect_mod
    from tokenpcap.analysis.report import render_text

    labels = [f"dp/backward/AllReduce step={i % 3}" for i in range(3000)]
    path = tmp_path / "f.pcapng"
    write_trace(path, 3000, qps=1500, fmt="pcapng", comments=labels, batch=700)
    full = inspect_capture(path).to_json()
    seen = []

    class Acc(inspect_mod.Acc):
        def __init__(self, *a, **k):  # type: ignore[no-untyped-def]
            super().__init__(*a, **k)
            seen.append(self)

    peak = {"rows": 0, "keys": 0, "pairs": 0}
    real_add = inspect_mod.add_batch

    def add(acc, cap, rec):  # type: ignore[no-untyped-def]
        real_add(acc, cap, rec)
        peak["rows"] = max(peak["rows"], acc.f["packets"].size, acc.psn.seen.size)
        peak["keys"] = max(peak["keys"], len(acc.flows.keys), len(acc.flows._index))
        peak["pairs"] = max(peak["pairs"], len(acc.flow_label))

    monkeypatch.setattr(inspect_mod, "Acc", Acc)
    monkeypatch.setattr(inspect_mod, "add_batch", add)
    rep = inspect_capture(path, max_records=500, max_flows=100)
    got = rep.to_json()
    assert peak == {"rows": 101, "keys": 100, "pairs": 101} and len(seen) == 1
    assert len(got["flows"]) == got["roce"]["flows"] == 100
    other = got["roce"]["flows_other"]
    assert other["limit"] == 100 and other["packets"] == 3000 - sum(
        f["packets"] for f in got["flows"])
    assert other["payload_bytes"] + sum(f["payload_bytes"] for f in got["flows"]) == \
        full["roce"]["payload_bytes"]
    note = "flows beyond 100 summarised as 'other': "
    assert any(n.startswith(note) for n in got["notes"]) and note in render_text(rep)
    for k in ("packets", "bytes", "phases", "first_ns", "last_ns", "kinds"):
        assert got[k] == full[k], k
    assert {k: v for k, v in got["roce"].items() if k not in ("flows", "flows_cut",
                                                                "flows_other")} == \
        {k: v for k, v in full["roce"].items() if k not in ("flows", "flows_cut")}
    assert "flows_other" not in full["roce"] and not full["notes"]
