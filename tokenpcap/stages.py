"""Stage lines: what a long step of a run is doing ("planning ...", "timing N messages, about
T", "writing ..."), announced by the library where the step starts and shown by whoever listens
(the command line's :mod:`tokenpcap.cli.progress`; nobody by default, so the library prints
nothing of its own).

:func:`stage` starts a step (ending the one before). A step with an estimate (``seconds``) is
shown at once when the estimate is at least the listener's threshold; one without is shown
when it is still running after the threshold, so steps shorter than about a second print
nothing. :func:`listening` installs a listener for a block (a context variable; a timer thread
shows the steps without estimate).
"""
from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import Callable, Iterator

__all__ = ["stage", "listening", "duration_text"]


class _Listener:
    def __init__(self, sink: Callable[[str], None], after_s: float):
        self.sink, self.after_s = sink, after_s
        self.timer: threading.Timer | None = None
        self.lock = threading.Lock()

    def start(self, text: str, seconds: float | None) -> None:
        with self.lock:
            self.cancel()
            if seconds is not None:
                if seconds >= self.after_s:
                    self.sink(f"{text}, about {duration_text(seconds)}")
                return
            if self.after_s <= 0:                   # every step is long: no timer
                self.sink(f"{text} ...")
                return
            if self.after_s == float("inf"):        # no step is long
                return
            self.timer = threading.Timer(self.after_s, self.sink, [f"{text} ..."])
            self.timer.daemon = True
            self.timer.start()

    def cancel(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


_LISTENER: contextvars.ContextVar[_Listener | None] = contextvars.ContextVar("stages",
                                                                              default=None)


def stage(text: str, *, seconds: float | None = None) -> None:
    """Start the step ``text`` (module docstring); ``seconds``: its estimated duration."""
    listener = _LISTENER.get()
    if listener is not None:
        listener.start(text, seconds)


@contextlib.contextmanager
def listening(sink: Callable[[str], None], *, after_s: float = 1.0) -> Iterator[None]:
    """Within the block, steps of at least ``after_s`` seconds go to ``sink(line)``."""
    listener = _Listener(sink, after_s)
    token = _LISTENER.set(listener)
    try:
        yield
    finally:
        with listener.lock:
            listener.cancel()
        _LISTENER.reset(token)


def duration_text(seconds: float) -> str:
    """``"under a second"``, ``"40 s"``, ``"3 min"``, ``"1.5 h"``."""
    if seconds < 1:
        return "under a second"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
