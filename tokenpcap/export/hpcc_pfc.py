"""The HPCC simulator's ``pfc.txt`` (``PFC_OUTPUT_FILE``) read back.

``third.cc`` connects every QbbNetDevice's ``QbbPfc`` trace source to ``get_pfc``, which writes
one line ``time_ns node node_type if_index type`` (``"%lu %u %u %u %u\\n"``) each time a device
*receives* a PFC frame, so the line names the device that is paused or resumed (the upstream
side of the congested port), not the one that sent the frame:

* ``time_ns``: ``Simulator::Now().GetTimeStep()``, integer ns.
* ``node``: the receiving device's node id (``GetNode()->GetId()``): hosts and switches as
  numbered in the topology file.
* ``node_type``: ``GetNodeType()``, 0 host (NIC), 1 switch.
* ``if_index``: the device's ``GetIfIndex()`` on its node: 1.. in the order of the topology
  file's links touching the node (0 is the loopback).
* ``type``: 1 pause (XOFF: a frame with ``PauseHeader`` time > 0), 0 resume (XON: time 0); from
  ``QbbNetDevice::Receive`` (src/point-to-point/model/qbb-net-device.cc), whose trace source says
  "0: resume, 1: pause". (``QbbNetDevice::SendPfc`` numbers the other way round: its ``type`` 0
  sends a pause, 1 a resume.) A pause only sets ``m_paused[qIndex]``; nothing ends it but a
  resume, so the device stays paused until the next type-0 line for it.

The priority (``qIndex``) is not written. The file is in time order (the simulator's events).
A file named ``*.gz`` is read through gzip (the fixtures in tests/cases/hpcc/ keep large ones so).

Beside a queued fabric (:func:`pfc_beside`): our fabric log's PFC table names the switch port
that *sends* each frame; the frame reaches the device at the other end of its cable, which is
the device a pfc.txt line names. With the export's node numbering (hosts 0..N-1 our NIC
indices, switch ``s`` node N + s, :func:`tokenpcap.schedule.engine.topology.hpcc_topology_lines`)
and ``third.cc`` installing one QbbNetDevice per topology line on each end in file order
(interface 0 the loopback), a host's only device is interface 1 (with planes, its port in plane
``k`` is interface ``k + 1``) and our port ``k`` of a switch
is its interface ``k + 1``: on the fixtures' single switch (node 64), interface ``i + 1`` faces
host ``i``. So the line ``(host h, 1)`` is the frames our switch port facing NIC ``h`` sent, and
``(N + s, k + 1)`` those of the port at the other end of our switch ``s`` port ``k``.
"""
from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

from tokenpcap.errors import InputError

__all__ = ["PFC_DTYPE", "PFC_RESUME", "PFC_PAUSE", "read_pfc", "pause_counts", "ns3_device",
           "pfc_beside", "pfc_lines", "PFC_KEYS"]

#: ``type`` of a resume (XON) line and of a pause (XOFF) line (qbb-net-device.cc, ``Receive``).
PFC_RESUME = 0
PFC_PAUSE = 1
#: One row per line of pfc.txt: ``line`` its 1-based line number, then the file's five columns
#: (module docstring); ``type`` is :data:`PFC_PAUSE` or :data:`PFC_RESUME`.
PFC_DTYPE = np.dtype([("line", "<i8"), ("time_ns", "<i8"), ("node", "<i8"), ("node_type", "<i8"),
                      ("if_index", "<i8"), ("type", "<i8")])
_FIELDS = ("time_ns", "node", "node_type", "if_index", "type")
_ALLOWED = {"node_type": (0, 1), "type": (PFC_RESUME, PFC_PAUSE)}


