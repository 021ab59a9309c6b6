"""Helpers shared by the command modules: one way to report library errors."""
from __future__ import annotations

import functools
import sys
from typing import Callable, TypeVar

import click

from tokenpcap.errors import TokenpcapError, one_line

F = TypeVar("F", bound=Callable[..., object])


def library_errors(func: F) -> F:
    """Decorate a click command body: a TokenpcapError prints ``error: <message>`` and exits 1."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except TokenpcapError as err:
            click.echo(f"error: {one_line(str(err))}", err=True)     # never more than one line
            sys.exit(1)

    return wrapper  # type: ignore[return-value]
