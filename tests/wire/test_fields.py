"""The header declarations: widths, codecs, round trips, errors, pretty-printer, tshark names."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.errors import DecodeError, EncodeError
from tokenpcap.wire import headers as H
from tokenpcap.wire.fields import Field, Header

ALL = list(H.HEADERS.values())

# Sizes in bytes from the specifications (IEEE 802.3/802.1Q, RFC 791/8200/768, IBTA vol.1 7.7-9.3).
SPEC_SIZES = {"Ethernet": 14, "802.1Q": 4, "IPv4": 20, "IPv6": 40, "UDP": 8, "LRH": 8, "GRH": 40,
              "BTH": 12, "RETH": 16, "AETH": 4, "ImmDt": 4, "DETH": 8, "IETH": 4, "AtomicETH": 28,
              "AtomicAckETH": 8, "CNP": 16, "ICRC": 4, "VCRC": 2, "PFC": 20}


def test_every_header_has_its_spec_size():
    assert {h.name: h.size for h in ALL} == SPEC_SIZES


def header_values(h: Header):
    return st.fixed_dictionaries({f.name: st.integers(0, (1 << f.bits) - 1) for f in h.fields})


@pytest.mark.parametrize("h", ALL, ids=[h.name for h in ALL])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_decode_encode_round_trip(h, data):
    values = data.draw(header_values(h))
    raw = h.pack(values)
    assert len(raw) == h.size
    assert h.unpack(raw) == values
    assert h.unpack(b"\xaa" + raw, 1) == values        # at an offset


@pytest.mark.parametrize("h", ALL, ids=[h.name for h in ALL])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_vectorized_put_get_equal_scalar_pack(h, data):
    rows = data.draw(st.lists(header_values(h), min_size=1, max_size=5))
    out = np.zeros((len(rows), h.size + 3), np.uint8)
    for f in h.fields:
        if f.bits > 64:
            vals = np.array([list(r[f.name].to_bytes(f.bits // 8, "big")) for r in rows], np.uint8)
        else:
            vals = np.array([r[f.name] for r in rows], np.uint64)
        h.put(out, 3, f.name, vals)
        got = h.get(out, 3, f.name)
        if f.bits > 64:
            assert [int.from_bytes(g.tobytes(), "big") for g in got] == [r[f.name] for r in rows]
        else:
            assert got.tolist() == [r[f.name] for r in rows]
    assert [out[i, 3:].tobytes() for i in range(len(rows))] == [h.pack(r) for r in rows]


def test_known_encodings_from_the_case_frames(scapy_vectors):
    # BTH of rc_write_first_psn_fffffe: opcode 6, MigReq, P_Key ffff, DestQP 0xd2a, PSN 0xfffffe.
    vec = bytes.fromhex(scapy_vectors["vectors"][0]["hex"])
    assert H.BTH.pack(OpCode=6, MigReq=1, DestQP=0xD2A, PSN=0xFFFFFE) == vec[42:54]
    assert H.RETH.unpack(vec, 54) == {"VA": 0x7F1234560000, "R_Key": 0xABCDEF, "DMALen": 520}
    # C14: IPv6 version/traffic class/flow label
    for tc, fl, first4 in ((0x6A, 0x12345, "66a12345"), (0x6A, 88000, "66a157c0"), (0xB8, 0xFFFFF, "6b8fffff")):
        assert H.IPV6.pack(TrafficClass=tc, FlowLabel=fl)[:4].hex() == first4
    # ICRC and VCRC are written least-significant byte first
    assert H.ICRC.pack(ICRC=0x64D2DD95).hex() == "95ddd264"
    assert H.VCRC.unpack(bytes.fromhex("8dfd"))["VCRC"] == 0xFD8D
    # 802.1Q: PCP 3, VID 100 -> 60 64
    assert H.DOT1Q.pack(PCP=3, VID=100).hex() == "60640800"


def test_encode_error_names_header_field_value_and_range():
    with pytest.raises(EncodeError, match=r"BTH\.PSN: got 16777216, expected 0\.\.16777215 \(24 bits\)"):
        H.BTH.pack(PSN=1 << 24)
    with pytest.raises(EncodeError, match=r"IPv4\.DSCP: got -1"):
        H.IPV4.pack(DSCP=-1)
    with pytest.raises(EncodeError, match=r"BTH: no field 'Psn'"):
        H.BTH.pack(Psn=1)
    with pytest.raises(EncodeError, match=r"RETH\.VA: got '1', expected an integer"):
        H.RETH.pack(VA="1")


def test_decode_error_names_offsets():
    with pytest.raises(DecodeError, match=r"BTH at byte 42: need 12 bytes \(to byte 54\), got 8 "
                                          r"\(input ends at byte 50\)"):
        H.BTH.unpack(bytes(50), 42)


def test_declaration_is_checked_at_import():
    with pytest.raises(TypeError, match="not a whole number of bytes"):
        Header("Bad", (Field("A", 3), Field("B", 4)), spec="test")
    with pytest.raises(TypeError, match="declared twice"):
        Header("Bad", (Field("A", 8), Field("A", 8)), spec="test")
    with pytest.raises(TypeError, match="does not fit"):
        Header("Bad", (Field("A", 4, default=16), Field("B", 4)), spec="test")
    with pytest.raises(TypeError, match="byte-aligned"):
        Header("Bad", (Field("A", 4), Field("B", 12, little_endian=True)), spec="test")


def test_pretty_printer():
    line = H.BTH.pretty(H.BTH.unpack(H.BTH.pack(OpCode=0x0A, DestQP=0x123, PSN=7, AckReq=1)))
    assert line == ("BTH: OpCode=0x0a SE=0 MigReq=1 PadCnt=0 TVer=0 P_Key=0xffff FECN=0 BECN=0 "
                    "Resv6a=0 DestQP=0x000123 AckReq=1 Resv7=0 PSN=0x000007")
    ip = H.IPV4.pretty(H.IPV4.unpack(H.IPV4.pack(SourceAddress=0xC6120001, DestinationAddress=0x0A000002)))
    assert "SourceAddress=198.18.0.1 DestinationAddress=10.0.0.2" in ip
    assert "Destination=02:00:00:00:00:0b" in H.ETHERNET.pretty({"Destination": 0x02000000000B})
    assert "SGID=fe80::2" in H.GRH.pretty({"SGID": 0xFE80 << 112 | 2})


def test_tshark_names_exist_in_tshark_4():
    # The names the tshark tests compare; checked against `tshark -G fields` of TShark 4.0.17.
    m = H.BTH.tshark_fields()
    assert m["OpCode"] == "infiniband.bth.opcode" and m["PSN"] == "infiniband.bth.psn"
    assert m["DestQP"] == "infiniband.bth.destqp" and m["PadCnt"] == "infiniband.bth.padcnt"
    assert H.RETH.tshark_fields()["DMALen"] == "infiniband.reth.dmalen"
    assert H.AETH.tshark_fields()["MSN"] == "infiniband.aeth.msn"
    assert H.LRH.tshark_fields()["PktLen"] == "infiniband.lrh.pktlen"
