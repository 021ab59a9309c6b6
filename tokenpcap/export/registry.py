"""The export formats, registered by name: what ``tokenpcap export --to`` offers.

An export writes the timed RDMA messages of a scheduled scenario (a
:class:`~tokenpcap.pipeline.Prepared`, its schedule run to the end) in one format. Each format is
one module of this package with one :func:`register_export` call; ``--to``'s choices and
:func:`tokenpcap.export.core.export_scenario` read :data:`EXPORTS`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tokenpcap.errors import OutputError
from tokenpcap.pcap.filekind import refuse_special_output

__all__ = ["ExportFormat", "EXPORTS", "register_export", "atomic_text", "discard"]


@dataclass(frozen=True)
class ExportFormat:
    """One export format.

    Attributes:
        name: the ``--to`` value. summary: one line for ``--help``.
        write: ``write(done, out, **options) -> [paths written]``; ``done`` is the scheduled
            scenario, ``out`` the path the user named, ``options`` format-specific keywords.
    """

    name: str
    summary: str
    write: Callable[..., list[Path]]
    #: True: ``write(plan, out, **options)`` takes the plan alone (no schedule is run)
    plan_only: bool = False


#: name -> format, in the order ``--to`` lists them.
EXPORTS: dict[str, ExportFormat] = {}


def register_export(name: str, summary: str, *, plan_only: bool = False) -> Callable:
    """Decorator: register ``write(done, out, **options)`` as export format ``name``
    (``plan_only``: ``write(plan, out, **options)``, the plan without a schedule).

    Raises:
        TypeError: the name is taken (a programming error, at import).
    """
    def deco(write: Callable[..., list[Path]]) -> Callable[..., list[Path]]:
        if name in EXPORTS:
            raise TypeError(f"export format {name!r} registered twice")
        EXPORTS[name] = ExportFormat(name, summary, write, plan_only)
        return write
    return deco


def discard(tmp: Path) -> None:
    """Remove a temporary file if it exists; a file system that refuses (read-only) is left
    alone: the error that brought us here is the one to report."""
    try:
        tmp.unlink(missing_ok=True)
    except OSError:
        pass


def atomic_text(path: Path, lines) -> None:  # type: ignore[no-untyped-def]
    """Write ``lines`` (str) to ``path`` through a hidden temporary file renamed when complete.

    Raises:
        OutputError: ``path`` is a device, a FIFO or a socket (never replaced), or the file
            cannot be written (the temporary file is removed).
    """
    refuse_special_output(path)
    tmp = path.with_name(f".{path.name}.part")
    try:
        with open(tmp, "w", encoding="utf-8", errors="surrogateescape", newline="") as f:
            f.writelines(lines)
        os.replace(tmp, path)
    except OSError as err:
        discard(tmp)
        raise OutputError(f"{path}: cannot write: {err.strerror}") from err
