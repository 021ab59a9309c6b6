"""``tokenpcap inspect FILE|DIR...``: what is in a capture, and whether it is right."""
from __future__ import annotations

import json
import re
import sys

import click

from tokenpcap.cli import main
from tokenpcap.cli.common import library_errors


def _iterations(ctx, param, value: str | None):
    """``N`` → N; ``A:B`` → (A, B) with B > A (the generator's ``--iterations``)."""
    if value is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*(?::\s*(\d+)\s*)?", value)
    if not m:
        raise click.BadParameter(f"got {value!r}, expected N or A:B (e.g. 2 or 1:3)")
    if m.group(2) is None:
        if int(m.group(1)) < 1:
            raise click.BadParameter(f"got {value!r}, expected N >= 1")
        return int(m.group(1))
    a, b = int(m.group(1)), int(m.group(2))
    if b <= a:
        raise click.BadParameter(f"got {value!r}, expected A:B with B > A")
    return a, b


class _Streamed(list):
    """A sequence the JSON encoder walks item by item (its ``__iter__``/``__len__``), so that
    the flows of a report are never all dicts, nor all text, at once."""

    def __init__(self, items):  # type: ignore[no-untyped-def]
        super().__init__()
        self._items = items

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return len(self._items) > 0


def write_json(doc: dict, out) -> None:  # type: ignore[no-untyped-def]
    """``json.dumps(doc, indent=2)`` written to ``out`` piece by piece (the same text): a
    ``flows`` sequence is encoded one flow at a time instead of as one string."""
    doc = {k: (_Streamed(v) if k == "flows" and not isinstance(v, list) else v)
           for k, v in doc.items()}
    buf: list[str] = []
    size = 0
    for chunk in json.JSONEncoder(indent=2).iterencode(doc):
        buf.append(chunk)
        size += len(chunk)
        if size > 1 << 20:
            out.write("".join(buf))
            buf, size = [], 0
    buf.append("\n")
    out.write("".join(buf))
    out.flush()


@main.command("inspect", no_args_is_help=True)
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option("--against", "scenario", type=click.Path(dir_okay=False, path_type=str),
              help="Compare payload bytes per NIC and phase with this scenario's plan.")
@click.option("--scale", type=click.IntRange(min=1), default=None,
              help="With --against: the run's --scale (default: from the capture's provenance "
                   "comment, else 1).")
@click.option("--iterations", callback=_iterations, default=None, metavar="N|A:B",
              help="With --against: the run's --iterations (default: from the capture's "
                   "provenance comment, else 1).")
@click.option("--strict", is_flag=True, help="Exit 1 when any check fails.")
@click.option("--no-crc", is_flag=True, help="Skip the ICRC/VCRC check (faster on full frames).")
@library_errors
def inspect_cmd(files: tuple[str, ...], as_json: bool, scenario: str | None, scale: int | None,
                iterations, strict: bool, no_crc: bool) -> None:
    """Summarise FILES (pcap, pcapng or ERF; several files add up, e.g. the per-NIC files of
    one generate run; a directory stands for its .pcap/.pcapng/.erf files, sorted): totals and rates, RDMA flows, opcodes, payload bytes, ICRC/VCRC, PSN
    gaps, CNPs, ECN, PFC, and bytes per phase."""
    if scenario is None and (scale is not None or iterations is not None):
        raise click.UsageError("--scale and --iterations need --against")
    from tokenpcap.analysis.inspect import inspect_captures
    from tokenpcap.analysis.report import render_text

    from tokenpcap.cli.captures import capture_paths

    rep = inspect_captures(capture_paths(files), crc=not no_crc)
    if scenario is not None:
        from tokenpcap.analysis.against import compare_with_plan

        compare_with_plan(rep, scenario, scale=scale, iterations=iterations)
    if as_json:
        write_json(rep.to_json(lazy_flows=True), sys.stdout)
    else:
        click.echo(render_text(rep))
    if strict and not rep.ok:
        sys.exit(1)
