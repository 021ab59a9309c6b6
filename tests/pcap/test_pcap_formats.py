"""Header declarations and timestamp arithmetic against the specs and exact rational arithmetic."""
from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.errors import CaptureError, EncodeError
from tokenpcap.pcap import formats as F
from tokenpcap.pcap.timestamps import erf_to_ns, ns_to_erf, split_ns, tsresol_to_ns

from .helpers import idb, option

NS = 10**9


def test_sizes_and_offsets_match_the_specs():
    # pcap draft §4/§5; pcapng draft §4.1-4.4; ERF generic header (16 bytes).
    assert F.PCAP_FILE_HEADER.size == 24 and F.PCAP_RECORD.size == 16
    assert F.PCAP_RECORD.offset("caplen") == 8 and F.PCAP_RECORD.offset("orig_len") == 12
    assert F.SHB.size == 24 and F.IDB.size == 16 and F.EPB.size == 28 and F.SPB.size == 12
    assert F.OPB.size == 28 and F.OPB.offset("ts_high") == 12
    assert F.ERF_RECORD.size == 16 and F.ERF_RECORD.offset("rlen") == 10
    assert F.ERF_RECORD.offset("wlen") == 14 and F.ERF_RECORD.offset("type") == 8


def test_pack_equals_hand_struct_in_both_orders():
    for order in "<>":
        got = F.PCAP_FILE_HEADER.pack(order, magic=0xA1B23C4D, snaplen=9000, linktype=197)
        assert got == struct.pack(order + "IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 9000, 197)
    # ERF mixes byte orders: ts little-endian, rlen/lctr/wlen big-endian whatever the file.
    got = F.ERF_RECORD.pack(">", ts=0x0102030405060708, type=21, flags=4, rlen=0x1234, wlen=0x56)
    assert got == struct.pack("<QBB", 0x0102030405060708, 21, 4) + struct.pack(">HHH", 0x1234, 0, 0x56)


def test_pack_rejects_out_of_range_and_missing():
    with pytest.raises(EncodeError, match="snaplen: got 4294967296"):
        F.PCAP_FILE_HEADER.pack("<", magic=1, snaplen=1 << 32)
    with pytest.raises(EncodeError, match="magic: got missing"):
        F.PCAP_FILE_HEADER.pack("<")
    with pytest.raises(EncodeError, match="unknown"):
        F.PCAP_RECORD.pack("<", nonsense=1)


@given(st.sampled_from([F.PCAP_RECORD, F.EPB, F.ERF_RECORD, F.OPB]), st.sampled_from("<>"),
       st.data())
def test_unpack_pack_round_trip(header, order, data):
    values = {}
    for f in header.fields:
        info = np.iinfo(np.dtype(f.type))
        values[f.name] = data.draw(st.integers(int(info.min), int(info.max)))
    assert header.unpack(header.pack(order, **values), 0, order) == values


@given(st.sampled_from("<>"), st.text(max_size=40), st.integers(0, 2**64 - 1),
       st.integers(0, 255), st.integers(-2**63, 2**63 - 1))
def test_options_round_trip_and_match_hand_encoding(order, name, speed, tsresol, tsoffset):
    opts = [(2, name), (8, speed), (9, tsresol), (14, tsoffset)]
    raw = F.encode_options(opts, F.IDB_OPTIONS, order)
    hand = (option(order, 2, name.encode()) + option(order, 8, struct.pack(order + "Q", speed))
            + option(order, 9, bytes([tsresol])) + option(order, 14, struct.pack(order + "q", tsoffset))
            + struct.pack(order + "HH", 0, 0))
    assert raw == hand and len(raw) % 4 == 0
    got = F.decode_options(raw, 0, len(raw), F.IDB_OPTIONS, order)
    assert got == {"if_name": name, "if_speed": speed, "if_tsresol": tsresol, "if_tsoffset": tsoffset}


def test_option_overrunning_its_block_names_the_offset():
    raw = idb("<", tsresol=9)[16:-4]          # the IDB's options
    with pytest.raises(CaptureError, match="byte offset 0"):
        F.decode_options(raw, 0, 4, F.IDB_OPTIONS, "<")


def test_c8_float_time_loses_nanoseconds_integer_does_not():
    t = np.array([1700000000_000000000, 1700000000_000000100, 1700000001_000000001])
    assert len({float(x) / 1e9 for x in t[:2]}) == 1          # a double cannot tell them apart
    sec, frac = split_ns(t, NS)
    assert sec.tolist() == [1700000000, 1700000000, 1700000001]
    assert frac.tolist() == [0, 100, 1]


def test_c9_microsecond_rounding_and_carry():
    # 1332502747.5209900094 s -> integer ns 1332502747520990009 -> usec 520990, not 520989.
    sec, usec = split_ns(np.array([1332502747_520990009]), 10**6)
    assert (sec[0], usec[0]) == (1332502747, 520990)
    # 1.9999995 s rounds half up to 2.000000 s: the fraction carries into the seconds.
    sec, usec = split_ns(np.array([1_999_999_500, 1_999_999_499]), 10**6)
    assert sec.tolist() == [2, 1] and usec.tolist() == [0, 999999]


@given(st.integers(0, (1 << 32) * NS - 1))
def test_usec_split_is_round_half_up_and_fraction_below_a_second(t):
    sec, usec = split_ns(np.array([t]), 10**6)
    exact = Fraction(t, 1000)
    want = int(exact) + (1 if exact - int(exact) >= Fraction(1, 2) else 0)
    assert int(sec[0]) * 10**6 + int(usec[0]) == want and 0 <= usec[0] < 10**6


def test_c11_tsresol_9_value():
    ns, bad = tsresol_to_ns(np.array([1573830016444223380], np.uint64), 9)
    assert ns[0] == 1573830016444223380 and not bad[0]


@given(st.integers(0, (1 << 32) * NS - 1))       # ERF seconds are 32 bits
@settings(max_examples=300)
def test_erf_timestamp_round_trips_every_ns(t):
    ts = ns_to_erf(np.array([t], np.int64))
    sec, frac = int(ts[0]) >> 32, int(ts[0]) & 0xFFFFFFFF
    # the fraction is the exact binary fraction rounded to nearest (Endace ERF timestamp)
    assert sec == t // NS and abs(Fraction(frac, 2**32) - Fraction(t % NS, NS)) <= Fraction(1, 2**33)
    assert erf_to_ns(ts)[0] == t


def _exact_ns(ticks: int, tsresol: int, offset: int) -> int | None:
    n = tsresol & 0x7F
    unit = Fraction(1, 2**n) if tsresol & 0x80 else Fraction(1, 10**n)
    return math.floor(ticks * unit * NS + offset * NS + Fraction(1, 2))   # nearest, half up


@given(st.integers(0, 2**64 - 1), st.sampled_from([0, 3, 6, 9, 10, 12, 15, 19, 0x80, 0x86,
                                                   0x8A, 0x94, 0x9E, 0xA0, 0xA2, 0xBF]),
       st.integers(-10**6, 10**6))
@settings(max_examples=400)
def test_tsresol_conversion_against_exact_fractions(ticks, tsresol, offset):
    ns, bad = tsresol_to_ns(np.array([ticks], np.uint64), tsresol, offset)
    want = _exact_ns(ticks, tsresol, offset)
    if bad[0]:
        assert want > 2**62            # refused only when int64 ns cannot hold it
        return
    n = tsresol & 0x7F
    if (tsresol & 0x80 and n <= 34) or (not tsresol & 0x80):
        assert ns[0] == want           # exact, or rounded half up to the nearest ns
    else:
        assert abs(int(ns[0]) - want) <= 1   # 2**-n, n > 34: fraction truncated to 2**-34 first
