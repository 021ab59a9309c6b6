"""``inspect --against SCENARIO``: compare a capture's RDMA payload bytes with the plan.

The plan (:func:`tokenpcap.plan.build_plan`) says, per phase label, how many payload bytes all
ranks put on their NICs in one iteration (``PhaseRow.nic_bytes``) and, per NIC, how many bytes it
sends (``Plan.nic_bytes_per_nic``). The capture gives the same numbers by pcapng phase comment and
by source address; source addresses map to NIC indices with
:func:`tokenpcap.addresses.nic_addresses` (NIC ``g`` always has the same MAC/IP/LID).

Control traffic (ACKs carry no payload; clear-to-send writes carry 64 bytes each) is not in the
plan: the generator's comments mark it (``cts ``/``ack `` prefixes, reported as ``"<label>
[cts]"``), and per-NIC bytes of a labelled capture count the plan's phases only. Phases the plan
does not know and the ``(no phase)`` bucket are reported but not compared. A capture of a
selection (some NICs, phases) is compared on what it holds: NICs and phases absent from the
capture are differences only when ``complete=True``, and per-NIC bytes are not compared when a
planned phase is missing (``note`` says so).

This is the one analysis module that imports the generator's side (plan, profiles, addresses).
"""
from __future__ import annotations

import ipaddress

from tokenpcap.analysis import Report

__all__ = ["compare_with_plan", "nic_index_by_address"]


def nic_index_by_address(cluster) -> dict[str, int]:
    """Address text (as :func:`tokenpcap.analysis.address_text` prints it) → global NIC index,
    for IPv4, IPv6 and LIDs of every NIC of ``cluster``."""
    from tokenpcap.addresses import nic_addresses

    a = nic_addresses(cluster)
    out: dict[str, int] = {}
    for g in range(len(a)):
        out[str(ipaddress.IPv4Address(bytes(a.ipv4[g])))] = g
        out[str(ipaddress.IPv6Address(bytes(a.ipv6[g])))] = g
        out[f"lid 0x{int(a.lid[g]):04x}"] = g
    return out


def _capture_nics(rep: Report, index: dict[str, int], plan_phase: dict | None
                  ) -> tuple[dict[int, int], dict[str, int]]:
    """Payload bytes per global NIC (and per unknown address) of the capture; with phase labels,
    the plan's phases only (control packets are not in the plan)."""
    if plan_phase is not None:
        pairs = [(addr, b) for (lab, addr), b in rep.phase_nic.items() if lab in plan_phase]
    else:
        pairs = [(n["address"], n["payload_bytes"]) for n in rep.nics]
    cap_nic: dict[int, int] = {}
    unknown: dict[str, int] = {}
    for addr, b in pairs:
        g = index.get(addr)
        if g is None:
            unknown[addr] = unknown.get(addr, 0) + b
        else:
            cap_nic[g] = cap_nic.get(g, 0) + b
    return cap_nic, unknown


def compare_with_plan(rep: Report, scenario_path: str, *, complete: bool = False) -> dict:
    """Fill ``rep.against`` with the comparison and return it.

    Returns:
        ``{"scenario", "phases": [{name, capture_bytes, plan_bytes}], "nics": [{nic,
        capture_bytes, plan_bytes}], "differences": [{what, key, capture_bytes, plan_bytes}],
        "note"}``; ``capture_bytes`` is None for what the capture does not hold.

    Raises:
        ProfileError, InfeasiblePlanError: the scenario cannot be loaded or planned.
    """
    from tokenpcap.plan import build_plan
    from tokenpcap.profiles import load_scenario

    scenario = load_scenario(scenario_path)
    plan = build_plan(scenario)
    cap_phase = {p["name"]: p["payload_bytes"] for p in rep.phases}
    plan_phase = {r.name: int(r.nic_bytes) for r in plan.rows if r.nic_bytes}
    labelled = any(name in plan_phase for name in cap_phase)
    index = nic_index_by_address(scenario.cluster)
    per_nic = plan.nic_bytes_per_nic()
    cap_nic, unknown = _capture_nics(rep, index, plan_phase if labelled else None)
    missing_phases = sorted(set(plan_phase) - set(cap_phase)) if labelled else []
    missing_nics = [g for g in range(per_nic.size) if per_nic[g] and g not in cap_nic]
    notes, diffs = [], []
    phases = [{"name": n, "capture_bytes": cap_phase.get(n), "plan_bytes": plan_phase.get(n)}
              for n in sorted(set(cap_phase) | set(plan_phase))]
    if missing_nics and not complete:
        notes.append(f"per-phase bytes not compared: the capture lacks NICs {missing_nics[:16]}"
                     f"{' ...' if len(missing_nics) > 16 else ''} (a selection); the plan's "
                     "per-phase bytes count every NIC")
    elif labelled or complete:
        for e in phases:
            c, p = e["capture_bytes"], e["plan_bytes"]
            if p is not None and (c is not None or complete) and (c or 0) != p:
                diffs.append({"what": "phase", "key": e["name"], "capture_bytes": c or 0,
                              "plan_bytes": p})
    nics = [{"nic": g, "capture_bytes": cap_nic.get(g), "plan_bytes": int(per_nic[g])}
            for g in range(per_nic.size) if per_nic[g] or g in cap_nic]
    if missing_phases and not complete:
        notes.append(f"per-NIC bytes not compared: the capture lacks phases {missing_phases} "
                     "(a selection); the plan's per-NIC bytes count every phase")
    else:
        for e in nics:
            c, p = e["capture_bytes"], e["plan_bytes"]
            if (c is not None or complete) and (c or 0) != p:
                diffs.append({"what": "nic", "key": str(e["nic"]), "capture_bytes": c or 0,
                              "plan_bytes": p})
    for addr, b in unknown.items():
        diffs.append({"what": "nic", "key": addr, "capture_bytes": b, "plan_bytes": 0})
    note = "; ".join(notes) or None
    rep.against = {"scenario": str(scenario_path), "phases": phases, "nics": nics,
                   "differences": diffs, "note": note}
    return rep.against
