"""What a long command is doing, on stderr: the stage lines of :mod:`tokenpcap.stages`
("planning dante (32 GPUs) ...", "timing 1,234,567 messages, about 40 s", "writing ...") and the
progress of a counted step (the timing: messages timed of the job's), never mixed with the
results on stdout. On a terminal the progress is a rich bar with the time left; elsewhere (a log
file, nohup, CI) a plain line every :data:`EVERY_S` seconds ("timing: 12,345,678 of 56,929,152
messages (21 %), about 2 min left"). Either way a counted step ends with its line ("... done in
3 min 4 s"), what its estimate is checked against. ``--quiet`` turns all of it off. Steps
shorter than :data:`AFTER_S` print nothing.
"""
from __future__ import annotations

import functools
import sys
import threading
from typing import Any, Callable, TypeVar

import click

from tokenpcap.stages import Count, about, listening

F = TypeVar("F", bound=Callable[..., object])

__all__ = ["AFTER_S", "EVERY_S", "BAR_EVERY_S", "stage_lines", "count_text"]

#: Steps that take (or are estimated to take) at least this many seconds get a line.
AFTER_S = 1.0
#: Seconds between two progress lines of a counted step off a terminal.
EVERY_S = 20.0
#: Seconds between two updates of the bar on a terminal.
BAR_EVERY_S = 0.25


def elapsed_text(seconds: float) -> str:
    """``"0.4 s"``, ``"42.0 s"``, ``"3 min 4 s"``: a measured time, to the second or better."""
    if seconds < 90:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def count_text(c: Count) -> str:
    """The line of a count: ``"timing: 12,345,678 of 56,929,152 messages (21 %), about 2 min
    left"``, the time left at the rate so far (:meth:`Count.left_s`); a final count says
    ``"done in ..."``; the caller's note follows after ``"; "``."""
    pct = 100 * min(c.done, c.total) // c.total if c.total > 0 else 100
    text = f"{c.what}: {c.done:,} of {c.total:,} {c.unit} ({pct} %)"
    if c.final:
        text += f", done in {elapsed_text(c.elapsed_s)}"
    else:
        left = c.left_s()
        text += ", the rate not known yet" if left is None else f", {about(left)} left"
    return text + (f"; {c.note}" if c.note else "")


def _line(text: str) -> None:
    click.echo(f"tokenpcap: {text}", err=True)


class _Terminal:
    """Stage lines and a rich bar per counted step on stderr's terminal."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(file=sys.stderr)
        self.bar: Any = None
        self.task: Any = None
        self.lock = threading.Lock()

    def line(self, text: str) -> None:
        self.console.print(f"tokenpcap: {text}", markup=False, highlight=False, soft_wrap=True)

    def meter(self, c: Count) -> None:
        from rich.progress import BarColumn, Progress, TextColumn

        with self.lock:
            if c.final:
                if self.bar is not None:
                    self.bar.stop()
                    self.bar = None
                self.line(count_text(c))
                return
            left = c.left_s()
            fields = dict(left="" if left is None else f"{about(left)} left",
                          note=c.note)
            if self.bar is None:
                self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                                    TextColumn("{task.completed:,}/{task.total:,} "
                                               "{task.fields[unit]}"),
                                    TextColumn("{task.fields[left]}"),
                                    TextColumn("{task.fields[note]}"),
                                    console=self.console, transient=True)
                self.bar.start()
                self.task = self.bar.add_task(c.what, total=c.total, unit=c.unit, **fields)
            self.bar.update(self.task, completed=min(c.done, c.total), **fields)

    def close(self) -> None:
        with self.lock:
            if self.bar is not None:
                self.bar.stop()
                self.bar = None


def stage_lines(f: F) -> F:
    """Decorator (below ``library_errors``): the ``--quiet`` option; without it the command's
    stage lines and progress go to stderr (module docstring)."""
    @functools.wraps(f)
    def run(*args: Any, quiet: bool, **kw: Any) -> object:
        if quiet:
            return f(*args, **kw)
        if not sys.stderr.isatty():
            with listening(_line, after_s=AFTER_S, meter=lambda c: _line(count_text(c)),
                           every_s=EVERY_S):
                return f(*args, **kw)
        term = _Terminal()
        try:
            with listening(term.line, after_s=AFTER_S, meter=term.meter, every_s=BAR_EVERY_S):
                return f(*args, **kw)
        finally:
            term.close()

    return click.option("--quiet", "-q", is_flag=True,
                        help="No stage lines or progress on stderr (what a long step does, "
                             "how long it is estimated to take, how far it is).")(run)  # type: ignore[return-value]
