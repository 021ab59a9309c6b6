"""What congestion control did, from a run's congestion-control side files
(:mod:`tokenpcap.records.cc`, read by :func:`tokenpcap.generate.ccfiles.read_cc_files`): the
CE marks and CNPs per QP for ``tokenpcap inspect --fabric``.

:func:`cc_report` counts, per QP that saw a CE mark or a CNP, the packets of its data that
arrived CE-marked at its peer and the CNPs that reached it (the ``ce_qps`` table), and the rows
of the ``cnps`` table that name it; in total, the CE marks switch ports made (``ce_ports``) and
the DCQCN rate changes (``rates``). Check ``cc-cnps``: per QP the CNP events of the ``cnps``
table equal its ``cnps_received`` counter (the engine counts the two apart).
"""
from __future__ import annotations

import numpy as np

from tokenpcap.records.text import counted

__all__ = ["cc_report", "render_cc_text", "MAX_QP_ROWS"]

#: most QP rows of the text output (``--json`` lists all)
MAX_QP_ROWS = 40


def cc_report(log: dict[str, np.ndarray]) -> dict:
    """The counts of the module docstring as a JSON-ready dict.

    Args:
        log: a congestion-control log (``{table: array}``, :data:`tokenpcap.records.cc.CC_TABLES`).

    Returns:
        ``{"cnps", "rate_changes", "ce_marked", "ce_received", "cnps_received", "qps": [{qp,
        src_nic, dst_nic, ce_received, cnps_received, cnp_events}], "checks": [...]}``, QP rows
        by ``qp``.
    """
    cnps, qps = log["cnps"], log["ce_qps"]
    ids, n = np.unique(cnps["qp"], return_counts=True)
    events = dict(zip(ids.tolist(), n.tolist()))
    rows = [{"qp": int(q["qp"]), "src_nic": int(q["src_nic"]), "dst_nic": int(q["dst_nic"]),
             "ce_received": int(q["ce_received"]), "cnps_received": int(q["cnps_received"]),
             "cnp_events": events.get(int(q["qp"]), 0)} for q in np.sort(qps, order="qp")]
    missing = sorted(set(events) - {r["qp"] for r in rows})
    bad = [r for r in rows if r["cnp_events"] != r["cnps_received"]]
    detail = (f"{counted(len(rows), 'QP')}: CNP events equal cnps_received"
              if not bad and not missing else
              f"qp {bad[0]['qp']}: {bad[0]['cnp_events']:,} CNP events, cnps_received "
              f"{bad[0]['cnps_received']:,}" if bad else
              f"qp {missing[0]}: CNP events but no ce_qps row")
    return {"cnps": int(cnps.size), "rate_changes": int(log["rates"].size),
            "ce_marked": int(log["ce_ports"]["ce_marked"].sum()),
            "ce_received": int(qps["ce_received"].sum()),
            "cnps_received": int(qps["cnps_received"].sum()), "qps": rows,
            "checks": [{"name": "cc-cnps", "ok": not bad and not missing, "detail": detail}]}


def render_cc_text(doc: dict) -> list[str]:
    """The lines of ``inspect``'s fabric block for :func:`cc_report`'s ``doc``."""
    lines = [f"  CE marks:            {doc['ce_marked']:,} by switch ports, "
             f"{doc['ce_received']:,} received",
             f"  CNPs:                {doc['cnps']:,} ({doc['cnps_received']:,} received); "
             f"DCQCN rate changes {doc['rate_changes']:,}"]
    qps = doc["qps"]
    if qps:
        lines.append("    qp" + " " * 8 + "src nic  dst nic  CE received  CNPs received")
        lines += [f"    {r['qp']:<10}{r['src_nic']:>7}  {r['dst_nic']:>7}  "
                  f"{r['ce_received']:>11,}  {r['cnps_received']:>13,}" for r in qps[:MAX_QP_ROWS]]
        if len(qps) > MAX_QP_ROWS:
            lines.append(f"    ... {MAX_QP_ROWS} of {len(qps):,} QPs shown (--json lists all)")
    return lines
