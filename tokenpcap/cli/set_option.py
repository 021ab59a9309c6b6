"""``--set KEY=VALUE`` on the commands that read a scenario (:mod:`tokenpcap.config.overrides`).

:func:`set_option` adds the option and runs the command with the overrides active, so every
scenario the command loads (by the library functions that take its path) has them applied and
checked as the YAML is. A malformed ``KEY=VALUE`` is a usage error (exit 2); a key or value the
profiles refuse is the profiles' one-line error naming ``--set KEY`` (exit 1).
"""
from __future__ import annotations

import functools
from typing import Any, Callable, TypeVar

import click

from tokenpcap.config import overrides as ov

F = TypeVar("F", bound=Callable[..., object])

__all__ = ["set_option"]

SET_HELP = ("Set a key of the scenario, or of the model or cluster profile it names, for this "
            "run (repeatable): KEY is dotted from the scenario's top level "
            "(parallelism.dp=2, collectives.channels=4, generation.clear_to_send=false, "
            "model.layers=4, cluster.fabric.model=queued), VALUE read as YAML; checked as "
            "the file is.")


def _parse(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
           ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for text in values:
        try:
            key, value = ov.parse_set(text)
        except ValueError as err:
            raise click.BadParameter(str(err), ctx=ctx, param=param) from None
        out[key] = value
    return out


def set_option(f: F) -> F:
    """Decorator (below ``library_errors``): the ``--set`` option, its overrides active while
    the command runs."""
    @functools.wraps(f)
    def run(*args: Any, overrides: dict[str, Any], **kw: Any) -> object:
        with ov.using(overrides):
            return f(*args, **kw)

    return click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
                        callback=_parse, help=SET_HELP)(run)  # type: ignore[return-value]
