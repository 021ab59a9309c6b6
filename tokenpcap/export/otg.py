"""Our scheduled messages as an Open Traffic Generator configuration (``tokenpcap export --to
otg``), for hardware testers driven through the OTG API (``snappi``; the OTG model's RoCEv2
devices, QPs, stateful flows and DCQCN options, open-traffic-generator/models ``device/rocev2``,
``flow/rocev2``, ``options/rocev2``).

``-o PATH`` writes two files:

* ``PATH``: the configuration as OTG JSON (``snappi`` builds, validates and serializes it):
  a port per NIC that sends or receives (``location`` ``nic<g>``: the lab maps locations to its
  tester ports); a device per NIC with an Ethernet of our MAC (MTU 9000) and an IPv4 address of
  ours (prefix 15, the RFC 2544 block the addresses are taken from; gateway the block's last
  host, for the lab to replace with the device under test's address); its RoCEv2 interface
  (``ib_mtu`` our path MTU) with a peer per NIC it exchanges messages with and, per connection,
  a QP of our QPN (``source_qp_number``), initial PSN, UDP source port, R_Key and buffer address
  (:mod:`tokenpcap.wire.qpn`, as the frames carry them), our DSCP and ECN; both ends of a
  connection, the sender's and the receiver's (which carries the clear-to-send writes);
  stateful RoCEv2 flows per sending port, one per (QP, verb, message size) with the verb
  (WRITE, WRITE with immediate, SEND) and size, at a target line rate that is the port's mean
  offered load over the iteration (%, at least 1); and per port the RoCEv2 options: CNPs with
  our CNP DSCP and ECN and ``min_time_between_cnps`` as the delay timer, and DCQCN with the
  fabric profile's NVIDIA parameters converted to OTG's units (rates in % of the link rate;
  ``enable_dcqcn`` only with ``fabric.cc: dcqcn``; values past OTG's ranges clamped to them:
  ns-3's alpha of 1024 to 1023, no byte counter (0) to the largest, 32,767).
* ``PATH.expected.csv``: per QP end that sends, the schedule's expectation: ``qp_name``,
  ``src_nic``, ``dst_nic``, ``connection``, ``source_qp_number``, ``dest_qp_number``, ``kind``
  (``data`` or ``cts``), ``messages``, ``bytes``, ``first_start_ns``, ``last_complete_ns`` (our
  schedule's start of its first message and arrival of its last, ns from the iteration's
  start), and the OTG flows it was written as.

What OTG cannot say, and a lab must know: a flow has one message size and no count or order, so
the messages' order, their times (the 8-slot window, compute between phases) and counts live in
the CSV, not in the configuration; a message size is written in the largest of OTG's units
(bytes, KB, MB, GB) that holds it exactly and in 16 bits, else rounded up in the smallest unit
that fits 16 bits (the CSV keeps the exact bytes and ``otg_size_error_bytes``); a WRITE with
immediate carries the immediate of the flow's first message.

Only RoCEv2 over IPv4: an IPv6 or InfiniBand cluster is refused with one line.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tokenpcap.config.addresses import nic_addresses
from tokenpcap.errors import InputError
from tokenpcap.export.registry import atomic_text, register_export
from tokenpcap.pipeline import Prepared
from tokenpcap.records import KIND_CTS, VERB_SEND, VERB_WRITE, VERB_WRITE_IMM
from tokenpcap.wire.qpn import _rkey_va, initial_psn, qpn
from tokenpcap.wire.rdma import rocev2_udp_sport

__all__ = ["otg_config", "write_otg", "otg_size", "MTU_BYTES"]

#: Ethernet MTU of every device: the jumbo MTU a RoCE lab port takes (at least a 4 KiB-PMTU
#: frame's 4,160 bytes after its Ethernet header).
MTU_BYTES = 9000
_ECN = {0: "non_ect", 1: "ect_1", 2: "ect_0", 3: "ce"}
_VERB = {VERB_WRITE: "write", VERB_WRITE_IMM: "write_with_immediate", VERB_SEND: "send"}
#: OTG's message-size units (``flow/rocev2`` ``message_size_unit``) and their bytes
_UNITS = (("gb", 1 << 30), ("mb", 1 << 20), ("kb", 1 << 10), ("bytes", 1))
_SIZE_MAX = 0xFFFF                      # ``message_size`` is 16 bits wide in OTG


def otg_size(size_bytes: int) -> tuple[int, str, int]:
    """``(message_size, unit, error_bytes)``: ``size_bytes`` in the largest unit that holds it
    exactly within 16 bits; else rounded up in the smallest unit that fits (error > 0).

    Raises:
        InputError: larger than 65,535 GB.
    """
    for unit, b in _UNITS:
        if size_bytes % b == 0 and size_bytes // b <= _SIZE_MAX:
            return size_bytes // b, unit, 0
    for unit, b in reversed(_UNITS):
        n = -(-size_bytes // b)
        if n <= _SIZE_MAX:
            return n, unit, n * b - size_bytes
    raise InputError(f"export --to otg: a message of {size_bytes} bytes, expected at most "
                     f"{_SIZE_MAX} GB")


def _ip(a: np.ndarray) -> str:
    return ".".join(str(int(x)) for x in a)


def _mac(a: np.ndarray) -> str:
    return ":".join(f"{int(x):02x}" for x in a)


def _gateway(ipv4: np.ndarray) -> str:
    """The last host of the /15 that holds the NICs' addresses."""
    v = (int(ipv4[0, 0]) << 24 | int(ipv4[0, 1]) << 16) & ~0x1FFFF
    v |= 0x1FFFE
    return ".".join(str((v >> s) & 0xFF) for s in (24, 16, 8, 0))


