"""``--to hpcc``: the input files of the HPCC ns-3 simulator, ready to run.

The simulator is ``scratch/third.cc`` of alibaba-edu/High-Precision-Congestion-Control
(``simulation/``, ns-3.17 based; Li et al., SIGCOMM 2019). One export writes four files beside
each other, named after the flow file ``OUT`` (stem ``S``):

* ``OUT``, the flow file (``FLOW_FILE``): first line the number of flows, then one ``src dst pg
  dport size_bytes start_seconds`` per data message, sorted by start time; ``src``/``dst`` are
  host node ids (the global NIC index), ``pg`` 3 (the lossless class of HPCC's examples),
  ``dport`` 100 + the message's QP index (its ``qp``; a microbenchmark workload's QPs counted
  from its first, so a one-channel incast is ``dport`` 100 as in tests/cases/hpcc/). ``start_seconds`` is the time the message may leave our
  NIC (its ``ready_ns``: ``start_ns``, or with clear-to-send the arrival of its CTS, a 64-byte
  handshake HPCC's transport does not have) plus ``start_offset_ns`` (HPCC's examples start flows
  at 2 s). The simulator reads it with ``istream >> double`` and ns-3.17's ``Seconds(double)``
  truncates to integer ns (:func:`ns3_seconds_to_ns`), so ``2.000039136`` would land on
  2,000,039,135 ns; each start is written as its nanosecond plus half a nanosecond
  (``2.0000391365``), and the export checks that every start survives that parse.
* ``S-topology.txt`` (``TOPOLOGY_FILE``): ``node_num switch_num link_num``, the switch ids, then
  ``a b rate delay error_rate`` per link (:data:`TOPOLOGIES`). ``rail-leaf-spine`` (the
  default): one leaf per rail (NIC index within a node, the
  rail-optimised cabling of the cluster profiles) and ``nics_per_node`` spines, every leaf to
  every spine at ``ceil(nodes / nics_per_node)`` times the NIC rate (non-blocking). Every link's
  delay is half the profile's one-way ``network.latency_ns`` (:func:`link_delay_ns`), so the
  rail-aligned path host-leaf-host, which carries all of NCCL's rail-optimised traffic, has
  exactly our one-way latency; a cross-rail path (host-leaf-spine-leaf-host) has twice it.
  ``single-switch``: every host on one switch, node ``H`` (H = the number of hosts), at the NIC
  rate and the same delay: the microbenchmarks' fabric (incasts in tests/cases/hpcc/).
  A cluster with a queued fabric (``fabric.model: queued``) writes the fabric's own topology
  (every kind, each link at its rate and propagation) and ``BUFFER_SIZE`` from
  ``fabric.switch.buffer_bytes`` (:mod:`tokenpcap.export.hpcc_fabric`, which also lists what of
  the profile ns-3 cannot model: per-port reserve, headroom and resume offset other than its
  own rules, cut-through and pipeline delay, pause quanta and expiring pauses, other lossless
  or control priorities, other ECMP hashes; :func:`~tokenpcap.export.hpcc_fabric.ns3_gaps`).
* ``S-config.txt``: every key ``third.cc`` reads, paths relative to the directory of the files
  (the simulator opens them relative to its working directory: run it there). The congestion
  control (``CC_MODE``) is chosen by ``cc`` (:data:`CC_MODES`); its parameters are those the
  simulator's own ``run.py`` writes for that mode at the NIC rate ``bw`` in Gb/s (e.g. HPCC:
  ``RATE_AI`` 10·bw/25 Mb/s, ``INT_MULTI`` bw/25, ``U_TARGET`` 0.95), ``PACKET_PAYLOAD_SIZE`` is
  the profile's PMTU, and ``KMAX_MAP``/``KMIN_MAP``/``PMAX_MAP`` have one entry per link speed in
  the topology (run.py's rule per speed r in Gb/s: KMIN 4·r KB, KMAX 16·r KB, PMAX 0.2; DCTCP
  KMIN = KMAX 3·r KB, PMAX 1.0; a debug build of the simulator stops on a speed without one).
  ``SIMULATOR_STOP_TIME`` leaves ten times our iteration's span after the first start, plus 1 s.
  ``BUFFER_SIZE`` (MB per switch) is run.py's 16·bw/50 unless given; ``USE_DYNAMIC_PFC_THRESHOLD``
  1 unless turned off; ``PAUSE_TIME`` (third.cc's default 5, the ``PauseHeader`` time of an
  XOFF; the receiving QbbNetDevice stays paused until the XON whatever it says) only when given.
  ``--hpcc-cc none`` (``CC_MODE`` 0, which rdma-hw.cc acts on nowhere): no congestion control,
  PFC only, with DCQCN's other settings (no window, ACKs high priority).
* ``S-trace.txt`` (``TRACE_FILE``): the traced node ids (``0``, none, by default: ``ENABLE_TRACE
  0``; with ``trace_nodes``, their count then one id a line, and ``ENABLE_TRACE 1``); the simulator's
  outputs are ``S-fct.txt`` (read back by :mod:`tokenpcap.export.hpcc_fct`), ``S-pfc.txt``,
  ``S-mix.tr`` and ``S-qlen.txt``.

Clear-to-send control messages (``kind`` 1) are left out of the flows.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from tokenpcap.errors import InputError, OutputError
from tokenpcap.export.hpcc_fabric import buffer_mib, fabric_topology
from tokenpcap.export.registry import register_export
from tokenpcap.pcap.filekind import refuse_special_output
from tokenpcap.pipeline import Prepared
from tokenpcap.records import DIMS, KIND_DATA

__all__ = ["HPCC_PG", "HPCC_DPORT_BASE", "START_OFFSET_NS", "CC_MODES", "TOPOLOGIES",
           "FLOW_DTYPE", "hpcc_flows",
           "ns3_seconds_to_ns", "start_seconds_text", "link_delay_ns", "path_links",
           "write_hpcc", "sibling", "SIBLINGS"]

HPCC_PG = 3
HPCC_DPORT_BASE = 100
#: HPCC's examples start their flows at 2 s, after the simulator's set-up.
START_OFFSET_NS = 2_000_000_000
#: ``--hpcc-cc`` names and third.cc's ``CC_MODE`` values (rdma-hw.cc: 1 DCQCN (Mellanox's),
#: 3 HPCC, 7 TIMELY, 8 DCTCP, 10 HPCC-PINT; any other value, here 0, no congestion control).
CC_MODES = {"hpcc": 3, "dcqcn": 1, "timely": 7, "dctcp": 8, "hpcc-pint": 10, "none": 0}
#: One row per exported flow; ``msg`` is the row of the message table it came from.
FLOW_DTYPE = np.dtype([("src", "<i8"), ("dst", "<i8"), ("dport", "<i8"), ("size_bytes", "<i8"),
                       ("start_ns", "<i8"), ("msg", "<i8")])
#: Files named in the config, beside the flow file ``<stem>.txt``: inputs then outputs.
SIBLINGS = {"TOPOLOGY_FILE": "-topology.txt", "TRACE_FILE": "-trace.txt",
            "FCT_OUTPUT_FILE": "-fct.txt", "PFC_OUTPUT_FILE": "-pfc.txt",
            "TRACE_OUTPUT_FILE": "-mix.tr", "QLEN_MON_FILE": "-qlen.txt"}
_NS_PER_S = 1_000_000_000


def hpcc_flows(messages: np.ndarray, start_offset_ns: int = START_OFFSET_NS) -> np.ndarray:
    """The flows of the flow file, in its order: ``FLOW_DTYPE (f,)``, ``start_ns`` absolute
    simulator time (the message's ``ready_ns``, or ``start_ns`` for a message table that has
    no engine times, plus ``start_offset_ns``), sorted by it (stable: ties in table order).

    Raises:
        InputError: a data message that was never ready (``ready_ns`` -1: not scheduled).
    """
    idx = np.flatnonzero(messages["kind"] == KIND_DATA)
    m = messages[idx]
    t = m["ready_ns"] if "ready_ns" in (m.dtype.names or ()) else m["start_ns"]
    if t.size and int(t.min()) < 0:
        i = int(np.argmin(t))
        raise InputError(f"export --to hpcc: message {int(m['msg_id'][i])}: ready_ns: got "
                         f"{int(t[i])}, expected a scheduled message (run the schedule first)")
    order = np.argsort(t, kind="stable")
    f = np.empty(idx.size, FLOW_DTYPE)
    f["src"], f["dst"] = m["src_nic"][order], m["dst_nic"][order]
    f["dport"] = HPCC_DPORT_BASE + _qp_index(m)[order]
    f["size_bytes"] = m["size_bytes"][order]
    f["start_ns"] = t[order].astype(np.int64) + int(start_offset_ns)
    f["msg"] = idx[order]
    return f


def _qp_index(m: np.ndarray) -> np.ndarray:
    """The QP index of each message (int64): its ``qp``, the connection index ``dim·channels +
    channel``; a microbenchmark workload's messages (dim ``wl``, the last of ``DIMS``) are
    numbered from their smallest ``qp``, so that a one-channel workload's flows are QP 0, as
    the simulator's own examples (tests/cases/hpcc/) write them."""
    qp = m["qp"].astype(np.int64)
    if "dim" not in (m.dtype.names or ()):
        return qp
    wl = m["dim"] == DIMS.index("wl")
    if wl.any():
        qp = qp.copy()
        qp[wl] -= int(qp[wl].min())
    return qp


