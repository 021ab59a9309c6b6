"""``tokenpcap inspect FILE|DIR...``: what is in a capture, and whether it is right."""
from __future__ import annotations

import json
import re
import sys

import click

from tokenpcap.cli import main
from tokenpcap.cli.common import library_errors
from tokenpcap.cli.set_option import set_option
from tokenpcap.records.provenance import MAX_SCALE


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
@click.argument("files", nargs=-1, required=False, type=click.Path(path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option("--fabric", "fabric", type=click.Path(path_type=str), default=None,
              metavar="DIR|FILE",
              help="Also summarise a queued-fabric run's side files: DIR holding one "
                   "<stem>_fabric.json, or that file (default: the side files beside the "
                   "captures, if their stem starts every capture's name). Alone: only them.")
@click.option("--no-fabric", is_flag=True, help="Ignore side files beside the captures.")
@click.option("--against", "scenario", type=click.Path(dir_okay=False, path_type=str),
              help="Compare payload bytes per NIC and phase with this scenario's plan.")
@click.option("--scale", type=click.IntRange(1, MAX_SCALE), default=None,
              help="With --against: the run's --scale (default: from the capture's provenance "
                   "comment, else 1).")
@click.option("--iterations", callback=_iterations, default=None, metavar="N|A:B",
              help="With --against: the run's --iterations (default: from the capture's "
                   "provenance comment, else 1).")
@click.option("--against-timing", "sent", multiple=True, type=click.Path(path_type=str),
              metavar="SENT",
              help="Score FILES as a capture of a replay of SENT (the generated capture; a "
                   "directory stands for its captures; repeatable): missing, extra and "
                   "reordered frames, message start error, gap distance, PFC/CNP/CE counters.")
@click.option("--strict", is_flag=True, help="Exit 1 when any check fails.")
@click.option("--no-crc", is_flag=True, help="Skip the ICRC/VCRC check (faster on full frames).")
@library_errors
@set_option
def inspect_cmd(files: tuple[str, ...], as_json: bool, fabric: str | None, no_fabric: bool,
                scenario: str | None, scale: int | None, iterations, sent: tuple[str, ...],
                strict: bool, no_crc: bool) -> None:
    """Summarise FILES (pcap, pcapng or ERF; several files add up, e.g. the per-NIC files of
    one generate run; a directory stands for its .pcap/.pcapng/.erf files, sorted): totals and
    rates, RDMA flows, opcodes, payload bytes, ICRC/VCRC, PSN gaps, CNPs, ECN, PFC, and bytes
    per phase; and what the fabric did when a queued-fabric run's side files are beside them
    or named with --fabric (per switch port: bytes, queue, PFC, pauses; drops, headroom)."""
    if scenario is None and (scale is not None or iterations is not None):
        raise click.UsageError("--scale and --iterations need --against")
    if not files and fabric is None:
        raise click.UsageError("expected FILES, --fabric DIR, or both")
    if fabric is not None and no_fabric:
        raise click.UsageError("--fabric and --no-fabric exclude each other")
    if not files and scenario is not None:
        raise click.UsageError("--against needs FILES (captures)")
    if not files and sent:
        raise click.UsageError("--against-timing needs FILES (the replay's capture)")
    from tokenpcap.analysis.fabric import fabric_beside, find_fabric

    from tokenpcap.cli.captures import capture_paths

    paths = capture_paths(files) if files else []
    side = find_fabric(fabric) if fabric is not None else \
        None if no_fabric else fabric_beside(paths)
    fab = _fabric_doc(*side) if side is not None else None
    if not paths:
        doc = {"fabric": fab}
        if as_json:
            write_json(doc, sys.stdout)
        else:
            from tokenpcap.analysis.fabric import render_fabric_text

            click.echo(render_fabric_text(fab, fab["path"]))
        if strict and not fab["ok"]:
            sys.exit(1)
        return
    from tokenpcap.analysis.inspect import inspect_captures
    from tokenpcap.analysis.report import render_text

    rep = inspect_captures(paths, crc=not no_crc)
    if scenario is not None:
        from tokenpcap.analysis.against import compare_with_plan

        compare_with_plan(rep, scenario, scale=scale, iterations=iterations)
    timing = None
    if sent:
        from tokenpcap.analysis.against_timing import score_replay

        timing = score_replay(paths, capture_paths(sent))
    ok = rep.ok and (fab is None or fab["ok"]) and (timing is None or timing["ok"])
    if as_json:
        doc = rep.to_json(lazy_flows=True)
        if fab is not None:
            doc["fabric"] = fab
        if timing is not None:
            doc["against_timing"] = timing
        if fab is not None or timing is not None:
            doc["ok"] = ok
        write_json(doc, sys.stdout)
    else:
        click.echo(render_text(rep))
        if fab is not None:
            from tokenpcap.analysis.fabric import render_fabric_text

            click.echo(render_fabric_text(fab, fab["path"]))
        if timing is not None:
            from tokenpcap.analysis.against_timing import render_timing_text

            click.echo(render_timing_text(timing))
    if strict and not ok:
        sys.exit(1)


def _fabric_doc(directory, stem: str) -> dict:
    """:func:`~tokenpcap.analysis.fabric.fabric_report` of the side files ``stem`` in
    ``directory``, with ``path`` (their JSON)."""
    from tokenpcap.analysis.ccreport import cc_report
    from tokenpcap.analysis.fabric import fabric_report
    from tokenpcap.generate.ccfiles import read_cc_files
    from tokenpcap.generate.fabricfiles import read_fabric_files, summary_name

    log, summary = read_fabric_files(directory, stem)
    doc = {"path": str(directory / summary_name(stem)), **fabric_report(log, summary)}
    cc = read_cc_files(directory, stem)
    if cc is not None:
        doc["cc"] = cc_report(cc)
        doc["ok"] = doc["ok"] and all(c["ok"] for c in doc["cc"]["checks"])
    return doc
