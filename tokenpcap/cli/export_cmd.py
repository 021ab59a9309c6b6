"""``tokenpcap export SCENARIO --to FORMAT -o PATH``: timed messages for simulators and viewers."""
from __future__ import annotations

import click

from tokenpcap.cli import main
from tokenpcap.cli.common import library_errors
from tokenpcap.export.core import FORMATS


@main.command("export")
@click.argument("scenario", type=click.Path(dir_okay=False, path_type=str))
@click.option("--to", "fmt", required=True, type=click.Choice(FORMATS),
              help="hpcc (ns-3 flow + topology files), csv/parquet (message table), chrome "
                   "(Trace Event JSON for Perfetto / about://tracing).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="Output file, its directory created (HPCC also writes <stem>-topology.txt "
                   "beside it).")
@click.option("--scale", type=click.IntRange(min=1), default=1, show_default=True,
              help="Divide message sizes and compute time by this.")
@click.option("--iterations", type=click.IntRange(min=1), default=1, show_default=True)
@library_errors
def export_cmd(scenario: str, fmt: str, output: str, scale: int, iterations: int) -> None:
    """Schedule SCENARIO and write its RDMA messages as FORMAT."""
    from tokenpcap.export.core import export_scenario

    for path in export_scenario(scenario, fmt, output, scale=scale, iterations=iterations):
        click.echo(str(path))
