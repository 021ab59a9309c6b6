"""NCCL's LL/LL128/Simple line formats and sizes against prims_ll.h, prims_ll128.h, device.h
and init.cc (NVIDIA/nccl 5067397c)."""
from __future__ import annotations

import struct

import numpy as np
from hypothesis import given, strategies as st

from tokenpcap.collectives.protocols import PROTOCOLS, decode_flags, encode_lines, wire_bytes


def test_buffer_and_step_sizes():
    # init.cc DEFAULT_LL_BUFFSIZE = 8 lines/thread * 512 threads * 8 steps * 16 B
    assert PROTOCOLS["LL"].buffer_bytes == 524288 and PROTOCOLS["LL"].step_data_bytes == 32768
    # DEFAULT_LL128_BUFFSIZE = 120 * 640 * 8 * 8; a step: 614400 wire bytes, 15/16 of them data
    assert PROTOCOLS["LL128"].buffer_bytes == 4915200
    assert PROTOCOLS["LL128"].step_bytes == 614400 and PROTOCOLS["LL128"].step_data_bytes == 576000
    assert PROTOCOLS["Simple"].step_bytes == 524288


def test_wire_sizes():
    assert wire_bytes("LL", 8) == 16 and wire_bytes("LL", 9) == 32 and wire_bytes("LL", 1024) == 2048
    # LL128: whole 2048-byte warp slices (32 threads x 8 words), 1920 data bytes each
    assert wire_bytes("LL128", 1) == 2048 and wire_bytes("LL128", 1920) == 2048
    assert wire_bytes("LL128", 1921) == 4096
    assert wire_bytes("Simple", 12345) == 12345


def test_ll_line_is_data_flag_data_flag():
    data = np.arange(16, dtype=np.uint8)
    w = encode_lines("LL", data, flag=7).tobytes()
    # storeLL: {(uint32)val, flag, (uint32)(val >> 32), flag}, little-endian
    v0, v1 = struct.unpack("<QQ", data.tobytes())
    assert w == struct.pack("<IIII", v0 & 0xFFFFFFFF, 7, v0 >> 32, 7) + \
        struct.pack("<IIII", v1 & 0xFFFFFFFF, 7, v1 >> 32, 7)


def test_ll128_flag_is_the_last_word_of_each_line():
    data = np.full(200, 0xAB, np.uint8)
    w = encode_lines("LL128", data, flag=3)
    assert w.size == 2048
    lines = w.reshape(16, 128)
    for line in lines:
        assert struct.unpack("<Q", line[120:].tobytes())[0] == 3
    assert (lines[0, :120] == 0xAB).all() and (lines[1, :80] == 0xAB).all()
    assert (lines[1, 80:120] == 0).all()


@given(st.sampled_from(["LL", "LL128"]), st.integers(1, 9000), st.integers(1, 2**31))
def test_round_trip_flags_and_data(proto, n, flag):
    rng = np.random.default_rng(n)
    data = rng.integers(0, 256, n, dtype=np.uint8)
    w = encode_lines(proto, data, flag)
    assert w.size == wire_bytes(proto, n)
    f = decode_flags(proto, w)
    assert (f == flag).all()
    p = PROTOCOLS[proto]
    lines = w.reshape(-1, p.line_bytes)
    back = (lines[:, [0, 1, 2, 3, 8, 9, 10, 11]] if proto == "LL" else lines[:, :120]).reshape(-1)
    assert (back[:n] == data).all()
