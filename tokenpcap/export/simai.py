"""The plan of one iteration as a SimAI workload file (``tokenpcap export --to simai``).

SimAI (Alibaba; its astra-sim fork reads the file in ``Workload::initialize_workload``, the same
parser for the analytical and the ns-3 backend) takes the workload Megatron workload generators
write: line 1 the parallelism policy ``HYBRID_TRANSFORMER_FWD_IN_BCKWD`` and integer ``key:
value`` pairs (``model_parallel_NPU_group`` = tp, ``ep``, ``pp``, ``vpp``, ``ga`` = microbatches,
``all_gpus``, ``checkpoints``, ``checkpoint_initiates``, ``pp_comm`` = the PP message in bytes),
line 2 the number of layer records, then one record per line of exactly 12 whitespace-separated
fields (:data:`FIELDS`): id, dependency (-1), forward compute ns, forward communication type and
bytes, input-gradient compute ns, type and bytes, weight-gradient compute ns, type and bytes,
weight-update ns. Types (:data:`TYPES`): ``NONE``, ``ALLREDUCE``, ``ALLGATHER``,
``REDUCESCATTER``, ``ALLTOALL``; in the forward and input-gradient columns a plain type runs on
the TP group and ``_EP`` on the EP group; in the weight-gradient column a plain type runs on the
DP group and ``_DP_EP`` on the expert-data-parallel group (DP / EP ranks). SimAI reads an
unknown type as ``NONE`` without a word, so :func:`simai_workload` only writes these.

What the records hold: SimAI's workload is one rank's view (SimAI runs every rank alike and
models PP by ``pp_comm``), so :func:`write_simai` writes one file per pipeline stage, the calls
of rank ``(stage, dp 0, tp 0, cp 0)`` in the plan's order (:func:`stage_path` names the files):

* per microbatch (microbatch 0's calls: SimAI walks the records once forward and once backward,
  ``Workload::iterate_hybrid_parallel_Transformer_fwd_in_bckwd``, and uses ``ga`` only in its
  PP bubble and PP communication estimates, ``Layer::report``): on stage 0 ``embedding_layer``
  with the embedding's TP collective; per transformer layer of the stage ``layer<L>`` carrying
  its compute whether or not the layer has a collective (the schedule's attention + the layer's
  own MLP, MoE or dense, forward and backward ns; with full recomputation the replayed forward
  in the input-gradient compute, as :mod:`tokenpcap.schedule.program` runs it), then one record
  per TP or EP collective of that layer (an MoE layer's dispatch and combine AllToAlls on the EP
  group), forward ones in the forward column, backward ones (and the forward collectives
  full recomputation replays) in the input-gradient column; on the last stage
  ``output_layer`` with the output layer's compute, then its TP collectives; sizes are the
  plan's ``S`` (nccl-tests convention: the AllReduce buffer, the whole buffer of AllGather,
  ReduceScatter, AllToAll);
* per iteration (weight-gradient column): one record per DP gradient bucket (AllReduce, or the
  distributed optimizer's ReduceScatter) and per parameter AllGather after the step, dense ones
  plain, expert ones ``_DP_EP``.

Left out (the format has no type or group for them; :class:`SimaiWorkload.left_out` lists them,
with bytes): PP SendRecv (in ``pp_comm``), Broadcasts, collectives over groups other than TP, EP,
DP and DP-within-EP (tied-embedding AllReduce, gradient statistics over the model-parallel group,
MoE token counts over TP x EP), iteration-level TP collectives (the forward and input-gradient
columns hold one microbatch's), ZeRO-3's per-layer DP gathers (the forward column has no DP
group). With context parallelism the ring-attention
sends (dim ``cp``) are left out too (the format has no CP group); the compute and the TP/EP sizes
are those of one CP rank (``s/cp`` tokens), and the weight-gradient records are the reductions
over Megatron's data-parallel group with context parallelism (``dp * cp`` ranks).
"""
from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tokenpcap.errors import InputError
from tokenpcap.export.registry import atomic_text, register_export

__all__ = ["FIELDS", "TYPES", "POLICY", "SimaiRecord", "SimaiWorkload", "simai_workload",
           "write_simai"]

POLICY = "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
#: The 12 fields of a layer record, in order.
FIELDS = ("id", "dependency", "fwd_compute_ns", "fwd_type", "fwd_bytes", "ig_compute_ns",
          "ig_type", "ig_bytes", "wg_compute_ns", "wg_type", "wg_bytes", "wg_update_ns")
_BASE = {"AllReduce": "ALLREDUCE", "AllGather": "ALLGATHER", "ReduceScatter": "REDUCESCATTER",
         "AllToAll": "ALLTOALL"}
#: Every communication type SimAI's parser knows (anything else silently becomes NONE).
TYPES = frozenset({"NONE"} | {b + sfx for b in list(_BASE.values()) + ["ALLREDUCEALLTOALL"]
                              for sfx in ("", "_EP", "_DP_EP")})


