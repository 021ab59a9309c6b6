"""The error tree of tokenpcap.

Every error the library raises on purpose derives from :class:`TokenpcapError`. The command line
catches exactly that base class, prints ``str(err)`` on one line to stderr and exits with code 1.
Usage errors (bad options) are click's business and exit with code 2.

The tree separates *malformed input* (a profile or corpus that is wrong in itself) from
*valid-but-infeasible* requests (a plan that cannot run on the cluster), as Calculon does, and both
from file-format problems when encoding or decoding packets and captures::

    TokenpcapError
    ├── InputError                  something the user gave us is wrong
    │   ├── ProfileError            a YAML profile key is unknown, missing or out of range
    │   ├── CorpusError             corpus missing, unreadable or not UTF-8
    │   └── TokenizerError          tokenizer unknown or unavailable offline
    ├── InfeasiblePlanError         valid profiles that cannot be combined (dp*tp*pp != GPUs ...)
    ├── EncodeError                 a header field value does not fit its declared width
    ├── DecodeError                 bytes that are not the header/format we expected
    │   └── CaptureError            a pcap/pcapng/ERF file that cannot be read
    │       ├── BadMagic
    │       └── TruncatedFile
    └── OutputError                 an output cannot be written (disk full, refused to overwrite ...)

Messages always carry both numbers: what we got and what we expected.

Stopping: SIGINT raises ``KeyboardInterrupt`` and, while a command runs, SIGTERM raises
:class:`Terminated` (both ``BaseException``: they unwind the command, whose outputs are aborted).
Such an exception can be lost: raised inside a callback from C (numba's compiler, any ctypes
callback) it is printed as "Exception ignored" and the code goes on. So the command's signal
handlers also note the signal (:func:`note_stop`), and the places that make a run's result
final (a set of files about to land, each chunk of the timing engine) call
:func:`raise_if_stopped`, which raises a noted stop once more.
"""
from __future__ import annotations

from pathlib import Path

__all__ = [
    "one_line",
    "clip",
    "clip_repr",
    "CLIP_CHARS",
    "TokenpcapError",
    "InputError",
    "ProfileError",
    "CorpusError",
    "TokenizerError",
    "InfeasiblePlanError",
    "EncodeError",
    "DecodeError",
    "CaptureError",
    "BadMagic",
    "TruncatedFile",
    "OutputError",
    "Terminated",
    "Interrupted",
    "note_stop",
    "clear_stops",
    "raise_if_stopped",
]


def one_line(text: str) -> str:
    """``text`` with line breaks, tabs and other unprintable characters written as escapes
    (``\\n``, ``\\x07``): text taken from an input file that goes into a one-line message."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii")
                   for c in text)


#: How much of a text taken from an input (a value, a key) a one-line message quotes: a whole
#: file parsed as one YAML scalar (``/etc/passwd`` given as a scenario) would fill the screen.
CLIP_CHARS = 120


def clip(text: str, limit: int = CLIP_CHARS) -> str:
    """``text`` when at most ``limit`` characters long, else its first ``limit`` characters,
    an ellipsis and the whole length: ``root:x:0:0… (2,034 characters)``."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


def clip_repr(value: object, limit: int = CLIP_CHARS) -> str:
    """``repr(value)`` cut as :func:`clip` cuts text; a string is cut before it is quoted, so
    the length said is the string's own: ``'root:x:0:0'… (2,034 characters)``."""
    if isinstance(value, str):
        return repr(value) if len(value) <= limit else \
            f"{value[:limit]!r}… ({len(value):,} characters)"
    return clip(repr(value), limit)


class TokenpcapError(Exception):
    """Base of every error tokenpcap raises on purpose; the CLI prints it in one line, exit 1."""


class InputError(TokenpcapError):
    """Something the user supplied (a file, a value) is wrong in itself."""


class ProfileError(InputError):
    """A profile (YAML) key is unknown, missing, of the wrong type or out of range.

    Args:
        file: the profile file (or ``None`` for an in-memory mapping).
        key: dotted key path inside the file, e.g. ``"parallelism.tp"`` (cut by :func:`clip`:
            an unknown key is the document's text).
        got: the value found (its ``repr``, cut by :func:`clip_repr`), the string ``"missing"``,
            or a ``str`` subclass whose ``repr`` is a description made by tokenpcap (printed
            whole).
        expected: a human description of what is allowed, e.g. ``"an integer >= 1"``.

    The message reads ``<file>: <key>: got <got>, expected <expected>``.
    """

    def __init__(self, file: str | Path | None, key: str, got: object, expected: str):
        self.file = one_line(str(file)) if file is not None else "<profile>"
        self.key = one_line(key)    # keys are the document's text: a YAML key may hold a newline
        self.got = got
        self.expected = expected
        if isinstance(got, str) and got == "missing":
            got_text = got
        elif isinstance(got, str) and type(got) is not str:     # a description: whole
            got_text = repr(got)
        else:
            got_text = clip_repr(got)
        super().__init__(f"{self.file}: {clip(self.key)}: got {got_text}, expected {expected}")


class CorpusError(InputError):
    """The corpus file does not exist, cannot be read, or is not valid UTF-8."""


class TokenizerError(InputError):
    """The tokenizer is unknown, or cannot be loaded offline (``tiktoken:``/``hf:``)."""


class InfeasiblePlanError(TokenpcapError):
    """Profiles that are each valid but cannot be combined.

    Examples: ``dp*tp*pp`` differs from the cluster's GPU count, attention heads not divisible by
    ``tp``, layers not divisible by ``pp``, a global batch that is not a multiple of
    ``micro_batch_size*dp``.
    """


class EncodeError(TokenpcapError):
    """A header field value does not fit its declared bit width, or a frame cannot be built."""


class DecodeError(TokenpcapError):
    """Bytes are not the header or format that was expected (too short, wrong version ...)."""


class CaptureError(DecodeError):
    """A capture file (pcap, pcapng, ERF) cannot be read; the message names the byte offset."""


class BadMagic(CaptureError):
    """The file does not start with a magic number we know."""


class TruncatedFile(CaptureError):
    """A record or block runs past the end of the file."""


class OutputError(TokenpcapError):
    """An output file cannot be written (no space, exists without --force, unwritable ...)."""


class Terminated(BaseException):
    """SIGTERM arrived while a command ran (raised in the main thread, like KeyboardInterrupt)."""


class Interrupted(KeyboardInterrupt):
    """SIGINT arrived while a command ran. A subclass, not ``KeyboardInterrupt`` itself: when
    the exact ``KeyboardInterrupt`` is left pending by code run from C (numba compiling the
    engine), CPython marks it unhandled and, at exit, kills the process with SIGINT whatever
    exit status the command chose (exit -2 instead of 130)."""


_STOPS: list[int] = []          # signals noted by the command's handlers, not yet handled


def note_stop(signum: int) -> None:
    """Note that signal ``signum`` (SIGINT or SIGTERM) is stopping the command (module docstring)."""
    _STOPS.append(int(signum))


def clear_stops() -> None:
    """Forget the noted stops (the command handled its stop, or a command starts or ends)."""
    _STOPS.clear()


def raise_if_stopped() -> None:
    """Raise a noted stop again (once): :class:`Terminated` for SIGTERM, :class:`Interrupted`
    otherwise; nothing when none is noted."""
    if _STOPS:
        import signal

        signum = _STOPS[0]
        _STOPS.clear()
        raise Terminated(signum) if signum == signal.SIGTERM else Interrupted()
