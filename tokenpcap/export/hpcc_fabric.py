"""A queued fabric's profile (``fabric.model: queued``) as HPCC ns-3 settings, and what of it
the simulator cannot model.

``export --to hpcc`` of a scenario whose cluster has a queued fabric writes the simulator's
topology from the same description our engine runs (:func:`fabric_topology`:
:func:`tokenpcap.schedule.engine.topology.hpcc_topology_lines` of
:func:`~tokenpcap.schedule.engine.topology.build_topology`: single-switch, rail-optimized,
leaf-spine and clos3, every link at its rate and propagation delay, hosts the NIC indices,
switches after them in our order; with planes a host has one link per plane, its devices
``1..planes``, which ``third.cc`` and ``RdmaHw`` take as a multi-NIC host) and its buffer from ``fabric.switch.buffer_bytes``
(:func:`buffer_mib`).

What ``third.cc`` and its switch model take from the config, and what they fix themselves (HPCC
ns-3, alibaba-edu/High-Precision-Congestion-Control ``simulation/``):

* ``BUFFER_SIZE``: whole MiB per switch (``uint32_t buffer_size``,
  ``ConfigBufferSize(buffer_size * 1024 * 1024)``); a buffer that is not a whole number of MiB
  is written rounded down (at least 1).
* The PFC threshold is always dynamic: ``switch-mmu.cc`` ``GetPfcThreshold`` ``(buffer_size -
  total_hdrm - total_rsrv - shared_used_bytes) >> pfc_a_shift[port]``, with ``third.cc``
  ``pfc_a_shift`` 3 less one per halving of the port rate down to the NIC rate (our
  ``dynamic_th -3``, ``dynamic_th_rate_scaled true``). ``USE_DYNAMIC_PFC_THRESHOLD`` is read
  into ``QbbNetDevice::DynamicThreshold`` (``m_dynamicth``), which no code reads: it is written
  1, the profile's (always dynamic) mode, and changes nothing.
* Per port and queue: ``reserve = 4 * 1024``, ``resume_offset = 3 * 1024``
  (``SwitchMmu::SwitchMmu``); headroom ``rate * delay / 8 / 1000000000 * 3`` (``third.cc``, our
  ``headroom_bytes: null``). Other values cannot be expressed.
* Forwarding is store-and-forward with no pipeline delay (``qbb-net-device.cc``
  ``TransmitStart`` once the whole packet is in); cut-through and ``pipeline_ns`` cannot be.
* A received pause holds the queue until the resume (``QbbNetDevice::Receive``: the pause
  time only sets ``m_paused``); ``PAUSE_TIME`` goes into the ``PauseHeader`` and nothing reads
  it, so ``pause_quanta`` and a pause that expires (``pause_until_resume: false``) cannot be.
* PFC is on for every switch queue (``SwitchMmu`` pauses any ``qIndex``); data is in priority
  group 3 (the export's ``HPCC_PG``), ACKs, NACKs, CNPs and PFC frames in queue 0
  (``switch-node.cc`` ``SendToDev``, ``ACK_HIGH_PRIO 1``): ``pfc.enabled: false``, other
  lossless priorities than ``[3]`` and a control priority other than 0 cannot be.
* ECMP: ``SwitchNode::EcmpHash`` (murmur3) of sip, dip and the ports with seed ``m_ecmpSeed =
  m_id``: our ``ecmp.mode five-tuple``, ``hash hpcc-murmur3``, ``seed 0``; others cannot be.
* Frames are the simulator's own (payload + 48 B, serialization truncated to whole ns, an ACK
  per packet with ``L2_ACK_INTERVAL 1``): our ``timing: hpcc-ns3``. With ``timing: rocev2``
  both run the same fabric with different frame sizes.

:func:`ns3_gaps` lists, one line each, the profile's settings among these that the simulator
will not honour; ``export --to hpcc`` prints them on stderr.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from tokenpcap.config.fabric_presets import MIB
from tokenpcap.config.fabric_types import FabricProfile

__all__ = ["NS3_RESERVE_BYTES", "NS3_RESUME_OFFSET_BYTES", "NS3_DYNAMIC_TH", "NS3_DATA_PRIORITY",
           "fabric_topology", "buffer_mib", "ns3_gaps", "ack_return_ns"]

#: switch-mmu.cc ``SwitchMmu::SwitchMmu``: ``reserve = 4 * 1024``.
NS3_RESERVE_BYTES = 4 * 1024
#: switch-mmu.cc ``SwitchMmu::SwitchMmu``: ``resume_offset = 3 * 1024``.
NS3_RESUME_OFFSET_BYTES = 3 * 1024
#: third.cc ``shift = 3`` (alpha 1/8): our exponent -3.
NS3_DYNAMIC_TH = -3
#: The flows' priority group (``tokenpcap.export.hpcc.HPCC_PG``).
NS3_DATA_PRIORITY = 3


def fabric_topology(cluster) -> tuple[list[str], list[float]]:
    """The topology file lines of ``cluster``'s queued fabric and its link speeds (Gb/s, sorted,
    distinct): ``hpcc_topology_lines(build_topology(cluster))``.

    Raises:
        ProfileError: the fabric's topology cannot hold the cluster (as ``build_topology``).
    """
    from tokenpcap.schedule.engine.topology import build_topology, hpcc_topology_lines

    topo = build_topology(cluster)
    return hpcc_topology_lines(topo), sorted({float(g) for g in topo.link_gbps.tolist()})


def buffer_mib(fabric: FabricProfile) -> int:
    """``BUFFER_SIZE``: ``fabric.switch.buffer_bytes`` in whole MiB, rounded down, at least 1."""
    return max(1, int(fabric.switch.buffer_bytes) // MIB)


def ns3_gaps(fabric: FabricProfile) -> list[str]:
    """What of the queued ``fabric`` HPCC ns-3 cannot model (module docstring), one line each
    naming the key, its value and what the simulator does instead; ``[]`` when everything is
    expressed (the ``hpcc-ns3`` preset) or the fabric is ideal."""
    if not fabric.queued:
        return []
    sw, pfc, ecmp = fabric.switch, fabric.pfc, fabric.ecmp
    out = []

    def gap(key: str, got, does: str) -> None:
        out.append(f"fabric.{key}: got {got}, HPCC ns-3 {does}")

    if sw.buffer_bytes % MIB:
        gap("switch.buffer_bytes", f"{sw.buffer_bytes:,}",
            f"takes whole MiB (BUFFER_SIZE {buffer_mib(fabric)}: {buffer_mib(fabric) * MIB:,} B)")
    if sw.forwarding != "store-and-forward":
        gap("switch.forwarding", sw.forwarding, "stores and forwards every packet")
    if sw.pipeline_ns:
        gap("switch.pipeline_ns", sw.pipeline_ns, "has no switch pipeline delay (0)")
    if sw.control_priority != 0:
        gap("switch.control_priority", sw.control_priority,
            "sends ACKs, CNPs and PFC frames in queue 0")
    if not pfc.enabled:
        gap("pfc.enabled", "false", "always runs PFC")
    if tuple(pfc.priorities) != (NS3_DATA_PRIORITY,):
        gap("pfc.priorities", list(pfc.priorities),
            f"sends the data in priority group {NS3_DATA_PRIORITY}, every queue lossless")
    if pfc.reserve_bytes != NS3_RESERVE_BYTES:
        gap("pfc.reserve_bytes", f"{pfc.reserve_bytes:,}",
            f"reserves {NS3_RESERVE_BYTES:,} B per port and queue")
    if pfc.headroom_bytes is not None:
        gap("pfc.headroom_bytes", f"{pfc.headroom_bytes:,}",
            "sizes headroom as rate * delay / 8 / 1e9 * 3 per port (null)")
    if pfc.resume_offset_bytes != NS3_RESUME_OFFSET_BYTES:
        gap("pfc.resume_offset_bytes", f"{pfc.resume_offset_bytes:,}",
            f"resumes {NS3_RESUME_OFFSET_BYTES:,} B below the threshold")
    if pfc.dynamic_th != NS3_DYNAMIC_TH or not pfc.dynamic_th_rate_scaled:
        gap("pfc.dynamic_th", f"{pfc.dynamic_th} (rate scaled: "
            f"{str(pfc.dynamic_th_rate_scaled).lower()})",
            f"uses alpha 2**{NS3_DYNAMIC_TH}, one doubling per halving of the port rate to the "
            "NIC rate")
    if not pfc.pause_until_resume:
        gap("pfc.pause_until_resume", "false",
            f"holds a paused queue until the resume (pause_quanta {pfc.pause_quanta} unused)")
    if ecmp.mode != "five-tuple" or ecmp.hash != "hpcc-murmur3" or ecmp.seed != 0:
        gap("ecmp", f"{ecmp.mode}/{ecmp.hash}/seed {ecmp.seed}",
            "hashes the five-tuple with murmur3, seed = the switch's node id "
            "(five-tuple/hpcc-murmur3/seed 0)")
    if fabric.topology.planes > 1:
        gap("topology.planes", fabric.topology.planes,
            "puts a QP on the host NIC (plane) of Hash32(sip, dip, sport, dport) % NICs "
            "(rdma-hw.cc GetNicIdxOfQp), not mlx5's round robin, and serves each NIC port's "
            "QPs at that port's rate")
    if fabric.timing != "hpcc-ns3":
        gap("timing", fabric.timing, "times its own frames (payload + 48 B, an ACK per "
            "packet; timing: hpcc-ns3)")
    return out


def _ser_ns(frame_bytes: int, gbps: float, floor: bool) -> int:
    """Serialization of ``frame_bytes`` at ``gbps`` in ns: truncated (ns-3) or rounded up."""
    r = Fraction(repr(float(gbps)))
    x = int(frame_bytes) * 8 * r.denominator
    return x // r.numerator if floor else -(-x // r.numerator)


def ack_return_ns(cluster, topology, src: np.ndarray, dst: np.ndarray,
                  ack_frame_bytes: int) -> np.ndarray:
    """The way back of a flow's last ACK on an idle reverse path, from the receiver NIC ``dst``
    to the sender NIC ``src`` (int arrays ``(f,)``): int64 ``(f,)`` ns.

    Per link of the path (the receiver's NIC link, for another leaf the leaf-spine links and,
    across pods, the spine-core links, then the sender's NIC link; rates and propagation of
    ``topology``, :class:`tokenpcap.schedule.engine.topology.Topology`): its propagation, plus
    the ACK's serialization on every link when the switches store and forward (once, on the
    first link, when they cut through), plus ``switch.pipeline_ns`` per switch. The ACK is
    ``timing: hpcc-ns3``'s 60 B, serialization truncated to whole ns (its ACK frame, as
    :mod:`tokenpcap.schedule.engine.fabstate` times it), else ``ack_frame_bytes`` (no FCS) + 24 B
    of FCS, preamble and gap, rounded up. HPCC ns-3: ``RdmaHw::ReceiveUdp`` sends the ACK as
    the data packet arrives, ``qbb-net-device.cc`` puts it first (queue 0, ``ACK_HIGH_PRIO 1``)
    and ``TransmitStart`` takes its serialization at every hop.
    """
    from tokenpcap.config.fabric import fabric_shape

    fab = cluster.fabric
    sh = fabric_shape(int(cluster.nodes), int(cluster.nics_per_node), float(cluster.link_gbps),
                      fab.topology)
    hpcc = fab.timing == "hpcc-ns3"
    tb = 60 if hpcc else int(ack_frame_bytes) + 24
    cut = fab.switch.forwarding == "cut-through"
    src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
    ls, ld = topology.leaf_of(src), topology.leaf_of(dst)
    per_pod = max(1, sh.leaves)
    pod_s, pod_d = ls // per_pod, ld // per_pod
    nic_ser = _ser_ns(tb, sh.nic_gbps, hpcc)
    up_ser = _ser_ns(tb, sh.uplink_gbps, hpcc) if sh.uplink_gbps else 0
    core_ser = _ser_ns(tb, sh.core_gbps, hpcc) if sh.core_gbps else 0
    prop = topology.port_prop_ns
    p0 = prop[topology.nic_port[src]] + prop[topology.nic_port[dst]]
    t1, t2 = fab.topology.propagation_ns[1], fab.topology.propagation_ns[2]
    via_spine = ls != ld
    via_core = via_spine & (pod_s != pod_d) & (sh.cores > 0)
    ser = (np.full(src.shape, nic_ser, np.int64) if cut else
           2 * nic_ser + np.where(via_spine, 2 * up_ser, 0) + np.where(via_core, 2 * core_ser, 0))
    switches = 1 + np.where(via_spine, 2, 0) + np.where(via_core, 2, 0)
    return (p0 + np.where(via_spine, 2 * t1, 0) + np.where(via_core, 2 * t2, 0) + ser
            + switches * int(fab.switch.pipeline_ns)).astype(np.int64)
