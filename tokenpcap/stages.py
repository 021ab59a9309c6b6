"""Stage lines: what a long step of a run is doing ("planning ...", "timing N messages, about
T", "writing ..."), announced by the library where the step starts and shown by whoever listens
(the command line's :mod:`tokenpcap.cli.progress`; nobody by default, so the library prints
nothing of its own).

:func:`stage` starts a step (ending the one before). A step with an estimate (``seconds``) is
shown at once when the estimate is at least the listener's threshold; one without is shown
when it is still running after the threshold, so steps shorter than about a second print
nothing. :func:`counting` gives the current step a count of its work (``done`` of ``total``
units, read by a callable): a listener with a meter reads it every ``every_s`` seconds on a
thread of its own (the caller never reports per unit: the counter is whatever the work already
keeps, e.g. the timing engine's message count, read while the engine runs without the GIL) and
once more, marked final, when the step ends. :func:`listening` installs a listener for a block
(a context variable; a timer thread shows the steps without estimate).

Estimates are CPU seconds of the reference machine stretched to the wall clock of this one by
:func:`wall_seconds`: by ``sqrt(load / cores)`` when there are more runnable processes than cores
(the 1-minute load average of ``os.getloadavg``). An empirical fit, not processor sharing: on the
shared 2-core machine (2026-12-07, load 6-12) the wall clock of our runs was 1.2-3.4 times their
CPU time (``plan --time`` of llama3-70b-64n at ``--scale 10``: 2.6-3.4; its engine alone in
``benchmarks/engine_timing.py``: 1.2-1.6; the engine's compile: 2.9; GPT-3 175B's ``generate
--scale 10``: 2.8), which ``sqrt(load / cores)`` (1.7-2.4) meets within 2x and ``load / cores``
(3-6) overshoots up to 5x: the load counts the other jobs' processes that wait on I/O or sleep
in bursts.
"""
from __future__ import annotations

import contextlib
import contextvars
import math
import os
import threading
import time
from typing import Callable, Iterator, NamedTuple

__all__ = ["stage", "counting", "listening", "Count", "about", "duration_text", "wall_seconds"]


class Count(NamedTuple):
    """What a meter is given: ``done`` of ``total`` ``unit`` of the step ``what`` (e.g.
    ``"timing"``), ``elapsed_s`` wall seconds since counting began, ``note`` more text of the
    caller ("" when none), ``final``: the step has ended (``done`` is then its last count)."""

    what: str
    done: int
    total: int
    unit: str
    elapsed_s: float
    note: str = ""
    final: bool = False

    def left_s(self) -> float | None:
        """Wall seconds left at the rate so far (``elapsed_s / done`` per unit); None before
        the first unit is done."""
        if self.done <= 0:
            return None
        return self.elapsed_s * max(0, self.total - self.done) / self.done


class _Counter:
    """A counted step polled on a thread (module docstring)."""

    def __init__(self, what: str, total: int, unit: str, count: Callable[[], int],
                 note: Callable[[], str] | None, meter: Callable[[Count], None], every_s: float):
        self.args = (what, int(total), unit)
        self.count, self.note, self.meter = count, note, meter
        self.t0 = time.perf_counter()
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._poll, args=(max(every_s, 0.001),),
                                       daemon=True, name="tokenpcap-progress")
        self.thread.start()

    def snapshot(self, final: bool) -> Count:
        return Count(*self.args[:1], int(self.count()), *self.args[1:],
                     time.perf_counter() - self.t0, self.note() if self.note else "", final)

    def _poll(self, every_s: float) -> None:
        while not self.stop_event.wait(every_s):
            try:
                self.meter(self.snapshot(False))
            except Exception:           # noqa: BLE001 - progress never stops the work
                return

    def end(self, final: bool) -> None:
        """Stop polling; with ``final``, the last count goes to the meter."""
        self.stop_event.set()
        self.thread.join()
        if final:
            self.meter(self.snapshot(True))


