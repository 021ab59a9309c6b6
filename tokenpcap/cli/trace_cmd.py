"""``tokenpcap trace SCENARIO TEXT``: follow a text of the corpus to the frames that carry it."""
from __future__ import annotations

import json
from collections import defaultdict

import click

from tokenpcap.cli import main
from tokenpcap.cli.common import library_errors
from tokenpcap.cli.progress import stage_lines
from tokenpcap.cli.set_option import set_option
from tokenpcap.config.profiles import load_scenario
from tokenpcap.records.provenance import MAX_SCALE


def _ranks(ranks: list[int]) -> str:
    if len(ranks) > 1 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(map(str, ranks))


def _print(j) -> None:  # type: ignore[no-untyped-def]
    loc = j.located
    how = "exact" if loc.exact else "whitespace-insensitive"
    click.echo(f"{loc.match!r}: {how} match {loc.occurrence} of {loc.occurrences}, "
               f"characters {loc.char_start}-{loc.char_end} of the corpus")
    click.echo(f"{len(loc.ids)} tokens ({j.tokenizer}), corpus tokens "
               f"{loc.token_start}-{loc.token_end} of {j.corpus_tokens:,}:")
    for i, (tid, text) in enumerate(zip(loc.ids, loc.strings)):
        click.echo(f"  {loc.token_start + i:>9}  id {tid:>6}  {text!r}")
    for h in j.held:
        click.echo(f"sequence {h.sample} (tokens {h.sample * j.seq_length}-"
                   f"{(h.sample + 1) * j.seq_length}), positions {h.positions[0]}-"
                   f"{h.positions[1]}: iteration {h.iteration}, microbatch {h.microbatch}, "
                   f"DP replica {h.replica}, sample {h.index} of the microbatch")
        for st, (ranks, sp) in enumerate(zip(h.ranks, h.sp_ranks)):
            extra = "" if sp == ranks else f" (sequence-parallel shard on rank {_ranks(sp)})"
            click.echo(f"  stage {st}: ranks {_ranks(ranks)}{extra}")
    nic = [k for k in j.carriers if k.on_nic]
    click.echo(f"messages on the NICs carrying them (scale {j.scale}; ns of simulated time): "
               f"{len(nic)}")
    for k in nic:
        click.echo(f"  {k.label} {k.op} call {k.call_id} step {k.step}: "
                   f"{j.nic_names[k.src_nic]} -> {j.nic_names[k.dst_nic]} (rank {k.rank_src} -> "
                   f"{k.rank_dst}), {k.start_ns}-{k.end_ns} ns, {k.size_bytes:,} B, "
                   f"{k.token_bytes:,} B of the tokens at bytes {k.byte_range[0]}-"
                   f"{k.byte_range[1]} (packets {k.packets[0]}-{k.packets[1] - 1})")
    nvl: dict[str, list] = defaultdict(list)
    for k in j.carriers:
        if not k.on_nic:
            nvl[k.label].append(k)
    if nvl:
        click.echo("NVLink copies carrying them (off the wire; --json lists each):")
        for label, ks in sorted(nvl.items()):
            click.echo(f"  {label}: {len(ks)} copies, {sum(k.token_bytes for k in ks):,} B of "
                       f"the tokens, {min(k.start_ns for k in ks)}-{max(k.end_ns for k in ks)} ns")
    if j.filters:
        click.echo(f"Wireshark display filters per sending NIC (seed {j.seed}): the frames of "
                   "those messages")
        for n, f in j.filters.items():
            click.echo(f"  {j.nic_names[n]}: {f}")
        click.echo("only the frames whose payload holds the tokens' bytes:")
        for n, f in j.token_filters.items():
            click.echo(f"  {j.nic_names[n]}: {f}")
    for e in j.frames:
        nums = ",".join(map(str, e["frames"]))
        click.echo(f"{e['file']}: frames {nums}; payload holding the tokens: "
                   f"{','.join(map(str, e['token_frames']))}")
        click.echo(f"  tshark -r {e['file']} -Y 'frame.number in {{{nums}}}'")


@main.command("trace")
@click.argument("scenario", type=click.Path(dir_okay=False, path_type=str))
@click.argument("text")
@click.option("--occurrence", type=click.IntRange(min=1), default=1, show_default=True,
              help="Which match of TEXT in the corpus (1 = the first).")
@click.option("--capture", type=click.Path(path_type=str),
              help="A pcapng file or directory written by `tokenpcap generate`: name the frames.")
@click.option("--scale", type=click.IntRange(1, MAX_SCALE), default=None,
              help="The run's --scale (default: the capture's, else 1).")
@click.option("--seed", type=click.IntRange(min=0), default=None,
              help="The run's --seed (QPNs, PSNs; default: the capture's, else the scenario's).")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@library_errors
@set_option
@stage_lines
def trace_cmd(scenario: str, text: str, occurrence: int, capture: str | None,
              scale: int | None, seed: int | None, as_json: bool) -> None:
    """Follow TEXT of SCENARIO's corpus to its tokens, sequence, microbatch, DP replica,
    iteration, ranks, the messages that carry it and their frames."""
    from tokenpcap.analysis.trace import trace

    j = trace(load_scenario(scenario), text, occurrence=occurrence, scale=scale,
              seed=seed, capture=capture)
    if as_json:
        click.echo(json.dumps(j.to_json(), indent=1))
        return
    _print(j)
