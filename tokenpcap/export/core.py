"""``tokenpcap export``: the timed RDMA messages of a scenario for simulators, testbeds and viewers.

The messages come from the schedule (stage 5, :class:`tokenpcap.schedule.runner.Schedule`): one
row per RDMA message with its provenance and the engine's times
(``tokenpcap.schedule.engine.nic.MSG_STATE_DTYPE``). Each format is a registered module
(:mod:`tokenpcap.export.registry`):

* ``hpcc``: the input files of the HPCC ns-3 simulator, ready to run
  (:mod:`tokenpcap.export.hpcc`: flows, topology, config, trace).
* ``csv`` / ``parquet``: the message table (:mod:`tokenpcap.export.table`).
* ``chrome``: Trace Event Format JSON (:mod:`tokenpcap.export.chrome`).
* ``simai``: the plan of one iteration as a SimAI workload file (:mod:`tokenpcap.export.simai`;
  no schedule: SimAI times it).
* ``chakra``: one Chakra execution trace per rank for ASTRA-sim (:mod:`tokenpcap.export.chakra`;
  no schedule: ASTRA-sim times it).

"""
from __future__ import annotations

import os
from pathlib import Path

from tokenpcap.errors import InputError
from tokenpcap.export.registry import EXPORTS
from tokenpcap.config.profiles import load_scenario
from tokenpcap.pipeline import schedule_scenario
from tokenpcap.plan.build import build_plan

# One import line per format module (registration order = the order --to lists them).
from tokenpcap.export import hpcc  # noqa: E402,F401
from tokenpcap.export import table  # noqa: E402,F401
from tokenpcap.export import chrome  # noqa: E402,F401
from tokenpcap.export import simai  # noqa: E402,F401
from tokenpcap.export import chakra  # noqa: E402,F401
from tokenpcap.export import trex  # noqa: E402,F401
from tokenpcap.export import otg  # noqa: E402,F401
from tokenpcap.export.chrome import write_chrome  # noqa: E402  (re-exported)
from tokenpcap.export.hpcc import write_hpcc  # noqa: E402  (re-exported)
from tokenpcap.export.table import TABLE_COLUMNS, write_table  # noqa: E402  (re-exported)

from tokenpcap.stages import stage  # noqa: E402

__all__ = ["FORMATS", "schedule_scenario", "write_hpcc", "write_table", "write_chrome",
           "export_scenario", "TABLE_COLUMNS"]

#: The ``--to`` choices: the registered export formats.
FORMATS = tuple(EXPORTS)


def export_scenario(scenario: str | os.PathLike, to: str, out: str | os.PathLike, *,
                    scale: int = 1, iterations: int = 1, **options) -> list[Path]:
    """Schedule ``scenario`` and write it in format ``to`` (:data:`FORMATS`) at ``out``.

    ``options`` go to the format's writer (``hpcc``: ``cc``, the simulator's congestion
    control, a key of ``tokenpcap.export.hpcc.CC_MODES``).

    Raises:
        InputError: an unknown format or option value. OutputError: the directory of ``out``
            (created with its parents; removed again if nothing is written) cannot be made: a
            path component is a file, or the file system refuses; another run is writing into
            it; ``out`` or a file written beside it is a device, a FIFO or a socket (never
            replaced). As :func:`~tokenpcap.pipeline.schedule_scenario` otherwise. The files land
            together or not at all (:class:`tokenpcap.pcap.outputset.OutputSet`).
    """
    from tokenpcap.pcap.output import make_directory
    from tokenpcap.pcap.outputset import OutputSet

    fmt = EXPORTS.get(to)
    if fmt is None:
        raise InputError(f"export --to: got {to!r}, expected one of {', '.join(EXPORTS)}")
    out = Path(out)
    with make_directory(out.parent), OutputSet(out.parent, what="export") as outset:
        staged = outset.path(out.name)      # refuses a device or FIFO before any work
        if fmt.plan_only:                   # the plan alone (SimAI times the iteration itself)
            s = load_scenario(scenario)
            stage(f"planning {s.name}")
            source = build_plan(s, scale=scale)
        else:
            source = schedule_scenario(scenario, scale=scale, iterations=iterations,
                                       run=f"export --to {to}")
        stage(f"writing {to} to {out}")
        written = fmt.write(source, staged, **options)   # staged: lands whole
        outset.commit()
        return [outset.final(p) for p in written]
