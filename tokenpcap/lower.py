"""Stage 6, lowering: transmitted frames of the NIC engine → ``PACKET_DTYPE`` rows for the builder.

:class:`tokenpcap.schedule.engine.nic.Engine` decides *when* each packet leaves which NIC; this module fills in
*what* the packet says, per QP and per message of a chunk, then per packet by one compiled loop
(:mod:`tokenpcap.wire.expand`; no Python loop per packet):

* BTH opcode from segmentation at the PMTU (IBTA vol.1 9.5, C5): FIRST/MIDDLE/LAST or ONLY, the
  last with immediate for ``VERB_WRITE_IMM``, SEND opcodes for ``VERB_SEND``; ACKs are
  ``Acknowledge`` (0x11). The opcode sequences come from :func:`tokenpcap.wire.rdma.segment`.
* PSN (9.7.1): per QP (the sender's QP of a connection: its data; the receiver's QP: its
  clear-to-send writes), a seeded initial PSN, +1 per packet modulo 2**24, the next message
  continuing where the last one ended (C6). An ACK carries the PSN of the packet it acknowledges.
* QPNs: a connection ``(sender S, receiver R, connection index c)`` owns one RC QP pair, as an
  NCCL net_ib send/receive communicator pair does (docs/lower.md): data S→R is sent by S's QP
  with DestQP = R's QPN; R's clear-to-send writes travel back on R's QP of the same pair (DestQP =
  S's QPN); ACKs come from the QP that received the request. Data R→S is another connection with
  its own pair. The QPN of the end at ``nic`` towards ``peer`` is ``2 + (base(seed, nic) + role *
  (2**23 - 1) + 256 * peer + c) mod (2**24 - 2)`` with role 0 at the sender, 1 at the receiver:
  data QPs are >= 2 (QP0/QP1 are SMI/GSI, C13), unique per NIC (up to 32767 NICs), pure
  functions of the seed and the connection (so any subset of NICs lowers to the same numbers);
  the rule lives in :mod:`tokenpcap.wire.qpn`, below the schedule, which needs the UDP ports.
* UDP source port: Linux's ``rdma_flow_label_to_udp_sport(rdma_calc_flow_label(a, b))`` of the two
  QPNs (:func:`tokenpcap.wire.rdma.rocev2_udp_sport`), in 0xC000-0xFFFF, the same both ways.
* AckReq on the last packet of every message, and on every N-th packet with
  ``ack_every_packets = N`` (9.7.3.1: the responder answers packets that request it).
* RETH on FIRST/ONLY (9.3.3): the responder buffer's virtual address (a seeded 1 MiB-aligned base
  per QP + the bytes sent on the QP before this message), the R_Key of that buffer (seeded per
  QP: the data buffer for data, the sender's FIFO for clear-to-send), DMA length = the whole
  message length.
* ImmDt = the message's ``imm``. AETH on ACKs (9.3.5): syndrome 0x1F = ACK (bits 6:5 = 00) with the
  credit count 0b11111 "invalid", as responders send when end-to-end credits are not used (the
  scapy vector ``rc_ack_psn_000000`` and the captured IB ACK carry it); MSN = messages completed
  on the QP modulo 2**24 (9.7.5.1.1): the acknowledged message's ``qp_seq + 1`` on its last
  packet, ``qp_seq`` before it.
* IPv4 Identification: the low 16 bits of the PSN. With DF set the ID has no meaning (RFC 6864
  4.1); deriving it from the PSN keeps it a pure function of the packet.
* NCCL lines: with ``line_protocols`` (per call index, :meth:`tokenpcap.plan.build.Plan.
  line_protocols`) the data packets of an LL or LL128 call say so (``line_protocol``) with the
  lines' flag ``line_flag`` = the message's sequence number on its QP + 1: NCCL's ``sendStep + 1``
  with one step per message (an LL/LL128 message is one FIFO step; earlier Simple messages on
  the connection count one step each here, where NCCL's ring slices take 2).
* PFC frames (``kind == PKT_PFC``, a switch port's IEEE 802.1Qbb pause of the queued fabric) are
  not RDMA: their row becomes ``opcode = OPCODE_PFC``, ``nic`` (``-1 - P``), ``peer_nic``,
  ``msg`` (pause quanta) and ``imm`` (class-enable vector, from ``index``), everything else 0
  (:data:`tokenpcap.records.PACKET_DTYPE`); they never touch the message table.
* CNPs (``kind == PKT_CNP``, DCQCN's notification point): opcode 0x81 from the marked packet's
  receiver to its sender, DestQP = the QPN that sent the marked packet, PSN 0, BECN, UDP source
  port ``fabric.np.cnp_udp_sport``; DSCP and PCP from ``fabric.np`` (:func:`wire_context`,
  :mod:`tokenpcap.wire.cnp`).
* CE marks: a ``flags`` column in the TX rows (the queued fabric's), bit
  :data:`tokenpcap.records.TX_FLAG_CE`, becomes ``PACKET_DTYPE.ce`` (the frame builder writes ECN
  3 and the IPv4 checksum; the ICRC is unchanged: :mod:`tokenpcap.wire.ecn`).
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from tokenpcap.config.addresses import nic_addresses, switch_port_macs
from tokenpcap.errors import InputError
from tokenpcap.records import KIND_CTS, OPCODE_PFC, PACKET_DTYPE, PKT_CNP, PKT_PFC, TX_FLAG_CE
from tokenpcap.schedule.engine.nic import PKT_ACK, Engine
from tokenpcap.config.profiles import ClusterProfile, GenerationConfig
from tokenpcap.wire import rdma
from tokenpcap.wire.cnp import cnp_packets
from tokenpcap.wire.context import WireContext
from tokenpcap.wire.expand import MessageValues, expand_rows
from tokenpcap.wire.qpn import (_PSN_MASK, _QPN_SPACE, _ROLE_OFFSET, _U64, QP_STRIDE,  # noqa: F401
                                _mix, _rkey_va, initial_psn, qpn)
from tokenpcap.wire.pfc import PFC_FRAME_BYTES

__all__ = ["Lowering", "MessageLowering", "lower_messages", "qpn", "initial_psn", "wire_context",
           "AETH_ACK_SYNDROME", "QP_STRIDE", "pfc_packets", "distinct_ids"]

_NOT_RDMA = {PKT_PFC: "PFC", PKT_CNP: "CNP"}
#: NICs the QPN rule holds (:class:`Lowering`): the base of a connection's key
_MAX_NICS = _ROLE_OFFSET // QP_STRIDE

#: QPs whose values a :class:`Lowering` keeps (six values of 2-8 bytes each: 32 MB at most).
_KEPT_QPS = 1 << 20
#: dtypes of :meth:`Lowering._qp_values`' six values (as :mod:`tokenpcap.wire.qpn` returns them)
_QP_VALUE_TYPES = (np.uint32, np.uint32, np.uint16, np.uint32, np.uint32, np.uint64)

#: AETH syndrome of an ACK without end-to-end credits (IBTA vol.1 9.3.5, Table 47).
AETH_ACK_SYNDROME = 0x1F


class Lowering:
    """Turns :data:`tokenpcap.schedule.engine.nic.TX_DTYPE` chunks into ``PACKET_DTYPE`` rows.

    Args:
        cluster: PMTU and transport of the run.
        seed: seeds QPNs, initial PSNs, R_Keys and buffer addresses.
        ack_every_packets: the engine's AckReq period (0: last packet only).
        line_protocols: None, or uint8 per call index: 1/2 marks the data packets of LL/LL128
            calls (module docstring).

    Raises:
        InputError: more NICs than the QPN rule holds (32767).
    """

    def __init__(self, cluster: ClusterProfile, seed: int = 0, ack_every_packets: int = 0,
                 line_protocols: np.ndarray | None = None):
        self.line_protocols = line_protocols
        self.pmtu = int(cluster.pmtu_bytes)
        self.seed = int(seed)
        self.ack_every = int(ack_every_packets)
        self.transport = cluster.transport
        self.cnp_udp_sport = int(cluster.fabric.np.cnp_udp_sport)
        self._qp_keys = np.zeros(0, np.int64)       # the QPs met so far (_qp_values)
        self._qp_vals: list[np.ndarray] = [np.zeros(0, t) for t in _QP_VALUE_TYPES]
        n = int(cluster.nodes) * int(cluster.nics_per_node)
        if n * QP_STRIDE > _ROLE_OFFSET:
            raise InputError(f"nodes * nics_per_node: got {n}, expected at most {_ROLE_OFFSET // QP_STRIDE} "
                             f"(24-bit QPNs, {QP_STRIDE} connections per peer and direction)")

    def __call__(self, tx: np.ndarray, messages: np.ndarray) -> np.ndarray:
        """Lower one chunk.

        Args:
            tx: ``TX_DTYPE (n,)`` from :meth:`tokenpcap.schedule.engine.nic.Engine.run`.
            messages: the engine's message table (``Engine.messages``), indexed by msg id.

        Returns:
            ``PACKET_DTYPE (n,)``, in the order of ``tx``.

        Raises:
            InputError: a message whose ``qp`` is >= QP_STRIDE; a PFC or CNP row that is
                malformed (:func:`pfc_packets`, :meth:`_cnp`) or under transport infiniband.
        """
        kind = tx["kind"]
        special = {k: kind == k for k in _NOT_RDMA}
        if not any(v.any() for v in special.values()):
            u, inv = distinct_ids(tx["msg"])
            return self.rdma_rows(tx, messages[u], inv)
        for k, mask in special.items():
            if mask.any() and self.transport != "rocev2":
                raise InputError(f"tx rows: got {int(mask.sum())} {_NOT_RDMA[k]} rows under "
                                 f"transport {self.transport!r}, expected none (InfiniBand has "
                                 f"credit-based link flow control, IBTA vol.1 7.9, no PFC frame "
                                 f"and no RoCEv2 CNP)")
        out = np.zeros(tx.size, PACKET_DTYPE)
        pfc, cnp = special[PKT_PFC], special[PKT_CNP]
        rd = ~(pfc | cnp)
        if rd.any():
            u, inv = distinct_ids(tx["msg"][rd])
            out[rd] = self.rdma_rows(tx[rd], messages[u], inv)
        if pfc.any():
            out[pfc] = pfc_packets(tx[pfc])
        if cnp.any():
            out[cnp] = self._cnp(tx[cnp], messages)
        return out

    def _pairs(self, messages: np.ndarray, ids: np.ndarray):  # type: ignore[no-untyped-def]
        """Per distinct message of ``ids``: ``(u, inv, m, src, dst, qp, role, qpn_src,
        qpn_dst)``: the messages, their NICs and connection index, the role of the sending QP
        (1 for CTS: the receiver's QP of the pair) and the QPNs of the packet's sender and
        receiver."""
        u, inv = distinct_ids(ids)
        return (u, inv, *self._ends(messages[u]))            # per message of the chunk

    def _ends(self, m: np.ndarray):  # type: ignore[no-untyped-def]
        """``(m, src, dst, qp, role, qpn_src, qpn_dst)`` of message rows ``m`` (:meth:`_pairs`)."""
        m, src, dst, qp, role, (ci, cs, cd, cq, cr) = self._connections(m)
        return m, src, dst, qp, role, qpn(self.seed, cs, cd, cq, cr)[ci], \
            qpn(self.seed, cd, cs, cq, 1 - cr)[ci]

    def _connections(self, m: np.ndarray):  # type: ignore[no-untyped-def]
        """``(m, src, dst, qp, role, (ci, cs, cd, cq, cr))``: the messages' NICs, connection
        index and role (1 for CTS: the receiver's QP of the pair), and the distinct QPs they
        are sent on, ``(cs, cd, cq, cr)[ci]`` being the messages' own: what depends on the QP
        alone (QPNs, initial PSN, R_Key, buffer base) is computed once per QP of a chunk, not
        per message."""
        src, dst, qp = m["src_nic"].astype(np.int64), m["dst_nic"].astype(np.int64), m["qp"].astype(np.int64)
        if (qp >= QP_STRIDE).any():
            bad = int(qp[qp >= QP_STRIDE][0])
            raise InputError(f"message qp: got {bad}, expected 0 .. {QP_STRIDE - 1}")
        role = (m["kind"] == KIND_CTS).astype(np.int64)      # CTS: the receiver's QP of the pair
        uk, ci = np.unique(_qp_key(src, dst, qp, role), return_inverse=True)
        sdq = uk >> 1
        sd = sdq // QP_STRIDE
        n = _MAX_NICS
        return m, src, dst, qp, role, (ci.reshape(-1), sd // n, sd % n, sdq % QP_STRIDE, uk & 1)

    def _qp_values(self, cs, cd, cq, cr) -> list[np.ndarray]:
        """``[qpn_src, qpn_dst, udp_sport, initial_psn, rkey, va]`` of the distinct QPs
        ``(cs, cd, cq, cr)[i]`` (:meth:`_connections`): pure functions of the seed and the QP
        (:mod:`tokenpcap.wire.qpn`), computed the first time a QP is met in the run and kept
        (sorted by the QP's key; at most :data:`_KEPT_QPS`, then started over), so that a
        chunk hashes only the QPs no chunk before it had."""
        key = _qp_key(cs, cd, cq, cr)
        known = self._qp_keys
        at = np.searchsorted(known, key)
        seen = at < known.size
        seen[seen] = known[at[seen]] == key[seen]
        if not seen.all():
            new = ~seen
            if known.size + int(new.sum()) > _KEPT_QPS:     # started over from this chunk's
                known, new = known[:0], np.ones(key.size, bool)
                self._qp_vals = [v[:0] for v in self._qp_vals]
            s, d, q, r = cs[new], cd[new], cq[new], cr[new]
            qs, qd = qpn(self.seed, s, d, q, r), qpn(self.seed, d, s, q, 1 - r)
            vals = [qs, qd, rdma.rocev2_udp_sport(qs, qd), initial_psn(self.seed, s, d, q, r),
                    *_rkey_va(self.seed, s, d, q, r)]
            keys = np.concatenate([known, key[new]])
            order = np.argsort(keys, kind="stable")
            self._qp_keys = keys[order]
            self._qp_vals = [np.concatenate([a, b])[order] for a, b in zip(self._qp_vals, vals)]
            at = np.searchsorted(self._qp_keys, key)
        return [v[at] for v in self._qp_vals]

    def _cnp(self, tx: np.ndarray, messages: np.ndarray) -> np.ndarray:
        """The CNP rows of a chunk (``kind == PKT_CNP``, :data:`tokenpcap.records.PKT_CNP`):
        from the marked packet's receiver to its sender, DestQP the QPN of the QP that sent it
        (the data sender's for data, the receiver's for a clear-to-send write), UDP source port
        ``fabric.np.cnp_udp_sport`` (:func:`tokenpcap.wire.cnp.cnp_packets`).

        Raises:
            InputError: a row whose ``nic``/``peer_nic`` are not the message's receiver/sender.
        """
        _, inv, _, src, dst, _, _, qpn_src, qpn_dst = self._pairs(messages, tx["msg"])
        for name, want in (("nic", dst[inv]), ("peer_nic", src[inv])):
            bad = tx[name] != want
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise InputError(f"CNP tx row {i}: {name}: got {tx[name][i]}, expected {want[i]} "
                                 f"(a CNP goes from the marked packet's receiver to its sender)")
        return cnp_packets(tx["time_ns"], tx["nic"], tx["peer_nic"], qpn_src[inv], qpn_dst[inv],
                           tx["msg"], self.cnp_udp_sport, tx["frame_bytes"])

    def rdma_rows(self, tx: np.ndarray, m: np.ndarray, inv: np.ndarray, *, time_add_ns: int = 0,
                  pos: np.ndarray | None = None, out: np.ndarray | None = None,
                  pay_out: np.ndarray | None = None) -> np.ndarray:
        """The RDMA rows (data, CTS, ACK; module docstring) of a chunk whose distinct messages
        are already looked up: what :func:`tokenpcap.generate.route.route_chunk` calls, having
        read each message once for its selection. What depends on the QP alone is computed
        once per QP of the run (:meth:`_connections`, :meth:`_qp_values`), the rest once per
        message, the
        rows from them by one compiled loop (:func:`tokenpcap.wire.expand.expand_rows`).

        Args:
            tx: ``TX_DTYPE (n,)`` rows of kind data, CTS or ACK.
            m: ``MSG_STATE_DTYPE (u,)``, the distinct messages the rows name.
            inv: int ``(n,)``, row ``i`` names message ``m[inv[i]]``.
            time_add_ns: added to every row's ``time_ns``.
            pos: None, or int64 ``(n,)``: the output row of each row of ``tx`` (a permutation,
                :func:`tokenpcap.wire.expand.group_positions`).
            out: None, or ``PACKET_DTYPE (n,)`` to write the rows into (a buffer shared with
                the writer processes, :meth:`tokenpcap.generate.output.Dispatcher.chunk_rows`).
            pay_out: None, or int64 ``(n,)``: each row's payload bytes, in the order of ``tx``.

        Returns:
            ``PACKET_DTYPE (n,)``, in the order of ``tx`` (or as ``pos`` places them); ``out``
            when given.

        Raises:
            InputError: a message whose ``qp`` is >= QP_STRIDE.
        """
        m, _, _, _, _, (ci, cs, cd, cq, cr) = self._connections(m)
        qs, qd, sport, psn0, rkey, va = (v[ci] for v in self._qp_values(cs, cd, cq, cr))
        qpn_src, qpn_dst = qs, qd
        psn0 = psn0.astype(np.int64) + m["psn_offset"]
        line = np.zeros(m.size, np.int64)
        if self.line_protocols is not None:      # NCCL LL/LL128 lines: the protocol of the call
            lp = self.line_protocols
            line = np.where(m["kind"] == KIND_CTS, 0, lp[m["call_id"] % lp.size])
        mv = MessageValues(qpn_src=qpn_src, qpn_dst=qpn_dst, sport=sport,
                           psn0=psn0, n_packets=m["n_packets"], size_bytes=m["size_bytes"],
                           verb=m["verb"], va=va + m["byte_offset"].astype(_U64), rkey=rkey,
                           imm=m["imm"], qp_seq=m["qp_seq"], line=line)
        flags = tx["flags"] if "flags" in tx.dtype.names else None      # a queued fabric's CE marks
        return expand_rows(tx, inv, mv, self.pmtu, self.ack_every, PKT_ACK, flags,
                           TX_FLAG_CE.bit_length() - 1, time_add_ns, pos, out, pay_out)


def _qp_key(src, dst, qp, role):
    """int64: one number per QP, ``((src * _MAX_NICS + dst) * QP_STRIDE + qp) * 2 + role``
    (int64 arrays), ordered as the tuples are."""
    return ((src * _MAX_NICS + dst) * QP_STRIDE + qp) * 2 + role


def pfc_packets(tx: np.ndarray) -> np.ndarray:
    """``PACKET_DTYPE`` rows of PFC ``TX_DTYPE`` rows (``kind == PKT_PFC``), in their order.

    Raises:
        InputError: a row whose ``nic`` is not a switch port (``-1 - P``), whose pause quanta
            (``msg``) is outside 0..65535, class-enable vector (``index``) outside 0..255, or
            ``frame_bytes`` not 60 (IEEE 802.1Qbb 36.1.3: the 64-byte minimum with FCS).
    """
    for name, bad, expected in (
            ("nic", tx["nic"] >= 0, "-1 - P (the switch port P that sends the PFC frame)"),
            ("msg", (tx["msg"] < 0) | (tx["msg"] > 0xFFFF), "pause quanta 0..65535"),
            ("index", (tx["index"] < 0) | (tx["index"] > 0xFF), "a class-enable vector 0..255"),
            ("frame_bytes", tx["frame_bytes"] != PFC_FRAME_BYTES, f"{PFC_FRAME_BYTES}")):
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise InputError(f"PFC tx row {i}: {name}: got {tx[name][i]}, expected {expected}")
    out = np.zeros(tx.size, PACKET_DTYPE)
    for name in ("time_ns", "nic", "peer_nic", "msg", "frame_bytes"):
        out[name] = tx[name]
    out["opcode"] = OPCODE_PFC
    out["imm"] = tx["index"]
    return out


def distinct_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(u, inv)``, int64 ``(u,)`` and ``(n,)``: ``u`` the sorted distinct values of the
    non-negative ints ``ids`` ``(n,)``, ``u[inv] == ids``; O(n) by a table of the span when the
    ids are dense (the message ids of a chunk are), a sort otherwise."""
    if ids.size == 0:
        return ids[:0], ids[:0]
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo > 4 * ids.size:
        return np.unique(ids, return_inverse=True)
    present = np.zeros(hi - lo + 1, bool)
    present[ids - lo] = True
    rank = np.cumsum(present) - 1
    return lo + np.flatnonzero(present), rank[ids - lo]


class MessageLowering:
    """Iterator of ``PACKET_DTYPE`` chunks for independent messages (see :func:`lower_messages`).

    ``messages`` is the engine's table (``MSG_STATE_DTYPE``: the given rows with their ids, then
    the CTS messages), what ``PACKET_DTYPE.msg`` indexes; ``engine`` is the engine itself.
    """

    def __init__(self, messages: np.ndarray, cluster: ClusterProfile, generation: GenerationConfig | None,
                 seed: int | None, chunk_rows: int, ib_grh: bool):
        gen = generation if generation is not None else GenerationConfig()
        self.engine = Engine(cluster, gen, chunk_rows=chunk_rows, ib_grh=ib_grh)
        self.engine.add_messages(messages)
        self._lower = Lowering(cluster, gen.seed if seed is None else seed, gen.ack_every_packets)
        self._it = self.engine.run()

    @property
    def messages(self) -> np.ndarray:
        return self.engine.messages

    def __iter__(self) -> Iterator[np.ndarray]:
        return self

    def __next__(self) -> np.ndarray:
        return self._lower(next(self._it), self.engine.messages)


def lower_messages(messages: np.ndarray, cluster: ClusterProfile, generation: GenerationConfig | None = None,
                   seed: int | None = None, *, chunk_rows: int = 1 << 18, ib_grh: bool = False) -> MessageLowering:
    """Packets of independent RDMA messages, each starting no earlier than its ``start_ns``.

    Runs the engine with no dependencies between messages (lowering on its own, for tests and
    benchmarks).

    Args:
        messages: ``MESSAGE_DTYPE (m,)``; ``msg_id`` is reassigned densely in row order (the CTS
            messages of clear-to-send mode follow).
        cluster: link rate, transport, PMTU, network.
        generation: ACK coalescing and clear-to-send (default :class:`GenerationConfig`).
        seed: QPNs, PSNs, keys (default ``generation.seed``).
        chunk_rows: most rows per chunk; ib_grh: native IB frames carry a GRH.

    Returns:
        :class:`MessageLowering`, an iterator of time-ordered ``PACKET_DTYPE`` chunks.

    Raises:
        InputError: bad messages (NIC out of range, src == dst, negative size, unknown verb ...).
    """
    return MessageLowering(messages, cluster, generation, seed, chunk_rows, ib_grh)


def wire_context(cluster: ClusterProfile, *, payload_seed: int = 0, ib_grh: bool = False) -> WireContext:
    """The :class:`tokenpcap.wire.context.WireContext` of ``cluster``: its network marking, the
    addresses of :func:`tokenpcap.config.addresses.nic_addresses` (GIDs as the IB GRH addresses)
    and, for the PFC frames of switch ports, :func:`tokenpcap.config.addresses.switch_port_macs`.

    Raises:
        ProfileError, InfeasiblePlanError: from the address rules; EncodeError: out-of-range marking.
    """
    net = cluster.network
    addr = nic_addresses(cluster)
    ib = cluster.transport == "infiniband"
    return WireContext(transport=cluster.transport, ip_version=int(net.ip_version), vlan_id=net.vlan_id,
                       pcp=int(net.pcp), dscp=int(net.dscp), ecn=int(net.ecn), ttl=int(net.ttl),
                       cnp_dscp=int(cluster.fabric.np.cnp_dscp),
                       cnp_pcp=int(cluster.fabric.np.cnp_802p_prio),
                       p_key=int(net.pkey), ib_grh=ib_grh, sl=int(net.ib_sl), vl=int(net.ib_vl),
                       mac=addr.mac, ipv4=addr.ipv4, ipv6=addr.gid if ib else addr.ipv6, lid=addr.lid,
                       payload_seed=int(payload_seed), switch_port_macs=switch_port_macs)
