"""What a long command is doing, on stderr: the stage lines of :mod:`tokenpcap.stages`
("planning dante (32 GPUs) ...", "timing 1,234,567 messages, about 40 s", "writing ...") as
plain lines, so that they show in a log file, under nohup or in CI as on a terminal, and never
mix with the results on stdout. ``--quiet`` turns them off. Steps shorter than
:data:`AFTER_S` print nothing.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

import click

from tokenpcap.stages import listening

F = TypeVar("F", bound=Callable[..., object])

__all__ = ["AFTER_S", "stage_lines"]

#: Steps that take (or are estimated to take) at least this many seconds get a line.
AFTER_S = 1.0


def _line(text: str) -> None:
    click.echo(f"tokenpcap: {text}", err=True)


def stage_lines(f: F) -> F:
    """Decorator (below ``library_errors``): the ``--quiet`` option; without it the command's
    stage lines go to stderr."""
    @functools.wraps(f)
    def run(*args: Any, quiet: bool, **kw: Any) -> object:
        if quiet:
            return f(*args, **kw)
        with listening(_line, after_s=AFTER_S):
            return f(*args, **kw)

    return click.option("--quiet", "-q", is_flag=True,
                        help="No stage lines on stderr (what a long step does and how long "
                             "it is estimated to take).")(run)  # type: ignore[return-value]
