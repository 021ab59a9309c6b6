"""What the commands print holds any path Linux allows: a file name is bytes, and a name that is
not UTF-8 arrives in Python as lone surrogates (PEP 383, ``os.fsdecode``). A standard stream
opened ``errors="strict"`` (a UTF-8 locale other than C/POSIX, or ``PYTHONIOENCODING=utf-8``)
cannot encode them, so ``click.echo(str(path))`` after a successful ``export -o DIR/$'\\xff'.csv``
raised ``UnicodeEncodeError`` with its output already written.

:func:`install` makes such streams write each undecodable byte as the ``\\xff`` escape that
:func:`tokenpcap.pcap.pathlimits.shown` uses in messages, and any other character the stream's
encoding lacks as Python's backslash escape; streams that already escape (``surrogateescape`` in
the C locale, which writes the original bytes back) are left as they are.
"""
from __future__ import annotations

import codecs
import sys

__all__ = ["ERRORS", "install"]

#: Name of the codec error handler :func:`install` registers and sets on strict streams.
ERRORS = "tokenpcap-path"


def _escape(err: UnicodeError) -> tuple[str, int]:
    """A lone surrogate U+DC80..U+DCFF (the byte 0x80..0xFF ``os.fsdecode`` could not decode)
    becomes ``\\xNN``; any other unencodable character Python's backslash escape
    (``\\xe9``, ``\\u2192``: backslashreplace).

    Raises:
        UnicodeError: ``err`` is a decode error (the handler is for encoding only).
    """
    if not isinstance(err, UnicodeEncodeError):
        raise err
    out = []
    for ch in err.object[err.start:err.end]:
        c = ord(ch)
        if 0xDC80 <= c <= 0xDCFF:
            out.append(f"\\x{c - 0xDC00:02x}")
        else:
            out.append(ch.encode("ascii", "backslashreplace").decode("ascii"))
    return "".join(out), err.end


codecs.register_error(ERRORS, _escape)


def install() -> None:
    """Set :data:`ERRORS` on ``sys.stdout`` and ``sys.stderr`` where they are strict text
    streams (module docstring); streams without ``reconfigure`` are left alone."""
    for stream in (sys.stdout, sys.stderr):
        if getattr(stream, "errors", None) == "strict" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors=ERRORS)
