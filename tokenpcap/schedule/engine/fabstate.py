"""The queued fabric's arrays and settings for the compiled engine
(:mod:`tokenpcap.schedule.engine.fabric`), built once per run from the cluster's ``fabric``
profile, its topology (:mod:`tokenpcap.schedule.engine.topology`) and the run's QPs and message
shapes; with an ideal fabric, one-row placeholders that the kernel never reads.

Timing bytes per packet (what a port's serialization counts, :func:`timing_bytes`):

* ``timing: rocev2`` (ours): the frame without FCS + 24 B (FCS 4, preamble and SFD 8, minimum
  inter-frame gap 12, IEEE 802.3), serialization rounded up to whole ns: exactly the layer-1 time
  the NICs use (:func:`tokenpcap.wire.layer1.layer1_time_ns`). A switch buffers the frame with its
  FCS (timing bytes - 20).
* ``timing: hpcc-ns3``: what HPCC ns-3 puts on a link: the payload + 48 B of its own headers
  (PPP, IPv4, UDP, its sequence header: the trace shows ``4144(4096)``), no preamble or gap, the
  serialization truncated to whole ns (``DataRate::CalculateTxTime`` through ``Seconds(double)``:
  a 4,144-B frame takes 82 ns at 400 Gb/s, not 82.88); its ACK 60 B, its PFC frame 64 B. The
  NIC's own frame times follow the same rule (so a flow's packets leave the NIC as in ns-3).
"""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from tokenpcap.config.addresses import nic_addresses
from tokenpcap.config.fabric import auto_headroom_bytes, plane_port_gbps, port_dynamic_th
from tokenpcap.errors import InputError
from tokenpcap.schedule.engine import events as K
from tokenpcap.schedule.engine.ecmp import ECMP_HASHES, ECMP_MODES
from tokenpcap.schedule.engine.topology import build_topology
from tokenpcap.schedule.engine.topology_planes import qp_planes, qp_planes_hash
from tokenpcap.wire import rdma
from tokenpcap.wire.qpn import qpn

__all__ = ["FabricArrays", "build_fabric", "fabric_args", "flow_keys", "placeholder",
           "timing_bytes", "parse_point",
           "HPCC_HEADER_BYTES", "ROCE_L1_BYTES"]

#: Bytes HPCC ns-3 adds to a packet's payload on the wire (PPP 2, IPv4 20, UDP 8, SeqTsHeader
#: and qbb fields 18): its trace prints a 4,096-B payload as ``4144(4096)``.
HPCC_HEADER_BYTES = 48
#: Layer-1 bytes beyond the frame on Ethernet: FCS 4 + preamble/SFD 8 + inter-frame gap 12.
ROCE_L1_BYTES = 24
_HPCC_ACK_BYTES, _HPCC_PFC_BYTES = 60, 64
_PFC_FRAME_BYTES = 60
_POINTS = {"nic-tx": 0, "nic-rx": 1}


@dataclass
class FabricArrays:
    """What :func:`tokenpcap.schedule.engine.state.build_state` puts into the kernel's ``State``
    (fields named as there) and ``cf`` (``settings``: slot -> value), plus ``sh_d``/``ack_ns``
    when the fabric's timing replaces the NICs' frame times (None: keep them)."""

    arrays: dict
    settings: dict
    sh_d: np.ndarray | None
    ack_ns: int | None


def flow_keys(seed: int):
    """``f(nic, peer, conn, role) -> (udp_sport, dest_qpn)`` of QPs (int64 arrays), as the
    lowering numbers them (:mod:`tokenpcap.wire.qpn`: the QP pair's UDP source port is Linux's
    ``rdma_flow_label_to_udp_sport`` of its two QPNs, the same both ways)."""
    def keys(nic, peer, conn, role):
        mine = qpn(seed, nic, peer, conn, role)
        other = qpn(seed, peer, nic, conn, 1 - role)
        return np.asarray(rdma.rocev2_udp_sport(mine, other), np.int64), other.astype(np.int64)
    return keys


def fabric_args(s, point, topology=None) -> dict:
    """The fabric arguments of :func:`~tokenpcap.schedule.engine.state.build_state` for scenario
    ``s`` and capture ``point`` (a :class:`~tokenpcap.records.points.CapturePoint`): none for an
    ideal fabric; the topology (built from the cluster's ``fabric`` unless given), the point and
    the QPs' flow keys for a queued one.

    Raises:
        InputError: a point other than ``nic-tx`` on an ideal fabric.
    """
    fab = getattr(s.cluster, "fabric", None)
    if topology is None and (fab is None or fab.model != "queued"):
        if str(point) != "nic-tx":
            raise InputError(f"--point: got {str(point)!r}, expected nic-tx with an ideal "
                             "fabric (a cluster with fabric.model: queued has nic-rx and "
                             "switch ports)")
        return {}
    if topology is None:
        topology = build_topology(s.cluster)
    return dict(topology=topology, point=str(point), flow_keys=flow_keys(int(s.generation.seed)))


