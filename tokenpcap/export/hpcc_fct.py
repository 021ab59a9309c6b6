"""The HPCC simulator's ``fct.txt`` read back and set beside our schedule.

``third.cc`` (``qp_finish``) writes one line per completed flow, when its last ACK reaches the
sender: ``sip dip sport dport size_bytes start_ns fct_ns standalone_fct_ns``, addresses as 8 hex
digits (node id = ``(ip >> 8) & 0xffff``, its ``ip_to_node_id``), ``start_ns`` the flow's start
as the simulator read it, ``fct_ns`` start to last ACK, ``standalone_fct_ns`` its own estimate
alone on the fabric (base RTT + bytes with headers at the path's bottleneck rate).

Each line is matched to the flow file's flow, and so to our message, with the same ``(src, dst,
dport, size_bytes, start_ns)``; equal keys pair in file order, so every simulated flow is used at
most once. Our side of the comparison is the same quantity on our ideal fabric:

``ours_fct_ns = arrival_ns - ready_ns + latency_ns``: from the time the message may leave our NIC
to its last bit at the receiver (the schedule, :mod:`tokenpcap.schedule`), plus one one-way
latency for the ACK to return (our model's ACK is not queued behind anything).

With a queued fabric (``fabric.model: queued``: our engine ran the same switches, queues and
PFC as the exported topology) the arrival already includes the fabric, so the last ACK's way back
is the only term added:

``ours_fct_ns = arrival_ns - ready_ns + ack_return_ns``, ``ack_return_ns`` the ACK's propagation
and per-hop serialization over the reverse path, unqueued
(:func:`tokenpcap.export.hpcc_fabric.ack_return_ns`; for the 400 Gb/s single switch of the
fixtures 2 × (500 + 1) ns). The simulator's ``fct_ns`` ends at the same event, the last ACK at
the sender, so on a fabric both model alike the two are equal (an ACK that waits behind a data
frame on the reverse path is the difference left).

``slowdown = fct_ns / ours_fct_ns``.

Alone on the fabric the two differ by the per-hop modelling (:func:`alone_gap_ns`): the
simulator's propagation there and back over the path's links (each ``latency_ns / 2``, see
:func:`tokenpcap.export.hpcc.link_delay_ns`: equal to our one-way latency on one rail, twice it
across rails) and its store-and-forward switches, each of which holds the largest packet of the
flow for its layer-1 time before sending it on (our model cuts through), so that
``fct_ns - ours_fct_ns = 2·(links·delay_ns − latency_ns) + (links − 1)·t_packet_ns``, within
2 ns per packet and per link (the simulator's headers are a few bytes shorter than RoCEv2's and
its times are whole ns). This holds for flows up to one bandwidth-delay product, which HPCC
sends before any feedback; longer flows also meet its rate control (``U_TARGET`` 0.95 of the
link), which docs/compare.md measures.
"""
from __future__ import annotations

import os
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tokenpcap.errors import InputError
from tokenpcap.export.hpcc import START_OFFSET_NS, hpcc_flows
from tokenpcap.export.hpcc_fabric import ack_return_ns
from tokenpcap.export.hpcc_pfc import pfc_beside, pfc_lines, read_pfc
from tokenpcap.records import DIMS, phase_label

__all__ = ["FCT_DTYPE", "read_fct", "match_flows", "alone_gap_ns", "Comparison", "compare_hpcc",
           "ours_fct", "fct_tail_ns", "GROUP_KEYS", "report_lines"]

FCT_DTYPE = np.dtype([("line", "<i8"), ("src", "<i8"), ("dst", "<i8"), ("sport", "<i8"),
                      ("dport", "<i8"), ("size_bytes", "<i8"), ("start_ns", "<i8"),
                      ("fct_ns", "<i8"), ("standalone_fct_ns", "<i8")])
_HEX = frozenset("0123456789abcdefABCDEF")
_FIELDS = ("sip", "dip", "sport", "dport", "size_bytes", "start_ns", "fct_ns", "standalone_fct_ns")


