"""The command line: a thin click layer over the library.

Each command lives in its own module and only parses options, calls one library function and prints.
Library errors (:class:`tokenpcap.errors.TokenpcapError`) print one line to stderr and exit 1;
usage errors exit 2 (click's default).
"""
from __future__ import annotations

import importlib

import click

from tokenpcap import __version__
from tokenpcap.cli import textout

#: Command name -> the module of ``tokenpcap.cli`` that defines it (and registers it on
#: :data:`main` when imported). A command's module is imported only when that command runs or is
#: listed (``--help``): ``tokenpcap inspect`` does not pay for the planner's, the engine's or the
#: exporters' imports (0.7 s of the CLI's start-up before, measured with ``python3 -X importtime``).
COMMANDS: dict[str, str] = {
    "compare": "compare_cmd",
    "export": "export_cmd",
    "generate": "generate_cmd",
    "inspect": "inspect_cmd",
    "plan": "plan_cmd",
    "plot": "plot_cmd",
    "readdress": "readdress_cmd",
    "run": "run_cmd",
    "tokens": "tokens_cmd",
    "trace": "trace_cmd",
}


class _LazyGroup(click.Group):
    """A group whose commands are imported on first use (:data:`COMMANDS`)."""

    def list_commands(self, ctx: click.Context | None) -> list[str]:
        return sorted(set(COMMANDS) | set(self.commands))

    def get_command(self, ctx: click.Context | None, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS and cmd_name not in self.commands:
            importlib.import_module(f"{__name__}.{COMMANDS[cmd_name]}")
        return super().get_command(ctx, cmd_name)  # type: ignore[arg-type]


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tokenpcap")
def main() -> None:
    """Follow a token from words to bits on the wire: LLM training traffic as RoCEv2/IB pcaps."""
    textout.install()           # a path that is not UTF-8 is printed with escapes, not a crash

