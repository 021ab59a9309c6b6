"""``tokenpcap plan [SCENARIO]``: the analytic traffic report of one training iteration."""
from __future__ import annotations

import json
import sys

import click

from tokenpcap.cli import main
from tokenpcap.cli.common import library_errors
from tokenpcap.cli.progress import stage_lines
from tokenpcap.cli.set_option import set_option
from tokenpcap.plan.build import build_plan
from tokenpcap.config.profiles import default_scenario_path, load_scenario
from tokenpcap.records.text import counted
from tokenpcap.tokens import tokenize_scenario
from tokenpcap.records.provenance import MAX_SCALE


def console():  # type: ignore[no-untyped-def]
    """A rich console on the current stdout, wide enough for the tables when not a terminal."""
    from rich.console import Console

    return Console(file=sys.stdout, width=None if sys.stdout.isatty() else 160)


def _b(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


@main.command("plan")
@click.argument("scenario", required=False, type=click.Path(dir_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.option("--no-tokens", is_flag=True,
              help="Do not tokenize the corpus (no per-epoch totals).")
@click.option("--scale", type=click.IntRange(1, MAX_SCALE), default=1, show_default=True,
              help="Divide every message size by this (the iteration `generate --scale` writes).")
@click.option("--nics", "by_nic", is_flag=True,
              help="Bytes each NIC sends per phase in one iteration, NICs with equal bytes in "
                   "every phase grouped (busiest first): which NIC carries what, for "
                   "`generate --nics`.")
@click.option("--time", "timed", is_flag=True,
              help="Also time one iteration (every message, no frame made; as long as "
                   "`generate`'s timing) and print its length, the MFU it implies by "
                   "Megatron-LM's formula, and where its time goes (compute, exposed "
                   "communication, pipeline bubble, optimizer, DP tail).")
@library_errors
@stage_lines
@set_option
def plan_cmd(scenario: str | None, as_json: bool, no_tokens: bool, scale: int,
             by_nic: bool, timed: bool) -> None:
    """Bytes per phase on NVLink and on the NICs for one iteration of SCENARIO (default: the
    bundled Divine Comedy scenario), per epoch of its corpus, and the expected pcap size."""
    s = load_scenario(scenario or default_scenario_path())
    if timed and s.workload is not None:
        raise click.UsageError("--time: a workload scenario has no model (no compute to "
                               "time against); expected a training scenario")
    toks = None if no_tokens or s.workload is not None else tokenize_scenario(s)
    plan = build_plan(s, toks, scale=scale)
    if by_nic:
        _nics(plan, as_json)
        return
    data = plan.to_json()
    del plan                # --time plans again for the schedule: not two plans held at once
    breakdown = None
    if timed:
        from tokenpcap.cli.plan_time import breakdown_json, time_iteration

        breakdown = time_iteration(s, toks, scale)
        data["iteration"] = breakdown_json(breakdown, s.published)
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return

    out = console()
    if s.workload is not None:
        _workload_head(out, data)
        _tables(out, data, toks)
        return
    p, par = data["parallelism"], data["parameters"]
    pad = "" if par["padded_vocab_size"] == par["vocab_size"] else (
        f"; {par['total_padded']:,} with the vocabulary padded to {par['padded_vocab_size']:,}")
    extra = "".join(f" {name} {p[key]}" for name, key in (
        ("cp", "context_parallel_size"), ("vpp", "virtual_pipeline_model_parallel_size"))
        if p[key] > 1)
    out.print(f"[bold]{data['scenario']}[/bold]: {data['model']} ({par['total']:,} parameters"
              f"{pad}) on "
              f"{data['cluster']} ({data['layout']['world_size']} GPUs, {data['layout']['nodes']}"
              f" nodes); dp {p['dp']} tp {p['tp']} pp {p['pp']} ep {p['ep']}{extra}, "
              f"SP {'on' if p['sequence_parallel'] else 'off'}, ZeRO-{p['zero_stage']}, "
              f"{data['algorithm']}; {data['microbatches']} microbatches, 1F1B bubble "
              f"{data['bubble_fraction']:.3f}")
    if breakdown is None:
        out.print(f"model FLOPs of one iteration (Megatron-LM's formula, causal attention): "
                  f"{data['model_flops']:.4g}; `--time` times the iteration and gives its MFU")
    _tables(out, data, toks)
    if breakdown is not None:
        from tokenpcap.cli.plan_time import print_breakdown

        print_breakdown(out, breakdown, s.cluster.gpu.peak_tflops, scale, s.published)


def _nics(plan, as_json: bool) -> None:  # type: ignore[no-untyped-def]
    """``plan --nics``: :func:`tokenpcap.plan.nics.nic_phase_table` as JSON or a table."""
    from rich.table import Table

    from tokenpcap.plan.nics import index_ranges, nic_phase_table

    table = nic_phase_table(plan)
    if as_json:
        click.echo(json.dumps({"scenario": plan.scenario.name, "scale": plan.scale,
                               **table.to_json()}, indent=2))
        return
    npn = table.nics_per_node
    t = Table(title=f"{plan.scenario.name}: bytes each NIC sends in one iteration, per phase "
                    f"(NIC = node * {npn} + local NIC; NICs with equal bytes grouped)")
    t.add_column("NICs", overflow="fold")
    t.add_column("count", justify="right")
    t.add_column("bytes/NIC", justify="right")
    for p in table.phases:                  # dim/phase/collective, one part a line
        t.add_column(p.replace("/", "/\n"), justify="right")
    for nics, b in table.groups():
        t.add_row(index_ranges(nics), f"{len(nics):,}", _b(int(b.sum())),
                  *[_b(int(v)) if v else "-" for v in b])
    console().print(t)


def _workload_head(out, data: dict) -> None:  # type: ignore[no-untyped-def]
    """The first line of a workload scenario's report (it has no model)."""
    w = data["workload"]
    who = (f"{w['flows']:,} flows of {w['file']} over {len(w['ranks'])} ranks, open loop"
           if w["kind"] == "flows" else
           f"{len(w['pairs'])} senders -> rank {w['receiver']}" if w["kind"] == "incast" else
           f"{len(w['pairs'])} pairs" if w["kind"] == "sendrecv" else f"{len(w['ranks'])} ranks")
    out.print(f"[bold]{data['scenario']}[/bold]: workload {w['kind']} ({who}, {w['bytes']:,} B"
              f"{' per pair' if w['kind'] == 'alltoall' else ''}, x{w['repeat']}) on "
              f"{data['cluster']} ({data['layout']['world_size']} GPUs, "
              f"{data['layout']['nodes']} nodes); {data['algorithm']}; no model: no compute, "
              "no tokens")
    if "receiver_bytes" in w:
        out.print(f"the receiver's NIC takes {w['receiver_bytes']:,} B: at least "
                  f"{w['receiver_wire_time_ns'] / 1000:,.1f} µs at link rate")


def _tables(out, data: dict, toks) -> None:  # type: ignore[no-untyped-def]
    from rich.table import Table

    t = Table(title="one iteration, per phase (per rank = busiest participating rank)")
    for col in ("phase", "collective", "group", "message B", "count", "NIC B/rank",
                "NVLink B/rank", "NIC B total", "wire µs"):
        t.add_column(col, justify="left" if col in ("phase", "collective") else "right")
    for r in data["phases"]:
        t.add_row(r["name"], r["collective"], str(r["group_size"]), _b(r["message_bytes"]),
                  _b(r["count"]), _b(r["nic_bytes_per_rank"]), _b(r["nvlink_bytes_per_rank"]),
                  _b(r["nic_bytes"]), f"{r['wire_time_ns'] / 1000:,.1f}")
    out.print(t)
    tot, ep, pc = data["totals"], data["epoch"], data["pcap"]
    s2 = Table(title="totals", show_header=True)
    s2.add_column("")
    s2.add_column("one iteration", justify="right")
    s2.add_column("one epoch", justify="right")
    s2.add_row("tokens", _b(tot["tokens"]), _b(ep["tokens"]) if ep else "-")
    s2.add_row("iterations (whole)", "1", _b(ep["iterations"]) if ep else "-")
    s2.add_row("NIC bytes (all NICs)", _b(tot["nic_bytes"]), _b(ep["nic_bytes"]) if ep else "-")
    s2.add_row("NVLink bytes", _b(tot["nvlink_bytes"]), _b(ep["nvlink_bytes"]) if ep else "-")
    s2.add_row("busiest NIC, wire µs", f"{tot['wire_time_ns'] / 1000:,.1f}", "-")
    s2.add_row("pcap bytes (estimate)", _b(pc["file_bytes"]), _b(ep["pcap_bytes"]) if ep else "-")
    s2.add_row("packets (estimate)", _b(pc["data_packets"] + pc["cts_packets"] + pc["ack_packets"]), "-")
    out.print(s2)
    for r in data["phases"]:
        if r.get("protocols"):
            # ``protocols`` counts the calls of other protocols than Simple; the rest are Simple
            simple = r["calls"] - sum(r["protocols"].values())
            counts = sorted(r["protocols"].items()) + ([("Simple", simple)] if simple else [])
            used = ", ".join(f"{k} {v:,} call{'' if v == 1 else 's'}" for k, v in counts)
            where = (f"NIC bytes on the wire {r['nic_bytes']:,} (data {r['nic_payload_bytes']:,})"
                     if r["nic_bytes"] else "on NVLink only")
            out.print(f"{r['name']}: NCCL protocol {used}; {where}")
        if r.get("nccl_forced"):
            would = ", ".join(f"{k} for {v:,} calls" for k, v in sorted(r["nccl_forced"].items()))
            out.print(f"{r['name']}: NCCL's tuner would run {would}; the scenario's "
                      f"{data.get('algorithm', 'ring')} was forced")
    for op, b in data.get("moe_dispatch", {}).items():
        out.print(f"ep {op} (DeepEP, node-limited), per rank, MoE layer and microbatch: "
                  f"IB {b['nic_bytes_per_rank']:,} B, NVLink {b['nvlink_bytes_per_rank']:,} B")
    if toks is not None and toks.vocabulary_note:
        out.print(toks.vocabulary_note)
    if ep:
        out.print(_epoch_note(ep, tot["tokens"], data["microbatches"]))
    if data["model"] is None:
        out.print("a workload's one iteration is one pass of its calls (`repeat` repetitions)")
    if data.get("scale", 1) > 1:
        out.print(f"message sizes divided by --scale {data['scale']} (whole elements, at least "
                  "one per piece: every peer, chunk and channel of a call kept): the iteration "
                  "`generate --scale` writes")


def _epoch_note(ep: dict, per_iteration: int, microbatches: int) -> str:
    """One line on what an epoch is for this corpus (Megatron drops incomplete global batches)."""
    if not ep["fills_batch"]:
        return (f"note: the corpus ({counted(ep['tokens'], 'token')}, "
                f"{counted(ep['sequences'], 'whole sequence')}) "
                f"does not fill one global batch ({counted(per_iteration, 'token')}): "
                f"Megatron drops incomplete batches, so an epoch has no whole iteration "
                f"(per-epoch bytes 0); "
                f"training wraps around the corpus, one iteration reads it "
                f"{ep['reads_per_iteration']:,.1f} times")
    return (f"one epoch = {counted(ep['iterations'], 'whole iteration')} "
            f"({ep['iterations_exact']:,.3f} by tokens; the last incomplete global batch, "
            f"{counted(ep['dropped_sequences'], 'sequence')} / "
            f"{counted(ep['dropped_tokens'], 'token')}, is dropped as Megatron does)")