@dataclass
class SimaiRecord:
    """One layer record (:data:`FIELDS`). ``fwd_call``, ``ig_call``, ``wg_call``: the plan's
    ``call_id`` of the collective in that column (-1: none); not written, they let a SimAI run's
    results be set beside the same calls of our schedule (:mod:`tokenpcap.export.simai_compare`)."""

    id: str
    fwd_compute_ns: int = 0
    fwd_type: str = "NONE"
    fwd_bytes: int = 0
    ig_compute_ns: int = 0
    ig_type: str = "NONE"
    ig_bytes: int = 0
    wg_compute_ns: int = 0
    wg_type: str = "NONE"
    wg_bytes: int = 0
    wg_update_ns: int = 0
    fwd_call: int = -1
    ig_call: int = -1
    wg_call: int = -1

    def line(self) -> str:
        for t in (self.fwd_type, self.ig_type, self.wg_type):
            if t not in TYPES:
                raise ValueError(f"SimAI communication type {t!r} is not one SimAI reads")
        if not self.id or any(c.isspace() for c in self.id):
            raise ValueError(f"SimAI layer id {self.id!r} must be one word")
        return " ".join(str(x) for x in (
            self.id, -1, self.fwd_compute_ns, self.fwd_type, self.fwd_bytes, self.ig_compute_ns,
            self.ig_type, self.ig_bytes, self.wg_compute_ns, self.wg_type, self.wg_bytes,
            self.wg_update_ns)) + "\n"


@dataclass
class SimaiWorkload:
    """The workload of one plan (module docstring). ``header``: the line-1 pairs in order;
    ``left_out``: ``{label (op): bytes}`` of the exported rank's calls that no record holds."""

    header: dict[str, int]
    records: list[SimaiRecord]
    left_out: dict[str, int] = field(default_factory=dict)

    def text(self) -> str:
        line1 = POLICY + "".join(f" {k}: {v}" for k, v in self.header.items()) + "\n"
        return line1 + f"{len(self.records)}\n" + "".join(r.line() for r in self.records)


