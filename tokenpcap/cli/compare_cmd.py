"""``tokenpcap compare SCENARIO --hpcc-fct FCT``: a simulator's run beside our schedule."""
from __future__ import annotations

import click

from tokenpcap.cli import main
from tokenpcap.cli.common import library_errors


@main.command("compare")
@click.argument("scenario", type=click.Path(dir_okay=False, path_type=str))
@click.option("--hpcc-fct", "fct", required=True, type=click.Path(dir_okay=False, path_type=str),
              help="The HPCC ns-3 simulator's FCT_OUTPUT_FILE from a run of "
                   "'export SCENARIO --to hpcc' (same --scale and --iterations).")
@click.option("--scale", type=click.IntRange(min=1), default=1, show_default=True,
              help="As given to export: message sizes and compute time divided by this.")
@click.option("--iterations", type=click.IntRange(min=1), default=1, show_default=True,
              help="As given to export.")
@click.option("--plot", "plot_dir", type=click.Path(file_okay=False, path_type=str),
              help="Also draw the slowdown CDF per phase and the per-NIC completion over time "
                   "into this directory (created with its parents).")
@library_errors
def compare_cmd(scenario: str, fct: str, scale: int, iterations: int,
                plot_dir: str | None) -> None:
    """Match every flow the simulator completed to our message (src, dst, port, size, start) and
    report per phase our ideal-fabric completion against the simulator's, slowdown percentiles
    and the flows it did not complete."""
    from tokenpcap.export.hpcc_fct import compare_hpcc, report_lines

    c = compare_hpcc(scenario, fct, scale=scale, iterations=iterations)
    for line in report_lines(c):
        click.echo(line)
    if plot_dir is not None:
        from pathlib import Path

        from tokenpcap.analysis.plot_compare import plot_comparison

        for path in plot_comparison(c, plot_dir, stem=Path(scenario).stem):
            click.echo(str(path))
