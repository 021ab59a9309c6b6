"""The command line: a thin click layer over the library.

Each command lives in its own module and only parses options, calls one library function and prints.
Library errors (:class:`tokenpcap.errors.TokenpcapError`) print one line to stderr and exit 1;
usage errors exit 2 (click's default).
"""
from __future__ import annotations

import click

from tokenpcap import __version__
from tokenpcap.cli import textout


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tokenpcap")
def main() -> None:
    """Follow a token from words to bits on the wire: LLM training traffic as RoCEv2/IB pcaps."""
    textout.install()           # a path that is not UTF-8 is printed with escapes, not a crash


# Each command module registers itself on `main` when imported. One line per module.
from tokenpcap.cli import _commands  # noqa: E402,F401
