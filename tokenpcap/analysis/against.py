"""``inspect --against SCENARIO``: compare a capture's RDMA payload bytes with the plan.

The plan's side is a table of payload bytes per (NIC, phase label)
(:func:`tokenpcap.analysis.plancells.plan_cells`) at the capture's scale, times its iterations.
The capture's side is its payload by (pcapng phase comment, source address); source addresses map
to NIC indices by the generator's address rules.

**What is compared** (``against["cells"]``, one entry per compared (NIC, phase) or NIC):

* with phase comments: every (NIC, phase) cell the capture *covers*; without them (classic pcap,
  ERF) each covered NIC's total over the phases it covers;
* what a file covers comes from its provenance comment (:mod:`tokenpcap.records.provenance`, pcapng SHB):
  the selected NICs/ranks and phases, except that a ``split=nic`` file covers the NIC(s) it holds
  and a ``split=phase`` file the phase(s) it holds. Without provenance, a file covers the NICs
  and phases it holds; a NIC that sends none of a phase simply has a plan cell of 0. Without
  comments or provenance the phases are inferred: the subsets of the plan's phases whose per-NIC
  bytes equal the capture's on every NIC it holds (a phase-split classic pcap); when none does,
  the comparison is with every phase;
* a capture that is a time slice (provenance ``time_window``, or messages cut at its edges:
  a flow that starts with a MIDDLE/LAST or ends with a FIRST/MIDDLE packet, e.g. ``editcap``) is
  compared as upper bounds: no cell may hold more than the plan;
* control traffic is left out: packets commented ``cts``/``ack``; without comments, when the run
  used clear-to-send, WRITE ONLY (0x0A) packets of exactly ``CTS_BYTES`` payload (every CTS is
  one, no data message is: data messages end in a WRITE with immediate).

Scale and iterations come from the provenance comment, ``scale``/``iterations`` override them
(classic pcap and ERF carry none: 1 and 1 unless given). A comparison that compares nothing says
so and fails (``compared == 0``).
"""
from __future__ import annotations

from itertools import combinations
from pathlib import Path

import numpy as np

from tokenpcap.analysis.plancells import nic_index_by_address, phase_patterns, plan_cells
from tokenpcap.analysis.result import Report
from tokenpcap.config.profiles import MAX_ITERATIONS
from tokenpcap.errors import InputError
from tokenpcap.records.text import counted

__all__ = ["compare_with_plan", "nic_index_by_address", "MAX_INFERRED_PHASES"]

#: Without comments or provenance, phase subsets are searched up to this many active phases.
MAX_INFERRED_PHASES = 12
_NO_PHASE = "(no phase)"


def _mixed_runs(provs: list[tuple[str, dict]], key: str) -> str:
    """The one-line refusal of files whose provenance ``key`` differs: each value with how many
    files carry it and the first of them (a directory of 512 NICs is not listed whole); the
    files' directory names them all when they share one."""
    dirs = {str(Path(path).parent) for path, _ in provs}
    one_dir = len(dirs) == 1
    by_value: dict = {}
    for path, p in provs:
        by_value.setdefault(p[key], []).append(Path(path).name if one_dir else path)
    got = " and ".join(
        f"{_value_text(v)} in {counted(len(paths), 'file')} ({paths[0]}"
        f"{', …' if len(paths) > 1 else ''})" for v, paths in sorted(by_value.items()))
    where = next(iter(dirs)) if one_dir else provs[0][0]
    return (f"{where}: provenance {key}: got {got}, expected one value (the files of one "
            "run)")


def _value_text(value) -> str:  # type: ignore[no-untyped-def]
    """A provenance value as the comment writes it: ``iterations`` ``A:B``, ``scale`` ``K``."""
    return f"{value[0]}:{value[1]}" if isinstance(value, tuple) else f"{value}"


