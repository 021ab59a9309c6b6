"""What a path names, in words, for the files tokenpcap reads and replaces: only regular files
are captures, profiles or corpora, and only a regular file (or a new name) may be replaced by an
output. A FIFO would block the reader, a device reads as endless or empty bytes, and renaming an
output over ``/dev/null`` would replace the device for every program on the machine.
"""
from __future__ import annotations

import os
import stat

from tokenpcap.errors import OutputError

__all__ = ["file_kind", "special_kind", "refuse_special_output"]

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file"))


def file_kind(mode: int) -> str:
    """``st_mode`` in words: ``"a regular file"``, ``"a directory"``, ``"a character device"``,
    ``"a block device"``, ``"a FIFO (named pipe)"``, ``"a socket"`` or ``"a special file"``."""
    for test, name in _KINDS:
        if test(mode):
            return name
    return "a special file"


def special_kind(path: str | os.PathLike) -> str | None:
    """``None`` when ``path`` is a regular file (symbolic links followed) or does not exist;
    otherwise what it is, as :func:`file_kind` says it. Raises nothing: a path that cannot be
    examined (permissions, a NUL character) is left for the open that follows to report."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    return None if stat.S_ISREG(mode) else file_kind(mode)


def refuse_special_output(path: str | os.PathLike) -> None:
    """Refuse an output destination that exists and is not a regular file (symbolic links
    followed), before an output is renamed over it: the rename would replace the device, FIFO
    or socket itself, e.g. ``/dev/null`` for every program on the machine.

    Raises:
        OutputError: ``path`` names a device, a FIFO, a socket or a directory (one line: the
            path, what it is, what was expected).
    """
    kind = special_kind(path)
    if kind is not None:
        raise OutputError(f"{path}: got {kind}, expected a regular file or a new path "
                          "(the output replaces it)")
