"""RC opcodes, segmentation at the path MTU, and frame lengths (vectorized).

Sources: IBTA vol.1 rel.1.4 9.2 Table 38 (opcodes and the extended headers each one carries),
9.5 (packet sequencing: FIRST/MIDDLE/LAST, PMTU-sized packets, only the last may be shorter),
9.7.4.1 (responder ACKs), Annex A17.9.3 (RoCEv2 CNP, opcode 0x81), 9.2 (PadCnt pads the
payload to a multiple of 4 bytes). Frame lengths: IEEE 802.3 (14-byte header, 60-byte minimum
without FCS), 802.1Q (+4), RFC 791/8200/768, IBTA 7.7/8.3 (LRH 8, GRH 40), 7.8 (ICRC 4, VCRC 2).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from tokenpcap.errors import EncodeError
from tokenpcap.records import VERB_SEND, VERB_WRITE, VERB_WRITE_IMM
from tokenpcap.wire import headers as H
from tokenpcap.wire.fields import Header
from tokenpcap.wire.stack import stack

__all__ = [
    "Opcode", "OPCODES", "PMTUS", "EXT_BYTES", "HAS_PAYLOAD", "HAS_RETH", "HAS_AETH", "HAS_IMMDT",
    "SEND_FIRST", "SEND_MIDDLE", "SEND_LAST", "SEND_LAST_IMM", "SEND_ONLY", "SEND_ONLY_IMM",
    "WRITE_FIRST", "WRITE_MIDDLE", "WRITE_LAST", "WRITE_LAST_IMM", "WRITE_ONLY", "WRITE_ONLY_IMM",
    "READ_REQUEST", "READ_RESPONSE_FIRST", "READ_RESPONSE_MIDDLE", "READ_RESPONSE_LAST",
    "READ_RESPONSE_ONLY", "ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE", "COMPARE_SWAP", "FETCH_ADD",
    "SEND_LAST_INV", "SEND_ONLY_INV", "UD_SEND_ONLY", "UD_SEND_ONLY_IMM", "CNP",
    "OPCODE_SEQUENCE", "FIRST", "MIDDLE", "LAST", "ONLY", "packet_position",
    "Segments", "SegmentedMessages", "segment", "segment_many", "packets_per_message",
    "pad_bytes", "header_bytes", "frame_bytes", "rocev2_flow_label", "rocev2_udp_sport",
    "ETH_MIN_FRAME_BYTES",
]

# IBTA vol.1 Table 38, RC (0x00-0x1F) and UD (0x60-0x7F) codes; CNP from Annex A17.9.3.
SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_LAST_IMM, SEND_ONLY, SEND_ONLY_IMM = range(0x00, 0x06)
WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_LAST_IMM, WRITE_ONLY, WRITE_ONLY_IMM = range(0x06, 0x0C)
READ_REQUEST = 0x0C
READ_RESPONSE_FIRST, READ_RESPONSE_MIDDLE, READ_RESPONSE_LAST, READ_RESPONSE_ONLY = range(0x0D, 0x11)
ACKNOWLEDGE = 0x11
ATOMIC_ACKNOWLEDGE = 0x12
COMPARE_SWAP = 0x13
FETCH_ADD = 0x14
SEND_LAST_INV = 0x16
SEND_ONLY_INV = 0x17
UD_SEND_ONLY = 0x64
UD_SEND_ONLY_IMM = 0x65
CNP = 0x81

#: Path MTUs an IB/RoCE QP can use (IBTA vol.1 9.6.3 / the IB MTU enumeration), bytes of payload.
PMTUS: tuple[int, ...] = (256, 512, 1024, 2048, 4096)

#: Ethernet minimum frame without FCS (IEEE 802.3 4.2.3.3: 64 bytes with FCS).
ETH_MIN_FRAME_BYTES = 60


@dataclass(frozen=True)
class Opcode:
    """One BTH opcode: its IBTA name, the extended headers after the BTH, whether it carries payload."""

    code: int
    name: str
    ext: tuple[Header, ...]
    payload: bool

    @property
    def ext_bytes(self) -> int:
        """Bytes of extended transport headers between the BTH and the payload."""
        return sum(h.size for h in self.ext)


def _op(code: int, name: str, ext: tuple[Header, ...] = (), payload: bool = True) -> Opcode:
    return Opcode(code, name, ext, payload)


#: BTH opcode → :class:`Opcode` (IBTA vol.1 Table 38 for RC and UD SEND; CNP from Annex A17.9.3).
OPCODES: dict[int, Opcode] = {o.code: o for o in (
    _op(SEND_FIRST, "SEND FIRST"),
    _op(SEND_MIDDLE, "SEND MIDDLE"),
    _op(SEND_LAST, "SEND LAST"),
    _op(SEND_LAST_IMM, "SEND LAST with Immediate", (H.IMMDT,)),
    _op(SEND_ONLY, "SEND ONLY"),
    _op(SEND_ONLY_IMM, "SEND ONLY with Immediate", (H.IMMDT,)),
    _op(WRITE_FIRST, "RDMA WRITE FIRST", (H.RETH,)),
    _op(WRITE_MIDDLE, "RDMA WRITE MIDDLE"),
    _op(WRITE_LAST, "RDMA WRITE LAST"),
    _op(WRITE_LAST_IMM, "RDMA WRITE LAST with Immediate", (H.IMMDT,)),
    _op(WRITE_ONLY, "RDMA WRITE ONLY", (H.RETH,)),
    _op(WRITE_ONLY_IMM, "RDMA WRITE ONLY with Immediate", (H.RETH, H.IMMDT)),
    _op(READ_REQUEST, "RDMA READ Request", (H.RETH,), payload=False),
    _op(READ_RESPONSE_FIRST, "RDMA READ response First", (H.AETH,)),
    _op(READ_RESPONSE_MIDDLE, "RDMA READ response Middle"),
    _op(READ_RESPONSE_LAST, "RDMA READ response Last", (H.AETH,)),
    _op(READ_RESPONSE_ONLY, "RDMA READ response Only", (H.AETH,)),
    _op(ACKNOWLEDGE, "Acknowledge", (H.AETH,), payload=False),
    _op(ATOMIC_ACKNOWLEDGE, "ATOMIC Acknowledge", (H.AETH, H.ATOMIC_ACK_ETH), payload=False),
    _op(COMPARE_SWAP, "CmpSwap", (H.ATOMIC_ETH,), payload=False),
    _op(FETCH_ADD, "FetchAdd", (H.ATOMIC_ETH,), payload=False),
    _op(SEND_LAST_INV, "SEND LAST with Invalidate", (H.IETH,)),
    _op(SEND_ONLY_INV, "SEND ONLY with Invalidate", (H.IETH,)),
    _op(UD_SEND_ONLY, "UD SEND ONLY", (H.DETH,)),
    _op(UD_SEND_ONLY_IMM, "UD SEND ONLY with Immediate", (H.DETH, H.IMMDT)),
    _op(CNP, "CNP", (H.CNP_PAD,), payload=False),
)}


def _table(pred, dtype, missing):
    t = np.full(256, missing, dtype=dtype)
    for code, o in OPCODES.items():
        t[code] = pred(o)
    t.flags.writeable = False
    return t


#: Lookup tables indexed by opcode (uint8): extended header bytes (-1: unknown opcode), whether
#: the opcode carries payload / a RETH / an AETH / an ImmDt.
EXT_BYTES = _table(lambda o: o.ext_bytes, np.int16, -1)
HAS_PAYLOAD = _table(lambda o: o.payload, bool, False)
HAS_RETH = _table(lambda o: H.RETH in o.ext, bool, False)
HAS_AETH = _table(lambda o: H.AETH in o.ext, bool, False)
HAS_IMMDT = _table(lambda o: H.IMMDT in o.ext, bool, False)

#: Positions of a packet in its message, the columns of :data:`OPCODE_SEQUENCE`.
FIRST, MIDDLE, LAST, ONLY = range(4)
# verb → (FIRST, MIDDLE, LAST, ONLY)
_SEQ = {
    VERB_WRITE: (WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST, WRITE_ONLY),
    VERB_WRITE_IMM: (WRITE_FIRST, WRITE_MIDDLE, WRITE_LAST_IMM, WRITE_ONLY_IMM),
    VERB_SEND: (SEND_FIRST, SEND_MIDDLE, SEND_LAST, SEND_ONLY),
}
#: uint8 ``(3, 4)``: the BTH opcode of a packet of a message sent with verb ``v``
#: (``tokenpcap.records.VERB_*``) at position ``FIRST``, ``MIDDLE``, ``LAST`` or ``ONLY``
#: (IBTA vol.1 9.4; :func:`segment` decides the position). Read-only.
OPCODE_SEQUENCE = np.zeros((max(_SEQ) + 1, 4), dtype=np.uint8)
for _v, _s in _SEQ.items():
    OPCODE_SEQUENCE[_v] = _s
OPCODE_SEQUENCE.flags.writeable = False


def _check_pmtu(pmtu_bytes: int) -> int:
    if int(pmtu_bytes) not in PMTUS:
        raise EncodeError(f"pmtu_bytes: got {pmtu_bytes!r}, expected one of {', '.join(map(str, PMTUS))}")
    return int(pmtu_bytes)


def _check_verbs(verb: np.ndarray) -> None:
    bad = ~np.isin(verb, list(_SEQ))
    if bad.any():
        raise EncodeError(f"verb: got {int(verb[bad][0])}, expected VERB_WRITE (0), VERB_WRITE_IMM (1) "
                          f"or VERB_SEND (2)")


def pad_bytes(payload_bytes: np.ndarray | int) -> np.ndarray:
    """BTH PadCnt: zero bytes that bring the payload to a multiple of 4 (IBTA 9.2), ``(-len) & 3``.

    Returns int64 of the shape of ``payload_bytes``.
    """
    return (-np.asarray(payload_bytes, dtype=np.int64)) & 3


def packets_per_message(size_bytes: np.ndarray | int, pmtu_bytes: int) -> np.ndarray:
    """Packets of a message: ``max(1, ceil(size / PMTU))`` (a zero-byte message is one ONLY packet).

    Args:
        size_bytes: int64 ``(m,)`` message payload sizes (>= 0).
        pmtu_bytes: one of :data:`PMTUS`.

    Returns:
        int64 ``(m,)``.

    Raises:
        EncodeError: a PMTU that is not an IB MTU, or a negative size.
    """
    pmtu = _check_pmtu(pmtu_bytes)
    size = np.asarray(size_bytes, dtype=np.int64)
    if (size < 0).any():
        raise EncodeError(f"size_bytes: got {int(size[size < 0].flat[0])}, expected >= 0")
    return np.maximum(1, -(-size // pmtu))


def packet_position(index_in_msg: np.ndarray, n_packets: np.ndarray) -> np.ndarray:
    """Column of :data:`OPCODE_SEQUENCE` for packet ``index_in_msg`` of a message of ``n_packets``
    packets: ``ONLY`` when it is the message's one packet, else ``FIRST``, ``MIDDLE`` or ``LAST``
    (IBTA vol.1 9.5).

    Args:
        index_in_msg, n_packets: int64 arrays of one shape (``0 <= index_in_msg < n_packets``).

    Returns:
        int64 array of that shape.
    """
    idx, n = np.asarray(index_in_msg), np.asarray(n_packets)
    return np.where(n == 1, ONLY, np.where(idx == 0, FIRST, np.where(idx == n - 1, LAST, MIDDLE)))


class Segments(NamedTuple):
    """The packets of one message, in order. Arrays of shape ``(k,)``."""

    opcode: np.ndarray         # uint8 BTH opcode
    payload_bytes: np.ndarray  # uint32 payload bytes in the packet (without pad)
    pad: np.ndarray            # uint8 PadCnt


class SegmentedMessages(NamedTuple):
    """The packets of many messages, message after message. Arrays of shape ``(k,)``."""

    msg_index: np.ndarray       # int64 index of the packet's message in the input
    index_in_msg: np.ndarray    # int64 0 .. packets-1 (PSN = first PSN + index_in_msg mod 2**24)
    opcode: np.ndarray          # uint8
    payload_bytes: np.ndarray   # uint32
    pad: np.ndarray             # uint8
    payload_offset: np.ndarray  # int64 offset of the packet's payload in its message


def segment(size_bytes: int, pmtu_bytes: int, verb: int) -> Segments:
    """Split one RDMA message into packets at the path MTU (IBTA 9.5; C5).

    A message of at most one PMTU (including 0 bytes) is one ONLY packet; otherwise FIRST, then
    MIDDLEs, then LAST, all PMTU-sized except the LAST, which carries the remainder (never an
    empty trailer: 8192 B at 4096 is FIRST + LAST). WRITE_IMM ends in LAST/ONLY with Immediate.

    Args:
        size_bytes: message payload bytes (>= 0).
        pmtu_bytes: one of :data:`PMTUS`.
        verb: ``tokenpcap.records.VERB_WRITE``, ``VERB_WRITE_IMM`` or ``VERB_SEND``.

    Returns:
        :class:`Segments` (opcode uint8, payload_bytes uint32, pad uint8), shape ``(k,)``.

    Raises:
        EncodeError: unknown verb, PMTU not an IB MTU, negative size.
    """
    pmtu = _check_pmtu(pmtu_bytes)
    if verb not in _SEQ:
        _check_verbs(np.array([verb]))
    size = int(size_bytes)
    if size < 0:
        raise EncodeError(f"size_bytes: got {size}, expected >= 0")
    first, middle, last, only = _SEQ[verb]
    if size <= pmtu:
        return Segments(np.array([only], np.uint8), np.array([size], np.uint32),
                        np.array([(-size) & 3], np.uint8))
    n = -(-size // pmtu)
    op = np.full(n, middle, np.uint8)
    op[0], op[-1] = first, last
    pay = np.full(n, pmtu, np.uint32)
    pay[-1] = size - (n - 1) * pmtu
    pad = np.zeros(n, np.uint8)
    pad[-1] = (-int(pay[-1])) & 3
    return Segments(op, pay, pad)


def segment_many(size_bytes: np.ndarray, pmtu_bytes: int, verb: np.ndarray | int) -> SegmentedMessages:
    """:func:`segment` for many messages at once, without a Python loop per message.

    Args:
        size_bytes: int64 ``(m,)`` message payload sizes.
        pmtu_bytes: one of :data:`PMTUS`.
        verb: uint8 ``(m,)`` or one verb for all.

    Returns:
        :class:`SegmentedMessages`, packets of message 0 first, then message 1 ...

    Raises:
        EncodeError: unknown verb, PMTU not an IB MTU, negative size.
    """
    pmtu = _check_pmtu(pmtu_bytes)
    size = np.asarray(size_bytes, dtype=np.int64).reshape(-1)
    verbs = np.broadcast_to(np.asarray(verb, dtype=np.int64), size.shape)
    _check_verbs(verbs)
    count = packets_per_message(size, pmtu)
    msg = np.repeat(np.arange(size.size, dtype=np.int64), count)
    starts = np.cumsum(count) - count
    idx = np.arange(msg.size, dtype=np.int64) - np.repeat(starts, count)
    n = count[msg]
    is_last = idx == n - 1
    opcode = OPCODE_SEQUENCE[verbs[msg], packet_position(idx, n)]
    off = idx * pmtu
    pay = np.where(is_last, size[msg] - off, pmtu).astype(np.uint32)
    pad = ((-pay.astype(np.int64)) & 3).astype(np.uint8)
    return SegmentedMessages(msg, idx, opcode, pay, pad, off)


def header_bytes(opcode: np.ndarray | int, *, transport: str = "rocev2", ip_version: int = 4,
                 vlan: bool = False, grh: bool = False) -> np.ndarray:
    """Bytes before the payload: L2/L3/L4 (or LRH[+GRH]) + BTH + extended headers.

    Raises:
        EncodeError: unknown opcode, transport or IP version.
    """
    ext = EXT_BYTES[np.asarray(opcode, dtype=np.uint8)]
    if (ext < 0).any():
        bad = int(np.asarray(opcode, dtype=np.uint8)[ext < 0].flat[0])
        raise EncodeError(f"BTH.OpCode: got 0x{bad:02x}, expected one of "
                          f"{', '.join(f'0x{c:02x}' for c in sorted(OPCODES))}")
    return _base_bytes(transport, ip_version, vlan, grh) + H.BTH.size + ext.astype(np.int64)


def _base_bytes(transport: str, ip_version: int, vlan: bool, grh: bool) -> int:
    return stack(transport, ip_version, vlan, grh).before_bth_bytes


def frame_bytes(opcode: np.ndarray | int, payload_bytes: np.ndarray | int, *, transport: str = "rocev2",
                ip_version: int = 4, vlan: bool = False, grh: bool = False) -> np.ndarray:
    """Frame length as a capture shows it (no Ethernet FCS), for many packets at once.

    RoCEv2: Ethernet 14 [+ 802.1Q 4] + IPv4 20 | IPv6 40 + UDP 8 + BTH 12 + ext + payload + pad +
    ICRC 4, at least 60 (802.3 minimum; a NIC pads short frames after the ICRC).
    InfiniBand: LRH 8 [+ GRH 40] + BTH 12 + ext + payload + pad + ICRC 4 + VCRC 2.
    C5: IPv4 WRITE FIRST of 4096 → 4170, MIDDLE 4096 → 4154, LAST of 1808 → 1866.

    Args:
        opcode: uint8 ``(n,)`` BTH opcodes.
        payload_bytes: ``(n,)`` payload bytes without pad.
        transport: ``"rocev2"`` or ``"infiniband"``; ip_version 4/6 and vlan for RoCEv2, grh for IB.

    Returns:
        int64 ``(n,)``.

    Raises:
        EncodeError: unknown opcode, transport or IP version.
    """
    pay = np.asarray(payload_bytes, dtype=np.int64)
    total = header_bytes(opcode, transport=transport, ip_version=ip_version, vlan=vlan, grh=grh) \
        + pay + ((-pay) & 3) + stack(transport, ip_version, vlan, grh).trailer_bytes
    if transport == "infiniband":
        return total
    return np.maximum(total, ETH_MIN_FRAME_BYTES)


def rocev2_flow_label(qpn_a: np.ndarray | int, qpn_b: np.ndarray | int) -> np.ndarray:
    """20-bit flow label of a QP pair as Linux computes it (``rdma_calc_flow_label``, ib_verbs.h).

    ``v = a*b; v ^= v >> 20; v ^= v >> 40; label = v & 0xFFFFF`` — symmetric in the two QPNs, so
    both directions of a QP pair get the same label. Params of the scapy vectors: QPNs 0xC11 and
    0xD2A → 0xED7C3.
    """
    v = np.asarray(qpn_a, dtype=np.uint64) * np.asarray(qpn_b, dtype=np.uint64)
    v ^= v >> np.uint64(20)
    v ^= v >> np.uint64(40)
    return (v & np.uint64(0xFFFFF)).astype(np.uint32)


def rocev2_udp_sport(qpn_a: np.ndarray | int, qpn_b: np.ndarray | int) -> np.ndarray:
    """UDP source port of a QP pair as Linux derives it (``rdma_flow_label_to_udp_sport``).

    ``low = fl & 0x3FFF; low ^= (fl & 0xFC000) >> 14; sport = low | 0xC000`` — in 0xC000..0xFFFF
    (ECMP entropy, IBTA Annex A17.5.1), the same in both directions. 0xC11/0xD2A → 0xD7F8.
    """
    fl = rocev2_flow_label(qpn_a, qpn_b)
    low = (fl & np.uint32(0x3FFF)) ^ ((fl & np.uint32(0xFC000)) >> np.uint32(14))
    return (low | np.uint32(0xC000)).astype(np.uint16)
