"""``tokenpcap generate SCENARIO -o DIR``: the captures of a scenario, with selections."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from tokenpcap.cli import main
from tokenpcap.cli.captures import CAPTURE_SUFFIXES
from tokenpcap.cli.common import (EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated,
                                  library_errors, output_path, terminate_like_interrupt)
from tokenpcap.cli.progress import stage_lines
from tokenpcap.cli.set_option import set_option
from tokenpcap.errors import InputError
from tokenpcap.pcap.registry import transport_mismatch
from tokenpcap.pcap.output import make_directory
from tokenpcap.records import LABELS
from tokenpcap.records.points import NIC_TX, parse_point
from tokenpcap.records.text import counted
from tokenpcap.generate.select import unknown_phase_patterns
from tokenpcap.generate.run import (FORMATS, SPLITS, GenerateOptions, GenerateResult, Selection,
                                generate, parse_index_set, parse_iterations, parse_window)
from tokenpcap.config.profiles import MAX_SEED, Scenario, load_scenario
from tokenpcap.records.provenance import MAX_SCALE

__all__ = ["generate_cmd", "run_generation", "print_summary", "other_captures", "default_jobs",
           "Terminated", "output_directory", "terminate_like_interrupt", "MAX_SEED"]

#: Create the output directory (and missing parents) for a run; removed again if the run fails.
output_directory = make_directory


def default_jobs() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:          # not Linux
        return max(1, os.cpu_count() or 1)


def _console():  # type: ignore[no-untyped-def]
    from rich.console import Console

    return Console(file=sys.stdout, width=None if sys.stdout.isatty() else 120)


def run_generation(s: Scenario, opt: GenerateOptions, tokens=None) -> GenerateResult:
    """Announce the expected size, generate (the progress: the stage lines of
    :mod:`tokenpcap.cli.progress`, timed messages of the job and packets written)."""
    out = _console()

    def announce(info: dict) -> None:
        files = f"writing {counted(info['files'], opt.fmt + ' file')} to {opt.out_dir}: "
        late = "PFC and CNP frames" if info.get("cnp_frames") else "PFC frames"
        if info.get("fabric_dependent") and opt.point.at_switch:
            out.print(f"{files}the RoCE frames of --point {opt.point}, of the run's "
                      f"{info['packets']:,} packets, {info['bytes']:,} bytes (predicted before "
                      f"routing: which cross the port, and its {late}, come with the fabric's "
                      f"timing, known only once simulated; {info['free_bytes']:,} bytes free)")
            return
        if info.get("fabric_dependent"):
            out.print(f"{files}{info['packets']:,} packets, {info['bytes']:,} bytes predicted for "
                      f"the RoCE frames at --point {opt.point} ({late} come with the fabric's "
                      f"timing, known only once simulated; {info['free_bytes']:,} bytes free)")
            return
        if info.get("upper_bound"):
            cnps = " without the CNP frames" if info.get("cnp_frames") else ""
            out.print(f"{files}at most {info['packets']:,} packets, {info['bytes']:,} bytes{cnps} "
                      f"(upper bound: the time window keeps less, known only once simulated; "
                      f"{info['free_bytes']:,} bytes free)")
            return
        if info.get("cnp_frames"):
            out.print(f"{files}{info['packets']:,} packets, {info['bytes']:,} bytes expected "
                      f"without the CNP frames (the fabric's reaction, known only once "
                      f"simulated; {info['free_bytes']:,} bytes free)")
            return
        out.print(f"{files}{info['packets']:,} packets, {info['bytes']:,} bytes expected "
                  f"({info['free_bytes']:,} bytes free)")

    with terminate_like_interrupt():
        return generate(s, opt, tokens=tokens, announce=announce)


def generate_into(s: Scenario, opt: GenerateOptions, tokens=None) -> GenerateResult:  # type: ignore[no-untyped-def]
    """Create ``opt.out_dir``, generate, and remove the directory again if it was created here
    and the run failed (refused, interrupted, an error). SIGINT and SIGTERM stop the run at
    once with a one-line message saying what the directory holds, and exit 130 / 143."""
    try:
        with output_directory(opt.out_dir):
            return run_generation(s, opt, tokens=tokens)
    except (Terminated, KeyboardInterrupt) as err:
        stopped(err, opt.out_dir, "writers killed")


def stopped(err: BaseException, out_dir: Path, how: str) -> None:
    """Say in one line that a run was stopped by SIGINT/SIGTERM (``err``) and what ``out_dir``
    holds now (the complete new set when the signal came after it landed, else what it held
    before), then exit 130 (SIGINT) or 143 (SIGTERM). ``how``: what was stopped."""
    name, code = (("SIGTERM", EXIT_TERMINATED) if isinstance(err, Terminated)
                  else ("SIGINT", EXIT_INTERRUPTED))
    if getattr(err, "output_committed", False):
        click.echo(f"error: stopped ({name}) after the run had finished: its files are "
                   f"complete in {out_dir}", err=True)
    else:
        click.echo(f"error: stopped ({name}): {how}, no file of this run kept; "
                   f"{out_dir} holds what it held before", err=True)
    sys.exit(code)


def expected_text(res: GenerateResult) -> str:
    """What the summary sets beside the written bytes: the prediction of
    :func:`tokenpcap.generate.size.predict_capture` as what it is. At ``nic-tx`` it is exact
    (``expected``), or an upper bound with a time window; at ``nic-rx`` exact for the RoCE
    frames, the PFC frames not included; at a switch port it counts every selected RoCE frame
    of the run, before routing says which cross the port, so it is neither the file's size
    nor a bound of it (the PFC frames come on top). The CNPs a DCQCN fabric sends are the
    fabric's reaction, not the plan's traffic: never in the prediction, said so when the file
    holds any."""
    sel = res.selection
    if res.point.at_switch:
        return (f"the run's RoCE frames, before routing, {res.expected_bytes:,}: "
                f"not this port's size")
    left_out = [k for k, there in (("PFC", res.point != NIC_TX), ("CNP", res.cnp_packets > 0))
                if there]
    without = f" without the {' and '.join(left_out)} frames" if left_out else ""
    if sel is not None and sel.window_ns and res.point == NIC_TX:
        return f"at most {res.expected_bytes:,}{without}"
    return f"expected {res.expected_bytes:,}{without}"


def print_summary(res: GenerateResult, tokens=None) -> None:
    """Files, packets, bytes, per-phase payload, control traffic and time span of a run."""
    from rich.table import Table

    out = _console()
    if tokens is not None:
        out.print(f"corpus: {tokens.tokens:,} tokens; one iteration takes "
                  f"{res.plan.tokens_per_iteration:,} tokens")
    files = Table(title="files")
    for col in ("file", "packets", "bytes"):
        files.add_column(col, justify="left" if col == "file" else "right")
    for path, p, b in res.files:
        files.add_row(str(path), f"{p:,}", f"{b:,}")
    out.print(files)
    a, b = res.iterations
    n_it = b - a
    plan = {r.name: r.nic_bytes * n_it for r in res.plan.rows}
    what = "the plan's NIC bytes beside"
    if res.scale > 1 or n_it > 1:
        what += f": plan at scale {res.scale} × {n_it} iteration{'s' if n_it > 1 else ''}"
    ph = Table(title=f"RDMA payload per phase (data packets; {what})")
    for col in ("phase", "packets", "payload B", "plan NIC B"):
        ph.add_column(col, justify="left" if col == "phase" else "right")
    for name in sorted(res.phase_payload):
        ph.add_row(name, f"{res.phase_packets[name]:,}", f"{res.phase_payload[name]:,}",
                   f"{plan.get(name, 0):,}")
    out.print(ph)
    # the note explains a payload below the plan: a selection that keeps every byte of the
    # phases it shows (all NICs) gets none
    sel = res.selection
    if sel is not None and (sel.nics or sel.ranks or sel.phases or sel.window_ns) and any(
            res.phase_payload[name] != plan.get(name, 0) for name in res.phase_payload):
        out.print("note: a selection (--nics/--ranks/--phases/--time-window) keeps part of the "
                  "traffic; the plan column is for every NIC")
    span = max(0, res.last_ns - res.first_ns)
    out.print(f"packets {res.packets:,}, file bytes {res.file_bytes:,} ({expected_text(res)}); "
              f"control traffic: "
              f"{counted(res.cts_packets, 'clear-to-send packet')} ({res.cts_payload:,} payload "
              f"bytes), {counted(res.ack_packets, 'ACK')}"
              f"{', ' + counted(res.cnp_packets, 'CNP') if res.cnp_packets else ''}"
              f"{'' if res.point == NIC_TX else ', ' + counted(res.pfc_packets, 'PFC frame')}"
              f"; time span "
              f"{span / 1e6:,.3f} ms of simulated time; {res.seconds:.1f} s wall")
    fab = res.fabric
    if fab is not None:
        out.print(f"fabric ({fab.topology_kind}{', preset ' + fab.preset if fab.preset else ''}): "
                  f"{fab.packet_hops:,} packets forwarded by switches, "
                  f"{counted(fab.drops_total, 'drop')}; what it did: "
                  f"{res.fabric_files[-1].name} and its tables beside the captures")
        if fab.headroom_overflows:
            click.echo(f"warning: {counted(fab.headroom_overflows, 'packet')} of a lossless priority "
                       "found its PFC headroom full (kept, not dropped: a real switch would drop "
                       "them); expected a larger fabric.pfc.headroom_bytes for these links", err=True)
    others = other_captures(res)
    if others:
        out.print(f"note: {res.files[0][0].parent} also holds "
                  f"{counted(len(others), 'capture file')} this run did not write (e.g. "
                  f"{others[0].name}); inspect DIR would add {'it' if len(others) == 1 else 'them'}"
                  " to this run's")


def other_captures(res: GenerateResult) -> list[Path]:
    """Capture files (.pcap, .pcapng, .erf) in the output directories of ``res`` that this run
    did not write: an earlier run with another --split or selection."""
    ours = {Path(p).resolve() for p, _, _ in res.files}
    dirs = {Path(p).resolve().parent for p in ours}
    return sorted(q for d in dirs for q in d.iterdir()
                  if q.suffix in CAPTURE_SUFFIXES and q.resolve() not in ours)


def selection_options(f):  # type: ignore[no-untyped-def]
    """The options shared by ``generate`` (selections, format, split ...)."""
    opts = [
        click.option("--ranks", help="Keep frames sent for these ranks, e.g. 0-3,8."),
        click.option("--nics", help="Keep frames these NICs send: global indices (0,8), busiest[:K] "
                     "(the K sending the most bytes, default 1) or carrying:FAMILY (every NIC "
                     "sending bytes of that phase family, e.g. carrying:ep); see `plan --nics`."),
        click.option("--phases", help="Comma-separated phase patterns: a label "
                     "(dp/backward/AllReduce), a prefix (pp/forward) or a component (backward)."),
        click.option("--iterations", help="N: run N iterations; A:B: run B, keep iterations A..B-1."),
        click.option("--time-window", help="START:END of simulated time to keep, e.g. 0:500us."),
        click.option("--format", "fmt", type=click.Choice(FORMATS), default="pcapng",
                     show_default=True),
        click.option("--split", type=click.Choice(SPLITS), default="nic", show_default=True,
                     help="One file per NIC, per phase, or one file."),
        click.option("--snaplen", type=click.IntRange(1, 262144), default=262144,
                     show_default=True, help="Frame bytes kept per packet. Every RoCEv2 header (up to RETH and ImmDt) needs 74 on IPv4, 94 on IPv6, 4 more with a VLAN tag; 64 cuts into the RETH."),
        click.option("--scale", type=click.IntRange(1, MAX_SCALE), default=1, show_default=True,
                     help="Divide every message size and compute time by this."),
        click.option("--seed", type=click.IntRange(0, MAX_SEED), default=None,
                     help="QPNs, PSNs, keys and payload (default: the scenario's)."),
        click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
                     help="Writer processes (default: the cores available)."),
        click.option("--force", is_flag=True, help="Write even if the disk looks too small."),
        click.option("--point", default="nic-tx", show_default=True,
                     metavar="nic-tx|nic-rx|switch:NAME:PORT",
                     help="Capture point: what each NIC sends, what each NIC receives (PFC "
                          "frames of its ToR included), or the egress of one switch port "
                          "(e.g. switch:leaf0-3:2)."),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def _option(hint: str, parse, *args):  # type: ignore[no-untyped-def]
    """Run a parser of option text; its InputError becomes a usage error (exit 2)."""
    try:
        return parse(*args)
    except InputError as err:
        raise click.BadParameter(str(err).split(": ", 1)[-1], param_hint=f"'{hint}'") from None


def parse_phases(text: str) -> tuple[str, ...]:
    """``--phases`` text → its comma-separated patterns, blanks dropped.

    Raises:
        InputError: no pattern at all (``''``, ``','``): an empty selection would otherwise
            keep every phase, the opposite of what was typed; a pattern that selects no phase
            label of any scenario (a typo: refused before anything is planned or timed)."""
    pats = tuple(p.strip() for p in text.split(",") if p.strip())
    if not pats:
        raise InputError(f"--phases: got {text!r}, expected phase patterns like "
                         "'dp/backward/AllReduce,pp/forward,backward'")
    bad = unknown_phase_patterns(pats)
    if bad:
        parts = [" ".join(dict.fromkeys(lab.split("/")[k] for lab in LABELS)) for k in range(3)]
        raise InputError(f"--phases: got {', '.join(map(repr, bad))}, expected a phase label "
                         "DIM/PASS/COLLECTIVE, a prefix of one ending at '/' or one of its parts "
                         f"(dims {parts[0]}; passes {parts[1]}; collectives {parts[2]})")
    return pats


def _parse_nics(s: Scenario, text: str, n_nics: int, scale: int) -> frozenset[int]:
    """``--nics`` text → NIC indices: a pick of :mod:`tokenpcap.plan.nic_pick` (``busiest:K``,
    ``carrying:dp``), resolved on the plan at ``scale`` and said on stderr, or indices.

    Raises:
        InputError: as :func:`~tokenpcap.plan.nic_pick.pick_nics` or :func:`parse_index_set`.
    """
    import re

    from tokenpcap.plan.nic_pick import NICS_WANT, is_pick, pick_nics

    if not is_pick(text):
        if re.search(r"[^\d\s,-]", text):          # a word that names no pick: say what is read
            raise InputError(f"--nics: got {text!r}, expected {NICS_WANT}")
        return parse_index_set(text, "--nics", n_nics)
    from tokenpcap.plan.build import build_plan
    from tokenpcap.plan.nics import nic_phase_table

    pick = pick_nics(text, nic_phase_table(build_plan(s, scale=scale)))
    click.echo(pick.why, err=True)
    return pick.nics


def build_options(s: Scenario, out_dir: str, ranks, nics, phases, iterations, time_window, fmt,
                  split, snaplen, scale, seed, jobs, force, point: str = "nic-tx"
                  ) -> GenerateOptions:
    """Options of the command line → :class:`GenerateOptions`.

    Raises:
        click.BadParameter: an option value out of range for this scenario (exit 2): indices
            outside the world / the NICs, an empty or malformed selection (``--nics ''`` names
            no NIC: it does not keep every NIC), time window or iteration range, ``--format erf``
            on RoCEv2, a ``--point`` that is not nic-tx, nic-rx or switch:NAME:PORT, a
            ``--nics`` pick (``busiest:K``, ``carrying:FAMILY``) that picks no NIC.
    """
    world = s.parallelism.world
    n_nics = s.cluster.nodes * s.cluster.nics_per_node
    why = transport_mismatch(fmt, s.cluster.transport)
    if why:
        raise click.BadParameter(why, param_hint="'--format'")
    n_it, keep_it = _option("--iterations", parse_iterations, iterations) \
        if iterations is not None else (None, None)
    sel = Selection(
        nics=_option("--nics", _parse_nics, s, nics, n_nics, scale) if nics is not None else None,
        ranks=_option("--ranks", parse_index_set, ranks, "--ranks", world)
        if ranks is not None else None,
        phases=_option("--phases", parse_phases, phases) if phases is not None else None,
        iterations=keep_it,
        window_ns=_option("--time-window", parse_window, time_window)
        if time_window is not None else None)
    return GenerateOptions(out_dir=Path(out_dir), fmt=fmt, split=split, snaplen=snaplen,
                           scale=scale, seed=seed, iterations=n_it, selection=sel,
                           jobs=jobs or default_jobs(), force=force,
                           point=_option("--point", parse_point, point))


@main.command("generate")
@click.argument("scenario", type=click.Path(dir_okay=False, path_type=str))
@click.option("--output", "-o", "out_dir", required=True, callback=output_path,
              type=click.Path(file_okay=False, path_type=str), help="Output directory (created).")
@selection_options
@click.option("--dask", "dask_address", metavar="ADDRESS|local[:N]",
              help="Write the files on a Dask cluster: a scheduler address (tcp://host:8786), "
                   "a scheduler file, or local[:N] for N worker processes here (--split nic; "
                   "DIR must be seen by every worker). See docs/dask.md.")
@library_errors
@set_option
@stage_lines
def generate_cmd(scenario: str, out_dir: str, dask_address: str | None = None, **kw) -> None:
    """Write the pcaps of SCENARIO's iterations (as its NICs send them) into OUTPUT."""
    s = load_scenario(scenario)
    opt = build_options(s, out_dir, **kw)          # usage errors before anything is created
    from tokenpcap.tokens import check_scenario_corpus

    check_scenario_corpus(s)                # refused as run refuses it; its tokens are not needed
    if dask_address is not None:
        from tokenpcap.cli.dask_run import generate_on_dask

        if opt.split != "nic":
            raise click.BadParameter(f"got --split {opt.split}, expected --split nic with "
                                     "--dask (shards are sets of NICs)", param_hint="'--dask'")
        if opt.point != NIC_TX:
            raise click.BadParameter(f"got --point {opt.point}, expected --point nic-tx with "
                                     "--dask (shards are sets of sending NICs)",
                                     param_hint="'--dask'")
        res = generate_on_dask(s, opt, dask_address)
    else:
        res = generate_into(s, opt)
    print_summary(res)