def _dcqcn(opt, fabric, link_mbps: float) -> None:  # type: ignore[no-untyped-def]
    """OTG ``options/rocev2`` of the fabric profile (module docstring): NVIDIA's names to
    OTG's (both in µs, 64-byte units and 1/1024 fractions; OTG's rates are % of the line)."""
    d, np_ = fabric.dcqcn, fabric.np
    opt.cnp.choice = "ip_dscp"
    opt.cnp.ip_dscp.value = int(np_.cnp_dscp)
    opt.cnp.cnp_delay_timer = min(int(np_.min_time_between_cnps), 255)
    q = opt.dcqcn_settings
    q.enable_dcqcn = fabric.cc == "dcqcn"
    pct = lambda mbps: min(100.0, 100.0 * float(mbps) / link_mbps)  # noqa: E731
    q.alpha_g = min(max(int(d.dce_tcp_g), 1), 1023)
    q.initial_alpha = min(max(int(d.initial_alpha_value), 1), 1023)
    q.alpha_update_period = int(d.dce_tcp_rtt)
    q.rate_reduction_time_period = int(d.rate_reduce_monitor_period)
    q.initial_rate_after_first_cnp = 100.0 if d.rate_to_set_on_first_cnp == 0 else \
        pct(d.rate_to_set_on_first_cnp)
    q.minimum_rate_limmit = pct(d.rpg_min_rate)
    q.maximum_rate_decrement_at_time = int(d.rpg_min_dec_fac)
    q.clamp_target_rate = bool(d.clamp_tgt_rate)
    q.rate_increment_time = int(d.rpg_time_reset)
    # 0 (no byte counter, as HPCC ns-3) has no OTG value: the largest counter comes closest
    q.rate_increment_byte_counter = 32767 if d.rpg_byte_reset == 0 else \
        min(int(d.rpg_byte_reset), 32767)
    q.rate_increment_threshold = min(max(int(d.rpg_threshold), 1), 31)
    q.additive_increment_rate = pct(d.rpg_ai_rate)
    q.hyper_increment_rate = pct(d.rpg_hai_rate)