def placeholder() -> FabricArrays:
    """An ideal fabric: one-row arrays the kernel never reads (``cf[FAB] == 0``)."""
    z = lambda *shape: np.full(shape, -1, np.int64)   # noqa: E731
    arrays = dict(fp=z(1, K.FP_COLS), fq=z(8, 4), fi=z(8, 6), fpu=z(8), fpv=z(8),
                  fsw=z(1, K.FS_COLS), fn=z(1, K.FN_COLS), pk=z(1, K.PK_COLS), rt_ptr=z(2),
                  rt_port=z(1), q_sport=z(1), q_dqpn=z(1), sh_tb=z(1, 3), lgp=z(1, 6),
                  lgq=z(1, 5), qsamp=z(8, 2), fw=z(0, K.FW_COLS), q_plane=z(1, 2))
    return FabricArrays(arrays, {K.FAB: 0}, None, None)


def parse_point(point: str, topo) -> tuple[int, int]:
    """``(F_POINT code, global switch port or -1)`` of a capture point ``nic-tx``, ``nic-rx`` or
    ``switch:NAME:PORT``.

    Raises:
        InputError: an unknown point, switch name or port number.
    """
    if point in _POINTS:
        return _POINTS[point], -1
    parts = point.split(":")
    if len(parts) != 3 or parts[0] != "switch":
        raise InputError(f"--point: got {point!r}, expected nic-tx, nic-rx or switch:NAME:PORT")
    names = list(topo.switch_names)
    if parts[1] not in names:
        raise InputError(f"--point: switch got {parts[1]!r}, expected one of "
                         f"{', '.join(names[:8])}{' ...' if len(names) > 8 else ''}")
    s = names.index(parts[1])
    try:
        num = int(parts[2])
    except ValueError:
        num = -1
    at = np.flatnonzero((topo.port_switch == s) & (topo.port_number == num))
    if not at.size:
        n = int((topo.port_switch == s).sum())
        raise InputError(f"--point: port of {parts[1]} got {parts[2]!r}, expected 0 .. {n - 1}")
    return 2, int(at[0])


def timing_bytes(timing: str, frame_bytes: np.ndarray, payload_bytes: np.ndarray) -> np.ndarray:
    """Timing bytes of packets (module docstring): int64, the shape of the inputs."""
    if timing == "hpcc-ns3":
        return np.asarray(payload_bytes, np.int64) + HPCC_HEADER_BYTES
    return np.asarray(frame_bytes, np.int64) + ROCE_L1_BYTES


def _rate(gbps: float) -> tuple[int, int]:
    r = Fraction(repr(float(gbps)))
    return r.numerator, r.denominator


def _ser(tb: np.ndarray, gbps: float, floor: bool) -> np.ndarray:
    num, den = _rate(gbps)
    x = np.asarray(tb, np.int64) * 8 * den
    return x // num if floor else -(-x // num)


def _payloads(sizes: np.ndarray, n: np.ndarray, pmtu: int) -> np.ndarray:
    last = sizes - (n - 1) * pmtu
    return np.where(n[:, None] == 1, sizes[:, None],
                    np.stack([np.full_like(sizes, pmtu), np.full_like(sizes, pmtu), last], 1))


