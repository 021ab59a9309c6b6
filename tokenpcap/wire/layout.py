"""Per-opcode frame layouts for the vectorized builder: a template, the fields that vary per packet,
and everything precomputed so that the ICRC/VCRC of a packet costs a few table look-ups.

A :class:`Layout` is made once per (builder context, opcode) from the header declarations: it packs
the constant fields into a template, lists the per-packet field writes and, from each field's bit
offset in the declaration, where its bits land in the header seen as big-endian 64-bit words
(:meth:`Layout.header_words` builds a batch of headers with contiguous 64-bit operations). It also
precomputes the CRC register of the masked template with the varying bytes zeroed and per-NIC
contributions of address fields. At build time the register of a packet is
``base ^ XOR_j C[k_j][x_j]`` over its varying bytes (see :mod:`tokenpcap.wire.linear`), then
shifted over the payload (payload bytes depend only on their position, so ``R(payload + pad)`` is
a table indexed by payload length).
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

from tokenpcap.wire import headers as H
from tokenpcap.wire.context import WireContext
from tokenpcap.wire.ecn import ce_bits
from tokenpcap.wire.fields import Header
from tokenpcap.wire.linear import CRC16_VCRC, CRC32
from tokenpcap.wire.rdma import CNP, OPCODES, rocev2_flow_label
from tokenpcap.wire.stack import stack

__all__ = ["Layout"]

#: Per-packet values derived from the payload length: ``(lp + add) >> shift`` with ``lp`` the
#: payload plus pad bytes (``(payload_bytes + 3) & ~3``); ``add`` and ``shift`` per layout
#: (:meth:`Layout.derived_terms`).
LP_DERIVED = ("udp_len", "pktlen_words", "grh_paylen")


@dataclass(frozen=True)
class Source:
    """Where a varying field's value comes from: a ``PACKET_DTYPE`` field, one of
    :data:`LP_DERIVED`, ``"pad"`` (BTH PadCnt) or ``"flow_label"`` (:func:`rocev2_flow_label` of
    the QP pair); then shifted right by ``rshift``, masked by ``mask`` (0: none), plus ``add``."""

    key: str
    add: int = 0
    rshift: int = 0
    mask: int = 0

    def get(self, p: np.ndarray, d: dict) -> np.ndarray:
        """The values of rows ``p`` (``d``: the derived values of :meth:`Layout.derived`)."""
        if self.key == "flow_label":
            v = rocev2_flow_label(p["src_qp"], p["dest_qp"])
        else:
            v = d[self.key] if self.key in d else p[self.key]
        if self.rshift:
            v = v >> v.dtype.type(self.rshift)
        if self.mask:
            v = v & v.dtype.type(self.mask)
        return v + self.add if self.add else v


@dataclass(frozen=True)
class _Write:
    header: Header
    col: int
    name: str
    src: Source

    def get(self, p: np.ndarray, d: dict) -> np.ndarray:
        return self.src.get(p, d)


@dataclass(frozen=True)
class _NicWrite:
    header: Header
    col: int
    name: str
    table: np.ndarray   # uint8 (n_nics, nbytes) or uint16 (n_nics,)
    key: str            # "nic" or "peer_nic"


class Layout:
    """Template and per-packet plan of one opcode under one :class:`WireContext`.

    Attributes:
        opcode: the BTH opcode.
        header_bytes: bytes before the payload (``H``).
        tpl: uint8 ``(H,)`` constant bytes (varying fields zero).
        writes: per-packet field writes; nic_writes: per-NIC address writes.
        l3, l4, bth: column of the IP header / GRH, UDP header, BTH (-1 when absent).
    """

    def __init__(self, ctx: WireContext, opcode: int):
        self.ctx = ctx
        self.opcode = opcode
        info = OPCODES[opcode]
        cnp = opcode == CNP
        self._parts: list[tuple[Header, int, dict]] = []
        self.writes: list[_Write] = []
        self.nic_writes: list[_NicWrite] = []
        self._col = 0
        self.l3 = self.l4 = -1
        self.roce = ctx.transport == "rocev2"
        if self.roce:
            ipv = H.ETHERTYPE_IPV4 if ctx.ip_version == 4 else H.ETHERTYPE_IPV6
            eth = self._add(H.ETHERNET, EtherType=H.ETHERTYPE_VLAN if ctx.vlan else ipv)
            self._nic(H.ETHERNET, eth, "Destination", ctx.mac, "peer_nic")
            self._nic(H.ETHERNET, eth, "Source", ctx.mac, "nic")
            if ctx.vlan:
                self._add(H.DOT1Q, PCP=ctx.cnp_pcp if cnp else ctx.pcp, DEI=ctx.dei, VID=ctx.vlan_id,
                          EtherType=ipv)
            dscp = ctx.cnp_dscp if cnp else ctx.dscp
            if ctx.ip_version == 4:
                self.l3 = self._add(H.IPV4, DSCP=dscp, ECN=ctx.ecn, DF=1, TTL=ctx.ttl)
                self._dyn(H.IPV4, "TotalLength", Source("udp_len", add=H.IPV4.size))
                self._dyn(H.IPV4, "Identification", Source("ip_id"))
                self._nic(H.IPV4, self.l3, "SourceAddress", ctx.ipv4, "nic")
                self._nic(H.IPV4, self.l3, "DestinationAddress", ctx.ipv4, "peer_nic")
            else:
                self.l3 = self._add(H.IPV6, TrafficClass=(dscp << 2) | ctx.ecn,
                                    FlowLabel=ctx.flow_label or 0, HopLimit=ctx.ttl)
                if ctx.flow_label is None:
                    self._dyn(H.IPV6, "FlowLabel", Source("flow_label"))
                self._dyn(H.IPV6, "PayloadLength", Source("udp_len"))
                self._nic(H.IPV6, self.l3, "SourceAddress", ctx.ipv6, "nic")
                self._nic(H.IPV6, self.l3, "DestinationAddress", ctx.ipv6, "peer_nic")
            self.l4 = self._add(H.UDP)
            self._dyn(H.UDP, "SourcePort", Source("udp_sport"))
            self._dyn(H.UDP, "Length", Source("udp_len"))
        else:
            lrh = self._add(H.LRH, VL=ctx.vl, SL=ctx.sl, LNH=3 if ctx.grh else 2)
            self._nic(H.LRH, lrh, "DLID", ctx.lid, "peer_nic")
            self._dyn(H.LRH, "PktLen", Source("pktlen_words"))
            self._nic(H.LRH, lrh, "SLID", ctx.lid, "nic")
            if ctx.grh:
                self.l3 = self._add(H.GRH, TClass=ctx.traffic_class, FlowLabel=ctx.flow_label or 0,
                                    HopLmt=ctx.ttl)
                if ctx.flow_label is None:
                    self._dyn(H.GRH, "FlowLabel", Source("flow_label"))
                self._dyn(H.GRH, "PayLen", Source("grh_paylen"))
                self._nic(H.GRH, self.l3, "SGID", ctx.ipv6, "nic")
                self._nic(H.GRH, self.l3, "DGID", ctx.ipv6, "peer_nic")
        self.bth = self._add(H.BTH, OpCode=opcode, MigReq=0 if cnp else ctx.mig_req, P_Key=ctx.p_key,
                             BECN=1 if cnp else 0)
        self._dyn(H.BTH, "SE", Source("solicited"))
        self._dyn(H.BTH, "PadCnt", Source("pad"))
        if not cnp:
            self._dyn(H.BTH, "BECN", Source("becn"))
        self._dyn(H.BTH, "DestQP", Source("dest_qp"))
        self._dyn(H.BTH, "AckReq", Source("ack_req"))
        self._dyn(H.BTH, "PSN", Source("psn"))
        for h in info.ext:
            self._ext(h)
        self.header_bytes = self._col
        self.payload = info.payload
        #: (word, bits) ORed into the rows with ``ce`` set (:mod:`tokenpcap.wire.ecn`), RoCEv2 only
        self.ce_word = ce_bits(ctx.ip_version, self.l3) if self.roce else None
        self._finish()

    # ------------------------------------------------------------------ declaration helpers
    def _add(self, header: Header, **const: int) -> int:
        col = self._col
        self._parts.append((header, col, const))
        self._col += header.size
        return col

    def _dyn(self, header: Header, name: str, src: Source) -> None:
        col = next(c for h, c, _ in reversed(self._parts) if h is header)
        self.writes.append(_Write(header, col, name, src))

    def _nic(self, header: Header, col: int, name: str, table: np.ndarray, key: str) -> None:
        self.nic_writes.append(_NicWrite(header, col, name, table, key))

    def _ext(self, h: Header) -> None:
        if h is H.CNP_PAD or h is H.ATOMIC_ACK_ETH:
            self._add(h)
            return
        self._add(h, **({"Q_Key": self.ctx.q_key} if h is H.DETH else {}))
        field_src = {
            "RETH": {"VA": "reth_va", "R_Key": "reth_rkey", "DMALen": "reth_len"},
            "AtomicETH": {"VA": "reth_va", "R_Key": "reth_rkey"},
            "IETH": {"R_Key": "reth_rkey"},
            "ImmDt": {"ImmDt": "imm"},
            "DETH": {"SrcQP": "src_qp"},
        }
        if h is H.AETH:
            self._dyn(h, "Syndrome", Source("aeth", rshift=24))
            self._dyn(h, "MSN", Source("aeth", mask=0xFFFFFF))
            return
        for name, key in field_src[h.name].items():
            self._dyn(h, name, Source(key))

    # ------------------------------------------------------------------ precomputation
    def _finish(self) -> None:
        hb = self.header_bytes
        st = stack(self.ctx.transport, self.ctx.ip_version, self.ctx.vlan, self.ctx.grh)
        if st.before_bth_bytes != self.bth:
            raise RuntimeError(f"internal: layout of {st.name} puts the BTH at {self.bth}, its "
                                 f"stack at {st.before_bth_bytes}")
        self.crc_start, self.prefix = st.icrc_start, st.icrc_prefix
        tpl = np.zeros(hb, dtype=np.uint8)
        for h, col, const in self._parts:
            tpl[col:col + h.size] = h.template(const)
        row = tpl[None, :]                         # varying fields are zero in the template
        for w in self.writes:
            w.header.put(row, w.col, w.name, 0)
        self.tpl = tpl
        self._ip4_sums()
        self._plan_words()
        ormask = np.zeros(hb, dtype=np.uint8)
        ormask[self.crc_start:self.bth + H.BTH.size] = st.icrc_mask()
        self.ormask = ormask
        dyn_cols = sorted({w.col + w.header.slot(w.name).first_byte + j
                           for w in self.writes for j in range(w.header.slot(w.name).nbytes)})
        dyn_cols = np.array(dyn_cols, dtype=np.int64)
        # ICRC: covered columns crc_start..H; fully masked columns never vary
        cov = dyn_cols[(dyn_cols >= self.crc_start) & (ormask[dyn_cols] != 0xFF)]
        self.icrc_cols = cov
        self.icrc_or = ormask[cov]
        self.icrc_idx = (hb - 1 - cov) * 256          # flat offset into CRC32.contributions
        masked = (tpl | ormask)[self.crc_start:].copy()
        masked[cov - self.crc_start] = 0
        nic_cols = self._nic_cols()
        masked[nic_cols[nic_cols >= self.crc_start] - self.crc_start] = 0
        c32 = CRC32.contributions(hb + 8)
        self.icrc_base = np.uint32(zlib.crc32(self.prefix + masked.tobytes()) ^ 0xFFFFFFFF)
        self.icrc_nic = [self._nic_contrib(nw, c32, ormask, self.crc_start) for nw in self.nic_writes]
        if not self.roce:                         # VCRC: LRH..ICRC, nothing masked
            self.vcrc_cols = dyn_cols
            self.vcrc_idx = (hb - 1 - dyn_cols) * 256
            plain = tpl.copy()
            plain[dyn_cols] = 0
            plain[nic_cols] = 0
            self.vcrc_base = np.uint32(CRC16_VCRC.register(plain.tobytes(), 0xFFFF))
            c16 = CRC16_VCRC.contributions(hb + 8)
            self.vcrc_nic = [self._nic_contrib(nw, c16, np.zeros(hb, np.uint8), 0) for nw in self.nic_writes]

    def derived_terms(self) -> dict[str, tuple[int, int]]:
        """The :data:`LP_DERIVED` values of this layout as ``{key: (add, shift)}``, each value
        ``(lp + add) >> shift`` with ``lp`` the payload plus pad bytes: the UDP length (UDP
        header to ICRC, RFC 768), the LRH PktLen (4-byte words from the LRH to the ICRC, IBTA
        vol. 1 7.7.8) and the GRH PayLen (after the GRH to the ICRC, IBTA vol. 1 8.3.1)."""
        hb = self.header_bytes
        if self.roce:
            return {"udp_len": (hb - self.l4 + H.ICRC.size, 0)}
        terms = {"pktlen_words": (hb + H.ICRC.size, 2)}
        if self.ctx.grh:
            terms["grh_paylen"] = (hb - (self.l3 + H.GRH.size) + H.ICRC.size, 0)
        return terms

    def _ip4_sums(self) -> None:
        """RFC 1071 sum of the constant IPv4 header words and of each NIC's address words."""
        if self.roce and self.ctx.ip_version == 4:
            ip = self.tpl[self.l3:self.l3 + H.IPV4.size].astype(np.int64)
            self.ip4_const = int(((ip[0::2] << 8) | ip[1::2]).sum())
            a = self.ctx.ipv4.astype(np.int64)
            self.ip4_nic_sum = ((a[:, 0] << 8) | a[:, 1]) + ((a[:, 2] << 8) | a[:, 3])

    def _plan_words(self) -> None:
        """The header as 64-bit big-endian words: constants, and where each varying field lands.

        Field ``f`` occupies header bits ``[a, a + bits)`` (``a`` from the declaration); the part
        of it inside word ``j`` (bits ``[lo, hi)``) is ``(v >> (a + bits - hi)) & (2**(hi-lo) - 1)``
        shifted left by ``64 j + 64 - hi``. Per-NIC address fields become per-NIC word tables.
        """
        nw = -(-self.header_bytes // 8)
        self.n_words = nw
        padded = np.zeros(nw * 8, np.uint8)
        padded[:self.header_bytes] = self.tpl
        self.word_const = padded.view(">u8").astype(np.uint64)
        #: (write, word, rshift, mask, lshift, width): the part's ``width`` bits of the value
        self.word_plan: list[tuple[int, int, int, np.uint64, int, int]] = []
        for i, w in enumerate(self.writes):
            s = w.header.slot(w.name)
            a = w.col * 8 + s.bit_offset
            end = a + s.field.bits
            for j in range(a // 64, (end - 1) // 64 + 1):
                lo, hi = max(a, 64 * j), min(end, 64 * j + 64)
                self.word_plan.append((i, j, end - hi, np.uint64((1 << (hi - lo)) - 1), 64 * j + 64 - hi,
                                       hi - lo))
        self.word_nic: list[tuple[str, int, np.ndarray]] = []                    # (key, word, table)
        for key in ("nic", "peer_nic"):
            nws = [nw_ for nw_ in self.nic_writes if nw_.key == key]
            if not nws:
                continue
            rows = np.zeros((len(nws[0].table), nw * 8), np.uint8)
            touched: set[int] = set()
            for nw_ in nws:
                c0 = nw_.col + nw_.header.slot(nw_.name).first_byte
                b = self._nic_bytes(nw_, np.arange(len(nw_.table)))
                rows[:, c0:c0 + b.shape[1]] = b
                touched.update(range(c0 // 8, (c0 + b.shape[1] - 1) // 8 + 1))
            words = rows.view(">u8").astype(np.uint64)
            self.word_nic += [(key, j, np.ascontiguousarray(words[:, j])) for j in sorted(touched)]

    def header_words(self, ps: np.ndarray, d: dict, nic: dict[str, np.ndarray], rows: bool = True
                     ) -> tuple[np.ndarray | None, np.ndarray]:
        """Headers of packets ``ps``: uint8 ``(k, H)`` (a view of big-endian 64-bit words; None
        when ``rows`` is False) and the words themselves, uint64 ``(n_words, k)`` (word j = header
        bytes 8j..8j+7, first byte most significant). Rows with ``ce`` set carry ECN CE (the IPv4
        checksum is the caller's).

        Every word is built with contiguous 64-bit operations and stored once, instead of one
        strided byte store per header byte; each field part is shifted and masked in one scratch
        row (the mask is left out where the shift alone drops the bits outside the part).
        """
        k = len(ps)
        words = np.empty((self.n_words, k), dtype=np.uint64)
        words[:] = self.word_const[:, None]
        values = [np.asarray(w.get(ps, d)) for w in self.writes]
        part = np.empty(k, dtype=np.uint64)
        for i, j, rshift, mask, lshift, width in self.word_plan:
            v = values[i]
            if rshift:
                np.right_shift(v, rshift, out=part, casting="unsafe")
            else:
                part[:] = v
            # the mask drops the value's bits above the part; a left shift to the word's top
            # drops them anyway, and a value type no wider than the part has none
            if lshift + width != 64 and v.dtype.itemsize * 8 - rshift > width:
                np.bitwise_and(part, mask, out=part)
            if lshift:
                np.left_shift(part, np.uint64(lshift), out=part)
            words[j] |= part
        for key, j, table in self.word_nic:
            words[j] |= table.take(nic[key])
        if self.ce_word is not None:              # CE marks: the two ECN bits set (ecn.py)
            ce = ps["ce"]
            if ce.any():
                j, bits = self.ce_word
                words[j] |= np.where(ce != 0, bits, np.uint64(0))
        if not rows:
            return None, words
        out = np.empty((k, self.n_words), dtype=">u8")
        out[:] = words.T
        return out.view(np.uint8)[:, :self.header_bytes], words

    def word_sum16(self, words: np.ndarray, start: int) -> np.ndarray:
        """Sum of the big-endian 16-bit words of header bytes ``start``..H (``start`` even), int64
        ``(k,)``, not folded: RFC 1071 sums are invariant under folding 32-bit halves (2**16 = 1
        mod 0xFFFF)."""
        total = np.zeros(words.shape[1], dtype=np.uint64)
        lo32 = np.uint64(0xFFFFFFFF)
        for j in range(start // 8, self.n_words):
            w = words[j]
            skip = start - 8 * j
            if skip > 0:
                w = w & np.uint64((1 << (64 - 8 * skip)) - 1)
            total += (w >> np.uint64(32)) + (w & lo32)
        return total.astype(np.int64)

    def _nic_cols(self) -> np.ndarray:
        cols = [nw.col + nw.header.slot(nw.name).first_byte + j
                for nw in self.nic_writes for j in range(nw.header.slot(nw.name).nbytes)]
        return np.array(cols, dtype=np.int64)

    def _nic_contrib(self, nw: _NicWrite, c: np.ndarray, ormask: np.ndarray, start: int) -> np.ndarray | None:
        """Per-NIC register contribution of an address field (None if not covered by the CRC)."""
        s = nw.header.slot(nw.name)
        c0 = nw.col + s.first_byte
        if c0 < start:
            return None
        rows = self._nic_bytes(nw, np.arange(len(nw.table)))
        out = np.zeros(len(nw.table), dtype=np.uint32)
        for j in range(s.nbytes):
            col = c0 + j
            out ^= c[self.header_bytes - 1 - col][rows[:, j] | ormask[col]]
        return out

    @staticmethod
    def _nic_bytes(nw: _NicWrite, index: np.ndarray) -> np.ndarray:
        t = nw.table
        if t.ndim == 2:
            return t[index]
        v = t[index].astype(np.uint16)             # LIDs: big-endian 16-bit
        return np.stack([(v >> 8).astype(np.uint8), (v & 0xFF).astype(np.uint8)], axis=1)