def otg_config(done: Prepared):  # type: ignore[no-untyped-def]
    """``(snappi Config, expected CSV lines)`` of a scheduled scenario (module docstring).

    Raises:
        InputError: the cluster is not RoCEv2 over IPv4, or a message is too large for OTG.
    """
    import logging

    try:
        import snappi
    except ImportError:
        raise InputError("export --to otg: got no snappi package, expected it installed "
                         "(pip install 'tokenpcap[otg]')") from None

    s = done.scenario
    cluster, net = s.cluster, s.cluster.network
    if cluster.transport != "rocev2" or net.ip_version != 4:
        raise InputError(f"export --to otg: got a {cluster.transport} "
                         f"cluster with IPv{net.ip_version}, expected RoCEv2 over IPv4 (the "
                         "OTG RoCEv2 model this export writes)")
    m = done.schedule.messages
    seed = int(s.generation.seed)
    addr = nic_addresses(cluster)
    link_mbps = float(cluster.link_gbps) * 1000.0
    role = (m["kind"] == KIND_CTS).astype(np.int64)
    src, dst, c = (m["src_nic"].astype(np.int64), m["dst_nic"].astype(np.int64),
                   m["qp"].astype(np.int64))
    # the QP end that sends each message, as lowering names it (tokenpcap.lower._pairs)
    ends, end_of = np.unique(np.stack([src, dst, c, role], axis=1), axis=0, return_inverse=True)
    end_of = end_of.reshape(-1)
    by_end = np.split(np.argsort(end_of, kind="stable"),
                      np.cumsum(np.bincount(end_of, minlength=len(ends)))[:-1])
    nics = sorted(set(src.tolist()) | set(dst.tolist()))
    cfg = snappi.api(loglevel=logging.ERROR).config()   # without its "version check" notice
    devices, ifaces, peers = {}, {}, {}
    for g in nics:
        cfg.ports.add(name=f"p{g}", location=f"nic{g}")
        d = cfg.devices.add(name=f"nic{g}")
        e = d.ethernets.add(name=f"nic{g}.eth", mac=_mac(addr.mac[g]), mtu=MTU_BYTES)
        e.connection.port_name = f"p{g}"
        e.ipv4_addresses.add(name=f"nic{g}.ipv4", address=_ip(addr.ipv4[g]), prefix=15,
                             gateway=_gateway(addr.ipv4))
        devices[g] = d
        ifaces[g] = d.rocev2.ipv4_interfaces.add(ipv4_name=f"nic{g}.ipv4",
                                                 ib_mtu=int(cluster.pmtu_bytes))
    pairs = {(int(a), int(b), int(k)) for a, b, k, r in ends.tolist() if r == 0} | \
            {(int(b), int(a), int(k)) for a, b, k, r in ends.tolist() if r == 1}
    for a, b, k in sorted(pairs):                   # both ends of every connection a -> b, k
        for nic, peer, rl in ((a, b, 0), (b, a, 1)):
            key = (nic, peer)
            if key not in peers:
                peers[key] = ifaces[nic].peers.add(name=f"nic{nic}-to-nic{peer}",
                                                   destination_ip_address=_ip(addr.ipv4[peer]))
            qp = peers[key].qps.add(qp_name=_qp_name(nic, peer, k, rl))
            rc = qp.connection_type.reliable_connection
            rkey, va = _rkey_va(seed, nic, peer, k, rl)     # the buffer this end writes to
            rc.source_qp_number = int(qpn(seed, nic, peer, k, rl))
            rc.initial_psn = int(initial_psn(seed, nic, peer, k, rl))
            rc.udp_source_port = int(rocev2_udp_sport(qpn(seed, nic, peer, k, rl),
                                                      qpn(seed, peer, nic, k, 1 - rl)))
            rc.dscp, rc.ecn = int(net.dscp), _ECN[int(net.ecn)]
            rc.remote_key = f"{int(rkey) & 0xFFFFFFFF:08x}"
            rc.virtual_address = f"{int(va):016x}"
    span = int(max(m["arrival_ns"].max(), 1)) if m.size else 1
    flows = cfg.stateful_flows.rocev2.add()
    lines = ["qp_name,src_nic,dst_nic,connection,source_qp_number,dest_qp_number,kind,"
             "messages,bytes,first_start_ns,last_complete_ns,otg_flows,otg_size_error_bytes\n"]
    for g in nics:
        mine = src == g
        if not mine.any():
            continue
        load = 100.0 * float(m["size_bytes"][mine].sum()) * 8 / (link_mbps / 1000.0) / span
        tx = flows.tx_ports.add(port_name=f"p{g}")
        tl = tx.transmit_type.target_line_rate
        tl.value = int(min(100, max(1, round(load))))
        for e_i in np.flatnonzero(ends[:, 0] == g).tolist():
            a, b, k, rl = ends[e_i].tolist()
            sel = by_end[e_i]                               # this end's messages, in order
            name = _qp_name(a, b, k, rl)
            peer_name = _qp_name(b, a, k, 1 - rl)
            written, err = [], 0
            for verb, size in sorted(set(zip(m["verb"][sel].tolist(),
                                             m["size_bytes"][sel].tolist()))):
                n, unit, e = otg_size(int(size))
                f = tl.flows.add(name=f"{name}/{_VERB[verb]}/{size}B", tx_endpoint=name,
                                 rx_endpoint=peer_name, message_size=n, message_size_unit=unit)
                f.rocev2_verb.choice = _VERB[verb]
                if verb == VERB_WRITE_IMM:
                    hit = (m["verb"][sel] == verb) & (m["size_bytes"][sel] == size)
                    f.rocev2_verb.write_with_immediate.immediate_data = \
                        f"{int(m['imm'][sel[np.argmax(hit)]]):08x}"
                written.append(f.name)
                err = max(err, e)
            lines.append(f"{name},{a},{b},{k},{int(qpn(seed, a, b, k, rl))},"
                         f"{int(qpn(seed, b, a, k, 1 - rl))},{'cts' if rl else 'data'},"
                         f"{sel.size},{int(m['size_bytes'][sel].sum())},"
                         f"{int(m['start_ns'][sel].min())},{int(m['arrival_ns'][sel].max())},"
                         f"{' '.join(written)},{err}\n")
    for g in nics:
        pp = cfg.options.per_port_options.add(port_name=f"p{g}")
        _dcqcn(pp.protocols.add().rocev2, cluster.fabric, link_mbps)
    return cfg, lines


def _qp_name(nic: int, peer: int, conn: int, role: int) -> str:
    return f"nic{nic}-nic{peer}-c{conn}-{'rx' if role else 'tx'}"


def write_otg(done: Prepared, out: str | Path) -> list[Path]:
    """Write ``out`` and ``out.expected.csv`` (module docstring); returns both paths.

    Raises:
        InputError: as :func:`otg_config`. OutputError: a file cannot be written.
    """
    out = Path(out)
    cfg, lines = otg_config(done)
    text = cfg.serialize(encoding=cfg.JSON)       # snappi validates while it serializes
    manifest = out.with_name(f"{out.name}.expected.csv")
    atomic_text(out, [text + "\n"])
    atomic_text(manifest, lines)
    return [out, manifest]


@register_export("otg", "Open Traffic Generator (snappi) configuration: devices, RoCEv2 QPs, "
                        "flows, CNP/DCQCN options; expected per-QP times beside it")
def _export(done: Prepared, out: Path) -> list[Path]:
    return write_otg(done, out)
