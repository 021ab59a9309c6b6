"""What a generate run is asked for and what it reports: :class:`GenerateOptions` (the CLI options
of the same names) and their check, :class:`GenerateResult`, the constants that fix a run's bytes
(:data:`EPOCH_NS`, :data:`MAX_SEED`) and its choices (:data:`FORMATS`, :data:`SPLITS`), and the
section comment that records all of them in every pcapng file (:func:`provenance_comment`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tokenpcap.config.profiles import MAX_SEED, Scenario
from tokenpcap.errors import InputError, OutputError
from tokenpcap.generate.select import OPEN_END_NS, Selection
from tokenpcap.pcap.registry import CAPTURE_FORMATS, capture_format
from tokenpcap.plan.build import Plan
from tokenpcap.records.points import NIC_TX, CapturePoint
from tokenpcap.records.provenance import MAX_SCALE, provenance_comment as _provenance_line
from tokenpcap.schedule.runner import Schedule

__all__ = ["EPOCH_NS", "MAX_SEED", "FORMATS", "SPLITS", "GenerateOptions", "GenerateResult",
           "check_options", "provenance_comment"]

#: Time of the first event of a run: 2024-01-01T00:00:00Z in ns since the epoch.
EPOCH_NS = 1_704_067_200 * 1_000_000_000
#: The ``--format`` choices: the registered capture formats.
FORMATS = tuple(CAPTURE_FORMATS)
#: The ``--split`` choices: one file per NIC, per phase label, or one file.
SPLITS = ("nic", "phase", "none")


@dataclass(frozen=True)
class GenerateOptions:
    """Options of :func:`generate` (module docstring; the CLI options of the same names).
    ``point``: where the frames are captured (:mod:`tokenpcap.records.points`; ``--point``)."""

    out_dir: Path
    fmt: str = "pcapng"
    split: str = "nic"
    snaplen: int = 262144
    scale: int = 1
    seed: int | None = None
    iterations: int | None = None
    selection: Selection = field(default_factory=Selection)
    jobs: int = 1
    force: bool = False
    point: CapturePoint = NIC_TX


@dataclass
class GenerateResult:
    """What was written: ``files`` ``[(path, packets, bytes)]``, totals, per-phase payload of data
    packets ``{label: bytes}``, per-NIC data payload (int64 per sending NIC), control traffic
    (CTS, ACKs, CNPs, and the PFC frames of switch ports at an ``nic-rx`` or switch point), span;
    ``plan`` is the plan at the run's scale (one iteration), ``iterations`` the kept iterations
    ``(A, B)``, so a full capture's payload is ``plan`` totals × ``B − A``; with a queued fabric
    ``fabric_files`` are the side files of what it did and ``fabric`` its
    :class:`~tokenpcap.records.fabric.FabricSummary` (none otherwise); ``point`` the capture
    point, which says what ``expected_bytes`` predicts (:mod:`tokenpcap.generate.size`)."""

    files: list[tuple[Path, int, int]]
    packets: int = 0
    file_bytes: int = 0
    expected_bytes: int = 0
    phase_payload: dict[str, int] = field(default_factory=dict)
    phase_packets: dict[str, int] = field(default_factory=dict)
    nic_payload: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cts_packets: int = 0
    cts_payload: int = 0
    ack_packets: int = 0
    cnp_packets: int = 0
    pfc_packets: int = 0
    first_ns: int = -1
    last_ns: int = -1
    seconds: float = 0.0
    plan: Plan | None = None
    schedule: Schedule | None = None
    iterations: tuple[int, int] = (0, 1)
    scale: int = 1
    selection: Selection | None = None
    fabric_files: list = field(default_factory=list)
    fabric: object | None = None
    point: CapturePoint = NIC_TX


def check_options(s: Scenario, opt: GenerateOptions) -> None:
    """Refuse options :func:`tokenpcap.generate.run.generate` cannot honour, before anything is
    planned or written.

    Raises:
        InputError: a format the transport cannot carry, an unknown split, a snaplen outside
            1..262144, scale outside 1..2^63-1, jobs or iterations below 1, a seed outside 0..2^63-1 (from ``opt``
            or the scenario), each naming the option and the value.
        OutputError: ``opt.out_dir`` is not an existing directory.
    """
    capture_format(opt.fmt, s.cluster.transport)
    if opt.split not in SPLITS:
        raise InputError(f"--split: got {opt.split!r}, expected one of {', '.join(SPLITS)}")
    if not 1 <= opt.snaplen <= 262144:
        raise InputError(f"--snaplen: got {opt.snaplen}, expected 1..262144")
    if opt.scale < 1 or opt.jobs < 1:
        raise InputError(f"--scale/--jobs: got {opt.scale}/{opt.jobs}, expected integers >= 1")
    if opt.scale > MAX_SCALE:
        raise InputError(f"--scale: got {opt.scale:,}, expected at most {MAX_SCALE:,}")
    if opt.iterations is not None and opt.iterations < 1:
        raise InputError(f"--iterations: got {opt.iterations}, expected an integer >= 1")
    if opt.seed is not None and not 0 <= opt.seed <= MAX_SEED:
        raise InputError(f"--seed: got {opt.seed}, expected 0..{MAX_SEED}")
    if opt.seed is None and not 0 <= s.generation.seed <= MAX_SEED:
        raise InputError(f"{s.path or '<scenario>'}: generation.seed: got {s.generation.seed}, "
                         f"expected 0..{MAX_SEED}")
    if not isinstance(opt.point, CapturePoint):
        raise InputError(f"--point: got {opt.point!r}, expected a CapturePoint "
                         f"(tokenpcap.records.points.parse_point)")
    if not Path(opt.out_dir).is_dir():
        raise OutputError(f"{opt.out_dir}: got no such directory, expected an existing directory")


def provenance_comment(s: Scenario, opt: GenerateOptions, iterations_run: int | None = None
                       ) -> str:
    """The SHB comment of every pcapng file :func:`generate` writes for ``s`` with ``opt``
    (format and parser: :mod:`tokenpcap.records.provenance`). ``iterations_run``: iterations simulated
    (default ``opt.iterations`` or the scenario's ``generation.iterations``); the kept ones are
    ``opt.selection.iterations`` or all of them. The seed is ``opt.seed`` or the scenario's.

    Raises:
        InputError: values out of range (see :func:`tokenpcap.records.provenance.provenance_comment`).
    """
    n = iterations_run or opt.iterations or s.generation.iterations
    kept = opt.selection.iterations
    its = (kept.start, kept.stop) if kept is not None else (0, n)
    w = opt.selection.window_ns
    return _provenance_line(
        scenario=s.name, scale=opt.scale, iterations=its, split=opt.split,
        nics=opt.selection.nics, ranks=opt.selection.ranks, phases=opt.selection.phases or None,
        time_window=None if w is None else (w[0], None if w[1] >= OPEN_END_NS else w[1]),
        snaplen=opt.snaplen, seed=s.generation.seed if opt.seed is None else opt.seed,
        clear_to_send=s.generation.clear_to_send, point=opt.point)
