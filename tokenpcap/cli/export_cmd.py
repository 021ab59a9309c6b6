"""``tokenpcap export SCENARIO --to FORMAT -o PATH``: timed messages for simulators and viewers."""
from __future__ import annotations

import click

from tokenpcap.cli import main
from tokenpcap.cli.common import library_errors, output_path
from tokenpcap.cli.progress import stage_lines
from tokenpcap.cli.set_option import set_option
from tokenpcap.export.core import FORMATS
from tokenpcap.export.hpcc import CC_MODES
from tokenpcap.export.registry import EXPORTS
from tokenpcap.records.provenance import MAX_SCALE


@main.command("export")
@click.argument("scenario", type=click.Path(dir_okay=False, path_type=str))
@click.option("--to", "fmt", required=True, type=click.Choice(FORMATS),
              help="; ".join(f"{f.name}: {f.summary}" for f in EXPORTS.values()) + ".")
@click.option("-o", "--output", required=True, callback=output_path,
              type=click.Path(dir_okay=False, path_type=str),
              help="Output file, its directory created (HPCC also writes <stem>-topology.txt, "
                   "<stem>-config.txt and <stem>-trace.txt beside it; SimAI with pp > 1 writes the "
                   "rank of stage k's workload to <stem>-stage<k><suffix> beside it; chakra: the "
                   "prefix of <prefix>.<rank>.et, <prefix>.comm_groups.json, <prefix>.summary.json).")
@click.option("--scale", type=click.IntRange(1, MAX_SCALE), default=1, show_default=True,
              help="Divide message sizes and compute time by this.")
@click.option("--iterations", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--hpcc-cc", type=click.Choice(tuple(CC_MODES)), default=None,
              help="hpcc only: the congestion control CC_MODE of the simulator's config "
                   "[default: a queued fabric's own fabric.cc, hpcc for an ideal fabric].")
@click.option("--chakra-p2p", is_flag=True, default=False,
              help="chakra only: every call as the point-to-point transfers of our schedule "
                   "(COMM_SEND/COMM_RECV nodes) instead of one COMM_COLL node.")
@library_errors
@set_option
@stage_lines
def export_cmd(scenario: str, fmt: str, output: str, scale: int, iterations: int,
               hpcc_cc: str | None, chakra_p2p: bool) -> None:
    """Schedule SCENARIO and write its RDMA messages as FORMAT.

    --to hpcc of a cluster with a queued fabric writes the fabric's topology and buffer, and
    warns on stderr of each setting of the fabric the simulator cannot model."""
    from tokenpcap.export.core import export_scenario

    if hpcc_cc is not None and fmt != "hpcc":
        raise click.UsageError(f"--hpcc-cc: got it with --to {fmt}, expected it only with "
                               "--to hpcc")
    if chakra_p2p and fmt != "chakra":
        raise click.UsageError(f"--chakra-p2p: got it with --to {fmt}, expected it only with "
                               "--to chakra")
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.tokens import check_scenario_corpus

    check_scenario_corpus(load_scenario(scenario))     # refused as run refuses it
    options = {"cc": hpcc_cc} if hpcc_cc is not None else {}
    if chakra_p2p:
        options["p2p"] = True
    paths = export_scenario(scenario, fmt, output, scale=scale, iterations=iterations,
                            **options)
    for path in paths:
        click.echo(str(path))
    if fmt == "chakra":
        import json

        summ = json.loads(paths[-1].read_text(encoding="utf-8"))
        nodes = ", ".join(f"{v:,} {k}" for k, v in summ["nodes"].items())
        click.echo(f"chakra: {summ['ranks']:,} ranks, {nodes}; compute {summ['compute_ns']:,} ns "
                   f"written as {summ['compute_written_ns']:,} ns (rounding to us: "
                   f"{summ['rounding_error_ns']:+,d} ns, at most "
                   f"{summ['max_node_rounding_error_ns']:,} ns per node)", err=True)
    if fmt == "hpcc":
        from tokenpcap.export.hpcc_cc import cc_gaps, default_cc
        from tokenpcap.export.hpcc_fabric import ns3_gaps

        cluster = load_scenario(scenario).cluster
        cc = default_cc(cluster) if hpcc_cc is None else hpcc_cc
        for gap in ns3_gaps(cluster.fabric) + cc_gaps(cluster, cc):
            click.echo(f"warning: {scenario}: {gap}", err=True)
