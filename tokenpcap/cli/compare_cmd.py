"""``tokenpcap compare SCENARIO --hpcc-fct FCT | --open-loop FLOWS | --simai-csv CSV``: a
simulator's run, or our own open-loop run of the export's flows, beside our schedule."""
from __future__ import annotations

from pathlib import Path

import click

from tokenpcap.cli import main
from tokenpcap.cli.common import library_errors, output_path
from tokenpcap.cli.progress import stage_lines
from tokenpcap.cli.set_option import set_option
from tokenpcap.records.provenance import MAX_SCALE


@main.command("compare")
@click.argument("scenario", type=click.Path(dir_okay=False, path_type=str))
@click.option("--hpcc-fct", "fct", type=click.Path(dir_okay=False, path_type=str),
              help="The HPCC ns-3 simulator's FCT_OUTPUT_FILE from a run of "
                   "'export SCENARIO --to hpcc' (same --scale and --iterations).")
@click.option("--hpcc-pfc", "pfc", type=click.Path(dir_okay=False, path_type=str),
              help="With --hpcc-fct and a cluster with fabric.model: queued: the same run's "
                   "PFC_OUTPUT_FILE, its pauses per device beside our fabric's PFC frames.")
@click.option("--open-loop", "open_loop", type=click.Path(dir_okay=False, path_type=str),
              help="A scenario with workload {kind: flows, file: F} on a queued fabric, F the "
                   "flow file of 'export SCENARIO --to hpcc' (same --scale): its flows run "
                   "open loop through our switches, beside our schedule as the simulator's "
                   "fct.txt is; with --hpcc-fct both side by side.")
@click.option("--simai-csv", "simai_csv", type=click.Path(dir_okay=False, path_type=str),
              help="SimAI_analytical's results/PREFIX-EndToEnd.csv from a run of "
                   "'export SCENARIO --to simai' (same --scale).")
@click.option("--scale", type=click.IntRange(1, MAX_SCALE), default=1, show_default=True,
              help="As given to export: message sizes and compute time divided by this.")
@click.option("--iterations", type=click.IntRange(min=1), default=1, show_default=True,
              help="As given to export --to hpcc (the SimAI workload is one iteration).")
@click.option("--plot", "plot_dir", callback=output_path,
              type=click.Path(file_okay=False, path_type=str),
              help="Also draw the comparison into this directory (created with its parents): "
                   "HPCC, the slowdown CDF per phase and the per-NIC completion over time; "
                   "SimAI, ours beside its times per phase and per collective.")
@library_errors
@set_option
@stage_lines
def compare_cmd(scenario: str, fct: str | None, pfc: str | None, open_loop: str | None,
                simai_csv: str | None, scale: int, iterations: int,
                plot_dir: str | None) -> None:
    """Set a simulator's run of our export beside our schedule.

    --hpcc-fct: match every flow the simulator completed to our message (src, dst, port, size,
    start) and report per phase our completion (on the ideal fabric, or on the cluster's queued
    fabric when it has one) against the simulator's, slowdown percentiles and the flows it did
    not complete; --hpcc-pfc adds the pauses per device of both.

    --open-loop: run the flows scenario (every exported flow at its start time, nothing
    depending on anything: as the simulator runs them) on its queued fabric and report per
    phase its slowdown against our schedule as --hpcc-fct does; with --hpcc-fct, per phase the
    simulator's slowdown percentiles beside our open loop's.

    --simai-csv: match every EndToEnd.csv row to the workload record (layer id) and so to the
    plan's call, and report per phase and collective our span of each call on the ideal fabric
    against SimAI's total and exposed communication time, and the records SimAI did not report."""
    if (fct is None and open_loop is None) == (simai_csv is None):
        raise click.UsageError("give one of --hpcc-fct FCT or --simai-csv CSV (or --open-loop "
                               "FLOWS, with or without --hpcc-fct)")
    if open_loop is not None and (pfc is not None or plot_dir is not None):
        raise click.UsageError("--open-loop: got it with --hpcc-pfc or --plot, expected "
                               "neither (they show the simulator's run alone)")
    if pfc is not None and fct is None:
        raise click.UsageError("--hpcc-pfc: got it without --hpcc-fct, expected both")
    if simai_csv is not None and iterations != 1:
        raise click.UsageError("--iterations: got "
                               f"{iterations}, expected 1 with --simai-csv (the SimAI workload "
                               "is one iteration)")
    stem = Path(scenario).stem
    if open_loop is not None:
        from tokenpcap.export.hpcc_fct import report_lines
        from tokenpcap.export.hpcc_openloop import beside_lines, compare_open_loop

        ol, sim = compare_open_loop(scenario, open_loop, scale=scale, iterations=iterations,
                                    fct_path=fct)
        if sim is None:
            click.echo(f"our open loop of {open_loop} in the simulator's columns (sim µs, "
                       "p50..max: its fct / ours)")
        for line in (report_lines(ol) if sim is None else beside_lines(ol, sim)):
            click.echo(line)
        return
    if fct is not None:
        from tokenpcap.export.hpcc_fct import compare_hpcc, report_lines

        c = compare_hpcc(scenario, fct, scale=scale, iterations=iterations, pfc_path=pfc)
        for line in report_lines(c):
            click.echo(line)
        if plot_dir is not None:
            from tokenpcap.analysis.plot_compare import plot_comparison

            for path in plot_comparison(c, plot_dir, stem=stem):
                click.echo(str(path))
        return
    from tokenpcap.export.simai_compare import compare_simai
    from tokenpcap.export.simai_compare import report_lines as simai_lines

    s = compare_simai(scenario, simai_csv, scale=scale)
    for line in simai_lines(s):
        click.echo(line)
    if plot_dir is not None:
        from tokenpcap.analysis.plot_compare import plot_simai_comparison

        for path in plot_simai_comparison(s, plot_dir, stem=stem):
            click.echo(str(path))
