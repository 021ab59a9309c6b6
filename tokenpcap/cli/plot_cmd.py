"""``tokenpcap plot SOURCE -o DIR``: PNG pictures of a capture, a directory of captures or a
scenario's schedule."""
from __future__ import annotations

import click

from tokenpcap.cli import main
from tokenpcap.cli.common import library_errors, output_path
from tokenpcap.cli.progress import stage_lines
from tokenpcap.cli.set_option import set_option
from tokenpcap.records.provenance import MAX_SCALE


@main.command("plot", no_args_is_help=True)
@click.argument("sources", metavar="[SOURCE]...", type=click.Path(path_type=str), nargs=-1)
@click.option("-o", "--outdir", default=".", show_default=True, callback=output_path,
              type=click.Path(file_okay=False, path_type=str),
              help="Directory for the PNGs (created, with its parents).")
@click.option("--scale", type=click.IntRange(1, MAX_SCALE), default=1, show_default=True,
              help="Scenario only: divide message sizes and compute time by this.")
@click.option("--iterations", type=click.IntRange(min=1), default=1, show_default=True,
              help="Scenario only: iterations to schedule.")
@click.option("--ranks", help="Scenario only: ranks on the timeline, e.g. 0,8,16,24 or 0-3.")
@click.option("--fabric", type=click.Path(path_type=str), default=None, metavar="DIR|FILE",
              help="Draw a queued-fabric run's side files (DIR holding one <stem>_fabric.json, "
                   "or that file): queue depth of the 8 busiest switch ports with their PFC "
                   "frames, and the throughput per phase of SOURCE's captures when given.")
@click.option("--bin", "bin_ns", type=click.IntRange(min=1), default=None, metavar="NS",
              help="Captures only: throughput bins of NS nanoseconds [default: the span in "
                   "200 bins].")
@click.option("--time-window", "window", default=None, metavar="START:END",
              help="Captures only: the frames from START to END after the first frame, as "
                   "Wireshark's frame.time_relative shows them (seconds, or with ns/us/ms/s; "
                   "either side may be empty), e.g. 0.5:0.75.")
@click.option("--qp", type=click.IntRange(min=0), default=None, metavar="N",
              help="With --fabric: draw QP N's DCQCN rate, the queue of the switch port before "
                   "its receiver and the CNPs that reached it (<stem>-qp<N>.png) from the "
                   "congestion-control side files; `inspect --fabric` lists the QPs.")
@click.option("--heatmap", is_flag=True,
              help="Captures only: one picture of every sending NIC of SOURCE(s) over time "
                   "(bytes per bin), with its bytes per phase family (<stem>-heatmap.png).")
@click.option("--fan-in", "fan_in", is_flag=True,
              help="Captures only: per receiving NIC, the distinct senders with data to it in "
                   "each bin (<stem>-fan-in.png).")
