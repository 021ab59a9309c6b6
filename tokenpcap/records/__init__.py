"""Shared vocabulary of the pipeline: phases, parallel dimensions, collectives, and the message table.

This module is the contract between the stages. The plan (stage 3) names its collective calls with
these codes, the schedule (stage 5) emits RDMA messages as rows of :data:`MESSAGE_DTYPE`, the
lowering (stage 6) turns those rows into packets, the pcap writer (stage 7) names each packet's
phase with :func:`phase_label`, and the analysis (stage 8) parses that label back. Nothing here
imports any other tokenpcap module.

Codes are small integers so that they fit in numpy structured arrays; the names are the strings a
user sees (plan tables, pcapng comments, JSON).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.errors import DecodeError, InputError

__all__ = [
    "PHASES",
    "DIMS",
    "COLLECTIVES",
    "VERB_WRITE",
    "VERB_WRITE_IMM",
    "VERB_SEND",
    "KIND_DATA",
    "KIND_CTS",
    "MESSAGE_DTYPE",
    "PACKET_DTYPE",
    "phase_label",
    "parse_phase_label",
]

#: Phases of one training iteration, in order, then ``run``: the calls of a microbenchmark
#: workload (no training iteration). Index = code stored in tables.
PHASES: tuple[str, ...] = ("forward", "backward", "optimizer", "run")

#: Parallel dimensions a collective belongs to. ``emb`` is the tied-embedding AllReduce between
#: the first and last pipeline stage (Megatron-LM); ``mp`` the model-parallel group (TP x PP, or
#: every rank with the distributed optimizer) that reduces gradient statistics (norm, inf/NaN);
#: ``cp`` the context-parallel ring of ring attention (K,V sends, Transformer Engine); ``wl`` the
#: calls of a microbenchmark workload (incast, AllToAll, ... of a ``workload:`` scenario).
DIMS: tuple[str, ...] = ("tp", "pp", "dp", "ep", "emb", "mp", "cp", "wl")

#: Collective kinds, spelled as NCCL and the literature spell them.
COLLECTIVES: tuple[str, ...] = (
    "AllReduce",
    "ReduceScatter",
    "AllGather",
    "AllToAll",
    "SendRecv",
    "Broadcast",
)

#: RDMA verbs a message is sent with (what the lowering turns it into).
VERB_WRITE = 0       # RDMA WRITE FIRST/MIDDLE/LAST or ONLY
VERB_WRITE_IMM = 1   # ... the last (or only) packet with immediate data
VERB_SEND = 2        # SEND FIRST/MIDDLE/LAST or ONLY

#: Message kinds: payload data of a collective, or NCCL-like clear-to-send control writes.
KIND_DATA = 0
KIND_CTS = 1

#: Packet kinds of what a NIC transmits: a packet of a :data:`KIND_DATA` message, of a
#: :data:`KIND_CTS` message, or an RC ACK (AETH) answering a packet with AckReq. The first two
#: equal the message kinds they carry. :data:`PKT_PFC` is an IEEE 802.1Qbb priority flow control
#: frame a switch port sends (a row of the queued fabric: ``nic`` = ``-1 - P`` for global switch
#: port ``P``, ``msg`` = pause time in quanta, 0 = XON, ``index`` = class-enable vector).
PKT_DATA = KIND_DATA
PKT_CTS = KIND_CTS
PKT_ACK = 2
PKT_PFC = 3
#: A RoCEv2 congestion notification packet (BTH opcode 0x81) a NIC sends as DCQCN's
#: notification point for a CE-marked packet it received: ``nic`` the NIC that sends the CNP
#: (the marked packet's receiver), ``peer_nic`` the marked packet's sender, ``msg`` the message
#: the marked packet belongs to (its QP pair gives the CNP's DestQP: the QPN of the QP that sent
#: it), ``index`` that packet's index in the message.
PKT_CNP = 4

#: Bits of the optional ``flags`` uint8 column of the engine's transmitted-frame rows (``TX_DTYPE``):
#: :data:`TX_FLAG_CE` = the packet left a switch queue marked CE (ECN 3, RFC 3168 5); the
#: lowering copies it into ``PACKET_DTYPE.ce``.
TX_FLAG_CE = 0x01

#: ``PACKET_DTYPE.opcode`` of a PFC row (not a BTH opcode: a PFC frame has no BTH). 0xFF lies in
#: the manufacturer-specific BTH range 0xC0-0xFF (IBTA vol.1 Table 38) that no generated RoCE or
#: InfiniBand packet uses, so the frame builder can group PFC rows by opcode like the others.
OPCODE_PFC = 0xFF

#: Payload of an NCCL-like clear-to-send RDMA WRITE: NCCL's ``ncclIbSendFifo`` entry is 64 bytes
#: (``src/transport/net_ib.cc``).
CTS_BYTES = 64

#: One row per RDMA message (one work request on one QP). Shape ``(n,)``.
#:
#: ============== ====== =================================================================
#: field          dtype  meaning
#: ============== ====== =================================================================
#: msg_id         int64  unique id, dense from 0 in the order the schedule created messages
#: start_ns       int64  earliest time (ns) the source NIC may put the first packet on the wire
#: src_nic        int32  global NIC index of the sender (node * nics_per_node + local NIC)
#: dst_nic        int32  global NIC index of the receiver
#: qp             int32  connection index between the two NICs (NCCL channel); the lowering maps
#:                       (src_nic, dst_nic, qp) to a pair of QPNs, deterministic from the seed
#: size_bytes     int64  RDMA payload bytes of the message (>= 0)
#: verb           uint8  VERB_WRITE, VERB_WRITE_IMM or VERB_SEND
#: kind           uint8  KIND_DATA or KIND_CTS (control traffic, counted separately)
#: imm            uint32 immediate data for VERB_WRITE_IMM
#: phase          uint8  index into PHASES
#: dim            uint8  index into DIMS
#: collective     uint8  index into COLLECTIVES
#: iteration      int16  training iteration (0-based)
#: layer          int16  transformer layer (global index) or -1
#: microbatch     int16  microbatch or -1
#: step           int32  algorithm step (ring step, tree level ...) or -1
#: call_id        int64  index of the plan's collective call this message belongs to, or -1
#: rank_src       int32  global rank (GPU) that sends
#: rank_dst       int32  global rank (GPU) that receives
#: token_start    int64  corpus token (index into the tokenized corpus, repeated epoch after
#:                       epoch) of the message's first byte, or -1 when the bytes are not
#:                       per-token (gradients)
#: token_end      int64  one past the token of its last byte, or -1. Activations are laid out
#:                       [s, b, h]: with micro_batch_size 1 the message holds tokens
#:                       [token_start, token_end); with b > 1 it interleaves b sequences and
#:                       records.tokenspans.held_spans gives the range it holds of each
#: ============== ====== =================================================================
MESSAGE_DTYPE = np.dtype(
    [
        ("msg_id", "<i8"),
        ("start_ns", "<i8"),
        ("src_nic", "<i4"),
        ("dst_nic", "<i4"),
        ("qp", "<i4"),
        ("size_bytes", "<i8"),
        ("verb", "u1"),
        ("kind", "u1"),
        ("imm", "<u4"),
        ("phase", "u1"),
        ("dim", "u1"),
        ("collective", "u1"),
        ("iteration", "<i2"),
        ("layer", "<i2"),
        ("microbatch", "<i2"),
        ("step", "<i4"),
        ("call_id", "<i8"),
        ("rank_src", "<i4"),
        ("rank_dst", "<i4"),
        ("token_start", "<i8"),
        ("token_end", "<i8"),
    ]
)


#: One row per packet on the wire, as the lowering (stage 6) produces it and the frame builder in
#: :mod:`tokenpcap.wire` consumes it. Shape ``(n,)``. Which headers a frame has follows from the
#: transport and the BTH ``opcode`` (RETH on WRITE FIRST/ONLY, ImmDt on ... WITH IMMEDIATE, AETH on
#: ACK ...); fields of headers a packet does not carry are ignored by the builder.
#:
#: ============== ====== =================================================================
#: field          dtype  meaning
#: ============== ====== =================================================================
#: time_ns        int64  time the frame's first bit leaves the sending NIC (pcap timestamp)
#: nic            int32  global index of the sending NIC (source MAC/IP/LID come from it)
#: peer_nic       int32  global index of the receiving NIC (destination MAC/IP/LID)
#: msg            int64  msg_id of the message the packet belongs to (ACKs: the acknowledged one)
#: opcode         uint8  BTH opcode, full 8 bits (RC 0x00-0x1F, CNP 0x81), or OPCODE_PFC
#: psn            uint32 BTH PSN (24 bits)
#: dest_qp        uint32 BTH DestQP (24 bits)
#: src_qp         uint32 the sender's own QPN (not on the wire in RC; keys the UDP source port)
#: udp_sport      uint16 UDP source port (RoCEv2), the same in both directions of a QP pair
#: payload_bytes  uint32 RDMA payload bytes in this packet (without pad)
#: pad            uint8  BTH PadCnt (0..3): zero bytes after the payload so that it is 4-aligned
#: ack_req        uint8  BTH AckReq bit
#: solicited      uint8  BTH SE bit
#: becn           uint8  BTH BECN bit (set on CNP)
#: reth_va        uint64 RETH virtual address
#: reth_rkey      uint32 RETH R_Key
#: reth_len       uint32 RETH DMA length (whole message length)
#: imm            uint32 ImmDt
#: aeth           uint32 AETH: syndrome << 24 | MSN
#: payload_offset int64  byte offset of this packet's payload inside its message
#: ip_id          uint16 IPv4 identification
#: frame_bytes    uint32 frame length on the wire without FCS (filled by the lowering)
#: ce             uint8  1: a switch marked the packet, its IP ECN field is CE (3) instead of the
#:                       context's ECT codepoint (IPv4 header checksum recomputed, ICRC unchanged:
#:                       it masks the ECN bits); 0: as sent
#: line_protocol  uint8  0: the payload is raw data (NCCL's Simple); 1 LL, 2 LL128: it is NCCL
#:                       lines (:mod:`tokenpcap.wire.lines`) with ``line_flag`` in every line
#: line_flag      uint32 the lines' flag (the sender's step on the connection + 1)
#: ============== ====== =================================================================
#:
#: A PFC row (``opcode == OPCODE_PFC``, 802.1Qbb MAC control frame of 60 bytes) uses three
#: fields: ``nic`` = ``-1 - P``, P the global id of the switch port that sends it (source MAC
#: :func:`tokenpcap.config.addresses.switch_port_macs`); ``msg`` = pause time in quanta of 512 bit
#: times (0 = XON, 1..65535 = XOFF), the same for every enabled priority; ``imm`` = class-enable
#: vector (bit p for priority p, 0..255). ``peer_nic`` is the receiver (a NIC, or ``-1 - P2``
#: for another switch's port); the frame's destination is the MAC control group address.
PACKET_DTYPE = np.dtype(
    [
        ("time_ns", "<i8"),
        ("nic", "<i4"),
        ("peer_nic", "<i4"),
        ("msg", "<i8"),
        ("opcode", "u1"),
        ("psn", "<u4"),
        ("dest_qp", "<u4"),
        ("src_qp", "<u4"),
        ("udp_sport", "<u2"),
        ("payload_bytes", "<u4"),
        ("pad", "u1"),
        ("ack_req", "u1"),
        ("solicited", "u1"),
        ("becn", "u1"),
        ("reth_va", "<u8"),
        ("reth_rkey", "<u4"),
        ("reth_len", "<u4"),
        ("imm", "<u4"),
        ("aeth", "<u4"),
        ("payload_offset", "<i8"),
        ("ip_id", "<u2"),
        ("frame_bytes", "<u4"),
        ("ce", "u1"),
        ("line_protocol", "u1"),
        ("line_flag", "<u4"),
    ]
)


def phase_label(dim: int | str, phase: int | str, collective: int | str) -> str:
    """Return the label that names a message's phase everywhere, e.g. ``"dp/backward/AllReduce"``.

    The same label keys the plan's per-phase rows (``plan --json`` ``phases[].name``), starts the
    pcapng packet comments, and is what ``inspect`` groups by, so that payload bytes per phase can be
    compared between a plan and a capture.

    Args:
        dim: index into :data:`DIMS` or its name.
        phase: index into :data:`PHASES` or its name.
        collective: index into :data:`COLLECTIVES` or its name.

    Raises:
        InputError: a name or index that is not in its table.
    """
    d = DIMS[dim] if isinstance(dim, (int, np.integer)) else _check(dim, DIMS)
    p = PHASES[phase] if isinstance(phase, (int, np.integer)) else _check(phase, PHASES)
    c = (
        COLLECTIVES[collective]
        if isinstance(collective, (int, np.integer))
        else _check(collective, COLLECTIVES)
    )
    return f"{d}/{p}/{c}"


def parse_phase_label(label: str) -> tuple[str, str, str]:
    """Split a :func:`phase_label` (possibly followed by a space and more text) into its names.

    Raises:
        DecodeError: the text does not start with ``dim/phase/collective`` of known names.
    """
    head = label.split(" ", 1)[0]
    parts = head.split("/")
    if len(parts) != 3:
        raise DecodeError(f"phase label {label!r}: expected 'dim/phase/collective'")
    try:
        return _check(parts[0], DIMS), _check(parts[1], PHASES), _check(parts[2], COLLECTIVES)
    except InputError as err:
        raise DecodeError(f"phase label {label!r}: {err}") from None


def _check(name: str, table: tuple[str, ...]) -> str:
    if name not in table:
        raise InputError(f"got {name!r}, expected one of {', '.join(table)}")
    return name


#: Every phase label, indexed by :func:`label_codes`:
#: ``(dim * len(PHASES) + phase) * len(COLLECTIVES) + collective``.
LABELS: tuple[str, ...] = tuple(phase_label(d, p, c) for d in range(len(DIMS))
                                for p in range(len(PHASES)) for c in range(len(COLLECTIVES)))


def label_codes(rows: np.ndarray) -> np.ndarray:
    """Index into :data:`LABELS` of message rows (fields dim, phase, collective): int64 ``(n,)``."""
    return ((rows["dim"].astype(np.int64) * len(PHASES) + rows["phase"]) * len(COLLECTIVES)
            + rows["collective"])
