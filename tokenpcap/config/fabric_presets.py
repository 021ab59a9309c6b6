"""The presets of a cluster profile's ``fabric:`` mapping (``fabric.preset``): name -> partial
mapping of the keys :mod:`tokenpcap.config.fabric` reads, with the primary source of every
number in the ``#:`` comment above it.

A preset value is either the value itself or a function of the cluster (:class:`FabricContext`)
for the few that scale with it (the HPCC export's buffer size). A key given in the profile
overrides the preset's; a key neither gives takes the loader's default (the ``th5-400g`` values).

Numbers and their sources:

* HPCC ns-3 (alibaba-edu/High-Precision-Congestion-Control, ``simulation/``):
  ``src/point-to-point/model/switch-mmu.cc`` ``SwitchMmu::SwitchMmu``: ``reserve = 4 * 1024``,
  ``resume_offset = 3 * 1024``; ``GetPfcThreshold``: ``(buffer_size - total_hdrm - total_rsrv -
  shared_used_bytes) >> pfc_a_shift[port]``. ``scratch/third.cc``: ``headroom = rate * delay /
  8 / 1000000000 * 3`` per port, ``pfc_a_shift`` 3 decremented while ``rate > nic_rate`` (rate
  halved each time), ``ConfigBufferSize(buffer_size * 1024 * 1024)`` with ``BUFFER_SIZE`` from
  the config file, which ``tokenpcap export --to hpcc`` writes as ``16 * link_gbps // 50``.
  ``qbb-net-device.cc``: a received pause holds the queue until a resume (no pause timer);
  ``switch-node.cc`` ``SendToDev``: control packets (PFC, QCN, ACK/NACK with ``AckHighPrio``) in
  queue 0, data in queue ``pg``; ``GetOutDev``: ``EcmpHash`` (murmur3) of sip, dip, ports with
  seed ``m_ecmpSeed = m_id``; store-and-forward, no pipeline delay (``TransmitStart``).
* Broadcom Tomahawk 5, Arista 7060X6-64PE (sonic-net/sonic-buildimage,
  ``device/arista/x86_64-arista_7060x6_64pe/Arista-7060X6-64PE-O128S2/``):
  ``buffers_defaults_t1.j2`` ``ingress_lossless_pool`` size 165,660,324 B;
  ``pg_profile_lookup.ini`` 400G rows (5 m and 150 m cables): size (reserved) 18,796 B, xoff
  (headroom) 612,140 B, xon_offset 3,556 B, dynamic_th 0 (alpha = 2**0 = 1).
* NVIDIA Spectrum-4, SN5600 (same repository,
  ``device/mellanox/x86_64-nvidia_sn5600-r0/Mellanox-SN5600-C224O8/buffers_defaults_t1.j2``):
  ``ingress_lossless_pool`` 133,643,264 B; the Mellanox SKUs compute headroom per port from
  speed and cable length (SONiC's dynamic buffer model), here the auto rule.
* NVIDIA ConnectX firmware defaults (``mlxconfig -q``): ``CNP_802P_PRIO`` 6: the control class.
* IEEE 802.1Qbb: pause time in quanta of 512 bit times, at most 0xFFFF; switches re-send XOFF
  before it expires while the priority stays congested (refresh).
* Pipeline latency of a cut-through ASIC: Broadcom publishes no port-to-port latency for
  Tomahawk 5; 700 ns is a modelling choice of the order vendors quote for 51.2 Tb/s
  single-chip switches, not a measured value.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["FabricContext", "PRESETS", "MIB"]

MIB = 1024 * 1024


@dataclass(frozen=True)
class FabricContext:
    """What a preset value may depend on: the cluster's size, NIC rate (Gb/s), one-way
    latency (ns) and 802.1p priority of the data (``network.pcp``)."""

    nodes: int
    nics_per_node: int
    link_gbps: float
    latency_ns: int
    pcp: int


def _hpcc_buffer_bytes(c: FabricContext) -> int:
    """``BUFFER_SIZE`` MiB as ``export --to hpcc`` writes it (``max(1, 16 * int(link_gbps) //
    50)``), times 1024 * 1024 as ``third.cc`` ``ConfigBufferSize`` takes it."""
    return max(1, 16 * int(c.link_gbps) // 50) * MIB


Value = Any | Callable[[FabricContext], Any]

#: preset name -> {"topology": {...}, "switch": {...}, "pfc": {...}, "ecmp": {...}, "timing": ...}
PRESETS: dict[str, dict[str, Value]] = {
    #: HPCC ns-3 ``third.cc`` fed by ``tokenpcap export --to hpcc`` (module docstring).
    "hpcc-ns3": {
        #: export/hpcc.py ``_topology``: one leaf per rail, nics_per_node spines.
        "topology": {"kind": "rail-optimized"},
        "switch": {
            #: qbb-net-device.cc TransmitStart: store-and-forward, no pipeline latency.
            "forwarding": "store-and-forward",
            "pipeline_ns": 0,
            #: third.cc ConfigBufferSize(BUFFER_SIZE * 1024 * 1024), BUFFER_SIZE = 16*bw/50.
            "buffer_bytes": _hpcc_buffer_bytes,
            #: switch-node.cc SendToDev: control packets in queue 0.
            "control_priority": 0,
        },
        "pfc": {
            #: export/hpcc.py HPCC_PG: the flows' priority group 3.
            "priorities": [3],
            #: switch-mmu.cc SwitchMmu(): reserve = 4 * 1024.
            "reserve_bytes": 4 * 1024,
            #: third.cc: headroom = rate * delay / 8 / 1e9 * 3 (auto).
            "headroom_bytes": None,
            #: third.cc: pfc_a_shift 3 (alpha 1/8), one less per doubling above the NIC rate.
            "dynamic_th": -3,
            "dynamic_th_rate_scaled": True,
            #: switch-mmu.cc SwitchMmu(): resume_offset = 3 * 1024.
            "resume_offset_bytes": 3 * 1024,
            "pause_quanta": 65_535,
            #: qbb-net-device.cc Receive: paused until the resume frame, no timer.
            "pause_until_resume": True,
        },
        #: switch-node.cc GetOutDev / EcmpHash: murmur3 over sip, dip, sport | dport << 16.
        "ecmp": {"mode": "five-tuple", "hash": "hpcc-murmur3"},
        #: ns-3 frames are payload + 48 B, serialization truncated to ns, an ACK per packet.
        "timing": "hpcc-ns3",
    },
    #: Broadcom Tomahawk 5 (Arista 7060X6-64PE, SONiC buffers_defaults_t1.j2, pg_profile_lookup.ini).
    "th5-400g": {
        "topology": {"kind": "rail-optimized"},
        #: cut-through; 700 ns pipeline is a modelling choice (module docstring).
        "switch": {"forwarding": "cut-through", "pipeline_ns": 700,
                   #: ingress_lossless_pool size 165,660,324 B.
                   "buffer_bytes": 165_660_324,
                   #: NVIDIA ConnectX CNP_802P_PRIO 6.
                   "control_priority": 6},
        #: pg_profile_lookup.ini 400G: size 18,796, xoff 612,140, xon_offset 3,556, dynamic_th 0.
        "pfc": {"reserve_bytes": 18_796, "headroom_bytes": 612_140, "dynamic_th": 0,
                "dynamic_th_rate_scaled": False, "resume_offset_bytes": 3_556,
                #: IEEE 802.1Qbb maximum pause time, refreshed while congested.
                "pause_quanta": 65_535, "pause_until_resume": False},
        "ecmp": {"mode": "five-tuple", "hash": "crc32"},
        "timing": "rocev2",
    },
    #: NVIDIA Spectrum-4 (SN5600, SONiC buffers_defaults_t1.j2); otherwise as th5-400g.
    "spectrum4-400g": {
        "topology": {"kind": "rail-optimized"},
        "switch": {"forwarding": "cut-through", "pipeline_ns": 700,
                   #: ingress_lossless_pool 133,643,264 B.
                   "buffer_bytes": 133_643_264,
                   "control_priority": 6},
        #: headroom from port speed and cable (SONiC dynamic buffer model): the auto rule.
        "pfc": {"reserve_bytes": 18_796, "headroom_bytes": None, "dynamic_th": 0,
                "dynamic_th_rate_scaled": False, "resume_offset_bytes": 3_556,
                "pause_quanta": 65_535, "pause_until_resume": False},
        "ecmp": {"mode": "five-tuple", "hash": "crc32"},
        "timing": "rocev2",
    },
}