def _run_params(rep: Report, scale, iterations) -> tuple[int, int, str, dict | None]:
    """(scale, iteration count, where they came from, a provenance dict or None).

    Raises:
        InputError: files of different runs, or more iterations than one capture holds
            (:data:`tokenpcap.config.profiles.MAX_ITERATIONS`).
    """
    provs = [(e["path"], e["provenance"]) for e in rep.files if e.get("provenance")]
    for key in ("scale", "iterations"):
        if len({p[key] for _, p in provs}) > 1:
            raise InputError(_mixed_runs(provs, key))
    prov = provs[0][1] if provs else None
    src = []
    if scale is None:
        scale = prov["scale"] if prov else 1
        src.append("scale")
    if iterations is None:
        iterations = prov["iterations"] if prov else (0, 1)
        src.append("iterations")
    src_text = " and ".join(src) + (" from the provenance comment" if prov else
                                    " assumed (no provenance comment: --scale, --iterations)")
    if isinstance(iterations, int):
        iterations = (0, iterations)
    n_iter = int(iterations[1]) - int(iterations[0])
    if n_iter > MAX_ITERATIONS:
        what = (f"{provs[0][0]}: provenance iterations" if "iterations" in src else
                "--iterations")
        raise InputError(f"{what}: got {n_iter:,} iterations, expected at most "
                         f"{MAX_ITERATIONS:,} (the most one capture holds)")
    return int(scale), n_iter, src_text if src else "", prov


def _split_capture(rep: Report, index: dict[str, int], labels: list[str], cts_bytes: int | None
                   ) -> tuple[dict, dict, dict, dict]:
    """Capture bytes: labelled data ``{(nic, label): B}``, unlabelled data ``{nic: B}``, control
    ``{nic: B}`` and unknown ``{what: B}`` (addresses outside the scenario, labels not in the
    plan)."""
    cells: dict[tuple[int, str], int] = {}
    plain: dict[int, int] = {}
    control: dict[int, int] = {}
    unknown: dict[str, int] = {}
    known = set(labels)
    for (label, addr), b in rep.phase_nic.items():
        g = index.get(addr)
        if g is None:
            if b:
                unknown[f"address {addr}"] = unknown.get(f"address {addr}", 0) + b
        elif label in known:
            cells[(g, label)] = cells.get((g, label), 0) + b
        elif label.endswith("]"):
            control[g] = control.get(g, 0) + b
        elif label == _NO_PHASE:
            plain[g] = plain.get(g, 0) + b
        elif b:
            unknown[f"phase {label}"] = unknown.get(f"phase {label}", 0) + b
    if cts_bytes is not None:
        for (label, addr, _, size), count in rep.small_writes.items():
            g = index.get(addr)
            if label == _NO_PHASE and size == cts_bytes and g is not None:
                plain[g] -= size * count
                control[g] = control.get(g, 0) + size * count
    return cells, plain, control, unknown


def _unpaired(rep: Report, cts_bytes: int) -> int:
    """NIC pairs (A, B), both sending in the capture, whose data messages A → B (WRITEs ending
    with immediate) do not match the clear-to-send writes B → A one for one: in a capture of
    a clear-to-send run that is complete for both NICs they always do."""
    data: dict[tuple[str, str], int] = {}
    for fl in rep.flows:
        if fl["imm_messages"]:
            key = (fl["src"], fl["dst"])
            data[key] = data.get(key, 0) + fl["imm_messages"]
    cts: dict[tuple[str, str], int] = {}
    for (_, src, dst, size), count in rep.small_writes.items():
        if size == cts_bytes:
            cts[(dst, src)] = cts.get((dst, src), 0) + count     # keyed as its data: dst -> src
    senders = {fl["src"] for fl in rep.flows if fl["packets"]}
    return sum(1 for k in set(data) | set(cts) if k[0] in senders and k[1] in senders
               and data.get(k, 0) != cts.get(k, 0))