@library_errors
@set_option
@stage_lines
def plot_cmd(sources: tuple[str, ...], outdir: str, scale: int, iterations: int,
             ranks: str | None, fabric: str | None, bin_ns: int | None, window: str | None,
             qp: int | None, heatmap: bool = False, fan_in: bool = False) -> None:
    """Draw SOURCE: a capture (pcap/pcapng/ERF) gives throughput per NIC stacked by phase and
    frame/message size distributions; a directory of captures gives those two pictures for each
    of its .pcap/.pcapng/.erf files (sorted); a scenario (.yaml) gives the per-rank timeline
    (1F1B, compute and RDMA messages) and message sizes. With --fabric: only the fabric picture
    <stem>-fabric-queues.png, SOURCE (optional: captures) adding the throughput per phase;
    with --fabric and --qp N: only QP N's rate, queue and CNPs, <stem>-qp<N>.png. Several
    SOURCEs (captures or directories) are drawn one after the other; with --heatmap and/or
    --fan-in, only those pictures, of all the captures together (<stem>: the first SOURCE's)."""
    from pathlib import Path

    from tokenpcap.analysis.plot_series import parse_time_window
    from tokenpcap.errors import InputError

    source = sources[0] if sources else None
    together = [v for v, on in (("heatmap", heatmap), ("fan-in", fan_in)) if on]
    scenarios = [p for p in sources if Path(p).suffix in (".yaml", ".yml")]
    if scenarios and len(sources) > 1:
        raise click.BadParameter(f"got {len(sources)} sources with the scenario {scenarios[0]}, "
                                 "expected one scenario or captures", param_hint="'SOURCE'")
    if together and (fabric is not None or scenarios or qp is not None or ranks):
        what = ("--fabric" if fabric is not None else "a scenario" if scenarios
                else "--qp" if qp is not None else "--ranks")
        raise click.BadParameter(f"got --{together[0]} with {what}, expected captures (files "
                                 "or directories) alone", param_hint=f"'--{together[0]}'")
    if len(sources) > 1 and fabric is not None:
        raise click.BadParameter(f"got {len(sources)} sources with --fabric, expected one "
                                 "(a capture or a directory)", param_hint="'SOURCE'")
    if qp is not None and fabric is None:
        raise click.BadParameter("got a QP without --fabric, expected --fabric DIR beside it",
                                 param_hint="'--qp'")
    if qp is not None and source is not None:
        raise click.BadParameter("got SOURCE with --qp, expected --fabric DIR --qp N alone",
                                 param_hint="'SOURCE'")

    span = None
    if window is not None:
        try:
            span = parse_time_window(window)
        except ValueError as err:
            raise click.BadParameter(str(err), param_hint="'--time-window'") from None
    is_scenario = source is not None and Path(source).suffix in (".yaml", ".yml")
    for name, given in (("--bin", bin_ns), ("--time-window", window)):
        if given is not None and (is_scenario or fabric is not None):
            raise click.BadParameter(f"got {name} with a "
                                     f"{'scenario' if is_scenario else '--fabric picture'}, "
                                     "expected it only with captures", param_hint=f"'{name}'")
    if fabric is not None:
        if source is not None and Path(source).suffix in (".yaml", ".yml"):
            raise click.BadParameter("got a scenario, expected captures (a file or a "
                                     "directory) beside --fabric", param_hint="'SOURCE'")
        if ranks:
            raise click.BadParameter("got ranks with --fabric, expected them only with a "
                                     "scenario (.yaml)", param_hint="'--ranks'")
        from tokenpcap.analysis.fabric import find_fabric
        from tokenpcap.analysis.plot_fabric import plot_fabric_files
        from tokenpcap.cli.captures import capture_paths

        directory, stem = find_fabric(fabric)
        if qp is not None:
            from tokenpcap.analysis.plot_qp import plot_qp_files

            for path in plot_qp_files(directory, stem, outdir, qp):
                click.echo(str(path))
            return
        caps = capture_paths([source]) if source is not None else None
        for path in plot_fabric_files(directory, stem, outdir, captures=caps):
            click.echo(str(path))
        return
    if source is None:
        raise click.UsageError("expected SOURCE (a capture, a directory or a scenario), or "
                               "--fabric DIR")
    from tokenpcap.generate.select import parse_index_set
    from tokenpcap.analysis.plot import plot_all

    rank_list = None
    if ranks:
        if Path(source).suffix not in (".yaml", ".yml"):
            raise click.BadParameter("got ranks for a capture, expected them only with a "
                                     "scenario (.yaml)", param_hint="'--ranks'")
        from tokenpcap.config.profiles import load_scenario

        p = load_scenario(source).parallelism
        try:
            rank_list = sorted(parse_index_set(ranks, "--ranks", p.world))
        except InputError as err:
            raise click.BadParameter(str(err).split(": ", 1)[-1], param_hint="'--ranks'") from None
    from tokenpcap.cli.captures import capture_paths

    if together:
        from tokenpcap.analysis.plot import plot_together

        for path in plot_together(capture_paths(sources), outdir, together,
                                  stem=Path(source).stem or "captures", bin_ns=bin_ns,
                                  window=span):
            click.echo(str(path))
        return
    if is_scenario:
        from tokenpcap.config.profiles import load_scenario
        from tokenpcap.tokens import check_scenario_corpus

        check_scenario_corpus(load_scenario(source))     # refused as run refuses it
    paths = [source] if is_scenario else capture_paths(sources)
    for src in paths:
        for path in plot_all(src, outdir, scale=scale, iterations=iterations, ranks=rank_list,
                             bin_ns=bin_ns, window=span):
            click.echo(str(path))
