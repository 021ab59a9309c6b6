"""The file system's length limits on an output path, checked before anything is written.

Linux refuses a path component longer than ``NAME_MAX`` bytes (255 on ext4, xfs, btrfs, tmpfs)
and a whole path longer than ``PATH_MAX`` bytes (4096) with ``ENAMETOOLONG``; the limits are
asked of the nearest existing directory (``pathconf(3)``: ``_PC_NAME_MAX``, ``_PC_PATH_MAX``).
Names are counted in bytes of their file-system encoding (``os.fsencode``: a name that is not
UTF-8 is still one byte per byte). A file written atomically is first created under a longer
temporary name (``.<name>.<pid>.<random>.part``, :class:`tokenpcap.pcap.output.AtomicOutput`),
so the check takes ``extra_bytes`` for the longest name the writer will create.
"""
from __future__ import annotations

import os
from pathlib import Path

from tokenpcap.errors import OutputError, one_line

__all__ = ["check_path_length", "name_max", "shown", "PART_EXTRA_BYTES"]

#: Bytes a temporary ``.<name>.<pid>.<random>.part`` adds to ``<name>``: the leading and two
#: inner dots, a pid (at most 7 digits: Linux's ``pid_max`` is at most 2^22 = 4194304), the 8
#: random characters of ``tempfile.mkstemp`` and ``.part``.
PART_EXTRA_BYTES = 1 + 1 + 7 + 1 + 8 + 5

_FALLBACK_NAME_MAX = 255        # POSIX _XOPEN_NAME_MAX, what Linux file systems use
_FALLBACK_PATH_MAX = 4096       # Linux PATH_MAX (include/uapi/linux/limits.h)


def shown(path: str | os.PathLike | bytes) -> str:
    """``path`` for a one-line message: bytes that are not UTF-8 written as ``\\xff`` escapes."""
    raw = os.fsencode(path)
    return one_line(raw.decode("utf-8", errors="backslashreplace"))


def _existing_ancestor(path: Path) -> Path:
    q = path
    while True:
        try:
            if q.exists():
                return q if q.is_dir() else q.parent
        except OSError:
            pass
        if q == q.parent:
            return q
        q = q.parent


def name_max(path: str | os.PathLike) -> tuple[int, int]:
    """``(NAME_MAX, PATH_MAX)`` in bytes for files under ``path`` (asked of its nearest existing
    directory; 255 and 4096 when the file system does not say)."""
    d = _existing_ancestor(Path(os.path.abspath(path)))
    out = []
    for key, fallback in (("PC_NAME_MAX", _FALLBACK_NAME_MAX), ("PC_PATH_MAX", _FALLBACK_PATH_MAX)):
        try:
            v = os.pathconf(d, key)
        except (OSError, ValueError):
            v = -1
        out.append(v if v and v > 0 else fallback)
    return out[0], out[1]


def check_path_length(path: str | os.PathLike, *, what: str = "output path",
                      extra_bytes: int = 0) -> None:
    """Refuse ``path`` if the file system cannot hold it.

    Args:
        path: the path to be created (a file or a directory).
        what: what the path is, for the message ("output directory", "output file").
        extra_bytes: bytes the writer adds to the last component for a temporary name
            (:data:`PART_EXTRA_BYTES` for an atomic file, 0 for a directory).

    Raises:
        OutputError: a component is longer than ``NAME_MAX - extra_bytes`` bytes or the absolute
            path longer than ``PATH_MAX - 1 - extra_bytes``; the message names the path, the
            length got and the length allowed.
    """
    limit_name, limit_path = name_max(path)
    raw = os.fsencode(os.path.abspath(path))
    parts = [c for c in raw.split(b"/") if c]
    for i, comp in enumerate(parts):
        allowed = limit_name - (extra_bytes if i == len(parts) - 1 else 0)
        if len(comp) > allowed:
            how = (f" ({limit_name} the file system allows, less {extra_bytes} for the "
                   "temporary name it is written under)" if extra_bytes and i == len(parts) - 1
                   else " (the file system's NAME_MAX)")
            raise OutputError(f"{shown(path)}: {what}: got a name of {len(comp)} bytes "
                              f"({shown(comp)[:40]}...), expected at most {allowed}{how}")
    allowed = limit_path - 1 - extra_bytes
    if len(raw) > allowed:
        raise OutputError(f"{shown(path)[:80]}...: {what}: got a path of {len(raw)} bytes, "
                          f"expected at most {allowed} (the file system's PATH_MAX)")
