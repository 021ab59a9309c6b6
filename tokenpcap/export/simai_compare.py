"""A SimAI run of our workload export set beside our schedule (``compare --simai-csv``).

``export --to simai`` writes, in the file of pipeline stage 0 (the one compared here: the rank at
stage 0, TP, DP and EP index 0; :mod:`tokenpcap.export.simai`), one record per collective, each made from one call of the plan
(microbatch 0 for the per-microbatch TP and EP collectives, the iteration's DP buckets), and the
record keeps that call's id. ``SimAI_analytical`` writes one ``EndToEnd.csv`` row per record, by
its id (:mod:`tokenpcap.export.simai_csv`). So every row is matched to its record by the id
(equal ids pair in file order; a row that matches no record is an error: another scenario or
``--scale``), and each collective of the record to the same call in our schedule.

Per collective (record and column: forward, input gradient, weight gradient):

* ours: the call's span on our ideal fabric (:func:`call_spans`): from the first of its
  transfers (RDMA messages, from the time each may leave the NIC, ``ready_ns``; NVLink copies,
  from their start) to the last bit of the last one at its receiver (``arrival_ns``), over every
  rank of the group instance; the schedule runs the whole iteration, so the span includes any
  wait behind other traffic on the same NIC or NVLink port. When the schedule times NVLink-only
  calls as a whole (``Schedule.nvlink_mode == "collectives"``, past
  ``NVLINK_COPIES_PER_COPY`` copies an iteration) such a call's span is its α–β time
  (``Schedule.whole_call_ns``);
* SimAI's: the row's total communication time of that column (one collective of the record's
  type, group and size in its busbw model) and the exposed part of it.

SimAI walks the records once forward, once backward (input gradient, then weight gradient) and
runs the weight update (``Workload::iterate_hybrid_parallel_Transformer_fwd_in_bckwd``; ``ga``
enters only its PP bubble and PP communication formulas in ``Layer::report``), so every row
holds one call of each of its collectives, as each entry here does. ``--scale`` must be the
export's: SimAI's compute columns are then the record's compute rounded to µs, which
:func:`compare_simai` checks row by row.
"""
from __future__ import annotations

import os
from collections import defaultdict, deque
from dataclasses import dataclass, field

import numpy as np

from tokenpcap.errors import InputError
from tokenpcap.export.simai import SimaiWorkload, simai_workload
from tokenpcap.export.simai_csv import EndToEnd, read_end_to_end

__all__ = ["SimaiEntry", "SimaiComparison", "call_spans", "match_rows", "compare_simai",
           "GROUP_KEYS", "report_lines"]

#: The record columns that can hold a collective (prefixes of SimaiRecord attributes).
_COLUMNS = ("fwd", "ig", "wg")


@dataclass(frozen=True)
class SimaiEntry:
    """One collective of the workload. ``column``: ``fwd``, ``ig`` or ``wg``; ``label``: the
    call's phase label (``dim/phase/Collective``); ``simai_type``: as written in the workload
    (``ALLGATHER``, ``ALLTOALL_EP``, ...); ``message_bytes``: the record's size (nccl-tests
    ``S``); ``ours_ns``: :func:`call_spans` (None: no transfer of the call was timed);
    ``sim_total_ns``/``sim_exposed_ns``: the row's columns (None: SimAI reported no row for
    the record, or wrote ``NaN or Inf``); ``line``: the row's line in EndToEnd.csv (-1: none)."""

    record: str
    column: str
    call_id: int
    label: str
    op: str
    layer: int
    group_ranks: int
    simai_type: str
    message_bytes: int
    ours_ns: int | None
    sim_total_ns: int | None
    sim_exposed_ns: int | None
    line: int


@dataclass
class SimaiComparison:
    """Our schedule beside a SimAI run: ``entries`` (one per collective of the workload, in
    workload order), ``not_reported`` (record ids without a row), ``left_out`` (``{label (op):
    bytes}`` of the exported rank's calls the workload format cannot hold), ``summary`` (SimAI's
    line 2 in ns, :class:`~tokenpcap.export.simai_csv.EndToEnd`), ``ours_iteration_ns`` (our
    iteration: the last compute block or arrival of any rank), ``ga`` (microbatches)."""

    entries: list
    not_reported: list
    left_out: dict
    summary: dict
    ours_iteration_ns: int
    ga: int
    csv: EndToEnd | None = field(default=None, repr=False)

    def groups(self) -> list[dict]:
        """One summary per phase label (workload order of first appearance), then ``all``:
        ``calls``, ``reported`` (with a SimAI row), ``bytes``; over the reported calls timed on
        both sides: ``ours_ns``, ``sim_ns``, ``exposed_ns`` (sums), ``diff_ns`` (sim − ours),
        per-call ratio sim/ours ``p50``, ``min``, ``max`` (None when there is none)."""
        by: dict[str, list] = {}
        for e in self.entries:
            by.setdefault(e.label, []).append(e)
        out = [_summary(lab, es) for lab, es in by.items()]
        out.append(_summary("all", self.entries))
        return out


