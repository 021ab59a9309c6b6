"""Capture arguments of ``inspect`` and ``plot``: a file, or a directory of captures."""
from __future__ import annotations

from pathlib import Path

from tokenpcap.errors import InputError
from tokenpcap.pcap.outputset import stopped_commit_text
from tokenpcap.pcap.registry import CAPTURE_FORMATS

#: file name endings read as captures in a directory: one per format generate writes
CAPTURE_SUFFIXES = tuple(f".{fmt}" for fmt in CAPTURE_FORMATS)


def capture_paths(paths: tuple[str, ...] | list[str]) -> list[str]:
    """``paths`` with every directory replaced by the captures it holds.

    A directory stands for its files ending in :data:`CAPTURE_SUFFIXES` (not its
    subdirectories, not hidden files such as a writer's temporary ``.NAME.part``), sorted by
    name; files are kept as given, in the order given.

    Raises:
        InputError: a directory holds no capture (``DIR: got a directory without .pcap,
            .pcapng or .erf files, expected captures``), or a run into it was stopped while
            moving its files into place (part of its set beside part of the earlier one;
            :func:`~tokenpcap.pcap.outputset.stopped_commit_text`).
    """
    out: list[str] = []
    for p in paths:
        d = Path(p)
        if not d.is_dir():
            out.append(p)
            continue
        stopped = stopped_commit_text(d)
        if stopped:
            raise InputError(stopped)
        found = sorted(str(q) for q in d.iterdir()
                       if q.suffix in CAPTURE_SUFFIXES and not q.name.startswith(".")
                       and q.is_file())
        if not found:
            kinds = ", ".join(CAPTURE_SUFFIXES[:-1]) + " or " + CAPTURE_SUFFIXES[-1]
            raise InputError(f"{p}: got a directory without {kinds} files, expected captures")
        out.extend(found)
    return out
