"""What a NIC puts on its link for a message: packets, frame lengths and layer-1 times.

Segmentation at the PMTU and the opcode of each packet come from :mod:`tokenpcap.wire.rdma`
(IBTA vol.1 9.5: FIRST, MIDDLE..., LAST, or ONLY for a message of at most one PMTU); frame lengths
from :func:`tokenpcap.wire.rdma.frame_bytes`; the time a frame occupies the link from
:func:`tokenpcap.wire.layer1.layer1_time_ns` (preamble, SFD, FCS and inter-frame gap for
Ethernet; the ceiling in whole ns). The engine needs, per distinct message size, the packet count
and the FIRST, MIDDLE and LAST durations and lengths (all three the ONLY packet for a one-packet
message); every MIDDLE packet of a message is PMTU-sized.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.config.profiles import ClusterProfile, GenerationConfig
from tokenpcap.errors import InputError
from tokenpcap.records import CTS_BYTES, VERB_SEND, VERB_WRITE, VERB_WRITE_IMM
from tokenpcap.wire import rdma
from tokenpcap.wire.layer1 import layer1_time_ns

__all__ = ["NicModel", "ACK_DELAY_NS"]

#: Time from an AckReq'd packet's arrival (last bit) to its ACK being ready to send at the
#: responder (ns). A modelling choice of the order of RoCE NIC responder turnaround (a few
#: hundred ns); every ACK is delayed by exactly this much.
ACK_DELAY_NS = 200
_VERBS = (VERB_WRITE, VERB_WRITE_IMM, VERB_SEND)


class NicModel:
    """The NICs of ``cluster`` as the engine times them.

    Attributes: ``n_nics``; ``latency_ns`` (last bit out to last bit in); ``ack_delay_ns``;
    ``cts_bytes`` (payload of a clear-to-send WRITE); ``clear_to_send`` and ``ack_every``
    (``generation.ack_every_packets``, 0: AckReq on the last packet only); ``ack_bytes`` and
    ``ack_ns``: length (no FCS) and layer-1 time of an ACK frame.

    Raises:
        InputError: a negative latency or ACK period, no NICs.
    """

    def __init__(self, cluster: ClusterProfile, generation: GenerationConfig | None = None, *,
                 ib_grh: bool = False, ack_delay_ns: int = ACK_DELAY_NS, cts_bytes: int = CTS_BYTES):
        gen = generation if generation is not None else GenerationConfig()
        net = cluster.network
        self.cluster = cluster
        self.n_nics = int(cluster.nodes) * int(cluster.nics_per_node)
        self.latency_ns = int(net.latency_ns)
        self.ack_delay_ns = int(ack_delay_ns)
        self.cts_bytes = int(cts_bytes)
        self.clear_to_send = bool(gen.clear_to_send)
        self.ack_every = int(gen.ack_every_packets)
        for key, val, low in (("network.latency_ns", self.latency_ns, 0), ("ack_delay_ns", self.ack_delay_ns, 0),
                              ("cts_bytes", self.cts_bytes, 0), ("generation.ack_every_packets", self.ack_every, 0),
                              ("nics", self.n_nics, 1)):
            if val < low:
                raise InputError(f"{key}: got {val}, expected an integer >= {low}")
        self._link = float(cluster.link_gbps)
        self._transport = cluster.transport
        self.pmtu = int(cluster.pmtu_bytes)
        self._wire = dict(transport=cluster.transport, ip_version=int(net.ip_version),
                          vlan=net.vlan_id is not None, grh=bool(ib_grh))
        self.ack_bytes = int(rdma.frame_bytes(rdma.ACKNOWLEDGE, 0, **self._wire))
        self.ack_ns = int(self.l1_ns(self.ack_bytes))
        #: a RoCEv2 CNP (BTH opcode 0x81 and its 16 reserved bytes, IBTA Annex A17.9.3): frame
        #: bytes without FCS and layer-1 ns
        self.cnp_bytes = int(rdma.frame_bytes(rdma.CNP, 0, **self._wire))
        self.cnp_ns = int(self.l1_ns(self.cnp_bytes))

    def l1_ns(self, frame_bytes) -> np.ndarray:
        """Layer-1 time (ns, ceiling) of frames of ``frame_bytes`` on this cluster's links."""
        return layer1_time_ns(frame_bytes, self._link, self._transport)

    def shapes(self, size_bytes, verb) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(packets (m,), ns (m, 3), frame bytes (m, 3))``, int64, of messages of ``size_bytes``
        sent with ``verb`` (arrays of one shape): FIRST, MIDDLE, LAST columns."""
        size = np.atleast_1d(np.asarray(size_bytes, np.int64))
        verb = np.broadcast_to(np.asarray(verb, np.int64), size.shape)
        n = np.asarray(rdma.packets_per_message(size, self.pmtu), np.int64)
        pos = np.where(n[:, None] == 1, rdma.ONLY, np.array([rdma.FIRST, rdma.MIDDLE, rdma.LAST]))
        ops = rdma.OPCODE_SEQUENCE[verb[:, None], pos]
        last = size - (n - 1) * self.pmtu
        pay = np.where(n[:, None] == 1, size[:, None], np.stack([np.full_like(size, self.pmtu),
                                                                 np.full_like(size, self.pmtu), last], 1))
        fb = np.asarray(rdma.frame_bytes(ops.ravel(), pay.ravel(), **self._wire), np.int64).reshape(-1, 3)
        return n, np.asarray(self.l1_ns(fb), np.int64).reshape(-1, 3), fb

    def frames(self, size_bytes: int, verb: int) -> tuple[int, tuple, tuple]:
        """``(packets, (ns FIRST, MIDDLE, LAST), (bytes FIRST, MIDDLE, LAST))`` of one message."""
        n, d, fb = self.shapes(np.array([size_bytes]), verb)
        return int(n[0]), tuple(int(x) for x in d[0]), tuple(int(x) for x in fb[0])
