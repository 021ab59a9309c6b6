"""``plan --time``: time one iteration (every message, no frame made) and say where its time goes
and the MFU it implies (:mod:`tokenpcap.schedule.breakdown`)."""
from __future__ import annotations

from tokenpcap.config.types import Published, Scenario
from tokenpcap.pipeline import prepare
from tokenpcap.schedule.breakdown import IterationBreakdown, iteration_breakdown
from tokenpcap.tokens import TokenizedCorpus

__all__ = ["time_iteration", "breakdown_json", "print_breakdown", "relative_gap"]


def time_iteration(s: Scenario, tokens: TokenizedCorpus | None, scale: int) -> IterationBreakdown:
    """Plan and time one iteration of ``s`` (every NIC timed, no frame kept) and break it down.

    Raises:
        InfeasiblePlanError: beyond what the engine can time (:func:`tokenpcap.pipeline.prepare`).
        ValueError: ``s`` has no model (a workload scenario).
    """
    done = prepare(s, tokens=tokens, scale=scale, nics=(), keep_messages=False,
                   keep_nvlink=False)
    for _ in done.schedule.run():
        pass
    return iteration_breakdown(done.schedule)


def relative_gap(b: IterationBreakdown, published: Published) -> float:
    """``mfu / published.mfu - 1``: how far the schedule's MFU is from the published one, as a
    fraction of the published one (+0.05: 5 % above it)."""
    return b.mfu / published.mfu - 1


def breakdown_json(b: IterationBreakdown, published: Published | None = None) -> dict:
    """``plan --time --json``'s ``iteration`` mapping (docs/plan.md)."""
    pub = None if published is None else {"mfu": published.mfu, "source": published.source,
                                          "relative_gap": relative_gap(b, published)}
    return {"iteration_ns": b.iteration_ns, "critical_rank": b.critical_rank, "stage": b.stage,
            "parts_ns": b.parts(), "pipeline_parts_ns": b.pipeline_parts(),
            "slowest_stage_compute_ns": b.slowest_stage_compute_ns, "published": pub,
            "ideal_bubble": b.ideal_bubble,
            "model_flops": b.model_flops, "executed_flops": b.executed_flops, "mfu": b.mfu,
            "executed_share": b.executed_share,
            "kernel_efficiency": {"gemm": b.gemm_efficiency, "attention": b.attention_efficiency}}


def print_breakdown(out, b: IterationBreakdown, peak_tflops: float, scale: int,  # type: ignore[no-untyped-def]
                    published: Published | None = None) -> None:
    """The iteration time, the MFU (beside the published one, if the scenario gives it) and the
    table of where the time goes, on a rich console."""
    from rich.table import Table

    scaled = f" (--scale {scale}: compute and messages divided by {scale})" if scale > 1 else ""
    length = (f"{b.iteration_ns / 1e9:,.3f} s" if b.iteration_ns >= 10**9
              else f"{b.iteration_ns / 1e6:,.3f} ms")
    out.print(f"[bold]iteration {length}[/bold]{scaled}; MFU "
              f"{100 * b.mfu:.1f} % (Megatron-LM's formula: {b.model_flops:.4g} model FLOPs, "
              f"causal attention, over {peak_tflops:g} TFLOP/s per GPU); the FLOPs the schedule runs "
              f"(recomputation included) {100 * b.executed_share:.1f} %; kernels at "
              f"{100 * b.gemm_efficiency:g} % (GEMM) / {100 * b.attention_efficiency:g} % "
              "(attention) of the peak")
    t = Table(title=f"where the iteration's time goes on rank {b.critical_rank} (stage "
                    f"{b.stage}, whose last backward closes the pipeline)")
    t.add_column("part")
    t.add_column("ms", justify="right")
    t.add_column("share", justify="right")
    for name, ns in b.parts().items():
        t.add_row(name, f"{ns / 1e6:,.3f}", f"{100 * ns / b.iteration_ns:.1f} %")
        if name == "pipeline bubble and waits":
            for sub, sub_ns in b.pipeline_parts().items():
                t.add_row(f"  {sub}", f"{sub_ns / 1e6:,.3f}",
                          f"{100 * sub_ns / b.iteration_ns:.1f} %")
    out.print(t)
    if published is not None:
        out.print(f"published MFU {100 * published.mfu:.1f} % ({published.source}); the "
                  f"schedule's {100 * b.mfu:.1f} % is {100 * relative_gap(b, published):+.1f} % "
                  "of it; the residual is the table's parts other than compute")
    out.print(f"pipeline bubble by (p - 1) / (v m): {100 * b.ideal_bubble:.1f} % of the "
              "pipeline's compute")
