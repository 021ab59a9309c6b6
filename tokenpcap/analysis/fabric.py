"""What the fabric did, from a queued-fabric run's side files: ``tokenpcap inspect --fabric``.

:func:`fabric_report` turns a fabric log and its summary (:mod:`tokenpcap.records.fabric`,
read by :func:`tokenpcap.generate.fabricfiles.read_fabric_files`) into the counts a lab compares
with its switch counters (the sonic-mgmt RoCE checks count per-queue PFC, drops and pauses):

* per switch egress port *with traffic* (it sent a frame or a PFC frame, received a PFC frame,
  queued or was paused): line rate, frames and bytes sent, the largest egress queue, the PFC
  XOFF and XON frames it sent (counted from the event table) and the PFC frames it received
  and the time it was paused (link counters);
* the NICs that were paused (PFC frames received from their switch, time paused);
* drops per (switch, port, priority), split into lossless priorities (a fault: PFC classes
  never drop) and the others;
* headroom overflows (lossless packets that arrived with the ingress headroom full: kept, but
  the headroom is too small for the link).

Checks (each ``{name, ok, detail}``, as :meth:`tokenpcap.analysis.result.Report.checks`):
``fabric-lossless`` (no drop on a lossless priority), ``fabric-headroom`` (no overflow),
``fabric-pfc`` (per port, the PFC frames of the event table equal the link's ``pfc_sent``: the
two are counted apart and must agree), ``fabric-drops`` (the drop table sums to the summary's
``drops_total``).

Side files are found by :func:`find_fabric` (``--fabric DIR`` or a ``_fabric.json`` path) and,
beside captures, by :func:`fabric_beside` (a directory holding ``<stem>_fabric.json`` where every
capture's name starts with ``<stem>_`` or ``<stem>.``).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tokenpcap.errors import InputError
from tokenpcap.analysis.ccreport import render_cc_text
from tokenpcap.records.fabric import FabricSummary, check_log
from tokenpcap.records.text import counted

__all__ = ["fabric_report", "render_fabric_text", "find_fabric", "fabric_beside",
           "MAX_PORT_ROWS", "SIDE_SUFFIX"]

#: most port rows of the text output (``--json`` lists all)
MAX_PORT_ROWS = 40
#: how the summary file of side files ends: ``<stem>_fabric.json``
SIDE_SUFFIX = "_fabric.json"


def find_fabric(path: str | os.PathLike) -> tuple[Path, str]:
    """``(directory, stem)`` of the side files ``path`` names: a ``<stem>_fabric.json`` file, or
    a directory holding exactly one.

    Raises:
        InputError: no such file or directory, a directory with none or several (named).
    """
    p = Path(path)
    if p.is_file() and p.name.endswith(SIDE_SUFFIX):
        return p.parent, p.name[:-len(SIDE_SUFFIX)]
    if not p.is_dir():
        raise InputError(f"--fabric: got {str(p)!r}, expected a directory holding "
                         f"<stem>{SIDE_SUFFIX} or that file")
    found = _summaries(p)
    if len(found) != 1:
        got = "none" if not found else ", ".join(s + SIDE_SUFFIX for s in found)
        raise InputError(f"--fabric {p}: got {got}, expected one <stem>{SIDE_SUFFIX} (name the "
                         "file to choose)")
    return p, found[0]


def fabric_beside(captures: list[str]) -> tuple[Path, str] | None:
    """The side files of the run that wrote ``captures``, or ``None``: every capture is in one
    directory that holds ``<stem>_fabric.json`` and every capture's name starts with
    ``<stem>_`` or ``<stem>.`` (a generate run's ``<stem>_node00_nic0.pcapng``,
    ``<stem>_dp-backward-AllReduce.pcap``, ``<stem>.pcapng`` with ``--split none``). With
    several such stems the longest wins (``a_b`` over ``a``). Raises nothing."""
    dirs = {Path(c).parent for c in captures}
    if len(dirs) != 1:
        return None
    d = dirs.pop()
    names = [Path(c).name for c in captures]
    stems = [s for s in _summaries(d) if all(n.startswith((s + "_", s + ".")) for n in names)]
    return (d, max(stems, key=len)) if stems else None


def _summaries(d: Path) -> list[str]:
    try:
        return sorted(q.name[:-len(SIDE_SUFFIX)] for q in d.iterdir()
                      if q.name.endswith(SIDE_SUFFIX) and not q.name.startswith(".")
                      and len(q.name) > len(SIDE_SUFFIX) and q.is_file())
    except OSError:
        return []


def fabric_report(log: dict, summary: FabricSummary) -> dict:
    """The summary of the module docstring as a JSON-ready dict.

    Returns:
        ``{"summary": FabricSummary.to_json(), "ports": [...], "ports_total", "pfc": {frames,
        xoff, xon, priorities}, "nics": {count, rx_frames, rx_bytes, paused}, "nics_paused":
        [...], "drops": {packets, bytes, lossless_packets, rows: [...]}, "headroom_overflows",
        "checks": [...], "ok"}``. A port row: ``switch, switch_name, port, peer, gbps,
        tx_frames, tx_bytes, max_queue_bytes, xoff_sent, xon_sent, pfc_sent, pfc_received,
        paused_ns``, sorted by (switch, port); ``peer`` is ``"nic N"``, ``"NAME:PORT"`` or
        ``""``.

    Raises:
        InputError: ``log`` is not a fabric log (:func:`~tokenpcap.records.fabric.check_log`).
    """
    check_log(log)
    names = summary.switch_names
    links, pfc, drops, nics = log["links"], log["pfc"], log["drops"], log["nics"]
    sent = _count_by_port(pfc)
    ports = []
    order = np.lexsort((links["port"], links["switch"]))
    for r in links[order]:
        key = (int(r["switch"]), int(r["port"]))
        xoff, xon = sent.get(key, (0, 0))
        busy = (r["tx_frames"] or r["pfc_sent"] or r["pfc_received"] or r["max_queue_bytes"]
                or r["paused_ns"] or xoff or xon)
        if not busy:
            continue
        ports.append({"switch": key[0], "switch_name": _name(names, key[0]), "port": key[1],
                      "peer": _peer(names, r), "gbps": float(r["gbps"]),
                      "tx_frames": int(r["tx_frames"]), "tx_bytes": int(r["tx_bytes"]),
                      "max_queue_bytes": int(r["max_queue_bytes"]), "xoff_sent": xoff,
                      "xon_sent": xon, "pfc_sent": int(r["pfc_sent"]),
                      "pfc_received": int(r["pfc_received"]), "paused_ns": int(r["paused_ns"])})
    lossless = np.isin(drops["priority"], np.array(summary.lossless_priorities, np.uint8))
    drop_rows = [{"switch": int(d["switch"]), "switch_name": _name(names, int(d["switch"])),
                  "port": int(d["port"]), "priority": int(d["priority"]),
                  "packets": int(d["packets"]), "bytes": int(d["bytes"]), "lossless": bool(k)}
                 for d, k in zip(drops, lossless)]
    paused = nics[(nics["pfc_received"] > 0) | (nics["paused_ns"] > 0)]
    prios, counts = np.unique(pfc["priority"], return_counts=True)
    doc = {
        "summary": summary.to_json(),
        "ports": ports,
        "ports_total": int(links.size),
        "pfc": {"frames": int(pfc.size), "xoff": int((pfc["xoff"] == 1).sum()),
                "xon": int((pfc["xoff"] == 0).sum()),
                "priorities": {str(p): int(c) for p, c in zip(prios.tolist(), counts.tolist())}},
        "nics": {"count": int(nics.size), "rx_frames": int(nics["rx_frames"].sum()),
                 "rx_bytes": int(nics["rx_bytes"].sum()), "paused": int(paused.size)},
        "nics_paused": [{"nic": int(n["nic"]), "pfc_received": int(n["pfc_received"]),
                         "paused_ns": int(n["paused_ns"])}
                        for n in np.sort(paused, order="nic")],
        "drops": {"packets": int(drops["packets"].sum()), "bytes": int(drops["bytes"].sum()),
                  "lossless_packets": int(drops["packets"][lossless].sum()), "rows": drop_rows},
        "headroom_overflows": summary.headroom_overflows,
    }
    doc["checks"] = _checks(doc, links, sent, summary)
    doc["ok"] = all(c["ok"] for c in doc["checks"])
    return doc


def _count_by_port(pfc: np.ndarray) -> dict[tuple[int, int], tuple[int, int]]:
    """``{(switch, port): (XOFF frames, XON frames)}`` of the PFC event table."""
    out: dict[tuple[int, int], tuple[int, int]] = {}
    if pfc.size == 0:
        return out
    keys = np.stack([pfc["switch"].astype(np.int64), pfc["port"].astype(np.int64),
                     pfc["xoff"].astype(np.int64)], axis=1)
    u, c = np.unique(keys, axis=0, return_counts=True)
    for (s, p, x), n in zip(u.tolist(), c.tolist()):
        xoff, xon = out.get((s, p), (0, 0))
        out[(s, p)] = (xoff + n, xon) if x else (xoff, xon + n)
    return out


def _checks(doc: dict, links: np.ndarray, sent: dict, s: FabricSummary) -> list[dict]:
    d = doc["drops"]
    lossless = [r for r in d["rows"] if r["lossless"] and r["packets"]]
    where = ", ".join(f"{r['switch_name']} port {r['port']} priority {r['priority']}: "
                      f"{r['packets']:,}" for r in lossless[:4])
    prios = ",".join(map(str, s.lossless_priorities)) or "none"
    out = [{"name": "fabric-lossless", "ok": not lossless,
            "detail": f"{d['lossless_packets']:,} packets dropped on lossless priorities "
                      f"({where}{', ...' if len(lossless) > 4 else ''}); PFC classes must never "
                      "drop" if lossless else f"no drop on lossless priorities {prios}"},
           {"name": "fabric-headroom", "ok": s.headroom_overflows == 0,
            "detail": f"{s.headroom_overflows:,} lossless packets arrived with the ingress "
                      "headroom full (kept, not dropped: the headroom is smaller than the "
                      "link's round trip needs)" if s.headroom_overflows else
                      "no headroom overflow"}]
    counter = {(int(r["switch"]), int(r["port"])): int(r["pfc_sent"]) for r in links}
    wrong = [(k, sum(sent.get(k, (0, 0))), counter.get(k))
             for k in sorted(set(sent) | set(counter))
             if sum(sent.get(k, (0, 0))) != counter.get(k, 0) or k not in counter]
    if wrong:
        (sw, port), got, want = min(wrong, key=lambda w: w[2] is not None)   # no row first
        detail = (f"{counted(len(wrong), 'port')} whose PFC frames in the event table differ "
                  f"from the link counter, e.g. {_name(s.switch_names, sw)} port {port}: "
                  f"{got:,} events, "
                  + ("no link row" if want is None else f"pfc_sent {want:,}"))
    else:
        detail = f"{doc['pfc']['frames']:,} PFC frames in the event table, as the link counters"
    out.append({"name": "fabric-pfc", "ok": not wrong, "detail": detail})
    out.append({"name": "fabric-drops", "ok": d["packets"] == s.drops_total,
                "detail": f"drop table {d['packets']:,} packets, summary drops_total "
                          f"{s.drops_total:,}"})
    return out


def _name(names: tuple[str, ...], i: int) -> str:
    return names[i] if 0 <= i < len(names) else f"switch{i}"


def _peer(names: tuple[str, ...], r) -> str:
    if r["peer_nic"] >= 0:
        return f"nic {int(r['peer_nic'])}"
    if r["peer_switch"] >= 0:
        return f"{_name(names, int(r['peer_switch']))}:{int(r['peer_port'])}"
    return ""


def render_fabric_text(doc: dict, where: str = "") -> str:
    """The text block of ``inspect`` for :func:`fabric_report`'s ``doc`` (``where``: the side
    files' path, shown in the heading)."""
    s = doc["summary"]
    kind = ", ".join(x for x in (s["preset"], s["topology_kind"]) if x)
    head = (f"Fabric ({kind}; {counted(len(s['switch_names']), 'switch', 'switches')}"
            f"{f'; {where}' if where else ''}):")
    p = doc["pfc"]
    prio = ", ".join(f"priority {k}: {v:,}" for k, v in p["priorities"].items())
    lines = [head,
             f"  Packet hops:         {s['packet_hops']:,}",
             f"  PFC frames:          {p['frames']:,} (XOFF {p['xoff']:,}, XON {p['xon']:,}"
             f"{'; ' + prio if prio else ''})",
             f"  Switch ports:        {len(doc['ports']):,} of {doc['ports_total']:,} with "
             "traffic"]
    ports = doc["ports"]
    if len(ports) > MAX_PORT_ROWS:
        top = sorted(range(len(ports)), key=lambda i: (-ports[i]["max_queue_bytes"],
                                                       -ports[i]["tx_bytes"], i))
        ports = [ports[i] for i in sorted(top[:MAX_PORT_ROWS])]
    if ports:
        rows = [[f"{r['switch_name']}", f"{r['port']}", r["peer"], f"{r['gbps']:g}",
                 f"{r['tx_frames']:,}", f"{r['tx_bytes']:,}", f"{r['max_queue_bytes']:,}",
                 f"{r['xoff_sent']:,}", f"{r['xon_sent']:,}", f"{r['pfc_received']:,}",
                 f"{r['paused_ns']:,}"] for r in ports]
        lines += _table(rows, ["switch", "port", "peer", "Gb/s", "tx frames", "tx bytes",
                               "max queue B", "XOFF sent", "XON sent", "PFC rcvd",
                               "paused ns"])
        if len(ports) < len(doc["ports"]):
            lines.append(f"    ... {len(ports)} of {len(doc['ports']):,} shown: those with the "
                         "largest max queue, in switch and port order (--json lists all)")
    n = doc["nics"]
    paused = doc["nics_paused"]
    some = ", ".join(f"nic {e['nic']} {e['paused_ns']:,} ns" for e in paused[:8])
    lines.append(f"  NICs paused:         {n['paused']:,} of {n['count']:,}"
                 + (f" ({some}{', ...' if len(paused) > 8 else ''})" if paused else ""))
    d = doc["drops"]
    lines.append(f"  Drops:               {d['packets']:,} packets, {d['bytes']:,} bytes "
                 f"(lossless priorities: {d['lossless_packets']:,})")
    lines.append(f"  Headroom overflows:  {doc['headroom_overflows']:,}")
    if doc.get("cc") is not None:
        lines += render_cc_text(doc["cc"])
    for c in doc["checks"]:
        if not c["ok"] and c["name"] in ("fabric-lossless", "fabric-headroom"):
            lines.append(f"  WARNING: {c['detail']}")
    lines.append("Fabric checks:")
    lines += [f"  {'ok  ' if c['ok'] else 'FAIL'} {c['name']}: {c['detail']}"
              for c in doc["checks"] + (doc.get("cc") or {}).get("checks", [])]
    return "\n".join(lines)


def _table(rows: list[list[str]], head: list[str]) -> list[str]:
    """Columns padded to their widest cell; the first three left-aligned, numbers right."""
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    return ["    " + "  ".join(x.ljust(w) if i < 3 else x.rjust(w)
                               for i, (x, w) in enumerate(zip(r, widths))).rstrip()
            for r in [head] + rows]