def build_fabric(cluster, topo, nic, *, sizes: np.ndarray, sh_n: np.ndarray, sh_fb: np.ndarray,
                 qcodes: np.ndarray, qp_stride: int, flow_keys, point: str = "nic-tx",
                 nics=None) -> FabricArrays:
    """The queued fabric of ``cluster`` on ``topo`` for a run whose message shapes are ``sizes``
    (bytes, ``(m,)``: the data sizes then the clear-to-send size) with ``sh_n`` packets and frame
    bytes ``sh_fb (m, 3)``, whose QPs have the global codes ``qcodes`` (module
    :mod:`tokenpcap.schedule.engine.state`). ``flow_keys(nic, peer, conn, role)`` gives each QP's
    UDP source port and the QPN of its other end (int64 arrays). ``point``: the capture point;
    ``nics``: the NICs whose frames are kept (None: all).

    Raises:
        InputError: a fabric the engine cannot run (InfiniBand transport, an unknown point).
    """
    fab = cluster.fabric
    if cluster.transport != "rocev2":
        raise InputError(f"fabric.model: got 'queued' with transport {cluster.transport!r}, "
                         "expected transport rocev2 (InfiniBand's credit-based link-level flow "
                         "control is not modelled)")
    N = int(cluster.nodes) * int(cluster.nics_per_node)
    S = len(topo.switch_names)
    P = int(topo.port_switch.size)
    hpcc = fab.timing == "hpcc-ns3"
    floor = hpcc
    code, pport = parse_point(point, topo)
    # ports
    fp = np.full((P, K.FP_COLS), -1, np.int64)
    fp[:, K.FP_SW] = topo.port_switch
    fp[:, K.FP_NUM_ON_SW] = topo.port_number
    fp[:, K.FP_PEER_NIC] = topo.port_peer_nic
    fp[:, K.FP_PEER_PORT] = topo.port_peer_port
    rates = np.array([_rate(g) for g in topo.port_gbps.tolist()], np.int64).reshape(-1, 2)
    fp[:, K.FP_RNUM], fp[:, K.FP_RDEN] = rates[:, 0], rates[:, 1]
    fp[:, K.FP_PROP] = topo.port_prop_ns
    fp[:, K.FP_BUSY] = 0
    fp[:, [K.FP_TXF, K.FP_TXB, K.FP_PFCS, K.FP_PFCR, K.FP_PAUSED_NS, K.FP_MAXQ, K.FP_QBYTES,
           K.FP_PFCM]] = 0
    pfc = fab.pfc
    # headroom per port: the profile's, or HPCC third.cc's 3 x rate x delay (bytes); the
    # dynamic threshold's shift (alpha = 2**-shift) per ingress port
    gbps, prop = topo.port_gbps.tolist(), topo.port_prop_ns.tolist()
    fp[:, K.FP_HDRM] = ([auto_headroom_bytes(g, d) for g, d in zip(gbps, prop)]
                        if pfc.headroom_bytes is None else int(pfc.headroom_bytes))
    nic_gbps = float(cluster.link_gbps)
    port_gbps = plane_port_gbps(nic_gbps, topo.planes)      # the NIC's rate with one plane
    shift = np.array([-port_dynamic_th(pfc, g, port_gbps) for g in gbps], np.int64).reshape(-1)
    fp[:, K.FP_SHIFT] = shift
    # switches
    fsw = np.zeros((S, K.FS_COLS), np.int64)
    fsw[:, K.FS_BUF] = int(fab.switch.buffer_bytes)
    fsw[:, K.FS_HDRM] = np.bincount(topo.port_switch, weights=fp[:, K.FP_HDRM], minlength=S).astype(np.int64)
    fsw[:, K.FS_RSRV] = np.bincount(topo.port_switch, minlength=S) * int(pfc.reserve_bytes)
    fsw[:, K.FS_SEED] = np.asarray(topo.switch_seed, np.int64)
    # NICs
    fn = np.zeros((N, K.FN_COLS), np.int64)
    fn[:, K.FN_PORT] = topo.nic_port
    fn[:, K.FN_PROP] = topo.port_prop_ns[topo.nic_port]
    fn[:, K.FN_RNUM], fn[:, K.FN_RDEN] = _rate(port_gbps)
    fn[:, K.FN_WHEAD] = fn[:, K.FN_WTAIL] = -1
    ip = nic_addresses(cluster).ipv4.astype(np.int64)
    fn[:, K.FN_IP] = (ip[:, 0] << 24) | (ip[:, 1] << 16) | (ip[:, 2] << 8) | ip[:, 3]
    if code == 1:
        fn[:, K.FN_RXSEL] = 1 if nics is None else 0
        if nics is not None:
            fn[np.asarray(sorted(nics), np.int64), K.FN_RXSEL] = 1
    # QPs: their pair's UDP source port and the QPN of their other end
    role = qcodes % 2
    rest = qcodes // 2
    conn, rest = rest % qp_stride, rest // qp_stride
    peer, me = rest % N, rest // N
    sport, dqpn = flow_keys(me, peer, conn, role)
    if fab.topology.plane_select == "five-tuple" and topo.planes > 1:
        q_plane = qp_planes_hash(fn[me, K.FN_IP], fn[peer, K.FN_IP], sport, topo.planes)
    else:
        q_plane = qp_planes(qcodes, N, qp_stride, topo.planes)
    fw = _plane_ports(topo, N)
    # timing bytes per shape and the NICs' frame times under that timing
    pay = _payloads(np.asarray(sizes, np.int64), np.asarray(sh_n, np.int64), int(cluster.pmtu_bytes))
    sh_tb = timing_bytes(fab.timing, sh_fb, pay)
    ack_tb = _HPCC_ACK_BYTES if hpcc else int(nic.ack_bytes) + ROCE_L1_BYTES
    pfc_tb = _HPCC_PFC_BYTES if hpcc else _PFC_FRAME_BYTES + ROCE_L1_BYTES
    sh_d = _ser(sh_tb, nic_gbps, floor) if hpcc else None
    ack_ns = int(_ser(np.array([ack_tb]), nic_gbps, floor)[0]) if hpcc else None
    dmin = min(int((sh_d if sh_d is not None else nic.l1_ns(sh_fb)).min()),
               ack_ns if ack_ns is not None else int(nic.ack_ns))
    cut = fab.switch.forwarding == "cut-through"
    cap = int(fn[:, K.FN_PROP].min(initial=0)) + (0 if cut else dmin)
    prios = set(int(p) for p in pfc.priorities)
    settings = {
        K.FAB: 1, K.F_CAP: max(0, cap), K.F_ACK_TB: ack_tb, K.F_PFC_TB: pfc_tb,
        K.F_BBOFF: 0 if hpcc else ROCE_L1_BYTES - 4, K.F_FLOOR: int(floor),
        K.F_DPRIO: int(cluster.network.pcp), K.F_CPRIO: int(fab.switch.control_priority),
        K.F_LOSSLESS: sum(1 << p for p in prios), K.F_PFC: int(bool(pfc.enabled)),
        K.F_RESERVE: int(pfc.reserve_bytes), K.F_RESUME: int(pfc.resume_offset_bytes),
        K.F_QUANTA: int(pfc.pause_quanta), K.F_UNTIL: int(bool(pfc.pause_until_resume)),
        K.F_CUT: int(cut), K.F_PIPE: int(fab.switch.pipeline_ns),
        K.F_EMODE: ECMP_MODES[fab.ecmp.mode], K.F_EHASH: ECMP_HASHES[fab.ecmp.hash],
        K.F_QLEN: int(fab.qlen_sample_ns), K.F_POINT: code, K.F_PPORT: pport, K.F_NSW: S,
    }
    pk = np.full((1 << 16, K.PK_COLS), -1, np.int64)
    pk[:, K.PK_NEXT] = np.arange(1, pk.shape[0] + 1)
    pk[-1, K.PK_NEXT] = -1
    fq = np.full((8 * P, 4), -1, np.int64)
    fq[:, [K.Q8_BYTES, K.Q8_PKTS]] = 0
    fi = np.zeros((8 * P, 6), np.int64)
    qsamp = np.zeros((8 * P, 2), np.int64)
    qsamp[:, 0] = -1
    arrays = dict(fp=fp, fq=fq, fi=fi, fpu=np.zeros(8 * P, np.int64),
                  fpv=np.full(8 * P, -1, np.int64), fsw=fsw, fn=fn, pk=pk,
                  rt_ptr=np.asarray(topo.route_ptr, np.int64),
                  rt_port=np.asarray(topo.route_port, np.int64),
                  q_sport=np.asarray(sport, np.int64).reshape(-1),
                  q_dqpn=np.asarray(dqpn, np.int64).reshape(-1),
                  sh_tb=np.ascontiguousarray(sh_tb), lgp=np.zeros((1 << 12, 6), np.int64),
                  lgq=np.zeros((1 << 14, 5), np.int64), qsamp=qsamp, fw=fw, q_plane=q_plane)
    return FabricArrays(arrays, settings, sh_d, ack_ns)


