"""Malformed RoCE frames: named and counted by reason, never "truncated", and
kept out of BECN/ECN/opcode/PSN statistics.

The frames are built with scapy (the independent builder: its BTH appends a correct ICRC) and then
damaged byte by byte where a field must lie; the expected reason of each comes from that
construction and the IBTA rules cited in :mod:`tokenpcap.analysis.decode`.
"""
from __future__ import annotations

import struct

import pytest

from tests.analysis.test_inspect import _scapy_frame, write
from tokenpcap.analysis.inspect import inspect_capture
from tokenpcap.analysis.report import render_text

pytest.importorskip("scapy.all")
from scapy.contrib.roce import BTH  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.l2 import Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402

ETH = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def _udp(payload: bytes, **udp) -> bytes:
    return bytes(Ether(**ETH) / IP(src="198.18.0.1", dst="198.18.0.3", flags="DF") /
                 UDP(sport=0xC009, dport=4791, chksum=0, **udp) / payload)


def _frames() -> tuple[list[bytes], dict[str, int]]:
    good = [_scapy_frame(0xC001, 5, p, 0x04, b"x" * 8) for p in (1, 2, 3, 4, 5)]
    ip_len = bytearray(good[2])                              # IPv4 total length + 4
    struct.pack_into(">H", ip_len, 16, struct.unpack_from(">H", ip_len, 16)[0] + 4)
    frames = [good[0], good[1], bytes(ip_len), good[3], good[4]]
    frames.append(_udp(b"\xff" * 40))                         # junk: opcode 0xFF, BECN bit set
    sz = len(BTH()) + 8 + 4                                  # the SEND ONLY frame's UDP length
    frames.append(_udp(bytes(BTH(opcode=4, dqpn=8, psn=1)) + b"abcd", len=sz + 4))  # UDP len
    frames.append(_scapy_frame(0xC002, 6, 10, 0x06, b""))    # WRITE FIRST without RETH
    frames.append(bytes(Ether(**ETH) / IP(src="198.18.0.1", dst="198.18.0.4", flags="DF") /
                        UDP(sport=0xC003, dport=4791, chksum=0) /
                        BTH(opcode=4, padcount=0, dqpn=7, psn=3) / Raw(b"abcde")))  # PadCnt 0
    frames.append(_scapy_frame(0xC004, 9, 4, 0x11, b"\x00\x00\x00\x07" + b"junk"))   # ACK+junk
    return frames, {"lengths": 2, "opcode": 1, "short": 1, "padcnt": 1, "junk": 1}


def test_malformed_frames_by_reason(tmp_path):
    frames, reasons = _frames()
    rep = inspect_capture(write(tmp_path / "m.pcap", frames))
    r = rep.roce
    assert r["malformed"] == 6 and r["malformed_reasons"] == reasons
    assert (r["icrc_ok"], r["icrc_bad"], r["icrc_unchecked"]) == (4, 0, 0)   # none "truncated"
    assert r["becn"] == 0 and r["fecn"] == 0                 # the junk's 0xFF byte 4
    assert sum(r["opcodes"].values()) == 4 and r["ecn"]["ect0"] + r["ecn"]["not_ect"] + \
        r["ecn"]["ect1"] + r["ecn"]["ce"] == 4
    assert r["psn_gaps"] == 0 and r["psn_flows_malformed"] == 6
    assert r["payload_bytes"] == 4 * 8
    lengths = [c for c in rep.checks() if c["name"] == "lengths"][0]
    assert not lengths["ok"] and "lengths 2" in lengths["detail"]
    text = render_text(rep)
    assert "Malformed:           6 (lengths 2, opcode 1, short 1, junk 1, padcnt 1;" in text
    assert "0 not checkable (truncated)" in text


def test_snaplen_truncation_is_not_malformed(tmp_path):
    """Cutting every frame at 60 bytes leaves the lengths consistent: not checkable, not
    malformed, payload still from the headers (C7)."""
    frames, _ = _frames()
    rep = inspect_capture(write(tmp_path / "t.pcap", frames[:2] + frames[3:5], snaplen=60))
    assert (rep.roce["malformed"], rep.roce["icrc_unchecked"]) == (0, 4)
    assert rep.roce["payload_bytes"] == 32 and rep.roce["psn_gaps"] == 1   # PSN 3 left out


def test_pad_of_a_c3_frame_is_consistent(tmp_path, scapy_vectors):
    """C3: a 5-byte SEND ONLY with PadCnt 3 is fine (only PadCnt 0 with 5 bytes is not)."""
    f = _scapy_frame(0xC005, 3, 1, 0x04, b"abcde")
    rep = inspect_capture(write(tmp_path / "c3.pcap", [f]))
    assert rep.roce["malformed"] == 0 and rep.roce["payload_bytes"] == 5
