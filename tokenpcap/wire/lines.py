"""NCCL's LL and LL128 line formats in a packet's payload: encoding, decoding, and the payload
pattern (with its CRC and checksum tables) of one flag value.

NCCL's LL protocol (``src/device/prims_ll.h``) writes 16-byte lines ``union ncclLLFifoLine {
uint32_t data1, flag1, data2, flag2; }`` (``src/include/device.h``): ``storeLL`` puts
``{(uint32)val, flag, (uint32)(val >> 32), flag}``, 8 data bytes per line. LL128
(``src/device/prims_ll128.h``) writes 128-byte lines of 16 eight-byte words whose last word
(``NCCL_LL128_FLAGTHREAD``, bytes 120..127) is the flag, 120 data bytes per line. GPU memory is
little-endian. The flag is the sender's step on the connection plus one (``sendFlag``: ``sendStep
+ 1``). NVIDIA/nccl commit 5067397c.

A packet's payload is a whole number of lines: messages are whole lines and packets are cut at
the PMTU (256..4096 bytes, a multiple of 128). The data words of the lines are the context's
payload pattern (the same bytes a Simple packet carries, in line order); the flag words depend
on the packet. :class:`LinePatterns` gives, per (protocol, flag), the payload pattern and the
tables the frame builder reads (CRC prefix registers, IPv6 UDP word sums), made from per-bit
tables by linearity, so that a new flag costs a few array XORs.
"""
from __future__ import annotations

import numpy as np

__all__ = ["LINE_PROTOCOLS", "LINE_FORMATS", "encode_lines", "decode_flags", "LinePatterns",
           "wire_offset"]

#: ``PACKET_DTYPE.line_protocol`` codes: 0 raw payload (NCCL's Simple), 1 LL, 2 LL128.
LINE_PROTOCOLS = {"Simple": 0, "LL": 1, "LL128": 2}
#: Per line protocol code: (line bytes, byte offsets of the flag bytes in a line, flag width).
LINE_FORMATS = {1: (16, (4, 5, 6, 7, 12, 13, 14, 15), 4), 2: (128, tuple(range(120, 128)), 8)}


def _code(protocol: str | int) -> int:
    return LINE_PROTOCOLS[protocol] if isinstance(protocol, str) else int(protocol)


def wire_offset(protocol: str | int, data_offset: int) -> int:
    """Offset in a message's wire bytes of its data byte ``data_offset`` (Simple: the same; LL:
    ``data1`` at bytes 0..3, ``data2`` at 8..11 of each 16-byte line; LL128: bytes 0..119 of each
    128-byte line), what :func:`encode_lines` writes."""
    code = _code(protocol)
    if code == 0:
        return int(data_offset)
    size, pos, _ = LINE_FORMATS[code]
    dpos = [i for i in range(size) if i not in pos]
    line, k = divmod(int(data_offset), len(dpos))
    return line * size + dpos[k]


def encode_lines(protocol: str | int, data: np.ndarray, flag: int, lines: int) -> np.ndarray:
    """``lines`` lines of ``protocol`` carrying ``data`` (zero-padded; uint8) with ``flag``:
    uint8 ``(lines * line_bytes,)``."""
    size, pos, width = LINE_FORMATS[_code(protocol)]
    dpos = np.setdiff1d(np.arange(size), pos)
    out = np.zeros((lines, size), np.uint8)
    d = np.zeros(lines * dpos.size, np.uint8)
    d[:min(d.size, len(data))] = np.asarray(data, np.uint8)[:d.size]
    out[:, dpos] = d.reshape(lines, dpos.size)
    fb = np.frombuffer(int(flag).to_bytes(width, "little"), np.uint8)
    out[:, list(pos)] = np.tile(fb, len(pos) // width)
    return out.reshape(-1)


def decode_flags(protocol: str | int, payload: np.ndarray) -> np.ndarray:
    """The flag words of a payload of whole lines: LL uint32 ``(lines, 2)`` (flag1, flag2), LL128
    uint64 ``(lines, 1)``.

    Raises:
        ValueError: a payload that is not whole lines.
    """
    size, pos, width = LINE_FORMATS[_code(protocol)]
    payload = np.asarray(payload, np.uint8)
    if payload.size % size:
        raise ValueError(f"payload of {payload.size} bytes: expected whole lines of {size} bytes")
    f = np.ascontiguousarray(payload.reshape(-1, size)[:, list(pos)])
    return f.view("<u4" if width == 4 else "<u8").reshape(payload.size // size, -1)


class LinePatterns:
    """Payload patterns of line protocols over a base pattern (module docstring).

    Args:
        base: uint8 ``(n,)``: the data bytes (the context's payload pattern).
        registers: ``[(crc, tail_zeros), ...]``: the reflected CRCs whose prefix registers the
            builder reads (:meth:`tokenpcap.wire.linear.ReflectedCRC.prefix_registers`).
    """

    _BITS = 32                      # flags are step + 1 < 2**32

    def __init__(self, base: np.ndarray, registers: list):
        self.base = np.asarray(base, np.uint8)
        self.registers = registers
        self._zero: dict[int, tuple] = {}
        self._bits: dict[int, list] = {}
        self._cache: dict[tuple[int, int], tuple] = {}

    def _pattern(self, code: int, flag: int) -> np.ndarray:
        size = LINE_FORMATS[code][0]
        n = self.base.size
        return encode_lines(code, self.base, flag, n // size)[:n]

    def _tables(self, pat: np.ndarray) -> tuple:
        regs = tuple(crc.prefix_registers(pat, tail_zeros=t) for crc, t in self.registers)
        words = (pat[0::2].astype(np.int64) << 8) | pat[1::2]
        cum = np.concatenate([[0], np.cumsum(words)])
        p = np.arange(pat.size + 1)
        odd = np.concatenate([[0], pat.astype(np.int64)])[p] << 8
        return regs, cum[p // 2] + np.where(p % 2 == 1, odd, 0)

    def get(self, protocol: str | int, flag: int) -> tuple[np.ndarray, tuple, np.ndarray]:
        """``(pattern uint8 (n,), prefix registers per CRC (uint32 (n+1,) each), IPv6 word sums
        int64 (n+1,))`` of the payload with ``flag`` in every line."""
        code, flag = _code(protocol), int(flag) & 0xFFFFFFFF
        key = (code, flag)
        got = self._cache.get(key)
        if got is not None:
            return got
        if code not in self._zero:
            zero = self._pattern(code, 0)
            self._zero[code] = (zero, *self._tables(zero))
            # one bit of the flag set in every line: the registers' and sums' change (CRC
            # registers from 0 are linear in the data; sums are linear in the bytes)
            bits = []
            for k in range(self._BITS):
                pk = self._pattern(code, 1 << k)
                regs, sums = self._tables(pk)
                bits.append((tuple(r ^ z for r, z in zip(regs, self._zero[code][1])),
                             sums - self._zero[code][2]))
            self._bits[code] = bits
        zero, regs0, sums0 = self._zero[code]
        regs = [r.copy() for r in regs0]
        sums = sums0.copy()
        for k in range(self._BITS):
            if flag >> k & 1:
                br, bs = self._bits[code][k]
                for r, b in zip(regs, br):
                    r ^= b
                sums += bs
        if len(self._cache) > 4096:
            self._cache.clear()
        got = self._cache[key] = (self._pattern(code, flag), tuple(regs), sums)
        return got
