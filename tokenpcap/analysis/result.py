"""What :func:`tokenpcap.analysis.inspect.inspect_capture` returns: :class:`Report` and its checks.

Kept apart from the reading and aggregating code (:mod:`tokenpcap.analysis.inspect`) so that renderers
(:mod:`tokenpcap.analysis.report`) and the plan comparison (:mod:`tokenpcap.analysis.against`)
depend on the result only.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from tokenpcap.analysis.decode import KIND_IB
from tokenpcap.records.provenance import index_ranges
from tokenpcap.records.text import counted

__all__ = ["Report", "FlowRows", "address_text", "NS_PER_S", "L1_OVERHEAD_BYTES",
           "MAX_LISTED_INDICES", "listed_indices"]

NS_PER_S = 1_000_000_000
#: FCS 4 + preamble/SFD 8 + inter-frame gap 12 (IEEE 802.3; case C12)
L1_OVERHEAD_BYTES = 24
#: Most NIC or rank indices of a provenance comment (``nics``, ``ranks``) the report lists one
#: by one; more are given as the comment's range text (``"0-1048575"``), so that the report of a
#: comment naming huge ranges stays as short as the comment (a range is a few bytes of comment,
#: a listed index about 12 bytes of indented JSON).
MAX_LISTED_INDICES = 1024
#: comment prefixes of control packets (clear-to-send writes, ACKs): their phase is reported as
#: ``"<label> [cts]"`` / ``"<label> [ack]"``, apart from the data of the phase


def address_text(kind: int, hi: int, lo: int) -> str:
    """Human text of a decoded address key: IPv4, IPv6/GID, or ``lid 0x0004`` for IB LIDs."""
    if kind == KIND_IB:
        return f"lid 0x{lo:04x}"
    if hi == 0 and lo < (1 << 32):
        return str(ipaddress.IPv4Address(lo))
    return str(ipaddress.IPv6Address((hi << 64) | lo))


def listed_indices(values):  # type: ignore[no-untyped-def]
    """A provenance index set as the report gives it: None (all), the list of indices when
    there are at most :data:`MAX_LISTED_INDICES`, else their range text
    (:func:`tokenpcap.records.provenance.index_ranges`, e.g. ``"0-1048575"``)."""
    if values is None:
        return None
    if len(values) <= MAX_LISTED_INDICES:
        return list(values)
    return index_ranges(values)


class FlowRows(Sequence):
    """The flows of a report, one dict per flow made when asked for (:meth:`Report.to_json`
    lists the keys), from columns: a capture of hundreds of thousands of flows holds a few
    int64 arrays instead of as many dicts (250,000 one-packet flows: 1.3 GB with ``--json``).

    Args:
        text: per flow, the columns whose values are not integers: ``transport``, ``src``,
            ``dst`` (lists of str, shared strings), ``cut`` (bool array), ``udp_sport`` (int64
            array, -1 for none: native IB).
        ints: int64 arrays ``(n,)`` of the integer columns, in the order of the dict.
    """

    def __init__(self, text: dict, ints: dict[str, np.ndarray]):
        self._text, self._ints = text, ints
        self._n = len(text["src"])

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        t = self._text
        sport = int(t["udp_sport"][i])
        row = {"transport": t["transport"][i], "src": t["src"][i], "dst": t["dst"][i],
               "dest_qp": int(self._ints["dest_qp"][i]),
               "udp_sport": None if sport < 0 else sport}
        row.update({k: int(v[i]) for k, v in self._ints.items() if k != "dest_qp"})
        row["cut"] = bool(t["cut"][i])
        return row

    def __iter__(self) -> Iterator[dict]:
        return (self[i] for i in range(self._n))

    def column(self, name: str):
        """One column: an int64 array, or the list of texts of ``transport``/``src``/``dst``."""
        return self._ints[name] if name in self._ints else self._text[name]

    def largest(self, n: int, by: str = "bytes") -> list[dict]:
        """The ``n`` flows with most ``by``, largest first (ties in flow order)."""
        order = np.argsort(-self._ints[by], kind="stable")[:n]
        return [self[int(i)] for i in order]


@dataclass
class Report:
    """What :func:`inspect_capture` found. Counts are ints; times are int ns since the epoch.

    ``flows`` (a :class:`FlowRows`), ``phases`` and ``nics`` are sequences of dicts (see
    :meth:`to_json`); ``phase_nic``
    maps ``(phase label, source address text) -> payload bytes`` for the plan comparison,
    ``small_writes`` ``(label, source, destination, payload bytes) -> packets`` of WRITE ONLY
    (0x0A) packets of at most 256 bytes, ``cut_sources`` source address -> flows with a message cut at the
    capture's edge. ``files``: per file ``{path, format, provenance, sources, labels}``
    (``provenance``: :func:`tokenpcap.records.provenance.parse_provenance` of its SHB comment, or
    None, in :meth:`to_json` with ``nics``/``ranks`` as :func:`listed_indices` gives them;
    ``sources``/``labels``: the sending addresses and phase labels it holds).
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
    flows: Sequence[dict] = field(default_factory=list)      # a FlowRows after inspection
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
                    v = listed_indices(p[key]) if key == "ranks" else p[key]
                    parts.append(f"{key}={v if isinstance(v, str) else ','.join(map(str, v))}")
            if p["time_window"] is not None:
                a, b = p["time_window"]
                parts.append(f"time_window={a}:{'' if b is None else b} ns")
            if p["iterations"][0] > 0:
                parts.append(f"iterations={p['iterations'][0]}:{p['iterations'][1]}")
            if p.get("point", "nic-tx").startswith("switch:"):
                parts.append(f"point={p['point']}")
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
             "detail": f"{r.get('icrc_bad', 0)} bad of {r.get('icrc_checked', 0)} checked"
                       if r.get("icrc_checked", 0) else
                       "none checked (--no-crc, or every RDMA frame cut before its ICRC)"},
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

    def to_json(self, *, lazy_flows: bool = False) -> dict:
        """Machine-readable report (``inspect --json``); every byte count is an int.
        ``lazy_flows``: ``flows`` is the :class:`FlowRows` itself (a sequence of dicts made on
        demand, for a streaming writer) instead of a list."""
        return {
            "file": self.path, "format": self.format, "packets": self.packets,
            "bytes": self.bytes, "captured_bytes": self.captured_bytes,
            "first_ns": self.first_ns, "last_ns": self.last_ns, "duration_ns": self.duration_ns,
            "l2_bps": self.rate_bps(self.bytes), "l1_bps": self.rate_bps(self.l1_bytes),
            "frame_bytes_min": self.frame_bytes_min, "frame_bytes_max": self.frame_bytes_max,
            "interfaces": self.interfaces, "kinds": self.kinds, "roce": self.roce,
            "pfc": self.pfc, "flows": self.flows if lazy_flows else list(self.flows),
            "phases": self.phases, "nics": self.nics,
            "files": [_listed(e) for e in self.files], "notes": self.notes,
            "idle_nics": self.idle_nics,
            "checks": self.checks(), "ok": self.ok, "truncated_at": self.truncated_at,
            **({"against": self.against} if self.against is not None else {}),
        }


def _listed(entry: dict) -> dict:
    """A ``files`` entry for the JSON report: its provenance's ``nics``/``ranks`` as
    :func:`listed_indices` gives them (tuples: as lists)."""
    p = entry.get("provenance")
    if not p:
        return entry
    return {**entry, "provenance": {**p, "nics": listed_indices(p["nics"]),
                                    "ranks": listed_indices(p["ranks"])}}


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
