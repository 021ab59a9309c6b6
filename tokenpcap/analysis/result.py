"""What :func:`tokenpcap.analysis.inspect.inspect_capture` returns: :class:`Report` and its checks.

Kept apart from the reading and aggregating code (:mod:`tokenpcap.analysis.inspect`) so that renderers
(:mod:`tokenpcap.analysis.report`) and the plan comparison (:mod:`tokenpcap.analysis.against`)
depend on the result only.
"""
from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from tokenpcap.analysis.decode import KIND_IB
from tokenpcap.records.text import counted

__all__ = ["Report", "address_text", "NS_PER_S", "L1_OVERHEAD_BYTES"]

NS_PER_S = 1_000_000_000
#: FCS 4 + preamble/SFD 8 + inter-frame gap 12 (IEEE 802.3; case C12)
L1_OVERHEAD_BYTES = 24
#: comment prefixes of control packets (clear-to-send writes, ACKs): their phase is reported as
#: ``"<label> [cts]"`` / ``"<label> [ack]"``, apart from the data of the phase


def address_text(kind: int, hi: int, lo: int) -> str:
    """Human text of a decoded address key: IPv4, IPv6/GID, or ``lid 0x0004`` for IB LIDs."""
    if kind == KIND_IB:
        return f"lid 0x{lo:04x}"
    if hi == 0 and lo < (1 << 32):
        return str(ipaddress.IPv4Address(lo))
    return str(ipaddress.IPv6Address((hi << 64) | lo))


