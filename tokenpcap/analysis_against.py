"""``inspect --against SCENARIO``: compare a capture's RDMA payload bytes with the plan.

The plan (:func:`tokenpcap.plan.build_plan`) says, per phase label, how many payload bytes all
ranks put on their NICs in one iteration (``PhaseRow.nic_bytes``) and, per NIC, how many bytes it
sends (``Plan.nic_bytes_per_nic``). The capture gives the same numbers by pcapng phase comment and
by source address; source addresses map to NIC indices with
:func:`tokenpcap.addresses.nic_addresses` (NIC ``g`` always has the same MAC/IP/LID).

Control traffic (ACKs carry no payload; clear-to-send writes carry a few bytes each) is not in
the plan: phases the plan does not know and the ``(no phase)`` bucket are reported but only
compared when the plan has them. A capture of a selection (some NICs, phases) is compared on
what it holds: NICs and phases absent from the capture are listed as ``missing`` and are
differences only when ``complete=True``.

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


def compare_with_plan(rep: Report, scenario_path: str, *, complete: bool = False) -> dict:
    """Fill ``rep.against`` with the comparison and return it.

    Returns:
        ``{"scenario", "phases": [{name, capture_bytes, plan_bytes}], "nics": [{nic, address,
        capture_bytes, plan_bytes}], "differences": [{what, key, capture_bytes, plan_bytes}]}``.

    Raises:
        ProfileError, InfeasiblePlanError: the scenario cannot be loaded or planned.
    """
    from tokenpcap.plan import build_plan
    from tokenpcap.profiles import load_scenario

    scenario = load_scenario(scenario_path)
    plan = build_plan(scenario)
    cap_phase = {p["name"]: p["payload_bytes"] for p in rep.phases}
    plan_phase = {r.name: int(r.nic_bytes) for r in plan.rows if r.nic_bytes}
    phases, diffs = [], []
    for name in sorted(set(cap_phase) | set(plan_phase)):
        c, p = cap_phase.get(name), plan_phase.get(name)
        phases.append({"name": name, "capture_bytes": c, "plan_bytes": p})
        if p is None:
            continue                       # control traffic / unlabelled: not in the plan
        if c is None and not complete:
            continue
        if (c or 0) != p:
            diffs.append({"what": "phase", "key": name, "capture_bytes": c or 0, "plan_bytes": p})
    index = nic_index_by_address(scenario.cluster)
    per_nic = plan.nic_bytes_per_nic()
    cap_nic: dict[int, int] = {}
    unknown = []
    for n in rep.nics:
        g = index.get(n["address"])
        if g is None:
            unknown.append(n["address"])
            continue
        cap_nic[g] = cap_nic.get(g, 0) + n["payload_bytes"]
    nics = []
    for g in range(per_nic.size):
        c, p = cap_nic.get(g), int(per_nic[g])
        if c is None and p == 0:
            continue
        nics.append({"nic": g, "capture_bytes": c, "plan_bytes": p})
        if c is None and not complete:
            continue
        if (c or 0) != p:
            diffs.append({"what": "nic", "key": str(g), "capture_bytes": c or 0, "plan_bytes": p})
    for addr in unknown:
        diffs.append({"what": "nic", "key": addr, "capture_bytes": next(
            n["payload_bytes"] for n in rep.nics if n["address"] == addr), "plan_bytes": 0})
    rep.against = {"scenario": str(scenario_path), "phases": phases, "nics": nics,
                   "differences": diffs}
    return rep.against
