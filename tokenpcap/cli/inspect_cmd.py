"""``tokenpcap inspect FILE``: what is in a capture, and whether it is right."""
from __future__ import annotations

import json
import sys

import click

from tokenpcap.cli import main
from tokenpcap.cli.common import library_errors


@main.command("inspect", no_args_is_help=True)
@click.argument("files", nargs=-1, required=True,
                type=click.Path(dir_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option("--against", "scenario", type=click.Path(dir_okay=False, path_type=str),
              help="Compare payload bytes per phase and per NIC with this scenario's plan.")
@click.option("--strict", is_flag=True, help="Exit 1 when any check fails.")
@click.option("--no-crc", is_flag=True, help="Skip the ICRC/VCRC check (faster on full frames).")
@library_errors
def inspect_cmd(files: tuple[str, ...], as_json: bool, scenario: str | None, strict: bool,
                no_crc: bool) -> None:
    """Summarise FILES (pcap, pcapng or ERF; several files add up, e.g. the per-NIC files of
    one generate run): totals and rates, RDMA flows, opcodes, payload bytes, ICRC/VCRC, PSN
    gaps, CNPs, ECN, PFC, and bytes per phase."""
    from tokenpcap.analysis import inspect_captures
    from tokenpcap.analysis_report import render_text

    rep = inspect_captures(files, crc=not no_crc)
    if scenario is not None:
        from tokenpcap.analysis_against import compare_with_plan

        compare_with_plan(rep, scenario)
    click.echo(json.dumps(rep.to_json(), indent=2) if as_json else render_text(rep))
    if strict and not rep.ok:
        sys.exit(1)
