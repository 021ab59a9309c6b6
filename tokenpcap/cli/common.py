"""Helpers shared by the command modules: one way to report library errors and signals."""
from __future__ import annotations

import contextlib
import errno
import functools
import os
import signal
import sys
import threading
from typing import Callable, Iterator, TypeVar

import click

from tokenpcap.errors import (Interrupted, Terminated, TokenpcapError, clear_stops, note_stop,
                              one_line, raise_if_stopped)

F = TypeVar("F", bound=Callable[..., object])


#: Exit status after SIGTERM / SIGINT (128 + the signal: the shell's convention).
EXIT_TERMINATED = 128 + signal.SIGTERM
EXIT_INTERRUPTED = 128 + signal.SIGINT


def _handle_unless_ignored(sig: int, handler) -> object:  # type: ignore[no-untyped-def]
    """Install ``handler`` for ``sig`` and return the old handler, unless ``sig`` is ignored:
    then leave it so and return ``SIG_IGN``. A process started with a signal ignored (a
    background job of a shell script, ``trap '' INT``) keeps it ignored, as POSIX programs do
    (a handler only where the signal is not ignored) and as ``python -m tokenpcap`` does
    while it imports."""
    old = signal.getsignal(sig)
    return old if old is signal.SIG_IGN else signal.signal(sig, handler)


@contextlib.contextmanager
def terminate_like_interrupt() -> Iterator[None]:
    """While the block runs, SIGTERM raises :class:`Terminated` in the main thread, so a
    command unwinds as after Ctrl-C: its outputs are aborted (temporary files and stages
    removed, earlier files kept); SIGINT raises :class:`~tokenpcap.errors.Interrupted` (a
    ``KeyboardInterrupt``); a signal ignored when the block starts stays ignored. Both are
    noted too (:func:`tokenpcap.errors.note_stop`), so one swallowed by a callback from C is
    raised again where a result is made final (and Python's "Exception ignored" report of it
    is not printed: the command's one line says it stopped). An error that escapes the block
    after a stop was noted is the stop's doing and is replaced by it: a ``KeyboardInterrupt``
    lost inside numba's compiler leaves a half-built library behind, and numba then fails with
    ``RuntimeError: no compiled object yet`` before any :func:`raise_if_stopped` is reached.
    Outside the main thread it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum, frame):  # type: ignore[no-untyped-def]
        note_stop(signum)
        raise Terminated(signum)

    def on_int(signum, frame):  # type: ignore[no-untyped-def]
        note_stop(signum)
        raise Interrupted

    def unraisable(u):  # type: ignore[no-untyped-def]
        # a stop lost in a callback from C is noted and raised again later: no traceback
        if not (isinstance(u.exc_type, type) and issubclass(u.exc_type, (KeyboardInterrupt,
                                                                          Terminated))):
            old_hook(u)

    clear_stops()
    old_term = _handle_unless_ignored(signal.SIGTERM, on_term)
    old_int = _handle_unless_ignored(signal.SIGINT, on_int)
    old_hook = sys.unraisablehook
    sys.unraisablehook = unraisable
    try:
        try:
            yield
        except Exception:
            raise_if_stopped()          # a noted stop is what the command met: raise it instead
            raise
    finally:
        sys.unraisablehook = old_hook
        for sig, old in ((signal.SIGTERM, old_term), (signal.SIGINT, old_int)):
            if old is not None:             # None: installed from C, cannot be put back
                signal.signal(sig, old)
        clear_stops()


def output_path(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Click callback of an output path option (``-o``, ``compare --plot``): an empty path is a
    usage error. ``Path("")`` is the current directory, so ``-o "$OUT"`` with ``OUT`` unset
    wrote the files wherever the shell was (``generate``, ``run``, ``plot``)."""
    if value == "":
        raise click.BadParameter("got an empty path, expected a path ('.' for the current "
                                 "directory)", ctx=ctx, param=param)
    return value


def library_errors(func: F) -> F:
    """Decorate a click command body: a TokenpcapError prints ``error: <message>`` (one line)
    and exits 1; SIGINT (Ctrl-C) and SIGTERM stop the command with ``error: stopped (SIGINT)``
    and exit 130 / 143, after its outputs were aborted (nothing half-written is kept)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            with terminate_like_interrupt():
                return func(*args, **kwargs)
        except TokenpcapError as err:
            click.echo(f"error: {one_line(str(err))}", err=True)     # never more than one line
            sys.exit(1)
        except OSError as err:
            if err.errno != errno.ENAMETOOLONG:
                raise
            # a path the file system cannot hold, met before a writer's own check: the input's
            # fault, told in one line (the writers check their outputs: pcap/pathlimits.py)
            name = os.fsencode(err.filename or "").decode("utf-8", "backslashreplace")
            click.echo(f"error: {one_line(name)}: got a path the file system cannot hold "
                       f"({err.strerror}), expected names of at most 255 bytes", err=True)
            sys.exit(1)
        except (KeyboardInterrupt, Terminated) as err:
            clear_stops()
            # the process ends after a stop: objects a stop cut half-built (numba's compiler
            # options, llvmlite handles) fail in their destructors at teardown; their
            # "Exception ignored" reports would follow the one line
            sys.unraisablehook = lambda unraisable: None
            term = isinstance(err, Terminated)
            click.echo(f"error: stopped ({'SIGTERM' if term else 'SIGINT'}): nothing "
                       "half-written was kept", err=True)
            sys.exit(EXIT_TERMINATED if term else EXIT_INTERRUPTED)

    return wrapper  # type: ignore[return-value]