class _Listener:
    def __init__(self, sink: Callable[[str], None], after_s: float,
                 meter: Callable[[Count], None] | None, every_s: float):
        self.sink, self.after_s = sink, after_s
        self.meter, self.every_s = meter, every_s
        self.timer: threading.Timer | None = None
        self.counter: _Counter | None = None
        self.shown = False              # the current step's line was printed
        self.t0 = 0.0
        self.lock = threading.Lock()

    def start(self, text: str, seconds: float | None) -> None:
        with self.lock:
            self.end()
            self.shown, self.t0 = False, time.perf_counter()
            if seconds is not None:
                if seconds >= self.after_s:
                    self._show(f"{text}, {about(seconds)}")
                return
            if self.after_s <= 0:                   # every step is long: no timer
                self._show(f"{text} ...")
                return
            if self.after_s == float("inf"):        # no step is long
                return
            timer = threading.Timer(self.after_s, lambda: self._late(timer, f"{text} ..."))
            timer.daemon = True
            self.timer = timer
            timer.start()

    def _show(self, line: str) -> None:
        self.shown = True
        self.sink(line)

    def _late(self, timer: threading.Timer, line: str) -> None:
        with self.lock:
            if self.timer is timer:                 # its step has not ended meanwhile
                self._show(line)

    def count(self, what: str, total: int, unit: str, count: Callable[[], int],
              note: Callable[[], str] | None) -> None:
        with self.lock:
            if self.meter is not None and self.counter is None:
                self.counter = _Counter(what, total, unit, count, note, self.meter, self.every_s)

    def end(self, failed: bool = False) -> None:
        """End the current step (the lock held); ``failed``: it was cut short by an exception
        (its count gets no final report: it did not get done)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.counter is not None:
            counter, self.counter = self.counter, None
            counter.end(not failed and (self.shown or
                                        time.perf_counter() - self.t0 >= self.after_s))


_LISTENER: contextvars.ContextVar[_Listener | None] = contextvars.ContextVar("stages",
                                                                              default=None)


def stage(text: str, *, seconds: float | None = None) -> None:
    """Start the step ``text`` (module docstring); ``seconds``: its estimated duration."""
    listener = _LISTENER.get()
    if listener is not None:
        listener.start(text, seconds)


def counting(what: str, total: int, unit: str, count: Callable[[], int],
             note: Callable[[], str] | None = None) -> None:
    """Count the current step's work (module docstring): ``count()`` units of ``total`` done so
    far (read on the listener's thread: it must be cheap and safe to call while the work runs),
    ``note()`` more text for the meter (e.g. the packets written so far). Nothing without a
    listener with a meter; a step is counted once (a second call is ignored)."""
    listener = _LISTENER.get()
    if listener is not None:
        listener.count(what, total, unit, count, note)


@contextlib.contextmanager
def listening(sink: Callable[[str], None], *, after_s: float = 1.0,
              meter: Callable[[Count], None] | None = None, every_s: float = 20.0
              ) -> Iterator[None]:
    """Within the block, steps of at least ``after_s`` seconds go to ``sink(line)``; with a
    ``meter``, the counted steps' counts go to ``meter(Count)`` every ``every_s`` seconds and
    once when they end (when their line was shown or they lasted ``after_s``; not when the
    block ends by an exception)."""
    listener = _Listener(sink, after_s, meter, every_s)
    token = _LISTENER.set(listener)
    failed = True
    try:
        yield
        failed = False
    finally:
        with listener.lock:
            listener.end(failed)
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


def about(seconds: float) -> str:
    """An estimate in words: ``"under a second"``, ``"about 40 s"``, ``"about 3 min"``."""
    return duration_text(seconds) if seconds < 1 else f"about {duration_text(seconds)}"


def wall_seconds(cpu_s: float) -> float:
    """``cpu_s`` CPU seconds of one thread as wall seconds on this machine now (module
    docstring): ``cpu_s * sqrt(max(1, load / cores))``, ``load`` the 1-minute load average and
    ``cores`` the CPUs this process may run on; ``cpu_s`` where the load is not known."""
    try:
        load = os.getloadavg()[0]
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else (os.cpu_count() or 1)
    except OSError:
        return cpu_s
    return cpu_s * math.sqrt(max(1.0, load / max(1, cores)))