def _plane_ports(topo, N: int) -> np.ndarray:
    """``fw`` (:class:`~tokenpcap.schedule.engine.events.State`): the NICs' ports per plane;
    with one plane none (the NIC's own link, ``fn``)."""
    planes = topo.planes
    if planes == 1:
        return np.zeros((0, K.FW_COLS), np.int64)
    fw = np.zeros((planes * N, K.FW_COLS), np.int64)
    fw[:, [K.FW_WHEAD, K.FW_WTAIL]] = -1
    ports = np.asarray(topo.plane_nic_port, np.int64).reshape(-1)
    fw[:, K.FW_PORT] = ports
    fw[:, K.FW_PROP] = topo.port_prop_ns[ports]
    rates = np.array([_rate(g) for g in topo.port_gbps[ports].tolist()], np.int64).reshape(-1, 2)
    fw[:, K.FW_RNUM], fw[:, K.FW_RDEN] = rates[:, 0], rates[:, 1]
    return fw




def grow_pool(pk: np.ndarray, sc: np.ndarray, need: int) -> np.ndarray:
    """The descriptor pool ``pk`` doubled (or more, to ``need`` rows), the new rows put on the
    free list ``sc[PKFREE]``."""
    old = pk.shape[0]
    rows = 2 * old
    while rows < need:
        rows *= 2
    new = np.full((rows, K.PK_COLS), -1, np.int64)
    new[:old] = pk
    new[old:, K.PK_NEXT] = np.arange(old + 1, rows + 1)
    new[-1, K.PK_NEXT] = sc[K.PKFREE]
    sc[K.PKFREE] = old
    return new