def _text(path: Path) -> str:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read().decode("ascii")
        return path.read_text(encoding="ascii")
    except FileNotFoundError:
        raise InputError(f"{path}: got no such file, expected the simulator's PFC_OUTPUT_FILE") \
            from None
    except (OSError, EOFError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None


def read_pfc(path: str | os.PathLike) -> np.ndarray:
    """Read ``pfc.txt`` (or ``pfc.txt.gz``): ``PFC_DTYPE (n,)`` in file order; blank lines are
    skipped (an empty file, a run without PFC, gives ``(0,)``).

    Raises:
        InputError: the file cannot be read, or a line has not 5 fields, a number that is not an
            integer from 0 to 10^18 - 1, a ``node_type`` other than 0/1 or a ``type`` other than
            0/1 (one line: file, line, column, value and what was expected).
    """
    path = Path(path)
    rows = []
    for n, line in enumerate(_text(path).splitlines(), 1):
        tok = line.split()
        if not tok:
            continue
        if len(tok) != len(_FIELDS):
            raise InputError(f"{path}: line {n}: got {len(tok)} fields, expected 5 ("
                             f"{' '.join(_FIELDS)})")
        vals = [n]
        for name, t in zip(_FIELDS, tok):
            if not (t.isascii() and t.isdigit()) or len(t) > 18:
                raise InputError(f"{path}: line {n}: {name}: got {t!r}, expected an integer "
                                 f"from 0 to 10^18 - 1")
            v = int(t)
            ok = _ALLOWED.get(name)
            if ok is not None and v not in ok:
                what = "0 (host) or 1 (switch)" if name == "node_type" else \
                    "0 (resume) or 1 (pause)"
                raise InputError(f"{path}: line {n}: {name}: got {v}, expected {what}")
            vals.append(v)
        rows.append(tuple(vals))
    return np.array(rows, PFC_DTYPE) if rows else np.empty(0, PFC_DTYPE)


def pause_counts(pfc: np.ndarray) -> dict[tuple[int, int], tuple[int, int, int]]:
    """Per paused device ``(node, if_index)``: ``(pauses, resumes, paused_ns)``.

    ``paused_ns`` adds up, for each pause, the time to the next resume of the same device (a
    pause lasts until its resume: module docstring); a pause that repeats while the device is
    already paused starts nothing new, and one never resumed counts up to the file's last line.

    Args:
        pfc: ``PFC_DTYPE (n,)`` in time order (:func:`read_pfc`).
    """
    out: dict[tuple[int, int], list[int]] = {}
    since: dict[tuple[int, int], int] = {}
    for t, node, dev, kind in zip(pfc["time_ns"].tolist(), pfc["node"].tolist(),
                                  pfc["if_index"].tolist(), pfc["type"].tolist()):
        key = (node, dev)
        c = out.setdefault(key, [0, 0, 0])
        if kind == PFC_PAUSE:
            c[0] += 1
            since.setdefault(key, t)
        else:
            c[1] += 1
            if key in since:
                c[2] += t - since.pop(key)
    end = int(pfc["time_ns"][-1]) if pfc.size else 0
    for key, t in since.items():
        out[key][2] += end - t
    return {k: (a, b, c) for k, (a, b, c) in out.items()}


def ns3_device(topology, switch: int, port: int) -> tuple[int, int, str]:
    """The simulator's device ``(node, if_index)`` that a PFC frame sent by our ``switch``
    port ``port`` reaches, and our name of it (``nic H`` or ``NAME:PORT``); module docstring."""
    gp = int(np.flatnonzero((topology.port_switch == switch)
                            & (topology.port_number == port))[0])
    n_nic = int(topology.nic_port.size)
    nic = int(topology.port_peer_nic[gp])
    if nic >= 0:                        # a host's device k + 1 is its port in plane k
        plane = int(topology.switch_plane[switch])
        return nic, plane + 1, f"nic {nic}" if topology.planes == 1 else f"nic {nic} plane {plane}"
    q = int(topology.port_peer_port[gp])
    sw, num = int(topology.port_switch[q]), int(topology.port_number[q])
    return n_nic + sw, num + 1, f"{topology.switch_names[sw]}:{num}"


#: The columns of a :func:`pfc_beside` row, in order.
PFC_KEYS = ("node", "if_index", "device", "sender", "sim_pauses", "sim_resumes", "sim_paused_ns",
            "ours_xoff", "ours_xon", "ours_paused_ns")


def pfc_beside(sim: np.ndarray, tables: dict, topology) -> list[dict]:
    """The simulator's pauses per device beside our fabric's PFC frames, one row per device
    that either paused (keys :data:`PFC_KEYS`), sorted by ``(node, if_index)``.

    Args:
        sim: ``PFC_DTYPE (n,)`` (:func:`read_pfc`).
        tables: our fabric log (:data:`tokenpcap.records.fabric.FABRIC_TABLES`): ``pfc`` the
            frames each switch port sent (XOFF ``xoff`` 1, XON 0, every lossless priority
            counted), ``nics``/``links`` ``paused_ns`` of the device paused.
        topology: the run's :class:`tokenpcap.schedule.engine.topology.Topology`.

    Returns:
        rows: ``device`` our name of the paused device, ``sender`` our switch port that sent
        the frames (``NAME:PORT``), ``sim_*`` from :func:`pause_counts` (0 when none),
        ``ours_xoff``/``ours_xon`` frame counts and ``ours_paused_ns`` (0 when none).

    Raises:
        InputError: a line of ``sim`` naming a device the exported topology does not have.
    """
    n_nic, n_sw = int(topology.nic_port.size), len(topology.switch_names)
    by_dev: dict[tuple[int, int], dict] = {}

    def row(node: int, dev: int) -> dict:
        r = by_dev.get((node, dev))
        if r is None:
            r = dict.fromkeys(PFC_KEYS, 0)
            r.update(node=node, if_index=dev)
            if node < n_nic:
                s_port = int(topology.plane_nic_port[dev - 1, node])
            else:
                s = node - n_nic
                first = int(np.searchsorted(topology.port_switch, s))
                s_port = int(topology.port_peer_port[first + dev - 1])
            sw, num = int(topology.port_switch[s_port]), int(topology.port_number[s_port])
            r["sender"] = f"{topology.switch_names[sw]}:{num}"
            r["device"] = ns3_device(topology, sw, num)[2]
            by_dev[(node, dev)] = r
        return r

    ports = np.bincount(topology.port_switch, minlength=n_sw)
    for (node, dev), (pauses, resumes, paused) in pause_counts(sim).items():
        ok = (1 <= dev <= topology.planes) if node < n_nic else (node < n_nic + n_sw
                                               and 1 <= dev <= int(ports[node - n_nic]))
        if not ok:
            raise InputError(f"pfc.txt: node {node} if_index {dev}: got a device the exported "
                             f"topology does not have, expected hosts 0..{n_nic - 1} (if_index "
                             f"1..{topology.planes}) or switches {n_nic}..{n_nic + n_sw - 1}")
        if node >= n_nic and int(topology.port_peer_port[
                int(np.searchsorted(topology.port_switch, node - n_nic)) + dev - 1]) < 0:
            raise InputError(f"pfc.txt: node {node} if_index {dev}: got a switch port facing a "
                             "host, expected a port paused by a switch (hosts send no PFC)")
        r = row(node, dev)
        r["sim_pauses"], r["sim_resumes"], r["sim_paused_ns"] = pauses, resumes, paused
    ev = tables["pfc"]
    for (sw, num), group in _group(ev):
        node, dev, _ = ns3_device(topology, sw, num)
        r = row(node, dev)
        r["ours_xoff"] = int((group["xoff"] == 1).sum())
        r["ours_xon"] = int((group["xoff"] == 0).sum())
    nics, links = tables["nics"], tables["links"]
    for r in by_dev.values():
        if r["node"] < n_nic:
            hit = nics["paused_ns"][nics["nic"] == r["node"]]
        else:
            s = r["node"] - n_nic
            hit = links["paused_ns"][(links["switch"] == s) & (links["port"] == r["if_index"] - 1)]
        r["ours_paused_ns"] = int(hit.sum())
    return [by_dev[k] for k in sorted(by_dev)]


def _group(ev: np.ndarray):
    """``((switch, port), rows)`` of PFC events ``ev`` per sending port."""
    if not ev.size:
        return []
    key = ev["switch"].astype(np.int64) << 32 | ev["port"].astype(np.int64)
    order = np.argsort(key, kind="stable")
    k = key[order]
    cuts = np.flatnonzero(np.diff(k)) + 1
    return [((int(ks >> 32), int(ks & 0xFFFFFFFF)), ev[ix])
            for ks, ix in zip(k[np.r_[0, cuts]].tolist(), np.split(order, cuts))]


def pfc_lines(rows: list[dict], *, max_rows: int = 64) -> list[str]:
    """:func:`pfc_beside` rows as a text table (at most ``max_rows`` devices, those with the most
    simulator pauses first, then a total), then what the columns mean."""
    head = (f"{'ns-3 device':>12} {'paused device':>16} {'sent by':>14} {'sim XOFF':>9} "
            f"{'ours XOFF':>9} {'sim XON':>8} {'ours XON':>8} {'sim paused µs':>14} "
            f"{'ours paused µs':>15}")
    out = ["PFC per paused device (simulator pfc.txt beside our fabric log)", head,
           "-" * len(head)]
    shown = sorted(rows, key=lambda r: (-r["sim_pauses"], -r["ours_xoff"], r["node"],
                                        r["if_index"]))[:max_rows]
    for r in sorted(shown, key=lambda r: (r["node"], r["if_index"])):
        out.append(f"{r['node']:>9}/{r['if_index']:<2} {r['device']:>16} {r['sender']:>14} "
                   f"{r['sim_pauses']:>9} {r['ours_xoff']:>9} {r['sim_resumes']:>8} "
                   f"{r['ours_xon']:>8} {r['sim_paused_ns'] / 1000:>14.3f} "
                   f"{r['ours_paused_ns'] / 1000:>15.3f}")
    if len(rows) > len(shown):
        out.append(f"... and {len(rows) - len(shown)} more devices")
    tot = {k: sum(r[k] for r in rows) for k in PFC_KEYS[4:]}
    out.append(f"{'all':>12} {len(rows):>16} {'':>14} {tot['sim_pauses']:>9} "
               f"{tot['ours_xoff']:>9} {tot['sim_resumes']:>8} {tot['ours_xon']:>8} "
               f"{tot['sim_paused_ns'] / 1000:>14.3f} {tot['ours_paused_ns'] / 1000:>15.3f}")
    out.append("ns-3 device: node/if_index of pfc.txt (the device that received the frames); "
               "sent by: our switch:port; XOFF/XON: frames; paused µs: time held paused")
    return out
