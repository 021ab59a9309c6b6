"""What a queued fabric did during a run, as tables: PFC frames, queue depths, link and NIC
counters, drops. The vocabulary between the engine that fills them
(``Schedule.fabric_log()``), the side files that hold them
(:mod:`tokenpcap.generate.fabricfiles`) and the analysis that reads them
(:mod:`tokenpcap.analysis.fabric`, :mod:`tokenpcap.analysis.plot_fabric`).

A *fabric log* is a dict ``{table name: numpy structured array of shape (n,)}`` with exactly the
keys of :data:`FABRIC_TABLES` and exactly their dtypes (:func:`check_log`); the scalars of the
run are a :class:`FabricSummary`. Every column is described, with its unit, in
:data:`COLUMN_DOCS` (the side files' JSON carries the same text).

Conventions:

* **Time** is integer ns of simulation time since the start of the run (the clock of the
  schedule's messages). The captures of the same run carry ``time_ns + EPOCH_NS``
  (``tokenpcap.generate.options.EPOCH_NS``, 2024-01-01T00:00:00Z).
* **Switches** are numbered ``0 .. len(switch_names) - 1`` (``Topology.switch_names``); a
  switch's ports from 0. A link row describes one *egress* port and the direction leaving it;
  each cable appears twice, once per end (a NIC end only in the NIC table).
* **Bytes** are frame bytes on the wire without FCS (as ``PACKET_DTYPE.frame_bytes``), neither
  preamble nor inter-frame gap.
* **PFC** (IEEE 802.1Qbb clause 36, frame format in IEEE 802.3 Annex 31D): a MAC control frame
  (EtherType 0x8808, opcode 0x0101) with a pause time per priority in *quanta* of 512 bit times
  (:data:`PAUSE_QUANTUM_BITS`; 5.12 ns at 100 Gb/s, 1.28 ns at 400 Gb/s). A time > 0 is an XOFF
  (pause), 0 an XON (resume). A switch sends it *out of the ingress port* whose buffer fills, to
  the upstream device that sends into it, which then holds that priority's egress queue.
* **Lossless** classes (the PFC-enabled priorities, :attr:`FabricSummary.lossless_priorities`)
  never drop: a packet that arrives when the port's headroom is full is kept and counted in
  :attr:`FabricSummary.headroom_overflows` (headroom sized too small for the link's round trip).
"""
from __future__ import annotations

from dataclasses import MISSING, asdict, dataclass, fields

import numpy as np

from tokenpcap.errors import InputError

__all__ = ["PFC_EVENT_DTYPE", "QUEUE_DEPTH_DTYPE", "LINK_DTYPE", "NIC_FABRIC_DTYPE", "DROP_DTYPE",
           "FABRIC_TABLES", "COLUMN_DOCS", "PAUSE_QUANTUM_BITS", "DEFAULT_LOSSLESS_PRIORITIES",
           "FabricSummary", "empty_log", "check_log", "pause_ns"]

#: One row per PFC frame a switch sends. Shape ``(n,)``, sorted by ``time_ns``.
PFC_EVENT_DTYPE = np.dtype([("time_ns", "<i8"), ("switch", "<i4"), ("port", "<i4"),
                            ("priority", "u1"), ("xoff", "u1"), ("quanta", "<u2")])

#: One row per (sampling interval, switch, egress port, priority) whose queue was not empty.
#: Shape ``(n,)``, sorted by ``time_ns``; intervals that are absent had an empty queue.
QUEUE_DEPTH_DTYPE = np.dtype([("time_ns", "<i8"), ("switch", "<i4"), ("port", "<i4"),
                              ("priority", "u1"), ("max_bytes", "<i8")])

#: One row per switch egress port (its cable's direction away from the switch). Shape ``(n,)``.
LINK_DTYPE = np.dtype([("switch", "<i4"), ("port", "<i4"), ("peer_nic", "<i4"),
                       ("peer_switch", "<i4"), ("peer_port", "<i4"), ("gbps", "<f8"),
                       ("tx_frames", "<i8"), ("tx_bytes", "<i8"), ("pfc_sent", "<i8"),
                       ("pfc_received", "<i8"), ("paused_ns", "<i8"),
                       ("max_queue_bytes", "<i8")])

#: One row per NIC of the job (its side of the cable to its switch). Shape ``(n_nics,)``.
NIC_FABRIC_DTYPE = np.dtype([("nic", "<i4"), ("pfc_received", "<i8"), ("paused_ns", "<i8"),
                             ("rx_frames", "<i8"), ("rx_bytes", "<i8")])

#: One row per (switch, egress port, priority) that dropped packets. Shape ``(n,)``. Never a
#: lossless priority (those keep the packet and count a headroom overflow instead).
DROP_DTYPE = np.dtype([("switch", "<i4"), ("port", "<i4"), ("priority", "u1"),
                       ("packets", "<i8"), ("bytes", "<i8")])