def ns3_seconds_to_ns(seconds: np.ndarray) -> np.ndarray:
    """Integer ns that ns-3.17's ``Seconds(double)`` makes of ``seconds`` (float64 ``(n,)`` >= 0,
    as ``istream >> double`` parsed them; Python's ``float`` rounds decimal text the same way).

    ``Time::FromDouble`` (src/core/model/nstime.h) builds an ``int64x64_t`` from the double
    (int64x64-128.h: ``hi = floor(v)``, ``lo = (int128)((v - hi) * 2^64)``, truncated), multiplies
    by the 64.64 value 10^9 (``Umul``: exact here, the factor has no fraction) and keeps the
    integer part (``Time(int64x64_t)``: ``GetHigh``). So ns = hi·10^9 + floor(lo·10^9 / 2^64),
    computed here exactly in uint64 halves. Returns int64 ``(n,)``.
    """
    v = np.asarray(seconds, np.float64)
    hi = np.floor(v)
    lo = ((v - hi) * 2.0 ** 64).astype(np.uint64)        # exact: v - hi and the power of two
    a, b = lo >> np.uint64(32), lo & np.uint64(0xFFFFFFFF)
    g = np.uint64(_NS_PER_S)
    # floor(lo * 1e9 / 2^64) = floor((a*1e9 + floor(b*1e9 / 2^32)) / 2^32), each product < 2^62
    frac = (a * g + ((b * g) >> np.uint64(32))) >> np.uint64(32)
    return hi.astype(np.int64) * _NS_PER_S + frac.astype(np.int64)