def simai_workload(plan, stage: int = 0) -> SimaiWorkload:  # type: ignore[no-untyped-def]
    """The SimAI workload of ``plan`` (a :class:`tokenpcap.plan.build.Plan`) as rank
    ``(stage, dp 0, tp 0, cp 0)`` makes it (module docstring): every layer of pipeline
    ``stage`` has its record with its compute, collectives or not.

    Raises:
        InputError: bad compute settings (:func:`tokenpcap.schedule.compute.stage_times`); a
            workload scenario (no model: SimAI's workload file is a model's layers); ``stage``
            outside ``[0, pp)``; DeepEP's node-limited dispatch (``moe.token_dispatcher:
            deepep``: calls over rails and nodes, where SimAI's ``ALLTOALL_EP`` is one AllToAll
            over the EP group).
    """
    from tokenpcap.plan.pipeline import stage_layers
    from tokenpcap.schedule.compute import stage_times

    plan.scenario.require_model("the SimAI export (a workload file of a model's layers)")
    s, lay = plan.scenario, plan.layout
    p = s.parallelism
    if s.model.moe is not None and s.model.moe.token_dispatcher != "alltoall":
        raise InputError(f"{s.path or '<scenario>'}: model.moe.token_dispatcher: got "
                         f"{s.model.moe.token_dispatcher!r}, expected 'alltoall' for a SimAI "
                         "workload (its ALLTOALL_EP is one AllToAll over the EP group; "
                         "`--set model.moe.token_dispatcher=alltoall` writes Megatron's "
                         "AllToAll dispatcher)")
    rank = lay.rank(stage, 0, 0)
    times = stage_times(s, stage, plan.scale)
    header = {"model_parallel_NPU_group": p.tp, "ep": p.ep, "pp": p.pp, "vpp": p.vpp,
              "ga": plan.microbatches, "all_gpus": lay.world_size, "checkpoints": 0,
              "checkpoint_initiates": 0, "pp_comm": 0}
    left: dict[str, int] = defaultdict(int)
    per_layer: dict[int, list[SimaiRecord]] = defaultdict(list)
    wg: list[SimaiRecord] = []
    edp = len(lay.group_of("edp", rank)) if p.ep > 1 else 0
    for c in plan.calls(0, ranks={rank}):
        key = f"{c.label} ({c.op})"
        n = len(c.group)
        if c.dim == "pp":
            header["pp_comm"] = max(header["pp_comm"], c.message_bytes)
            left[key] += c.message_bytes
            continue
        base = _BASE.get(c.collective)
        if c.dim == "tp" and base and c.microbatch >= 0:
            sfx = ""
        elif c.dim == "ep" and base == "ALLTOALL" and c.microbatch >= 0:
            sfx = "_EP"
        elif c.dim == "dp" and base and c.bucket >= 0:
            sfx = "_DP_EP" if (p.ep > 1 and n == edp and c.op.startswith("expert")) else ""
        else:
            left[key] += c.message_bytes
            continue
        if c.bucket >= 0:
            wg.append(SimaiRecord(f"{c.op}{c.bucket}", wg_type=base + sfx,
                                  wg_bytes=c.message_bytes, wg_call=c.call_id))
            continue
        if c.microbatch != 0:               # the records hold one microbatch's calls
            continue
        name = f"layer{c.layer}_{c.op}{'_recompute' if c.recompute else ''}" if c.layer >= 0 \
            else f"{c.op}"
        if c.phase == "forward" and not c.recompute:
            per_layer[c.layer].append(SimaiRecord(name, fwd_type=base + sfx,
                                                  fwd_bytes=c.message_bytes, fwd_call=c.call_id))
        else:
            per_layer[c.layer].append(SimaiRecord(name, ig_type=base + sfx,
                                                  ig_bytes=c.message_bytes, ig_call=c.call_id))
    records = [SimaiRecord("embedding_layer")] if stage == 0 else []
    output: list[SimaiRecord] = []
    for r in per_layer.get(-1, []):
        if r.id == "embedding":
            records[0].fwd_type, records[0].fwd_bytes = r.fwd_type, r.fwd_bytes
            records[0].fwd_call = r.fwd_call
        elif r.id == "embedding_grad":
            records[0].ig_type, records[0].ig_bytes = r.ig_type, r.ig_bytes
            records[0].ig_call = r.ig_call
        else:
            output.append(r)
    full = s.training.recompute == "full"
    for L in stage_layers(s, stage):
        moe = s.model.moe_layers[L]          # dense layers of a mixed model: the dense MLP
        mlp_fwd, mlp_bwd = (times.mlp_fwd, times.mlp_bwd) if moe else \
            (times.dense_mlp_fwd, times.dense_mlp_bwd)
        # full recomputation replays the layer's forward right before its backward
        # (tokenpcap.schedule.program: the rank's program)
        replay = times.attn_fwd + mlp_fwd if full else 0
        records.append(SimaiRecord(f"layer{L}", fwd_compute_ns=times.attn_fwd + mlp_fwd,
                                   ig_compute_ns=times.attn_bwd + mlp_bwd + replay))
        fwd = [r for r in per_layer.get(L, []) if r.fwd_type != "NONE"]
        bwd = [r for r in per_layer.get(L, []) if r.fwd_type == "NONE"]
        # SimAI walks the records backward in the backward pass: the input-gradient records
        # go in reverse of the order the rank makes them (recomputed forward, then backward)
        records += sorted(fwd, key=lambda r: _order(r.id))
        records += sorted(bwd, key=lambda r: _order(r.id), reverse=True)
    if stage == p.pp - 1:
        # the output layer and the cross-entropy of the last stage (its TP collectives follow)
        records.append(SimaiRecord("output_layer", fwd_compute_ns=times.logits_fwd,
                                   ig_compute_ns=times.logits_bwd))
    records += output
    if wg:
        wg[-1].wg_update_ns = times.optimizer
    records += wg
    return SimaiWorkload(header, records, dict(left))


def stage_path(out: Path, stage: int) -> Path:
    """The file of pipeline ``stage``'s workload: ``out`` itself for stage 0,
    ``<stem>-stage<k><suffix>`` beside it for stage ``k`` > 0."""
    return out if stage == 0 else out.with_name(f"{out.stem}-stage{stage}{out.suffix}")


def _order(record_id: str) -> int:
    """Position of a layer record's operation in time (the schedule's layer programs)."""
    from tokenpcap.schedule.program import BACKWARD_LAYER_OPS, FORWARD_LAYER_OPS

    op = record_id.split("_", 1)[1]
    if op.endswith("_recompute"):
        return FORWARD_LAYER_OPS.index(op[:-len("_recompute")])
    if op in FORWARD_LAYER_OPS and not op.endswith("_grad"):
        return FORWARD_LAYER_OPS.index(op)
    return len(FORWARD_LAYER_OPS) + BACKWARD_LAYER_OPS.index(op)


def write_simai(plan, out: str | os.PathLike) -> list[Path]:  # type: ignore[no-untyped-def]
    """Write :func:`simai_workload` of every pipeline stage of ``plan``: stage 0 to ``out``,
    stage ``k`` to :func:`stage_path` (each file whole or not at all); the paths in stage order.

    Raises:
        OutputError: a file cannot be written.
    """
    out = Path(out)
    paths = []
    for st in range(plan.scenario.parallelism.pp):
        path = stage_path(out, st)
        atomic_text(path, [simai_workload(plan, st).text()])
        paths.append(path)
    return paths


@register_export("simai", "SimAI workload files of the plan, one per pipeline stage "
                 "(no schedule)", plan_only=True)
def _export(plan, out: Path) -> list[Path]:  # type: ignore[no-untyped-def]
    return write_simai(plan, out)