def _summary(name: str, es: list) -> dict:
    both = [e for e in es if e.ours_ns is not None and e.sim_total_ns is not None]
    ratio = np.array([e.sim_total_ns / e.ours_ns for e in both if e.ours_ns > 0], np.float64)
    ours = sum(e.ours_ns for e in both)
    sim = sum(e.sim_total_ns for e in both)
    return {"group": name, "calls": len(es), "reported": sum(e.line >= 0 for e in es),
            "bytes": sum(e.message_bytes for e in es),
            "ours_ns": ours if both else None, "sim_ns": sim if both else None,
            "exposed_ns": sum(e.sim_exposed_ns or 0 for e in both) if both else None,
            "diff_ns": sim - ours if both else None,
            "p50": float(np.median(ratio)) if ratio.size else None,
            "min": float(ratio.min()) if ratio.size else None,
            "max": float(ratio.max()) if ratio.size else None}


GROUP_KEYS = ("group", "calls", "reported", "bytes", "ours_ns", "sim_ns", "exposed_ns", "diff_ns",
              "p50", "min", "max")


def call_spans(messages: np.ndarray, nvlink: np.ndarray, call_ids) -> dict[int, int]:
    """``{call_id: span_ns}`` for the calls of ``call_ids`` with at least one timed transfer:
    ``max(arrival_ns) - min(start)`` over their RDMA messages (``MSG_STATE_DTYPE``, start
    ``ready_ns``) and NVLink copies (``NVLINK_DTYPE``, start ``start_ns``), int ns."""
    want = np.asarray(sorted({int(c) for c in call_ids}), np.int64)
    cid = np.concatenate([messages["call_id"], nvlink["call_id"]]).astype(np.int64)
    t0 = np.concatenate([messages["ready_ns"], nvlink["start_ns"]]).astype(np.int64)
    t1 = np.concatenate([messages["arrival_ns"], nvlink["arrival_ns"]]).astype(np.int64)
    keep = np.isin(cid, want) & (t1 >= 0)
    cid, t0, t1 = cid[keep], t0[keep], t1[keep]
    if not cid.size:
        return {}
    order = np.argsort(cid, kind="stable")
    cid, t0, t1 = cid[order], t0[order], t1[order]
    first = np.r_[0, np.flatnonzero(np.diff(cid)) + 1]
    span = np.maximum.reduceat(t1, first) - np.minimum.reduceat(t0, first)
    return dict(zip(cid[first].tolist(), span.tolist()))


def match_rows(workload: SimaiWorkload, csv: EndToEnd) -> list[int]:
    """Index into ``csv.rows`` of each record of ``workload`` (-1: SimAI reported none).

    Raises:
        InputError: a row whose layer id is no (remaining) record of the workload.
    """
    pending: dict[str, deque] = defaultdict(deque)
    for i, r in enumerate(workload.records):
        pending[r.id].append(i)
    out = [-1] * len(workload.records)
    for j, row in enumerate(csv.rows):
        q = pending.get(row.layer)
        if not q:
            twice = row.layer in pending
            raise InputError(
                f"{csv.path}: line {row.line}: layer_name: got {row.layer!r}, expected "
                + ("each record once" if twice else
                   "a layer record of this scenario's export (same scenario and --scale)"))
        out[q.popleft()] = j
    return out


def _check_compute(workload: SimaiWorkload, csv: EndToEnd, rows: list[int]) -> None:
    """SimAI's compute columns against the records' (module docstring).

    Raises:
        InputError: a row whose compute is not the record's: another scenario or --scale.
    """
    for rec, j in zip(workload.records, rows):
        if j < 0:
            continue
        row = csv.rows[j]
        for col, want in (("fwd compute", rec.fwd_compute_ns), ("wg compute", rec.wg_compute_ns),
                          ("ig compute", rec.ig_compute_ns)):
            got = getattr(row, col.split()[0] + "_compute_ns")
            if got is not None and got != round(want / 1000) * 1000:
                raise InputError(
                    f"{csv.path}: line {row.line}: {col}: got {got // 1000} µs, expected "
                    f"{round(want / 1000)} µs ({rec.id} of this scenario's export, {want} ns); "
                    "another scenario or --scale")


