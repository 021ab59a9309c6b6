"""``tokenpcap run [SCENARIO]``: the main job — tokens → plan → packets → files → a summary."""
from __future__ import annotations

from pathlib import Path

import click

from tokenpcap.cli import main
from tokenpcap.cli.common import library_errors, output_path
from tokenpcap.cli.progress import stage_lines
from tokenpcap.cli.set_option import set_option
from tokenpcap.cli.generate_cmd import build_options, generate_into, print_summary
from tokenpcap.generate.run import FORMATS
from tokenpcap.config.profiles import default_scenario_path, load_scenario
from tokenpcap.tokens import tokenize_scenario
from tokenpcap.records.provenance import MAX_SCALE


@main.command("run")
@click.argument("scenario", required=False, type=click.Path(dir_okay=False, path_type=str))
@click.option("--output", "-o", "out_dir", default=None, callback=output_path, type=click.Path(file_okay=False, path_type=str),
              help="Output directory (default: ./tokenpcap-out/<scenario name>).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="pcapng", show_default=True)
@click.option("--scale", type=click.IntRange(1, MAX_SCALE), default=1, show_default=True,
              help="Divide every message size and compute time by this.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Writer processes (default: the cores available).")
@click.option("--force", is_flag=True, help="Write even if the disk looks too small.")
@library_errors
@set_option
@stage_lines
def run_cmd(scenario: str | None, out_dir: str | None, fmt: str, scale: int, jobs: int | None,
            force: bool) -> None:
    """Tokenize SCENARIO's corpus, plan one training iteration, and write the pcaps its NICs
    send, one file per NIC (default scenario: GPT-2 small on the Divine Comedy, 32 H100s)."""
    s = load_scenario(scenario or default_scenario_path())
    toks = tokenize_scenario(s) if s.workload is None else None    # a workload: no corpus
    out = Path(out_dir) if out_dir else Path("tokenpcap-out") / s.name
    opt = build_options(s, str(out), None, None, None, None, None, fmt, "nic", 262144, scale,
                        None, jobs, force)
    res = generate_into(s, opt, tokens=toks)
    print_summary(res, toks)