def start_seconds_text(t_ns: np.ndarray) -> list[str]:
    """``S.FFFFFFFFF5``: integer ns ``t_ns`` (int64 ``(n,)`` >= 0) plus half a nanosecond, in
    seconds. The nearest double is within half a unit in the last place of the exact value, far
    below 0.5 ns for any start under 2^22 s (48 days), so the simulator's truncation lands on
    ``t_ns`` (checked by :func:`write_hpcc`)."""
    sec, frac = np.divmod(np.asarray(t_ns, np.int64), _NS_PER_S)
    return [f"{s}.{f:09d}5" for s, f in zip(sec.tolist(), frac.tolist())]


def link_delay_ns(cluster) -> int:
    """Propagation delay of every topology link (ns): half of ``network.latency_ns`` (>= 1)."""
    return max(1, int(cluster.network.latency_ns) // 2)


def path_links(cluster, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
    """Links on the simulator's shortest path between host ``src`` and ``dst`` (int ``(n,)``):
    2 on one rail (host-leaf-host), 4 across rails (host-leaf-spine-leaf-host)."""
    rails = int(cluster.nics_per_node)
    same = np.asarray(src) % rails == np.asarray(dst) % rails
    return np.where(same, 2, 4)


def sibling(out: str | os.PathLike, suffix: str) -> Path:
    """``<stem><suffix>`` beside the flow file ``out`` (``suffix`` e.g. ``-topology.txt``)."""
    out = Path(out)
    return out.with_name(f"{out.stem}{suffix}")


def _rate_text(gbps: float) -> str:
    return f"{int(gbps)}Gbps" if float(gbps).is_integer() else f"{int(round(gbps * 1000))}Mbps"


def _rate_bps(gbps: float) -> int:
    """Bit rate ns-3 parses from :func:`_rate_text` (``DataRate``: Gbps 10^9, Mbps 10^6)."""
    return int(gbps) * 10**9 if float(gbps).is_integer() else int(round(gbps * 1000)) * 10**6


def _rail_leaf_spine(cluster) -> tuple[list[str], list[float]]:
    hosts = cluster.nodes * cluster.nics_per_node
    rails = spines = cluster.nics_per_node
    leaf0, spine0 = hosts, hosts + rails
    up_gbps = cluster.link_gbps * max(1, -(-cluster.nodes // spines))
    rate, up = _rate_text(cluster.link_gbps), _rate_text(up_gbps)
    delay = f"{link_delay_ns(cluster)}ns"
    links = [f"{g} {leaf0 + g % rails} {rate} {delay} 0\n" for g in range(hosts)]
    links += [f"{leaf0 + a} {spine0 + b} {up} {delay} 0\n" for a in range(rails)
              for b in range(spines)]
    switches = " ".join(str(i) for i in range(leaf0, spine0 + spines))
    return ([f"{hosts + rails + spines} {rails + spines} {len(links)}\n", f"{switches}\n", *links],
            sorted({float(cluster.link_gbps), float(up_gbps)}))


def _single_switch(cluster) -> tuple[list[str], list[float]]:
    hosts = cluster.nodes * cluster.nics_per_node
    rate, delay = _rate_text(cluster.link_gbps), f"{link_delay_ns(cluster)}ns"
    links = [f"{h} {hosts} {rate} {delay} 0\n" for h in range(hosts)]
    return [f"{hosts + 1} 1 {hosts}\n", f"{hosts}\n", *links], [float(cluster.link_gbps)]


#: ``topology`` of :func:`write_hpcc`: cluster -> (topology file lines, link speeds in Gb/s).
TOPOLOGIES = {"rail-leaf-spine": _rail_leaf_spine, "single-switch": _single_switch}


def _ecn_maps(cc: str, speeds_gbps: list[float]) -> list[str]:
    """KMAX/KMIN/PMAX_MAP lines, one entry per link speed (run.py's rules; thresholds in KB)."""
    bps = [_rate_bps(g) for g in speeds_gbps]
    if cc == "dctcp":
        kmax = kmin = [30 * b // 10**10 for b in bps]
        pmax = "1.00"
    else:
        kmax = [400 * b // (25 * 10**9) for b in bps]
        kmin = [100 * b // (25 * 10**9) for b in bps]
        pmax = "0.20"
    n = len(bps)
    return [f"KMAX_MAP {n} " + " ".join(f"{b} {k}" for b, k in zip(bps, kmax)) + "\n",
            f"KMIN_MAP {n} " + " ".join(f"{b} {k}" for b, k in zip(bps, kmin)) + "\n",
            f"PMAX_MAP {n} " + " ".join(f"{b} {pmax}" for b in bps) + "\n"]


def _cc_settings(cc: str, bw: float) -> dict[str, str]:
    """run.py's per-mode settings at NIC rate ``bw`` Gb/s (its integer arithmetic, floored)."""
    b = int(bw)
    common = {"ALPHA_RESUME_INTERVAL": "1", "RATE_DECREASE_INTERVAL": "4", "RP_TIMER": "300",
              "EWMA_GAIN": "0.00390625", "DCTCP_RATE_AI": "1000Mb/s", "U_TARGET": "0.95",
              "MI_THRESH": "0", "INT_MULTI": "1", "PINT_LOG_BASE": "1.01", "PINT_PROB": "1.0"}
    if cc in ("hpcc", "hpcc-pint"):
        ai = f"{10 * b // 25}Mb/s"
        mode = {"RATE_AI": ai, "RATE_HAI": ai, "HAS_WIN": "1", "VAR_WIN": "1", "FAST_REACT": "1",
                "INT_MULTI": str(max(1, b // 25)), "ACK_HIGH_PRIO": "0"}
    elif cc in ("dcqcn", "none"):
        mode = {"RATE_AI": f"{5 * b // 25}Mb/s", "RATE_HAI": f"{50 * b // 25}Mb/s", "HAS_WIN": "0",
                "VAR_WIN": "0", "FAST_REACT": "0", "ACK_HIGH_PRIO": "1"}
    elif cc == "timely":
        mode = {"RATE_AI": f"{10 * b // 10}Mb/s", "RATE_HAI": f"{50 * b // 10}Mb/s",
                "HAS_WIN": "0", "VAR_WIN": "0", "FAST_REACT": "0", "ACK_HIGH_PRIO": "1"}
    else:                                                       # dctcp
        mode = {"RATE_AI": "10Mb/s", "RATE_HAI": "10Mb/s", "DCTCP_RATE_AI": "615Mb/s",
                "EWMA_GAIN": "0.0625", "HAS_WIN": "1", "VAR_WIN": "1", "FAST_REACT": "0",
                "ACK_HIGH_PRIO": "0"}
    return {**common, **mode}


def _config(out: Path, cluster, cc: str, speeds: list[float], stop_s: int, qlen_ns: int,
            pfc: dict[str, str], trace: bool) -> list[str]:
    names = {k: sibling(out, suffix).name for k, suffix in SIBLINGS.items()}
    cfg = {"ENABLE_QCN": "1", "USE_DYNAMIC_PFC_THRESHOLD": pfc["USE_DYNAMIC_PFC_THRESHOLD"],
           "PACKET_PAYLOAD_SIZE": str(int(cluster.pmtu_bytes)),
           "TOPOLOGY_FILE": names["TOPOLOGY_FILE"], "FLOW_FILE": out.name,
           "TRACE_FILE": names["TRACE_FILE"], "TRACE_OUTPUT_FILE": names["TRACE_OUTPUT_FILE"],
           "FCT_OUTPUT_FILE": names["FCT_OUTPUT_FILE"], "PFC_OUTPUT_FILE": names["PFC_OUTPUT_FILE"],
           "SIMULATOR_STOP_TIME": f"{stop_s}", "CC_MODE": str(CC_MODES[cc]),
           "CLAMP_TARGET_RATE": "0", "FAST_RECOVERY_TIMES": "1", "MIN_RATE": "1000Mb/s",
           "ERROR_RATE_PER_LINK": "0.0000", "L2_CHUNK_SIZE": "4000", "L2_ACK_INTERVAL": "1",
           "L2_BACK_TO_ZERO": "0", "GLOBAL_T": "1", "MULTI_RATE": "0", "SAMPLE_FEEDBACK": "0",
           "RATE_BOUND": "1", "LINK_DOWN": "0 0 0", "ENABLE_TRACE": str(int(trace)),
           "BUFFER_SIZE": pfc["BUFFER_SIZE"],
           "QLEN_MON_FILE": names["QLEN_MON_FILE"], "QLEN_MON_START": str(qlen_ns),
           "QLEN_MON_END": str(qlen_ns), **_cc_settings(cc, cluster.link_gbps)}
    if "PAUSE_TIME" in pfc:
        cfg["PAUSE_TIME"] = pfc["PAUSE_TIME"]
    return [f"{k} {v}\n" for k, v in cfg.items()] + _ecn_maps(cc, speeds)


def write_hpcc(messages: np.ndarray, cluster, out: str | os.PathLike, *, cc: str = "hpcc",
               start_offset_ns: int = START_OFFSET_NS, topology: str | None = None,
               buffer_mb: int | None = None, dynamic_pfc_threshold: bool = True,
               pause_time: int | None = None, trace_nodes: tuple[int, ...] = ()) -> list[Path]:
    """Write the flow file ``out`` and its topology, config and trace files (module docstring).

    Args:
        messages: ``MSG_STATE_DTYPE`` rows of a run schedule (``MESSAGE_DTYPE`` rows: their
            ``start_ns``).
        cluster: the scenario's ``ClusterProfile`` (nodes, NICs, link rate, PMTU, latency).
        cc: a key of :data:`CC_MODES`.
        topology: a key of :data:`TOPOLOGIES`; None: the cluster's queued fabric
            (:func:`tokenpcap.export.hpcc_fabric.fabric_topology`), ``rail-leaf-spine`` for an
            ideal one.
        buffer_mb: ``BUFFER_SIZE``, each switch's shared buffer in MiB (third.cc multiplies by
            1024 · 1024); None: the queued fabric's ``switch.buffer_bytes`` in whole MiB
            (:func:`tokenpcap.export.hpcc_fabric.buffer_mib`), for an ideal one run.py's
            16·bw/50 at the NIC rate bw in Gb/s.
        dynamic_pfc_threshold: ``USE_DYNAMIC_PFC_THRESHOLD`` (switch-mmu.cc's ``CheckShouldPause``:
            the free buffer shifted by ``pfc_a_shift`` instead of a static threshold).
        pause_time: ``PAUSE_TIME`` (QbbNetDevice's ``PauseTime``, the XOFF's time field), written
            only when given.
        trace_nodes: node ids the simulator traces into ``TRACE_OUTPUT_FILE`` (``ENABLE_TRACE``
            1 when any).

    Returns:
        [flow file, topology, config, trace]: all four written, or none (temporary files
        renamed once every one is complete).

    Raises:
        InputError: an unknown ``cc`` or ``topology``, a ``buffer_mb`` below 1; a start the
            simulator would not read back exactly.
        ProfileError: the queued fabric's topology cannot hold the cluster.
        OutputError: a file cannot be written.
    """
    if cc not in CC_MODES:
        raise InputError(f"export --hpcc-cc: got {cc!r}, expected one of {', '.join(CC_MODES)}")
    queued = cluster.fabric.queued
    if topology is None and not queued:
        topology = "rail-leaf-spine"
    if topology is not None and topology not in TOPOLOGIES:
        raise InputError(f"export --to hpcc: topology: got {topology!r}, expected one of "
                         f"{', '.join(TOPOLOGIES)}")
    if buffer_mb is not None and int(buffer_mb) < 1:
        raise InputError(f"export --to hpcc: buffer_mb: got {buffer_mb}, expected >= 1")
    if buffer_mb is None:
        buffer_mb = (buffer_mib(cluster.fabric) if queued else
                     max(1, 16 * int(cluster.link_gbps) // 50))
    pfc = {"BUFFER_SIZE": str(int(buffer_mb)),
           "USE_DYNAMIC_PFC_THRESHOLD": str(int(bool(dynamic_pfc_threshold)))}
    if pause_time is not None:
        pfc["PAUSE_TIME"] = str(int(pause_time))
    out = Path(out)
    f = hpcc_flows(messages, start_offset_ns)
    text = start_seconds_text(f["start_ns"])
    back = ns3_seconds_to_ns(np.array([float(t) for t in text], np.float64))
    bad = np.flatnonzero(back != f["start_ns"])
    if bad.size:
        i = int(bad[0])
        raise InputError(f"{out}: line {i + 2}: start_seconds: got {text[i]}, which the "
                         f"simulator reads as {int(back[i])} ns, expected {int(f['start_ns'][i])}")
    rows = [f"{a} {b} {HPCC_PG} {p} {n} {t}\n" for a, b, p, n, t in zip(
        f["src"].tolist(), f["dst"].tolist(), f["dport"].tolist(), f["size_bytes"].tolist(), text)]
    topo_lines, speeds = (fabric_topology(cluster) if topology is None
                          else TOPOLOGIES[topology](cluster))
    end = messages["arrival_ns"] if "arrival_ns" in (messages.dtype.names or ()) else f["start_ns"]
    span = int(end.max()) if end.size else 0
    stop_s = math.ceil((start_offset_ns + 10 * max(span, 0)) / _NS_PER_S) + 1
    files = {out: [f"{len(rows)}\n", *rows], sibling(out, "-topology.txt"): topo_lines,
             sibling(out, "-config.txt"): _config(out, cluster, cc, speeds, stop_s,
                                                  start_offset_ns, pfc, bool(trace_nodes)),
             sibling(out, "-trace.txt"): [f"{len(trace_nodes)}\n",
                                          *(f"{int(n)}\n" for n in trace_nodes)]}
    _write_all(files)
    return list(files)


def _write_all(files: dict[Path, list[str]]) -> None:
    """Write every file to a temporary name first and rename them only when all are written, so
    that a failure leaves none of them (nor an earlier run's set half replaced)."""
    for path in files:          # the renames below must not fail half-way: all in one folder
        if path.is_dir():
            raise OutputError(f"{path}: cannot write: got a directory, expected a file")
        refuse_special_output(path)
    parts = {path: path.with_name(f".{path.name}.part") for path in files}
    current = next(iter(files))
    try:
        for current, lines in files.items():
            # a name that is not UTF-8 (a FLOW_FILE line) is written as its own bytes
            with open(parts[current], "w", encoding="utf-8", errors="surrogateescape",
                      newline="") as f:
                f.writelines(lines)
        for current, tmp in parts.items():
            os.replace(tmp, current)
    except OSError as err:
        for tmp in parts.values():
            try:
                tmp.unlink(missing_ok=True)
            except OSError:
                pass
        raise OutputError(f"{current}: cannot write: {err.strerror}") from err


@register_export("hpcc", "HPCC ns-3 flow, topology, config and trace files, ready to run")
def _hpcc(done: Prepared, out: Path, cc: str | None = None) -> list[Path]:
    """``cc`` None: the cluster's own (:func:`tokenpcap.export.hpcc_cc.default_cc`)."""
    from tokenpcap.export.hpcc_cc import default_cc

    cluster = done.scenario.cluster
    return write_hpcc(done.schedule.messages, cluster, out,
                      cc=default_cc(cluster) if cc is None else cc)
