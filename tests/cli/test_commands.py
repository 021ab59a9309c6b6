"""The command group of ``tokenpcap.cli``: each command's module is imported when the command
runs, so a command pays only for its own imports; the name map cannot drift from the modules."""
from __future__ import annotations

import importlib
import subprocess
import sys

import click

from tokenpcap import cli


def test_every_name_is_the_command_its_module_registers():
    for name, module in cli.COMMANDS.items():
        importlib.import_module(f"tokenpcap.cli.{module}")
        cmd = cli.main.commands.get(name)
        assert isinstance(cmd, click.Command) and cmd.name == name, (name, module)
    assert sorted(cli.main.commands) == sorted(cli.COMMANDS) == cli.main.list_commands(None)


def test_every_command_module_is_in_the_map():
    from pathlib import Path
    here = Path(cli.__file__).parent
    modules = {p.stem for p in here.glob("*_cmd.py")}
    assert modules == set(cli.COMMANDS.values())


def test_inspect_does_not_import_the_planner_or_the_engine():
    """What ``tokenpcap inspect --help`` loads, in a fresh interpreter: not the planner, the
    timing engine or the exporters (measured 0.7 s of the start-up when every command module was
    imported up front)."""
    code = ("import sys; from tokenpcap.cli import main; main.get_command(None, 'inspect'); "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith('tokenpcap.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(out.stdout.split())
    assert "tokenpcap.cli.inspect_cmd" in loaded
    for heavy in ("tokenpcap.pipeline", "tokenpcap.schedule.runner", "tokenpcap.export.core",
                  "tokenpcap.plan.build", "tokenpcap.cli.export_cmd"):
        assert heavy not in loaded, heavy
