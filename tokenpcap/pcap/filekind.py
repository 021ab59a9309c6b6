"""What a path names, in words, for the files tokenpcap reads and replaces: only regular files
are captures, profiles or corpora, and only a regular file (or a new name) may be replaced by an
output. A FIFO would block the reader, a device reads as endless or empty bytes, and renaming an
output over ``/dev/null`` would replace the device for every program on the machine.
"""
from __future__ import annotations

import os
import stat

__all__ = ["file_kind", "special_kind"]

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
