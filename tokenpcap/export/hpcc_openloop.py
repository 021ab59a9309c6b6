"""Open loop: the flows of ``export --to hpcc`` run through our queued fabric, as the simulator
runs them, and set beside our ideal-fabric schedule the way the simulator's ``fct.txt`` is.

HPCC ns-3 starts every flow of its flow file at the file's start time, whatever happened to
the flows before it: an open-loop replay of our schedule. Our engine does the same with a
``flows`` workload scenario (:mod:`tokenpcap.config.flowfile`) that reads that flow file on a
cluster with a queued fabric (e.g. ``profiles/clusters/h100-rocev2-400g-hpcc-ns3.yaml``: the
rail-optimized leaf-spine the export writes, preset ``hpcc-ns3``). Then, per flow (flow-file
line ``i``; each flow is one message of the workload, the call of line ``i``:
:func:`tokenpcap.plan.flows.call_flows`):

``open_fct_ns = arrival_ns - ready_ns + ack_return_ns``: from its start to its last bit at the
receiver through our switches, plus the last ACK's way back on an idle reverse path
(:func:`tokenpcap.export.hpcc_fct.fct_tail_ns`): what ns-3's ``fct.txt`` counts, start to last
ACK at the sender (:mod:`tokenpcap.export.hpcc_fct`).

:func:`compare_open_loop` returns a :class:`~tokenpcap.export.hpcc_fct.Comparison` whose
"simulator" column is that open-loop FCT and whose ``ours`` is the scenario's own
(:func:`~tokenpcap.export.hpcc_fct.ours_fct`, ideal fabric for a scenario without one), so its
per-group slowdowns (:meth:`~tokenpcap.export.hpcc_fct.Comparison.groups`) are computed
exactly as those of the simulator's run, and :func:`beside_lines` sets the two side by side.
"""
from __future__ import annotations

import os

import numpy as np

from tokenpcap.errors import InputError
from tokenpcap.export.hpcc import START_OFFSET_NS
from tokenpcap.export.hpcc_fct import Comparison, compare_hpcc, fct_tail_ns, ours_fct
from tokenpcap.plan.flows import call_flows
from tokenpcap.records import KIND_DATA

__all__ = ["open_loop_fct", "compare_open_loop", "open_loop_beside", "beside_lines"]


def open_loop_fct(flows_scenario: str | os.PathLike):
    """Run the ``flows`` workload scenario to its end: ``(flows, fct_ns)``, its flows in file
    order (:data:`~tokenpcap.config.flowfile.FLOW_DTYPE`) and their open-loop FCT (int64
    ``(f,)``, module docstring).

    Raises:
        InputError: a scenario whose workload is not ``flows``, or whose cluster's fabric is not
            queued (an ideal fabric gives back the ideal schedule); as ``schedule_scenario``.
    """
    from tokenpcap.pipeline import schedule_scenario

    s, _, sched = schedule_scenario(flows_scenario, run="compare")
    w = s.workload
    if w is None or w.flows is None:
        raise InputError(f"{flows_scenario}: workload.kind: got "
                         f"{getattr(w, 'kind', 'no workload')!r}, expected 'flows'")
    if not sched.fabric_queued:
        raise InputError(f"{flows_scenario}: cluster.fabric.model: got 'ideal', expected "
                         "'queued' (the open loop runs the flows through our switches)")
    m = sched.messages
    m = m[m["kind"] == KIND_DATA]
    flow = call_flows(w)[m["call_id"].astype(np.int64)]
    first = np.full(w.flows.size, np.iinfo(np.int64).max, np.int64)
    last = np.full(w.flows.size, -1, np.int64)
    np.minimum.at(first, flow, m["ready_ns"].astype(np.int64))
    np.maximum.at(last, flow, m["arrival_ns"].astype(np.int64))
    f = w.flows
    return f, last - first + fct_tail_ns(s.cluster, sched, f["src"], f["dst"])


