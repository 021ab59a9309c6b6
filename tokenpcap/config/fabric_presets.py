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
  DCQCN and the CNPs take the ConnectX defaults in every preset but ``hpcc-ns3`` and
  ``simai-400g`` (the loader's defaults, :mod:`tokenpcap.config.cc_types`).
* HPCC ns-3 congestion control: ``simulation/run.py`` ``--cc dcqcn``: ``KMIN_MAP`` 100 * bw / 25
  and ``KMAX_MAP`` 400 * bw / 25 KB per link speed bw Gb/s (4 bw, 16 bw), ``PMAX_MAP`` 0.2;
  ``switch-mmu.cc`` ``ConfigEcn``: ``kmin = _kmin * 1000`` (KB of 1000 B); ``ShouldSendCN``
  never marks queue 0. ``RATE_AI`` 5 * bw / 25 Mb/s, ``RATE_HAI`` 50 * bw / 25 Mb/s (80 / 800
  at 400G), ``MIN_RATE`` 1000 Mb/s, ``EWMA_GAIN`` 0.00390625 (1/256), ``RP_TIMER`` 300,
  ``ALPHA_RESUME_INTERVAL`` 1, ``RATE_DECREASE_INTERVAL`` 4, ``FAST_RECOVERY_TIMES`` 1,
  ``CLAMP_TARGET_RATE`` 0; ``rdma-hw.cc``: no byte counter (``RateIncEventTimerMlx`` only),
  ``cnp_received_mlx`` sets alpha = 1 on the first CNP and ``m_rateOnFirstCNP`` (1.0: keep the
  rate), ``ReceiveUdp`` sets ``FLAG_CNP`` in the ACK of every CE packet (no CNP pacing).
* SONiC lossless WRED (sonic-buildimage ``files/build_templates/qos_config.j2``
  ``AZURE_LOSSLESS``): green min threshold 1,048,576 B, max 2,097,152 B, drop probability 5 %,
  ``ecn: ecn_all``, on the lossless queues; marking on egress (sonic-mgmt
  ``docs/ECN-test-plan.md`` tests dequeue-based marking).
* SimAI (aliyun/SimAI ``astra-sim-alibabacloud/inputs/config/SimAI.conf``, HPCC's ns-3 fork):
  ``KMIN_MAP`` 400G 800 KB, ``KMAX_MAP`` 400G 3,200 KB, ``PMAX_MAP`` 400G 0.2, ``BUFFER_SIZE``
  32 (MiB), ``RP_TIMER`` 900, ``RATE_AI`` 50 Mb/s, ``RATE_HAI`` 100 Mb/s, ``MIN_RATE`` 100 Mb/s,
  ``EWMA_GAIN`` 0.00390625, ``ALPHA_RESUME_INTERVAL`` 1, ``RATE_DECREASE_INTERVAL`` 4,
  ``FAST_RECOVERY_TIMES`` 1, ``CLAMP_TARGET_RATE`` 0; its 200G row (300 / 1,200 KB, 0.8) is not
  the 400G row scaled, so the preset's thresholds are its 400G values at every port speed.
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


def _gbps_int(c: FabricContext) -> int:
    """The NIC rate in whole Gb/s, as ``export --to hpcc`` passes ``bw`` to run.py's rules."""
    return int(c.link_gbps)


def _hpcc_kmin_bytes(c: FabricContext) -> int:
    """run.py ``KMIN_MAP`` at the NIC rate: ``100 * bw / 25`` KB, times 1000 (``ConfigEcn``)."""
    return 100 * int(round(float(c.link_gbps) * 1e9)) // (25 * 10**9) * 1000


def _hpcc_kmax_bytes(c: FabricContext) -> int:
    """run.py ``KMAX_MAP`` at the NIC rate: ``400 * bw / 25`` KB, times 1000."""
    return 400 * int(round(float(c.link_gbps) * 1e9)) // (25 * 10**9) * 1000


def _hpcc_ai_mbps(c: FabricContext) -> int:
    """run.py ``RATE_AI`` ``5 * bw / 25`` Mb/s (``export/hpcc.py`` ``_cc_settings``, floored)."""
    return 5 * _gbps_int(c) // 25


def _hpcc_hai_mbps(c: FabricContext) -> int:
    """run.py ``RATE_HAI`` ``50 * bw / 25`` Mb/s."""
    return 50 * _gbps_int(c) // 25


Value = Any | Callable[[FabricContext], Any]

#: preset name -> {"topology": {...}, "switch": {...}, "pfc": {...}, "ecmp": {...}, "timing": ...,
#: "ecn": {...}, "dcqcn": {...}, "np": {...}}; no preset sets ``cc`` (it stays ``none``)
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
        #: run.py KMIN/KMAX_MAP 4 bw / 16 bw KB per link speed, PMAX 0.2; marked at dequeue.
        "ecn": {"kmin_bytes": _hpcc_kmin_bytes, "kmax_bytes": _hpcc_kmax_bytes, "pmax": 0.2,
                "mark_at": "dequeue", "priorities": [3], "rate_scaled": True},
        #: run.py --cc dcqcn and rdma-hw.cc's Mellanox variant (module docstring).
        "dcqcn": {"rpg_time_reset": 300, "rpg_byte_reset": 0, "rpg_threshold": 1,
                  "rpg_ai_rate": _hpcc_ai_mbps, "rpg_hai_rate": _hpcc_hai_mbps, "rpg_gd": 11,
                  "rpg_min_rate": 1000, "rate_to_set_on_first_cnp": 0, "dce_tcp_g": 1020,
                  "dce_tcp_rtt": 1, "initial_alpha_value": 1024,
                  "rate_reduce_monitor_period": 4, "clamp_tgt_rate": False,
                  "clamp_tgt_rate_after_time_inc": True},
        #: rdma-hw.cc ReceiveUdp: FLAG_CNP in the ACK of every CE packet, in queue 0.
        "np": {"min_time_between_cnps": 0, "cnp_in_ack": True, "cnp_802p_prio": 0},
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
        #: SONiC AZURE_LOSSLESS WRED: 1,048,576 / 2,097,152 B, 5 %, egress.
        "ecn": {"kmin_bytes": 1_048_576, "kmax_bytes": 2_097_152, "pmax": 0.05,
                "mark_at": "dequeue", "rate_scaled": False},
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
        #: SONiC's default qos_config.j2 AZURE_LOSSLESS (the SKU has no qos.json.j2 of its own).
        "ecn": {"kmin_bytes": 1_048_576, "kmax_bytes": 2_097_152, "pmax": 0.05,
                "mark_at": "dequeue", "rate_scaled": False},
    },
}

_NS3 = PRESETS["hpcc-ns3"]
#: SimAI.conf's numbers on HPCC ns-3's switch model (SimAI runs HPCC's ns-3 fork); its window
#: (HAS_WIN 1, VAR_WIN 1) and ACKs in the data class (ACK_HIGH_PRIO 0) are not modelled.
PRESETS["simai-400g"] = {
    **_NS3,
    #: BUFFER_SIZE 32 (MiB, third.cc ConfigBufferSize).
    "switch": {**_NS3["switch"], "buffer_bytes": 32 * MIB},
    #: KMIN_MAP / KMAX_MAP / PMAX_MAP at 400G: 800 / 3,200 KB of 1000 B, 0.2, at every speed.
    "ecn": {**_NS3["ecn"], "kmin_bytes": 800_000, "kmax_bytes": 3_200_000, "pmax": 0.2,
            "rate_scaled": False},
    #: RP_TIMER 900, RATE_AI 50, RATE_HAI 100, MIN_RATE 100 Mb/s; the rest as hpcc-ns3.
    "dcqcn": {**_NS3["dcqcn"], "rpg_time_reset": 900, "rpg_ai_rate": 50, "rpg_hai_rate": 100,
              "rpg_min_rate": 100},
}