def _file_extent(e: dict, index: dict[str, int], labels: list[str], nics: int, rank_nic
                 ) -> tuple[set[int], set[str] | None]:
    """The NICs and labels one file covers (module docstring); labels None: unknown."""
    prov = e.get("provenance")
    seen_nics = {index[a] for a in e["sources"] if a in index}
    seen_labels = {x for x in e["labels"] if x in labels}
    if prov is None:
        return seen_nics, (seen_labels or None)
    if prov["split"] == "nic":
        nic_set = seen_nics
    else:
        nic_set = set(range(nics)) if prov["nics"] is None else set(prov["nics"])
        if prov["ranks"] is not None:
            nic_set &= {int(rank_nic[r]) for r in prov["ranks"] if 0 <= r < rank_nic.size}
    if prov["split"] == "phase":
        lab = seen_labels
    else:
        lab = set(labels) if prov["phases"] is None else phase_patterns(prov["phases"], labels)
    return nic_set, lab


def _infer_phases(plain: dict[int, int], nic_set: set[int], P: np.ndarray, labels: list[str]
                  ) -> tuple[list[set[str]], list[str]]:
    """Phase subsets whose per-NIC bytes equal the capture's on every NIC of ``nic_set``, and
    the active labels (some NIC of the set sends them)."""
    rows = sorted(nic_set)
    if not rows:
        return [], []
    sub = P[rows]
    active = [j for j in range(len(labels)) if sub[:, j].any()]
    want = np.array([plain.get(g, 0) for g in rows], np.int64)
    if len(active) > MAX_INFERRED_PHASES:
        return [], [labels[j] for j in active]
    found = []
    for k in range(len(active), 0, -1):
        for combo in combinations(active, k):
            if (sub[:, list(combo)].sum(axis=1) == want).all():
                found.append({labels[j] for j in combo})
    return found, [labels[j] for j in active]