#: The tables of a fabric log, in the order the side files list them: name → dtype.
FABRIC_TABLES: dict[str, np.dtype] = {
    "pfc": PFC_EVENT_DTYPE,
    "queues": QUEUE_DEPTH_DTYPE,
    "links": LINK_DTYPE,
    "nics": NIC_FABRIC_DTYPE,
    "drops": DROP_DTYPE,
}

#: Bits of one PFC pause quantum: IEEE 802.3 Annex 31B.2 (pause_time in units of 512 bit
#: times), used per priority by IEEE 802.1Qbb 36.1.3.
PAUSE_QUANTUM_BITS = 512

#: The PFC-enabled priority of RoCE deployments (SONiC and Cumulus default ``pfc_enable 3``;
#: HPCC ns-3 ``third.cc`` puts data in queue/priority 3).
DEFAULT_LOSSLESS_PRIORITIES: tuple[int, ...] = (3,)

_SWITCH = "switch index: Topology.switch_names[switch] (the side files add switch_name)"
_PORT = "port number on that switch, from 0"
_PRIO = "802.1p priority / traffic class, 0..7"

#: ``{table: {column: (unit, meaning)}}`` for every column of :data:`FABRIC_TABLES`; the unit is
#: ``""`` for counts and indices.
COLUMN_DOCS: dict[str, dict[str, tuple[str, str]]] = {
    "pfc": {
        "time_ns": ("ns", "the PFC frame's first bit leaves the switch port (simulation time)"),
        "switch": ("", _SWITCH),
        "port": ("", "port that sends the frame: the ingress port whose upstream is paused"),
        "priority": ("", _PRIO + " the frame pauses or resumes"),
        "xoff": ("", "1 XOFF (pause), 0 XON (resume)"),
        "quanta": ("512 bit times", "pause time in quanta of 512 bit times (IEEE 802.1Qbb); "
                   "0 for XON"),
    },
    "queues": {
        "time_ns": ("ns", "start of the sampling interval (fabric.qlen_sample_ns wide)"),
        "switch": ("", _SWITCH),
        "port": ("", "egress port of the queue"),
        "priority": ("", _PRIO + " of the queue"),
        "max_bytes": ("bytes", "largest egress queue of (port, priority) during the interval; "
                      "only intervals where it was > 0"),
    },
    "links": {
        "switch": ("", _SWITCH),
        "port": ("", "egress port"),
        "peer_nic": ("", "global NIC index at the other end of the cable, or -1"),
        "peer_switch": ("", "switch index at the other end of the cable, or -1"),
        "peer_port": ("", "port of peer_switch, or -1"),
        "gbps": ("Gb/s", "line rate of the link"),
        "tx_frames": ("frames", "frames sent by this egress port (PFC frames not included)"),
        "tx_bytes": ("bytes", "frame bytes (no FCS) sent by this egress port"),
        "pfc_sent": ("frames", "PFC frames this port sent upstream (XOFF and XON)"),
        "pfc_received": ("frames", "PFC frames this port received from its peer"),
        "paused_ns": ("ns", "time its lossless class was paused by the peer"),
        "max_queue_bytes": ("bytes", "largest egress queue of the port over the run, any "
                            "priority"),
    },
    "nics": {
        "nic": ("", "global NIC index (node * nics_per_node + local NIC)"),
        "pfc_received": ("frames", "PFC frames the NIC received from its switch"),
        "paused_ns": ("ns", "time the NIC's lossless class was paused"),
        "rx_frames": ("frames", "frames the switch delivered to the NIC"),
        "rx_bytes": ("bytes", "frame bytes (no FCS) the switch delivered to the NIC"),
    },
    "drops": {
        "switch": ("", _SWITCH),
        "port": ("", "egress port that dropped"),
        "priority": ("", _PRIO + " (never a lossless one)"),
        "packets": ("packets", "packets dropped"),
        "bytes": ("bytes", "frame bytes (no FCS) dropped"),
    },
}


