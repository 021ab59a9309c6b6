"""CRCs as affine maps over GF(2): update a template's CRC from the few bytes that change.

A reflected CRC with register ``r`` processes a byte ``b`` as ``r' = (r >> 8) ^ T[(r ^ b) & 0xFF]``.
``T`` is linear (``T[a ^ b] = T[a] ^ T[b]``), so ``r' = A r ^ T[b]`` with ``A r = (r >> 8) ^ T[r & 0xFF]``
and, over ``n`` bytes ``d``, ``R(d, r0) = A^n r0 ^ XOR_j A^(n-1-j) T[d_j]`` (Koopman, "32-bit cyclic
redundancy codes for Internet applications", DSN 2002, §2; the same algebra as zlib's
``crc32_combine``). Hence:

* ``C[k][b] = A^k T[b]`` is the contribution of byte ``b`` at distance ``k`` from the end of the data;
  a frame's register is the template's register XOR ``C[k_j][x_j]`` over the bytes ``x_j`` that vary
  (template value zero at those positions);
* appending ``n`` bytes (``n`` at least the register width in bytes) maps a register ``r`` to
  ``A^n r ^ R(tail, 0)``, and ``A^n r = XOR_i C[n-1-i][byte_i(r)]`` (processing zero bytes from ``r``
  equals processing ``r``'s own bytes, least significant first, from zero).

:class:`ReflectedCRC` holds ``T`` and a growing table of ``C``; ``CRC32`` is zlib's CRC-32 (the ICRC),
``CRC16_VCRC`` the InfiniBand VCRC.
"""
from __future__ import annotations

import numpy as np

__all__ = ["ReflectedCRC", "CRC32", "CRC16_VCRC"]


class ReflectedCRC:
    """A reflected (LSB-first) CRC of ``width`` bits, with its per-position contribution tables.

    Args:
        width: 16 or 32.
        poly_reflected: the bit-reversed generator polynomial (0xEDB88320 for CRC-32, 0xD008 for
            the IB VCRC polynomial 0x100B).
        init, xorout: initial register and final XOR (all ones for both).
    """

    def __init__(self, width: int, poly_reflected: int, init: int, xorout: int):
        self.width = width
        self.nbytes = width // 8
        self.init = init
        self.xorout = xorout
        t = np.arange(256, dtype=np.uint32)
        for _ in range(8):
            t = np.where(t & 1, (t >> 1) ^ np.uint32(poly_reflected), t >> 1).astype(np.uint32)
        self.table = t
        self._c = t[None, :].copy()

    def contributions(self, kmax: int) -> np.ndarray:
        """``C`` for distances ``0..kmax`` as uint32 ``(>= kmax+1, 256)`` (grown on demand, cached)."""
        c = self._c
        if len(c) <= kmax:
            grown = np.empty((max(kmax + 1, 2 * len(c)), 256), dtype=np.uint32)
            grown[:len(c)] = c
            t = self.table
            for k in range(len(c), len(grown)):
                prev = grown[k - 1]
                grown[k] = (prev >> np.uint32(8)) ^ t[prev & np.uint32(0xFF)]
            grown.flags.writeable = False
            self._c = c = grown
        return c

    def register(self, data: bytes | np.ndarray, reg: int) -> int:
        """Raw register after processing ``data`` from register ``reg`` (no final XOR)."""
        t = self.table
        for b in bytes(data):
            reg = (reg >> 8) ^ int(t[(reg ^ b) & 0xFF])
        return reg

    def compute(self, data: bytes | np.ndarray) -> int:
        """The CRC value of ``data`` (init, process, xorout)."""
        return self.register(data, self.init) ^ self.xorout

    def shift(self, reg: np.ndarray, nbytes: np.ndarray) -> np.ndarray:
        """``A^n reg`` for every row: the register after ``n`` more zero bytes.

        Args:
            reg: uint32 ``(m,)`` registers.
            nbytes: int64 ``(m,)``, each 0 or at least ``width/8``.

        Returns:
            uint32 ``(m,)``.
        """
        n = np.asarray(nbytes, dtype=np.int64)
        c = self.contributions(int(n.max(initial=0)))
        flat = c.reshape(-1)
        out = np.zeros(len(reg), dtype=np.uint32)
        base = (n - 1) * 256
        for i in range(self.nbytes):
            byte = ((reg >> np.uint32(8 * i)) & np.uint32(0xFF)).astype(np.int64)
            out ^= flat[np.maximum(base - 256 * i, 0) + byte]
        return np.where(n == 0, reg, out).astype(np.uint32)

    def prefix_registers(self, pattern: np.ndarray, tail_zeros: int = 0) -> np.ndarray:
        """``R(pattern[:P] + pad(P) zero bytes + tail_zeros zero bytes, 0)`` for P = 0..len(pattern).

        ``pad(P) = (-P) & 3`` is the BTH pad. One pass over the pattern (a loop per pattern byte,
        done once per builder, not per packet).

        Returns:
            uint32 ``(len(pattern) + 1,)``.
        """
        t = [int(x) for x in self.table]
        out = np.empty(len(pattern) + 1, dtype=np.uint32)
        reg = 0
        for p in range(len(pattern) + 1):
            r = reg
            for _ in range(((-p) & 3) + tail_zeros):
                r = (r >> 8) ^ t[r & 0xFF]
            out[p] = r
            if p < len(pattern):
                reg = (reg >> 8) ^ t[(reg ^ int(pattern[p])) & 0xFF]
        return out


#: zlib's CRC-32 (IEEE 802.3), the ICRC (IBTA vol.1 7.8.1).
CRC32 = ReflectedCRC(32, 0xEDB88320, 0xFFFFFFFF, 0xFFFFFFFF)
#: The InfiniBand VCRC: polynomial 0x100B reflected, init and xorout 0xFFFF (IBTA vol.1 7.8.2).
CRC16_VCRC = ReflectedCRC(16, 0xD008, 0xFFFF, 0xFFFF)