def compare_simai(scenario: str | os.PathLike, csv_path: str | os.PathLike, *,
                  scale: int = 1) -> SimaiComparison:
    """Export ``scenario`` to SimAI again (as ``export --to simai --scale``), schedule it and set
    ``csv_path`` (SimAI_analytical's EndToEnd.csv of that export) beside it.

    Raises:
        InputError: as :func:`~tokenpcap.export.simai_csv.read_end_to_end`, :func:`match_rows`,
            a compute column that is not the export's (another scenario or --scale), all before
            the schedule runs. ProfileError: the scenario cannot be loaded; as
            :func:`tokenpcap.pipeline.prepare` otherwise.
    """
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.pipeline import prepare

    csv = read_end_to_end(csv_path)
    matched: dict = {}

    def check(plan) -> None:  # type: ignore[no-untyped-def]
        # before the schedule runs: a file of another export is refused at once
        wl = simai_workload(plan)
        rows = match_rows(wl, csv)
        _check_compute(wl, csv, rows)
        matched.update(wl=wl, rows=rows)

    done = prepare(load_scenario(scenario), scale=scale, iterations=1, nics=(), check=check,
                   run="compare")
    for _ in done.schedule.run():
        pass
    sched, plan = done.schedule, done.plan
    wl, rows = matched["wl"], matched["rows"]
    calls = {c.call_id: c for c in plan.calls(0, ranks={plan.layout.rank(0, 0, 0)})}
    ids = [getattr(r, f"{k}_call") for r in wl.records for k in _COLUMNS]
    msgs, nv = sched.messages, sched.nvlink
    spans = {**sched.whole_call_ns, **call_spans(msgs, nv, [i for i in ids if i >= 0])}
    entries = []
    for rec, j in zip(wl.records, rows):
        row = csv.rows[j] if j >= 0 else None
        for k in _COLUMNS:
            cid = getattr(rec, f"{k}_call")
            if cid < 0:
                continue
            c = calls[cid]
            entries.append(SimaiEntry(
                rec.id, k, cid, c.label, c.op, c.layer, len(c.group), getattr(rec, f"{k}_type"),
                getattr(rec, f"{k}_bytes"), spans.get(cid),
                getattr(row, f"{k}_comm_ns") if row else None,
                getattr(row, f"{k}_exposed_ns") if row else None, row.line if row else -1))
    tl = sched.timeline
    ends = [int(tl["end_ns"].max()) if tl.size else 0,
            int(msgs["arrival_ns"].max()) if msgs.size else 0,
            int(nv["arrival_ns"].max()) if nv.size else 0]
    return SimaiComparison(entries, [r.id for r, j in zip(wl.records, rows) if j < 0],
                           dict(wl.left_out), dict(csv.summary), max(ends),
                           int(wl.header["ga"]), csv)


def _us(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1000:.3f}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def report_lines(c: SimaiComparison, *, max_listed: int = 20) -> list[str]:
    """The comparison as text: one row per phase label and one for all collectives
    (:meth:`SimaiComparison.groups`), SimAI's summary beside our iteration, the records SimAI
    did not report, the calls the workload could not hold, then what the columns mean."""
    groups = c.groups()
    width = max(len("group"), *(len(g["group"]) for g in groups))
    head = (f"{'group':<{width}} {'calls':>6} {'rows':>5} {'MB':>9} {'ours µs':>11} "
            f"{'SimAI µs':>11} {'exposed µs':>11} {'diff µs':>11} {'p50':>7} {'min':>7} "
            f"{'max':>7}")
    out = [head, "-" * len(head)]
    for g in groups:
        out.append(f"{g['group']:<{width}} {g['calls']:>6} {g['reported']:>5} "
                   f"{g['bytes'] / 1e6:>9.3f} {_us(g['ours_ns']):>11} {_us(g['sim_ns']):>11} "
                   f"{_us(g['exposed_ns']):>11} {_us(g['diff_ns']):>11} {_x(g['p50']):>7} "
                   f"{_x(g['min']):>7} {_x(g['max']):>7}")
    s = c.summary
    keys = (("Expose DP comm", "DP"), ("Expose DP_EP comm", "DP_EP"), ("Expose TP comm", "TP"),
            ("Expose_EP_comm", "EP"), ("Expose_PP_comm", "PP"), ("bubble time", "bubble"),
            ("total comp", "compute"), ("total exposed comm", "exposed comm"),
            ("Total time", "total"))
    out.append("SimAI summary µs: " + ", ".join(
        f"{name} {'-' if s.get(k) is None else s[k] // 1000}" for k, name in keys))
    out.append(f"our iteration on the ideal fabric: {_us(c.ours_iteration_ns)} µs "
               f"({c.ga} microbatches)")
    if c.not_reported:
        n = len(c.not_reported)
        shown = ", ".join(c.not_reported[:max_listed])
        more = f" and {n - max_listed} more" if n > max_listed else ""
        out.append(f"not reported by SimAI: {n} record{'s' * (n != 1)}: {shown}{more}")
    else:
        out.append(f"SimAI reported every one of the {len({e.record for e in c.entries})} "
                   "records with a collective")
    untimed = [e for e in c.entries if e.ours_ns is None]
    if untimed:
        out.append(f"not timed by our schedule: {len(untimed)} calls")
    if c.left_out:
        out.append("not in the workload (the format has no type or group for them): " +
                   ", ".join(f"{k} {v / 1e6:.3f} MB" for k, v in c.left_out.items()))
    out.append("ours µs: sum over the calls of each one's span on our ideal fabric (first "
               "transfer ready to last arrival); SimAI µs / exposed µs: sum of its total / "
               "exposed communication per record; p50 min max: per call, SimAI / ours")
    return out
