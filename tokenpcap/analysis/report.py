"""Text rendering of an inspection :class:`~tokenpcap.analysis.inspect.Report` (``tokenpcap inspect``).

capinfos-style ``name: value`` lines for the totals, then tables of opcodes, flows, phases and
checks. Rates are printed in Gb/s (1 Gb/s = 10**9 bit/s) and times as integer ns next to UTC.
"""
from __future__ import annotations

from datetime import datetime, timezone

from tokenpcap.analysis.inspect import NS_PER_S, Report
from tokenpcap.records.text import counted

__all__ = ["render_text", "ns_text"]

MAX_FLOWS = 20
MAX_INTERFACES = 16
MAX_DIFFERENCES = 40


def ns_text(t: int | None) -> str:
    """``1700000000123456789 (2023-11-14 22:13:20.123456789 UTC)`` (exact, no float)."""
    if t is None:
        return "n/a"
    s, frac = divmod(t, NS_PER_S)
    when = datetime.fromtimestamp(s, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    return f"{t} ({when}.{frac:09d} UTC)"


def _files(path: str) -> str:
    names = path.split(", ")
    return path if len(names) <= 3 else f"{len(names)} files: {names[0]} ... {names[-1]}"


def _rate(bps: int | None) -> str:
    return "n/a" if bps is None else f"{bps / 1e9:,.3f} Gb/s ({bps:,} bit/s)"


def _table(rows: list[list[str]], head: list[str]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    fmt = lambda r: "  " + "  ".join(str(x).rjust(w) if i else str(x).ljust(w)  # noqa: E731
                                    for i, (x, w) in enumerate(zip(r, widths)))
    return [fmt(head)] + [fmt(r) for r in rows]


def _interfaces(interfaces: list[dict]) -> str:
    """One line per interface (at most :data:`MAX_INTERFACES`, then "... N more"); ERF ports
    show their port index."""
    out = []
    for i in interfaces[:MAX_INTERFACES]:
        port = f" (ERF port {i['port']})" if "port" in i else ""
        out.append(f"\n  #{i['index']} linktype {i['linktype']} {i['name'] or ''}".rstrip()
                   + port)
    if len(interfaces) > MAX_INTERFACES:
        out.append(f"\n  ... {len(interfaces) - MAX_INTERFACES:,} more (--json lists all)")
    return "".join(out)


def _against(a: dict) -> list[str]:
    """The ``--against`` block: what was compared, at which scale, what not, the differences."""
    it = a["iterations"]
    lines = [f"Against the plan of {a['scenario']} (scale {a['scale']}, {it} iteration"
             f"{'s' if it != 1 else ''}{'; ' + a['source'] if a.get('source') else ''}):"]
    if a.get("mismatch"):
        lines.append(f"  MISMATCH:      {a['mismatch']}: the differences below follow from it")
    unit = "(NIC, phase) cells" if a["mode"] == "nic_phase" else "NICs (total per NIC)"
    how = "as upper bounds" if a["bound"] else "exactly"
    lines.append(f"  compared:      {a['compared']:,} {unit}, {how}" if a["compared"] else
                 "  compared:      nothing comparable")
    if a.get("control_bytes"):
        lines.append(f"  left out:      {a['control_bytes']:,} payload bytes of control "
                     "traffic (clear-to-send)")
    lines += [f"  not compared:  {x}" for x in a.get("not_compared", [])]
    lines += [f"  note:          {x}" for x in a.get("notes", [])]
    diffs = a["differences"]
    lines += [f"  {d['what']} {d['key']}: capture {d['capture_bytes']:,} B, plan "
              f"{d['plan_bytes']:,} B" for d in diffs[:MAX_DIFFERENCES]]
    if len(diffs) > MAX_DIFFERENCES:
        lines.append(f"  ... {len(diffs) - MAX_DIFFERENCES:,} more differences (--json lists all)")
    if not diffs and a["compared"]:
        lines.append("  no difference in what was compared")
    return lines


def render_text(rep: Report) -> str:
    """The human report; ends with one line per check (``ok``/``FAIL``)."""
    j = rep.to_json()
    lines = [
        f"File name:           {_files(rep.path)}",
        f"File format:         {rep.format}",
        f"Interfaces:          {len(rep.interfaces)}" + _interfaces(rep.interfaces),
        f"Number of packets:   {rep.packets:,}",
        f"Bytes (wire):        {rep.bytes:,}" + (f" (captured {rep.captured_bytes:,})"
                                                 if rep.captured_bytes != rep.bytes else ""),
        "Frame sizes:         " + ("n/a" if rep.frame_bytes_max is None else
                                      f"{rep.frame_bytes_min:,} .. {rep.frame_bytes_max:,} bytes"
                                      + (f" (replay needs MTU >= {rep.eth_frame_bytes_max - 14:,})"
                                         if rep.ethernet_frames else "")),
        f"First packet:        {ns_text(rep.first_ns)}",
        f"Last packet:         {ns_text(rep.last_ns)}",
        f"Duration:            {rep.duration_ns:,} ns",
        f"Layer-2 rate:        {_rate(j['l2_bps'])}",
        f"Layer-1 rate:        {_rate(j['l1_bps'])}"
        + ("  (+FCS, preamble, IFG per Ethernet frame)" if rep.ethernet_frames else ""),
        "Packet kinds:        " + (", ".join(f"{k} {v:,}" for k, v in rep.kinds.items()) or "-"),
    ]
    r = rep.roce
    if r.get("packets"):
        e = r["ecn"]
        lines += [
            "",
            f"RDMA packets:        {r['packets']:,} in {counted(r['flows'], 'flow')} "
            "(src, dst, DestQP)",
            f"RDMA payload:        {r['payload_bytes']:,} bytes",
            "ICRC:                " + ("not checked (--no-crc)" if r.get("icrc_skipped") else
                                          f"{r['icrc_ok']:,} ok, {r['icrc_bad']:,} bad, "
                                          f"{r['icrc_unchecked']:,} not checkable (truncated)"),
        ]
        if r.get("malformed"):
            lines.append(f"Malformed:           {r['malformed']:,} ("
                         + ", ".join(f"{k} {v:,}" for k, v in r["malformed_reasons"].items())
                         + "; not in payload, PSN, ECN or BECN counts)")
        if r["vcrc_ok"] or r["vcrc_bad"]:
            lines.append(f"VCRC:                {r['vcrc_ok']:,} ok, {r['vcrc_bad']:,} bad")
        lines += [
            f"PSN:                 {counted(r['psn_gaps'], 'gap')} ({r['psn_missing']:,} missing), "
            f"{r['psn_reordered']:,} late/duplicate",
            f"CNP:                 {r['cnp']:,}   FECN {r['fecn']:,}   BECN {r['becn']:,}",
        ]
        if rep.kinds.get("RoCEv2") or rep.kinds.get("RoCEv1"):      # IP ECN: not on native IB
            lines.append(f"ECN:                 CE {e['ce']:,}, ECT(0) {e['ect0']:,}, "
                         f"ECT(1) {e['ect1']:,}, Not-ECT {e['not_ect']:,}")
        lines += [
            "Opcodes:",
            *_table([[k, f"{v:,}"] for k, v in r["opcodes"].items()], ["opcode", "packets"]),
        ]
    if rep.pfc.get("frames"):
        p = rep.pfc
        lines.append(f"PFC pause frames:    {p['frames']:,} (XOFF {p['xoff']:,}, "
                     f"XON {p['xon']:,}); "
                     f"priorities {', '.join(f'{k}: {v}' for k, v in p['priorities'].items())}")
    if rep.flows:
        flows = (rep.flows.largest(MAX_FLOWS) if hasattr(rep.flows, "largest") else
                 sorted(rep.flows, key=lambda f: -f["bytes"])[:MAX_FLOWS])
        lines += ["", f"Flows (largest {len(flows)} of {len(rep.flows)}):", *_table(
            [[f["transport"], f["src"], f["dst"], f"0x{f['dest_qp']:06x}", f"{f['packets']:,}",
              f"{f['payload_bytes']:,}", f["psn_gaps"], f["icrc_bad"]] for f in flows],
            ["transport", "src", "dst", "DestQP", "packets", "payload B", "PSN gaps", "ICRC bad"])]
    if len(rep.nics) > 1:
        nics = sorted(rep.nics, key=lambda e: -e["bytes"])[:MAX_FLOWS]
        lines += ["", f"Sending NICs (largest {len(nics)} of {len(rep.nics)}):", *_table(
            [[e["address"], f"{e['flows']:,}", f"{e['packets']:,}", f"{e['bytes']:,}",
              f"{e['payload_bytes']:,}"] for e in nics],
            ["address", "flows", "packets", "bytes", "payload B"])]
    if rep.phases and not (len(rep.phases) == 1 and rep.phases[0]["name"] == "(no phase)"):
        lines += ["", "Phases (pcapng comments):", *_table(
            [[p["name"], f"{p['packets']:,}", f"{p['payload_bytes']:,}"] for p in rep.phases],
            ["phase", "packets", "payload B"])]
    if rep.notes:
        lines += ["", "Notes:"] + [f"  {x}" for x in rep.notes[:MAX_DIFFERENCES]]
        if len(rep.notes) > MAX_DIFFERENCES:
            lines.append(f"  ... {len(rep.notes) - MAX_DIFFERENCES:,} more (--json lists all)")
    if rep.against is not None:
        lines += ["", *_against(rep.against)]
    lines += ["", "Checks:"] + [f"  {'ok  ' if c['ok'] else 'FAIL'} {c['name']}: {c['detail']}"
                                for c in rep.checks()]
    return "\n".join(lines)
