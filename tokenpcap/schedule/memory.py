"""The memory of a run, by what the run does with the schedule: one estimate per run kind.

Every run of a scenario holds the timing engine's state (:class:`tokenpcap.schedule.limits.Work`'s
``engine_bytes``: calls, transfers, NVLink copies, and with ``keep_messages`` a row per RDMA
message; ``generate`` keeps only the messages in progress). What it does after the run adds its
own terms, and they dominate the runs that read every message:

* ``plot`` reads the message table whole (:attr:`tokenpcap.schedule.runner.Schedule.messages`,
  a new ``MSG_STATE_DTYPE`` array of 159 B a message beside the engine's rows), and draws every
  rank's compute and sends (matplotlib's patches for the drawn ranks);
* ``export --to csv`` / ``parquet`` turn the table into 22 columns of Python objects
  (:func:`tokenpcap.export.table.table_columns`: a pointer and an int object per cell), then into
  CSV text or a pyarrow table and its Parquet pages;
* ``export --to chrome`` one JSON event per message; ``hpcc`` one flow line per data message;
  ``otg`` the messages grouped per QP (``export --to trex`` runs ``generate`` and is checked
  as it);
* ``trace`` and ``compare`` read the table whole and select from it;
* ``generate`` predicts its capture's size in pieces of whole calls (their predicted rows,
  comment and record sizes), at most :attr:`RunKind.held_messages` messages at once.

So each run kind is (:class:`RunKind`): whether it keeps every message's row, the bytes it holds
per RDMA message (data and clear-to-send) of the run beyond the engine's state, and the bytes of
the process before the run (Python, numpy, numba's compiled engine and the kind's own libraries:
matplotlib, pyarrow). Its estimate is ``engine_bytes + base_bytes + messages * message_bytes``
(:meth:`RunKind.bytes`), counted by :func:`tokenpcap.schedule.limits.check_work`, which refuses
a run whose estimate passes the limit with one line naming the run kind.

Source of every constant: ``benchmarks/run_memory.py`` runs each kind in a fresh process on the
production scenarios (at a ``--scale`` that keeps each run within a few GB) and records its peak
RSS (``ru_maxrss`` of the child, as ``/usr/bin/time -v`` reports it) beside this estimate; the
constants are the per-message excess of the largest measured run rounded up, so that every
measured peak is at or below the estimate (the table: docs/generate.md, "Memory per run kind";
benchmarks/README.md, "run_memory.py"). A writer process of ``generate`` is a separate process
(forked, its own peak): not counted here (docs/generate.md, "Memory").
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["RunKind", "RUN_KINDS", "run_kind", "engine_run", "COMPILE_BYTES", "BASE_BYTES"]


@dataclass(frozen=True)
class RunKind:
    """What one kind of run holds beyond the timing engine's state (module docstring).

    Attributes:
        name: the command as a user types it (``"plot"``, ``"export --to csv"``).
        keep_messages: it reads every message's row after the run (else only the messages in
            progress are held: ``generate``).
        message_bytes: bytes it holds per RDMA message of the run (data and clear-to-send, all
            iterations) beyond the engine's state, at its peak.
        base_bytes: bytes of the process before any scenario is planned: the interpreter,
            numpy, numba's cached engine, the kind's libraries (a first run, which compiles
            the engine, adds :data:`COMPILE_BYTES`: :func:`run_kind`).
        held_messages: the most messages whose :attr:`message_bytes` the run holds at once
            (None: every message of the run). ``generate`` predicts its capture's size in
            pieces of whole calls of about 1 << 20 transfers
            (:func:`tokenpcap.generate.size.predict_message_chunks`), each with its
            clear-to-send rows: at most 2 << 20 predicted messages at a time.
    """

    name: str
    keep_messages: bool
    message_bytes: int
    base_bytes: int
    held_messages: int | None = None

    def bytes(self, engine_bytes: int, messages: int) -> int:
        """The run's peak memory estimate (bytes): the engine's state ``engine_bytes`` (as
        :attr:`tokenpcap.schedule.limits.Work.engine_bytes`), the process's base and
        ``messages`` (RDMA messages of the run, at most :attr:`held_messages`) times
        :attr:`message_bytes`."""
        held = messages if self.held_messages is None else min(messages, self.held_messages)
        return engine_bytes + self.base_bytes + held * self.message_bytes


def engine_run(keep_messages: bool = True) -> RunKind:
    """The engine's state alone (no term of a run kind, no name): what a library caller that
    names no run kind is checked against."""
    return RunKind("", keep_messages, 0, 0)


_MB = 1_000_000

#: What a first run adds to the base while numba compiles the engine (bytes): ``generate``
#: of dante peaked at 823 MB compiling and at 221 MB with the engine cached (dante at
#: ``--scale 16``), 2026-12-07; rounded up.
COMPILE_BYTES = 650 * _MB
#: Every kind's base (bytes): the largest peak of any kind on dante at ``--scale 16`` (4,656
#: messages, the engine cached), 274 MB (``export --to otg``), rounded up.
BASE_BYTES = 300 * _MB

#: The run kinds by name. Bytes per message: the largest ``(peak - engine - base) / messages``
#: of the production runs measured (docs/generate.md, "Memory per run kind"), rounded up by
#: about a tenth.
RUN_KINDS: dict[str, RunKind] = {k.name: k for k in (
    RunKind("generate", False, 200, BASE_BYTES, held_messages=2 << 20),
    RunKind("plot", True, 500, BASE_BYTES),
    RunKind("trace", True, 550, BASE_BYTES),
    # not measured on a production scenario (it needs a simulator's output of the same run):
    # it reads the whole table and selects from it, as trace does
    RunKind("compare", True, 550, BASE_BYTES),
    RunKind("export --to hpcc", True, 500, BASE_BYTES),
    RunKind("export --to csv", True, 650, BASE_BYTES),
    RunKind("export --to parquet", True, 950, BASE_BYTES),
    RunKind("export --to chrome", True, 1800, BASE_BYTES),
    RunKind("export --to otg", True, 550, BASE_BYTES),
)}


def run_kind(name: str, *, compiling: bool = False) -> RunKind:
    """The run kind ``name`` (a key of :data:`RUN_KINDS`); ``compiling``: the run compiles
    the timing engine first (no cache on disk yet), which adds :data:`COMPILE_BYTES` to its
    base.

    Raises:
        KeyError: not a run kind (a programming error: every command that runs the schedule
            names its kind).
    """
    kind = RUN_KINDS[name]
    if compiling:
        return dataclasses.replace(kind, base_bytes=kind.base_bytes + COMPILE_BYTES)
    return kind