def compare_with_plan(rep: Report, scenario_path: str, *, scale: int | None = None,
                      iterations=None) -> dict:
    """Fill ``rep.against`` with the comparison (module docstring) and return it.

    Args:
        scale: message-size divisor of the run (default: the provenance comment's, else 1).
        iterations: ``N`` or ``(A, B)`` (B − A iterations; default: the provenance comment's,
            else 1).

    Returns:
        ``{"scenario", "scale", "iterations", "mode" ("nic_phase"|"nic"), "bound" (bool: upper
        bounds only), "compared" (int), "cells": [{nic, phase, capture_bytes, plan_bytes}],
        "phases": [{name, capture_bytes, plan_bytes}], "nics": [{nic, capture_bytes,
        plan_bytes}], "control_bytes", "differences": [{what, key, capture_bytes, plan_bytes}],
        "not_compared": [str], "notes": [str], "note", "mismatch"}``; ``notes`` are the remarks
        on how the comparison was made, each whole (one may hold '; '); ``note`` joins mismatch,
        notes and not_compared with '; ' into one text; ``phase`` is None in ``nic`` mode;
        ``differences`` holds one entry per compared cell that differs, then one per capture
        address the plan has no NIC for (``what`` "address"); ``mismatch`` (str or None) says
        that the provenance comment names another scenario, first in ``note``.

    Raises:
        ProfileError, InfeasiblePlanError: the scenario cannot be loaded or planned.
        InputError: files of different runs (provenance scale/iterations differ), or more
            iterations (given or from the provenance comment) than one capture holds.
    """
    from tokenpcap.records import CTS_BYTES
    from tokenpcap.config.profiles import load_scenario

    scenario = load_scenario(scenario_path)
    scale_given, iter_given = scale is not None, iterations is not None
    scale, n_iter, source, prov = _run_params(rep, scale, iterations)
    ranks = None
    provs = [e["provenance"] for e in rep.files if e.get("provenance")]
    if provs and all(p["ranks"] is not None for p in provs):
        ranks = tuple(sorted({r for p in provs for r in p["ranks"]}))
    pc = plan_cells(scenario, scale=scale, iterations=n_iter, ranks=ranks)
    P, labels = pc.bytes, pc.labels
    index = nic_index_by_address(scenario.cluster)
    cts = prov["clear_to_send"] if prov else bool(scenario.generation.clear_to_send)
    cells, plain, control, unknown = _split_capture(rep, index, labels,
                                                    CTS_BYTES if cts else None)
    notes, not_compared = [], []
    made_from = {p["scenario"] for p in provs} - {scenario.name}
    mismatch = None
    if made_from:                      # the first thing to say: nothing below can agree
        mismatch = (f"the capture was made from scenario {', '.join(map(repr, sorted(made_from)))}"
                    f", not {scenario.name!r} (its provenance comment)")
    why = []
    if any(p["time_window"] is not None for p in provs):
        why.append("its provenance names a time window")
    if rep.cut_sources:
        cut = sum(rep.cut_sources.values())
        why.append(f"{counted(cut, 'flow')} {'has' if cut == 1 else 'have'} messages cut at its "
                   "edges")
    unpaired = _unpaired(rep, CTS_BYTES) if cts and not any(
        p["ranks"] is not None for p in provs) else 0
    if unpaired:
        why.append(f"on {counted(unpaired, 'NIC pair')} data messages and clear-to-send writes "
                   "do not pair up")
    bound = bool(why)
    if bound:
        notes.append(f"a time slice ({'; '.join(why)}): compared as upper bounds")
    labelled = bool(cells)
    extent: set[tuple[int, str]] = set()
    nic_cover: set[int] = set()
    label_cover: set[str] | None = set()
    for e in rep.files:
        ns, ls = _file_extent(e, index, labels, pc.nics, pc.rank_nic)
        nic_cover |= ns
        if ls is None:
            label_cover = None
        elif label_cover is not None:
            label_cover |= ls
            extent |= {(g, x) for g in ns for x in ls}
    # NICs / phases a provenance comment names but the capture holds nothing of (no packet at
    # all): a file left out, or the capture filtered after tokenpcap wrote it (tshark -w keeps
    # the comment): named, not compared. In a time slice they are compared (as bounds: 0 <= plan)
    seen_nics = {index[a] for e in rep.files for a in e["sources"] if a in index}
    seen_labels = {x for e in rep.files for x in e["labels"]}
    claimed = set() if bound else nic_cover - seen_nics     # a slice may lack whole NICs
    nic_cover -= claimed
    # a phase counts as missing only where the plan puts bytes on a NIC the capture covers
    # (a NIC that neither sends nor receives a phase has no packet of it to lose)
    cover = sorted(g for g in nic_cover if 0 <= g < pc.bytes.shape[0])
    expected = {labels[j] for j in np.flatnonzero(pc.bytes[cover].sum(axis=0)).tolist()} \
        if cover else set(labels)
    gone = ({x for _, x in extent} - seen_labels) & expected if labelled and not bound else set()
    extent = {(g, x) for g, x in extent if g not in claimed and x not in gone}
    named = any(p["phases"] is not None for p in provs)    # else the plan's phases, all
    for what, by in ((f"NICs {_ranges(sorted(claimed))}" if claimed else None,
                      "named by the provenance comment"),
                     (f"phases {sorted(gone)}" if gone else None,
                      "named by the provenance comment" if named else "in the plan")):
        if what:
            not_compared.append(f"{what}: {by} but absent from the capture (a file left out, "
                                "or filtered after tokenpcap wrote it)")
    col = {x: j for j, x in enumerate(labels)}
    out_cells, diffs = [], []

    def check(nic, phase, c, p):
        out_cells.append({"nic": nic, "phase": phase, "capture_bytes": c, "plan_bytes": p})
        if (c > p) if bound else (c != p):
            diffs.append({"what": "nic" if phase is None else "nic/phase",
                          "key": f"{nic}" if phase is None else f"{nic} {phase}",
                          "capture_bytes": c, "plan_bytes": p})

    if labelled:
        mode = "nic_phase"
        if label_cover is None:          # a file without comments among labelled ones
            not_compared.append("files without phase comments")
        for key in sorted(extent | set(cells), key=lambda k: (k[0], col[k[1]])):
            c, p = cells.get(key, 0), int(P[key[0], col[key[1]]])
            if c or p:
                check(key[0], key[1], c, p)
        if any(plain.values()):
            not_compared.append(f"{sum(plain.values()):,} payload bytes without a phase comment")
        lost = sorted({x for x in labels} - {k[1] for k in extent} - gone)
        if lost:
            not_compared.append(f"phases {lost}: not in the capture"
                                + (" (a selection)" if provs else ""))
    else:
        mode = "nic"
        use = label_cover
        if use is None:
            found, active = _infer_phases(plain, nic_cover, P, labels)
            if found and set(found[0]) == set(active):
                use = set(active)
            elif found:
                use = found[-1]
                notes.append("no phase comments: the per-NIC bytes equal the plan's "
                             + " or ".join(str(sorted(s)) for s in found[:3])
                             + " on every NIC held (those phases only, inferred)")
            else:
                use = set(active)
            if active:
                notes.append("no phase comments: compared per NIC")
        for g in sorted(nic_cover | set(plain)):
            p = int(sum(P[g, col[x]] for x in use)) if g < pc.nics else 0
            c = plain.get(g, 0)
            if c or p:
                check(g, None, c, p)
        if cts and any(rep.small_writes):
            notes.append(f"WRITE ONLY packets of {CTS_BYTES} B counted as clear-to-send "
                         "control (the run uses clear_to_send)")
    missing = sorted(set(range(pc.nics)) - nic_cover - claimed - {c["nic"] for c in out_cells})
    if missing:
        not_compared.append(f"{len(missing)} NICs not covered by the capture: "
                            f"{_ranges(missing)}")
    if diffs and prov is None and (scale_given, iter_given) == (False, False) and not bound:
        cap_total = sum(c["capture_bytes"] for c in out_cells)
        plan_total = sum(c["plan_bytes"] for c in out_cells)
        if cap_total and plan_total and max(cap_total, plan_total) >= 1.5 * min(cap_total,
                                                                                plan_total):
            k = round(plan_total / cap_total) if plan_total > cap_total else \
                round(cap_total / plan_total)
            hint = (f"the capture holds about 1/{k} of the plan's bytes: made with --scale {k}?"
                    if plan_total > cap_total else
                    f"the capture holds about {k} times the plan's bytes: --iterations {k}?")
            notes.append(hint + " (classic pcap and ERF do not record it: give --scale and "
                         "--iterations)")
    for what, b in unknown.items():
        diffs.append({"what": what.split()[0], "key": what.split(" ", 1)[1],
                      "capture_bytes": b, "plan_bytes": 0})
    phases = []
    for x in labels:
        sel = [c for c in out_cells if c["phase"] == x]
        if sel:
            phases.append({"name": x, "capture_bytes": sum(c["capture_bytes"] for c in sel),
                           "plan_bytes": sum(c["plan_bytes"] for c in sel)})
    nics: dict[int, dict] = {}
    for c in out_cells:
        e = nics.setdefault(c["nic"], {"nic": c["nic"], "capture_bytes": 0, "plan_bytes": 0})
        e["capture_bytes"] += c["capture_bytes"]
        e["plan_bytes"] += c["plan_bytes"]
    rep.against = {
        "scenario": str(scenario_path), "scale": scale, "iterations": n_iter, "source": source,
        "mismatch": mismatch, "mode": mode, "bound": bound, "compared": len(out_cells),
        "cells": out_cells,
        "phases": phases, "nics": sorted(nics.values(), key=lambda e: e["nic"]),
        "control_bytes": sum(control.values()), "differences": diffs,
        "not_compared": not_compared, "notes": notes,
        "note": "; ".join(([mismatch] if mismatch else []) + notes + not_compared) or None}
    return rep.against


def _ranges(values: list[int]) -> str:
    """``[0, 1, 2, 5]`` → ``"0-2,5"``."""
    out, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            out.append(f"{start}" if start == v else f"{start}-{v}")
            start = None
    return ",".join(out)