def read_fct(path: str | os.PathLike) -> np.ndarray:
    """Read ``fct.txt``: ``FCT_DTYPE (n,)`` in file order, ``line`` its 1-based line number.

    Raises:
        InputError: the file cannot be read, or a line has not 8 fields, an address that is not
            8 hex digits, a number that is not an integer from 0 to 10^18 - 1 (one line: file,
            line, field, value and what was expected); or the file has no flow line (a
            simulator that completed no flow, or stopped before writing one: nothing to compare).
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        raise InputError(f"{path}: got no such file, expected the simulator's FCT_OUTPUT_FILE") \
            from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        tok = line.split()
        if not tok:
            continue
        if len(tok) != len(_FIELDS):
            raise InputError(f"{path}: line {n}: got {len(tok)} fields, expected 8 ("
                             f"{' '.join(_FIELDS)})")
        vals = [n]
        for i, (name, t) in enumerate(zip(_FIELDS, tok)):
            try:
                if i < 2:
                    # third.cc prints "%08x": exactly 8 of [0-9a-f]; int(t, 16) alone would also
                    # take "0x000201", "+0000201" or "0_000201", which ns-3 never writes
                    if len(t) != 8 or not all(c in _HEX for c in t):
                        raise ValueError
                    v = (int(t, 16) >> 8) & 0xFFFF
                else:
                    if not (t.isascii() and t.isdigit()) or len(t) > 18:
                        raise ValueError
                    v = int(t)
            except ValueError:
                what = "8 hex digits" if i < 2 else "an integer from 0 to 10^18 - 1"
                raise InputError(f"{path}: line {n}: column {i + 1} ({name}): got {t[:40]!r}, "
                                 f"expected {what}") from None
            vals.append(v)
        rows.append(tuple(vals))
    if not rows:
        raise InputError(f"{path}: got no flow line, expected one line per flow the simulator "
                         "completed (did its run reach the end?)")
    return np.array(rows, FCT_DTYPE)


def match_flows(flows: np.ndarray, fct: np.ndarray, path: str | os.PathLike = "fct.txt") -> np.ndarray:
    """Row of ``fct`` that completed each flow of ``flows`` (``FLOW_DTYPE``), int64 ``(f,)``,
    -1 where the simulator did not complete it.

    Raises:
        InputError: a line of ``fct`` that matches no remaining flow (another scenario, --scale,
            --iterations or start offset than the export's, or a flow completed twice).
    """
    pending: dict[tuple, deque] = defaultdict(deque)
    for i, key in enumerate(zip(flows["src"].tolist(), flows["dst"].tolist(),
                                flows["dport"].tolist(), flows["size_bytes"].tolist(),
                                flows["start_ns"].tolist())):
        pending[key].append(i)
    row = np.full(flows.size, -1, np.int64)
    for j, key in enumerate(zip(fct["src"].tolist(), fct["dst"].tolist(), fct["dport"].tolist(),
                                fct["size_bytes"].tolist(), fct["start_ns"].tolist())):
        q = pending.get(key)
        if not q:
            s, d, p, n, t = key
            twice = key in pending
            raise InputError(
                f"{path}: line {int(fct['line'][j])}: flow {s}->{d} dport {p} {n} B at {t} ns: "
                + ("got it completed more than once, expected once" if twice else
                   "got no such exported flow, expected the export's scenario, --scale, "
                   "--iterations and start offset"))
        row[q.popleft()] = j
    return row


def alone_gap_ns(links, delay_ns: int, latency_ns: int, packet_ns):
    """``fct_ns - ours_fct_ns`` of a flow alone on the fabric (module docstring), in ns.

    Args:
        links: links on the path (int or int array, :func:`tokenpcap.export.hpcc.path_links`).
        delay_ns: propagation delay per link (:func:`tokenpcap.export.hpcc.link_delay_ns`).
        latency_ns: our one-way latency (``network.latency_ns``).
        packet_ns: layer-1 time of the flow's largest packet at the link rate (int or array);
            with uplinks faster than the NICs this bounds the switches' hold from above.
    """
    links = np.asarray(links, np.int64)
    return 2 * (links * int(delay_ns) - int(latency_ns)) + (links - 1) * np.asarray(packet_ns,
                                                                                     np.int64)


@dataclass
class Comparison:
    """Our schedule beside the simulator's run, one entry per exported flow (flow file order).

    Attributes:
        flows: ``FLOW_DTYPE (f,)``.
        labels: phase label per flow (``dim/phase/Collective``), list of f str.
        ours_fct_ns: int64 ``(f,)``, see the module docstring.
        sim_fct_ns: int64 ``(f,)``, the simulator's ``fct_ns``, -1 for flows it did not complete.
        sim_line: int64 ``(f,)``, the flow's line in fct.txt, -1 when not completed.
        start_offset_ns: the export's offset (simulator time of our time 0).
        fabric: ``ideal`` or ``queued``: which of our models ``ours_fct_ns`` comes from.
        pfc: with a queued fabric and the simulator's pfc.txt, the pause counts per device beside
            ours (:func:`tokenpcap.export.hpcc_pfc.pfc_beside`), else None.
    """
    flows: np.ndarray
    labels: list
    ours_fct_ns: np.ndarray
    sim_fct_ns: np.ndarray
    sim_line: np.ndarray
    start_offset_ns: int
    fabric: str = "ideal"
    pfc: list | None = None

    @property
    def completed(self) -> np.ndarray:
        return self.sim_fct_ns >= 0

    @property
    def slowdown(self) -> np.ndarray:
        """float64 ``(f,)``: ``sim_fct_ns / ours_fct_ns``, NaN where not completed."""
        s = np.full(self.flows.size, np.nan)
        ok = self.completed
        s[ok] = self.sim_fct_ns[ok] / self.ours_fct_ns[ok]
        return s

    def groups(self) -> list[dict]:
        """One summary per phase label (in order of first start), then ``all``: ``flows``,
        ``completed``, ``bytes``, ``ours_ns``/``sim_ns`` (first start to last ACK of the group;
        ``sim_ns`` over the completed flows, None if none), slowdown ``p50``/``p90``/``p99``/
        ``max`` (None if none completed) and ``not_completed`` (flow-file line numbers)."""
        by: dict[str, list[int]] = {}
        for i, lab in enumerate(self.labels):
            by.setdefault(lab, []).append(i)
        out = [self._summary(lab, np.array(ix, np.int64)) for lab, ix in by.items()]
        out.append(self._summary("all", np.arange(self.flows.size)))
        return out

    def _summary(self, name: str, ix: np.ndarray) -> dict:
        t0 = self.flows["start_ns"][ix]
        ok = self.completed[ix]
        sd = self.slowdown[ix][ok]
        ours = int((t0 + self.ours_fct_ns[ix]).max() - t0.min()) if ix.size else 0
        sim = (int((t0[ok] + self.sim_fct_ns[ix][ok]).max() - t0.min()) if ok.any() else None)
        pct = (dict(zip(("p50", "p90", "p99"), (float(x) for x in np.percentile(sd, [50, 90, 99]))))
               if sd.size else dict.fromkeys(("p50", "p90", "p99")))
        return {"group": name, "flows": int(ix.size), "completed": int(ok.sum()),
                "bytes": int(self.flows["size_bytes"][ix].sum()), "ours_ns": ours, "sim_ns": sim,
                **pct, "max": float(sd.max()) if sd.size else None,
                "not_completed": (ix[~ok] + 2).tolist()}


GROUP_KEYS = ("group", "flows", "completed", "bytes", "ours_ns", "sim_ns", "p50", "p90", "p99",
              "max")


def ours_fct(scenario: str | os.PathLike, *, scale: int = 1, iterations: int = 1,
             start_offset_ns: int = START_OFFSET_NS):
    """Schedule ``scenario`` as ``export --to hpcc`` did: ``(schedule, flows, labels,
    ours_fct_ns)``, the flows in flow-file order (``FLOW_DTYPE (f,)``), their phase labels
    (list of f str) and our FCT of each (int64 ``(f,)``, the module docstring's definition: the
    queued fabric's when the cluster has one).

    Raises:
        InputError: as ``schedule_scenario``.
    """
    from tokenpcap.pipeline import schedule_scenario

    s, _, sched = schedule_scenario(scenario, scale=scale, iterations=iterations,
                                    run="compare")
    m = sched.messages
    flows = hpcc_flows(m, start_offset_ns)
    mm = m[flows["msg"]]
    back = fct_tail_ns(s.cluster, sched, flows["src"], flows["dst"])
    ours = (mm["arrival_ns"] - mm["ready_ns"]).astype(np.int64) + back
    labels = [phase_label(int(d), int(p), int(c)) if d < len(DIMS) else "other"
              for d, p, c in zip(mm["dim"], mm["phase"], mm["collective"])]
    return sched, flows, labels, ours


def fct_tail_ns(cluster, sched, src: np.ndarray, dst: np.ndarray):
    """What our FCT adds to ``arrival_ns - ready_ns`` (module docstring): the last ACK's way back
    on a queued fabric (int64 ``(f,)``, :func:`~tokenpcap.export.hpcc_fabric.ack_return_ns`),
    one ``network.latency_ns`` on an ideal one (int)."""
    if sched.fabric_queued:
        return ack_return_ns(cluster, sched.topology, src, dst, sched.engine.ack_bytes)
    return int(cluster.network.latency_ns)


def compare_hpcc(scenario: str | os.PathLike, fct_path: str | os.PathLike, *, scale: int = 1,
                 iterations: int = 1, start_offset_ns: int | None = None,
                 pfc_path: str | os.PathLike | None = None) -> Comparison:
    """Schedule ``scenario`` as ``export --to hpcc`` did and match ``fct_path`` to its flows;
    ``ours`` is the queued fabric's when the cluster has one (module docstring). ``pfc_path``:
    the simulator's pfc.txt, set beside our fabric's PFC frames (queued fabric only).

    Raises:
        InputError: as :func:`read_fct` and :func:`match_flows`; as ``schedule_scenario``;
            ``pfc_path`` with an ideal fabric, or as :func:`tokenpcap.export.hpcc_pfc.read_pfc`.
    """
    off = START_OFFSET_NS if start_offset_ns is None else int(start_offset_ns)
    fct = read_fct(fct_path)
    sched, flows, labels, ours = ours_fct(scenario, scale=scale, iterations=iterations,
                                          start_offset_ns=off)
    if pfc_path is not None and not sched.fabric_queued:
        raise InputError(f"{scenario}: --hpcc-pfc: got a scenario with an ideal fabric, "
                         "expected a cluster with fabric.model: queued (PFC is the fabric's)")
    row = match_flows(flows, fct, fct_path)
    ok = row >= 0
    sim = np.full(flows.size, -1, np.int64)
    sim[ok] = fct["fct_ns"][row[ok]]
    line = np.full(flows.size, -1, np.int64)
    line[ok] = fct["line"][row[ok]]
    pfc = None
    if pfc_path is not None:
        tables, _ = sched.fabric_log()
        pfc = pfc_beside(read_pfc(pfc_path), tables, sched.topology)
    return Comparison(flows, labels, ours, sim, line, off,
                      "queued" if sched.fabric_queued else "ideal", pfc)


def _us(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1000:.3f}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def report_lines(c: Comparison, *, max_listed: int = 20) -> list[str]:
    """The comparison as text: one row per phase label and one for all flows (``groups``), then
    the flows the simulator did not complete (their flow-file line numbers, at most
    ``max_listed``), then what the columns mean."""
    groups = c.groups()
    width = max(len("group"), *(len(g["group"]) for g in groups))
    head = (f"{'group':<{width}} {'flows':>6} {'done':>6} {'MB':>9} {'ours µs':>11} "
            f"{'sim µs':>11} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7}")
    out = [head, "-" * len(head)]
    for g in groups:
        out.append(f"{g['group']:<{width}} {g['flows']:>6} {g['completed']:>6} "
                   f"{g['bytes'] / 1e6:>9.3f} {_us(g['ours_ns']):>11} {_us(g['sim_ns']):>11} "
                   f"{_x(g['p50']):>7} {_x(g['p90']):>7} {_x(g['p99']):>7} {_x(g['max']):>7}")
    missing = groups[-1]["not_completed"]
    if missing:
        shown = ", ".join(str(n) for n in missing[:max_listed])
        more = f" and {len(missing) - max_listed} more" if len(missing) > max_listed else ""
        n = len(missing)
        out.append(f"not completed by the simulator: {n} flow{'s' * (n != 1)}, flow-file "
                   f"line{'s' * (n != 1)} {shown}{more}")
    else:
        out.append(f"every one of the {c.flows.size} flows completed in the simulator")
    ok = c.completed
    if ok.any():
        o, m = c.ours_fct_ns[ok], c.sim_fct_ns[ok]
        out.append(f"per-flow fct µs (completed flows): ours min {_us(int(o.min()))} max "
                   f"{_us(int(o.max()))}, simulator min {_us(int(m.min()))} max "
                   f"{_us(int(m.max()))}, largest |sim - ours| {_us(int(np.abs(m - o).max()))}")
    out.append(f"ours µs / sim µs: first start to last ACK of the group on our {c.fabric} "
               "fabric / in the simulator; p50..max: per-flow slowdown, simulator fct / ours")
    if c.pfc is not None:
        out.append("")
        out.extend(pfc_lines(c.pfc))
    return out