@dataclass
class Report:
    """What :func:`inspect_capture` found. Counts are ints; times are int ns since the epoch.

    ``flows``, ``phases`` and ``nics`` are lists of dicts (see :meth:`to_json`); ``phase_nic``
    maps ``(phase label, source address text) -> payload bytes`` for the plan comparison,
    ``small_writes`` ``(label, source, destination, payload bytes) -> packets`` of WRITE ONLY
    (0x0A) packets of at most 256 bytes, ``cut_sources`` source address -> flows with a message cut at the
    capture's edge. ``files``: per file ``{path, format, provenance, sources, labels}``
    (``provenance``: :func:`tokenpcap.records.provenance.parse_provenance` of its SHB comment, or
    None; ``sources``/``labels``: the sending addresses and phase labels it holds).
    """

    path: str
    format: str
    packets: int = 0
    bytes: int = 0
    captured_bytes: int = 0
    first_ns: int | None = None
    last_ns: int | None = None
    l1_bytes: int = 0
    frame_bytes_min: int | None = None
    frame_bytes_max: int | None = None
    kinds: dict[str, int] = field(default_factory=dict)
    interfaces: list[dict] = field(default_factory=list)
    roce: dict = field(default_factory=dict)
    pfc: dict = field(default_factory=dict)
    flows: list[dict] = field(default_factory=list)
    phases: list[dict] = field(default_factory=list)
    nics: list[dict] = field(default_factory=list)
    phase_nic: dict[tuple[str, str], int] = field(default_factory=dict)
    small_writes: dict[tuple[str, str, str, int], int] = field(default_factory=dict)
    cut_sources: dict[str, int] = field(default_factory=dict)
    files: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: NICs of the capture that send no data: ``{"nic", "address", "packets", "reason"}`` with
    #: reason ``control_only`` (clear-to-send writes and ACKs) or ``no_packet``.
    idle_nics: list[dict] = field(default_factory=list)
    ethernet_frames: int = 0
    eth_frame_bytes_max: int = 0
    truncated_at: int | None = None
    against: dict | None = None

    @property
    def duration_ns(self) -> int:
        """last − first (0 for fewer than two timestamps)."""
        if self.first_ns is None or self.last_ns is None:
            return 0
        return self.last_ns - self.first_ns

    def rate_bps(self, nbytes: int) -> int | None:
        """``nbytes * 8 / duration`` in bit/s (integer, floor), None without a duration."""
        d = self.duration_ns
        return nbytes * 8 * NS_PER_S // d if d > 0 else None

    @property
    def selection(self) -> str | None:
        """What the capture's provenance comments say it leaves out (phases, ranks, a time
        window, earlier iterations), e.g. ``"phases=pp"``; None for a capture of everything or
        without provenance."""
        parts: list[str] = []
        for e in self.files:
            p = e.get("provenance")
            if not p or not p["selection"]:
                continue
            for key in ("phases", "ranks"):
                if p[key] is not None:
                    parts.append(f"{key}={','.join(map(str, p[key]))}")
            if p["time_window"] is not None:
                a, b = p["time_window"]
                parts.append(f"time_window={a}:{'' if b is None else b} ns")
            if p["iterations"][0] > 0:
                parts.append(f"iterations={p['iterations'][0]}:{p['iterations'][1]}")
        return " ".join(dict.fromkeys(parts)) or None

    def checks(self) -> list[dict]:
        """Every check with ``name``, ``ok`` and ``detail``; ``--strict`` fails on any not ok.

        PSN gaps in a capture whose provenance says it is a selection (:attr:`selection`) are
        expected (the selection leaves out packets of the QPs it shows) and do not fail; late
        packets still do."""
        r = self.roce
        gaps, late = r.get("psn_gaps", 0), r.get("psn_reordered", 0)
        psn = (f"{counted(gaps, 'gap')} ({counted(r.get('psn_missing', 0), 'PSN')} missing), "
               f"{late:,} late")
        sel = self.selection
        if sel and gaps:
            psn += f"; gaps expected in a selection ({sel})"
        reasons = r.get("malformed_reasons") or {}
        out = [
            {"name": "icrc", "ok": r.get("icrc_bad", 0) == 0,
             "detail": f"{r.get('icrc_bad', 0)} bad of {r.get('icrc_checked', 0)} checked"},
            {"name": "vcrc", "ok": r.get("vcrc_bad", 0) == 0,
             "detail": f"{r.get('vcrc_bad', 0)} bad"},
            {"name": "psn", "ok": late == 0 and (gaps == 0 or sel is not None), "detail": psn},
            {"name": "lengths", "ok": r.get("malformed", 0) == 0,
             "detail": f"{r.get('malformed', 0)} malformed RDMA packets" + (
                 " (" + ", ".join(f"{k} {v}" for k, v in reasons.items()) + ")"
                 if reasons else "")},
            {"name": "complete", "ok": self.truncated_at is None,
             "detail": "file complete" if self.truncated_at is None else
                       f"file truncated at byte offset {self.truncated_at}"},
        ]
        if self.against is not None:
            a = self.against
            out.append({"name": "against", "ok": a.get("compared", 0) > 0 and not a["differences"],
                         "detail": against_detail(a)})
        return out

    @property
    def ok(self) -> bool:
        """All checks pass."""
        return all(c["ok"] for c in self.checks())

    def to_json(self) -> dict:
        """Machine-readable report (``inspect --json``); every byte count is an int."""
        return {
            "file": self.path, "format": self.format, "packets": self.packets,
            "bytes": self.bytes, "captured_bytes": self.captured_bytes,
            "first_ns": self.first_ns, "last_ns": self.last_ns, "duration_ns": self.duration_ns,
            "l2_bps": self.rate_bps(self.bytes), "l1_bps": self.rate_bps(self.l1_bytes),
            "frame_bytes_min": self.frame_bytes_min, "frame_bytes_max": self.frame_bytes_max,
            "interfaces": self.interfaces, "kinds": self.kinds, "roce": self.roce,
            "pfc": self.pfc, "flows": self.flows, "phases": self.phases, "nics": self.nics,
            "files": self.files, "notes": self.notes, "idle_nics": self.idle_nics,
            "checks": self.checks(), "ok": self.ok, "truncated_at": self.truncated_at,
            **({"against": self.against} if self.against is not None else {}),
        }


def against_detail(a: dict) -> str:
    """The ``against`` check's one line: a scenario mismatch first, then the differing cells out
    of those compared, then the capture addresses the plan has no NIC for (counted apart: they
    are not among the compared)."""
    n = a.get("compared", 0)
    cell = sum(d["what"] in ("nic", "nic/phase") for d in a["differences"])
    extra = len(a["differences"]) - cell
    unit = "cells" if a.get("mode") == "nic_phase" else "NICs"
    parts = [a["mismatch"]] if a.get("mismatch") else []
    parts.append(f"{cell} of {n} compared {unit} differ from the plan" if n
                 else "nothing comparable with the plan")
    if extra:
        parts.append(f"{extra} capture addresses have no NIC in the plan")
    return "; ".join(parts)
