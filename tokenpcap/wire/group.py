"""An opcode group's headers and the bytes after its payload, by linearity (steps 2-3 of
:mod:`tokenpcap.wire.builder`).

For a group of rows of one opcode (one :class:`~tokenpcap.wire.layout.Layout`):

* the headers are big-endian 64-bit words: template constants OR each varying field shifted to
  where the declaration puts it (:meth:`Layout.header_words`); the IPv4 header checksum is the
  template's sum plus the varying words (RFC 1071 is linear), plus the CE adjustment of
  :func:`tokenpcap.wire.ecn.ipv4_checksum_delta` (RFC 1624);
* the ICRC (and VCRC) of every packet is the template's CRC register XOR per-byte contribution
  tables of the varying bytes, shifted over the payload (CRC linearity,
  :mod:`tokenpcap.wire.linear`); the payload is the context's fixed pattern, so its contribution
  is a table indexed by payload length; the IPv6 UDP checksum (RFC 8200 8.1) is summed the same
  way, from the pattern's prefix sums.

:class:`GroupBuild` is a part of :class:`~tokenpcap.wire.builder.FrameBuilder`, which sets the
tables it reads in its constructor: ``ctx`` (the :class:`~tokenpcap.wire.context.WireContext`),
``_c32`` / ``_c16`` (flattened CRC-32 / VCRC contribution tables), ``_pay32`` / ``_pay16`` (the
pattern's CRC registers per payload length), ``_c16_icrc`` (VCRC contributions of the four ICRC
bytes) and ``_paysum`` (the pattern's 16-bit word sums per payload length).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.wire import headers as H
from tokenpcap.wire.ecn import ipv4_checksum_delta
from tokenpcap.wire.layout import Layout
from tokenpcap.wire.linear import CRC16_VCRC, CRC32
from tokenpcap.wire.placement import or_field16, xor_contributions

__all__ = ["GroupBuild"]


def _fold16(s: np.ndarray) -> np.ndarray:
    """int64 sums ``(k,)`` folded to 16 bits with end-around carry (RFC 1071 one's-complement sum)."""
    s = (s & 0xFFFF) + (s >> 16)
    s = (s & 0xFFFF) + (s >> 16)
    return (s & 0xFFFF) + (s >> 16)


class GroupBuild:
    """Headers, checksums and CRCs of a group of one opcode (module docstring), a part of
    :class:`~tokenpcap.wire.builder.FrameBuilder`."""

    def _header_words(self, lay: Layout, ps: np.ndarray, direct: bool = False):
        """Header rows and words of a group, IPv4 checksum included (into the words when
        ``direct``, else into the rows): ``(hdr uint8 (k, H), words uint64 (n_words, k),
        pay int64 (k,), d)``; ``d`` holds the derived per-packet values and NIC indices."""
        ctx = self.ctx
        pay = ps["payload_bytes"].astype(np.int64)
        pad = (-pay) & 3
        lp = pay + pad
        d = {"pad": pad}
        for key, (add, shift) in lay.derived_terms().items():
            d[key] = (lp + add) >> shift
        nic = {"nic": ps["nic"], "peer_nic": ps["peer_nic"]}
        d["nic_rows"], d["lp"] = nic, lp
        hdr, words = lay.header_words(ps, d, nic, rows=not direct)
        if lay.roce and ctx.ip_version == 4:        # RFC 1071 sum: template + varying words
            total = lay.ip4_const + d["udp_len"] + H.IPV4.size + ps["ip_id"] \
                + lay.ip4_nic_sum[nic["nic"]] + lay.ip4_nic_sum[nic["peer_nic"]] \
                + ipv4_checksum_delta(ctx, ps["ce"])
            csum = ~_fold16(total) & 0xFFFF
            if direct:
                or_field16(words, lay.l3 + H.IPV4.slot("HeaderChecksum").first_byte, csum)
            else:
                H.IPV4.put(hdr, lay.l3, "HeaderChecksum", csum)
        return hdr, words, pay, d

    def _build_group(self, lay: Layout, ps: np.ndarray, caplen: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """Headers and the bytes after the payload of a group of one opcode.

        Returns:
            headers uint8 ``(k, H)`` (rows of a C-contiguous array); the bytes after the payload,
            uint8 ``(k, 16)`` C-contiguous (pad zeros, ICRC LE, then VCRC LE or Ethernet zero
            padding), or None when ``caplen`` keeps none of them; int64 ``(k,)`` payload bytes.
        """
        ctx = self.ctx
        k, hb = len(ps), lay.header_bytes
        hdr, words, pay, d = self._header_words(lay, ps)
        nic, lp, pad = d["nic_rows"], d["lp"], d["pad"]
        # The CRCs are needed when a kept byte shows them: the ICRC/VCRC themselves, or the IPv6
        # UDP checksum that covers the ICRC. A snaplen that cuts every frame before them skips them.
        udp6 = lay.roce and ctx.ip_version == 6 and ctx.ipv6_udp_checksum
        need_crc = bool((caplen > hb + pay).any()) or (udp6 and bool((caplen > lay.l4 + 6).any()))
        if not need_crc:
            return hdr, None, pay
        icrc, after = self._crcs(lay, ps, hdr, words, pay, lp, d, nic, udp6)
        # after the payload: pad zeros, ICRC (LE), then VCRC (LE) or Ethernet zero padding, as
        # two little-endian words per row: bytes 0..7, and byte 8 (the VCRC's high byte, pad 3)
        shift = (pad * 8).astype(np.uint64)
        tail = np.zeros((k, 2), "<u8")
        tail[:, 0] = (icrc.astype(np.uint64) << shift) | (after.astype(np.uint64) << (shift + np.uint64(32)))
        if (pad == 3).any():
            tail[:, 1] = np.where(pad == 3, after >> 8, 0)
        return hdr, tail.view(np.uint8), pay

    def _crcs(self, lay: Layout, ps: np.ndarray, hdr: np.ndarray, words: np.ndarray, pay: np.ndarray,
              lp: np.ndarray, d: dict, nic: dict, udp6: bool) -> tuple[np.ndarray, np.ndarray]:
        """ICRC and VCRC (or the IPv6 UDP checksum, written into ``hdr``) of a group by CRC linearity.

        Returns:
            ICRC uint32 ``(k,)`` (the value whose little-endian bytes follow the pad) and the
            16-bit value after it, int64 ``(k,)``: VCRC, or 0 (Ethernet zero padding).
        """
        k = len(ps)
        # ICRC by linearity
        reg = xor_contributions(self._c32, words, lay.icrc_cols, lay.icrc_or, lay.icrc_idx, lay.icrc_base)
        for nw, tab in zip(lay.nic_writes, lay.icrc_nic):
            if tab is not None:
                reg ^= tab[nic[nw.key]]
        icrc = CRC32.shift(reg.astype(np.uint32), lp) ^ self._pay32[pay] ^ np.uint32(0xFFFFFFFF)
        icrc_b = icrc.astype("<u4").view(np.uint8).reshape(k, 4)
        after = np.zeros(k, dtype=np.int64)          # VCRC, or Ethernet zero padding

        if not lay.roce:                                  # VCRC over LRH..ICRC
            r16 = xor_contributions(self._c16, words, lay.vcrc_cols, None, lay.vcrc_idx, lay.vcrc_base)
            for nw, tab in zip(lay.nic_writes, lay.vcrc_nic):
                if tab is not None:
                    r16 ^= tab[nic[nw.key]]
            r16 = CRC16_VCRC.shift(r16.astype(np.uint32), lp + H.ICRC.size) ^ self._pay16[pay]
            for i in range(4):
                r16 ^= self._c16_icrc[i][icrc_b[:, i]]
            after = (r16 ^ 0xFFFF).astype(np.int64)
        elif udp6:   # RFC 8200 8.1
            ic = icrc_b.astype(np.int64)      # addresses, UDP header (checksum 0), BTH, ext + the rest
            total = lay.word_sum16(words, lay.l3 + 8) + d["udp_len"] + H.IP_PROTO_UDP \
                + self._paysum[pay] + ((ic[:, 0] << 8) | ic[:, 1]) + ((ic[:, 2] << 8) | ic[:, 3])
            csum = ~_fold16(total) & 0xFFFF
            H.UDP.put(hdr, lay.l4, "Checksum", np.where(csum == 0, 0xFFFF, csum))

        return icrc, after