def compare_open_loop(scenario: str | os.PathLike, flows_scenario: str | os.PathLike, *,
                      scale: int = 1, iterations: int = 1,
                      fct_path: str | os.PathLike | None = None
                      ) -> tuple[Comparison, Comparison | None]:
    """``(open, sim)``: our open-loop run of ``flows_scenario`` (whose flow file is
    ``export scenario --to hpcc --scale scale``'s) beside ``scenario``'s own schedule, and with
    ``fct_path`` the simulator's run beside the same schedule (as
    :func:`~tokenpcap.export.hpcc_fct.compare_hpcc`), else None.

    Raises:
        InputError: the flow file's flows are not the export's (count, ranks or sizes line by
            line: another scenario or --scale); as :func:`open_loop_fct`,
            :func:`~tokenpcap.export.hpcc_fct.compare_hpcc`.
    """
    if fct_path is not None:
        sim = compare_hpcc(scenario, fct_path, scale=scale, iterations=iterations)
        flows, labels, ours, off = sim.flows, sim.labels, sim.ours_fct_ns, sim.start_offset_ns
    else:
        sim, off = None, START_OFFSET_NS
        _, flows, labels, ours = ours_fct(scenario, scale=scale, iterations=iterations,
                                          start_offset_ns=off)
    return open_loop_beside(flows, labels, ours, off, flows_scenario,
                            f"export {scenario} --to hpcc --scale {scale}"), sim


def open_loop_beside(flows: np.ndarray, labels: list, ours: np.ndarray, start_offset_ns: int,
                     flows_scenario: str | os.PathLike, what: str = "the export") -> Comparison:
    """Our open-loop run of ``flows_scenario`` beside the exported ``flows`` (``FLOW_DTYPE``,
    flow-file order), their ``labels`` and ``ours`` FCT (:func:`~tokenpcap.export.hpcc_fct.
    ours_fct`'s); ``what`` names the export in the error.

    Raises:
        InputError: the flow file's flows are not ``flows`` (count, ranks, sizes or starts line
            by line); as :func:`open_loop_fct`.
    """
    f, fct = open_loop_fct(flows_scenario)
    bad = (np.array([0]) if f.size != flows.size else
           np.flatnonzero((f["src"] != flows["src"]) | (f["dst"] != flows["dst"])
                          | (f["size_bytes"] != flows["size_bytes"])
                          | (f["start_ns"] != flows["start_ns"] - flows["start_ns"].min())))
    if bad.size:
        i = int(bad[0])
        got = (f"{f.size} flows" if f.size != flows.size else
               f"line {int(f['line'][i])}: {int(f['src'][i])} -> {int(f['dst'][i])} "
               f"{int(f['size_bytes'][i])} B")
        raise InputError(f"{flows_scenario}: workload.file: got {got}, expected the flows of "
                         f"'{what}' ({flows.size} flows)")
    return Comparison(flows, labels, ours, fct, f["line"].astype(np.int64), start_offset_ns,
                      "queued open-loop")


def _pct(a, b) -> str:
    return "-" if a is None or b is None else f"{100 * (a / b - 1):+.1f}%"


def beside_lines(open_c: Comparison, sim: Comparison) -> list[str]:
    """Per group (:meth:`Comparison.groups`): the simulator's slowdown p50/p90/p99 beside our
    open loop's and the difference (ours / simulator - 1), then what the columns mean."""
    a, b = open_c.groups(), {g["group"]: g for g in sim.groups()}
    width = max(len("group"), *(len(g["group"]) for g in a))
    head = (f"{'group':<{width}} {'flows':>7} " + " ".join(
        f"{'sim ' + q:>8} {'open ' + q:>8} {'diff':>7}" for q in ("p50", "p90", "p99")))
    out = [head, "-" * len(head)]
    for g in a:
        s = b.get(g["group"], {})
        cells = " ".join(f"{_x(s.get(q)):>8} {_x(g[q]):>8} {_pct(g[q], s.get(q)):>7}"
                         for q in ("p50", "p90", "p99"))
        out.append(f"{g['group']:<{width}} {g['flows']:>7} {cells}")
    out.append("sim: the simulator's fct / ours; open: our queued fabric's open-loop fct / ours; "
               f"ours: the scenario's schedule on our {sim.fabric} fabric")
    return out


def _x(v) -> str:
    return "-" if v is None else f"{v:.3f}"