@dataclass(frozen=True)
class FabricSummary:
    """The scalars of a queued-fabric run.

    Attributes:
        switch_names: name of switch ``i`` at index ``i`` (``Topology.switch_names``).
        packet_hops: packets forwarded by a switch, summed over the switches (a packet that
            crosses three switches counts 3).
        headroom_overflows: packets of a lossless class that arrived when their ingress
            headroom was full; kept, not dropped (module docstring).
        drops_total: packets dropped, all switches and priorities (the sum of the drop table).
        preset: name of the fabric preset (``hpcc-ns3`` ...), ``""`` when none.
        topology_kind: ``fabric.topology.kind`` (``rail-optimized``, ``leaf-spine`` ...).
        lossless_priorities: the PFC-enabled priorities (default
            :data:`DEFAULT_LOSSLESS_PRIORITIES`).
        qlen_sample_ns: width of a queue-depth sampling interval (``fabric.qlen_sample_ns``),
            0 when unknown.

    Raises:
        InputError: a negative count, a priority outside 0..7, names that are not strings.
    """

    switch_names: tuple[str, ...]
    packet_hops: int
    headroom_overflows: int
    drops_total: int
    preset: str
    topology_kind: str
    lossless_priorities: tuple[int, ...] = DEFAULT_LOSSLESS_PRIORITIES
    qlen_sample_ns: int = 0

    def __post_init__(self):
        object.__setattr__(self, "switch_names", tuple(self.switch_names))
        object.__setattr__(self, "lossless_priorities", tuple(self.lossless_priorities))
        if not all(isinstance(n, str) for n in self.switch_names):
            raise InputError(f"switch_names: got {self.switch_names!r}, expected strings")
        for name in ("packet_hops", "headroom_overflows", "drops_total", "qlen_sample_ns"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise InputError(f"{name}: got {v!r}, expected an integer >= 0")
            object.__setattr__(self, name, int(v))
        for p in self.lossless_priorities:
            if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or not 0 <= p <= 7:
                raise InputError(f"lossless_priorities: got {p!r}, expected priorities 0..7")
        object.__setattr__(self, "lossless_priorities",
                           tuple(int(p) for p in self.lossless_priorities))
        for name in ("preset", "topology_kind"):
            if not isinstance(getattr(self, name), str):
                raise InputError(f"{name}: got {getattr(self, name)!r}, expected a string")

    def to_json(self) -> dict:
        """A JSON-ready dict (tuples as lists), read back by :meth:`from_json`."""
        d = asdict(self)
        d["switch_names"] = list(self.switch_names)
        d["lossless_priorities"] = list(self.lossless_priorities)
        return d

    @classmethod
    def from_json(cls, doc: object, where: str = "summary") -> "FabricSummary":
        """The summary of :meth:`to_json`.

        Raises:
            InputError: ``where: KEY: got X, expected Y`` for a missing, unknown or bad key.
        """
        if not isinstance(doc, dict):
            raise InputError(f"{where}: got {type(doc).__name__}, expected an object")
        names = [f.name for f in fields(cls)]
        for k in doc:
            if k not in names:
                raise InputError(f"{where}: {k}: got an unknown key, expected one of "
                                 f"{', '.join(names)}")
        kw = {}
        for f in fields(cls):
            if f.name not in doc:
                if f.default is not MISSING:
                    continue
                raise InputError(f"{where}: {f.name}: got missing, expected a value")
            v = doc[f.name]
            if f.name in ("switch_names", "lossless_priorities"):
                if not isinstance(v, list):
                    raise InputError(f"{where}: {f.name}: got {v!r}, expected a list")
            kw[f.name] = v
        try:
            return cls(**kw)
        except InputError as err:
            raise InputError(f"{where}: {err}") from None


def empty_log() -> dict[str, np.ndarray]:
    """A fabric log with every table empty (an ideal fabric has nothing to report)."""
    return {name: np.zeros(0, dt) for name, dt in FABRIC_TABLES.items()}


def check_log(log: object) -> dict[str, np.ndarray]:
    """``log`` itself when it is a fabric log: a dict with exactly the tables of
    :data:`FABRIC_TABLES`, each a 1-D array of exactly its dtype.

    Raises:
        InputError: ``fabric log: TABLE: got ..., expected ...`` naming the first difference.
    """
    if not isinstance(log, dict):
        raise InputError(f"fabric log: got {type(log).__name__}, expected a dict of tables")
    extra = sorted(set(log) - set(FABRIC_TABLES))
    if extra:
        raise InputError(f"fabric log: got table {extra[0]!r}, expected only "
                         f"{', '.join(FABRIC_TABLES)}")
    for name, dt in FABRIC_TABLES.items():
        if name not in log:
            raise InputError(f"fabric log: {name}: got missing, expected a table")
        a = log[name]
        if not isinstance(a, np.ndarray) or a.ndim != 1:
            raise InputError(f"fabric log: {name}: got {type(a).__name__}, expected a 1-D "
                             "numpy structured array")
        if a.dtype != dt:
            raise InputError(f"fabric log: {name}: got dtype {a.dtype}, expected {dt}")
    return log


def pause_ns(quanta: np.ndarray | int, gbps: np.ndarray | float) -> np.ndarray:
    """Pause time in ns of ``quanta`` PFC quanta on a link of ``gbps`` Gb/s:
    ``quanta * 512 / gbps`` (:data:`PAUSE_QUANTUM_BITS` bit times; 65,535 quanta at 400 Gb/s
    are 83,884.8 ns). float64, broadcast shape of the arguments."""
    return np.asarray(quanta, np.float64) * PAUSE_QUANTUM_BITS / np.asarray(gbps, np.float64)
