"""Stage 3 (part): the data-parallel gradient collectives of one pipeline stage (Megatron-core
DDP and distributed optimizer; Rajbhandari et al. 2020 for ZeRO).

Gradients are reduced in ``grad_reduce_dtype``; dense and expert parameters are separate DDP
buffers, reduced over the DP and the expert-data-parallel group. With ``overlap_grad_reduce`` a
buffer is cut into buckets of about ``bucket_size`` parameters in the order backward produces
them (:func:`dp_bucket_size`, :func:`buckets`), else one bucket per buffer after backward; one
AllReduce per bucket (ZeRO-0). ZeRO-1/2: ReduceScatter per bucket, then AllGather of the updated
parameters (precision dtype) per bucket in the optimizer phase. ZeRO-3: per microbatch an
AllGather of each layer's parameters in forward and again in backward, and a ReduceScatter of
its gradients in backward (as DeepSpeed stage 3, every micro-step). The groups are Megatron's
data-parallel groups with context parallelism (``dp * cp`` ranks) and, for expert parameters,
the expert-data-parallel groups (``dp * cp / ep`` ranks). With the interleaved schedule each
model chunk of a stage is its own DDP buffer (:func:`chunk_tensors`), bucketed only for chunk 0
of stage 0 (Megatron-LM ``training.py``: ``disable_bucketing`` for ``chunk_idx > 0``), ``op``
``<kind>_grad_bucket_chunk<c>``.
"""
from __future__ import annotations

import math

from tokenpcap.collectives.layout import RankLayout
from tokenpcap.config.profiles import DTYPE_BYTES, Scenario
from tokenpcap.model import ShardParameters, Tensor, rank_tensors
from tokenpcap.plan.family import Inst
from tokenpcap.plan.pipeline import chunk_layers

__all__ = ["dp_bucket_size", "buckets", "dp_families", "chunk_tensors"]


def dp_bucket_size(s: Scenario, stage: int) -> int | None:
    """Parameters per DP gradient bucket on pipeline ``stage``, or None for one bucket per
    buffer (Megatron-core ``DistributedDataParallel.__init__``): ``training.bucket_size``, by
    default ``max(40,000,000, 1,000,000 * dp * cp)`` (the dp-cp group's ranks); None without
    ``overlap_grad_reduce`` and on every stage but the first ("data-parallel communication on
    these stages is not on the critical path")."""
    t = s.training
    if not t.overlap_grad_reduce or stage > 0:
        return None
    dp_cp = s.parallelism.dp * s.parallelism.cp
    return t.bucket_size if t.bucket_size is not None else max(40_000_000, 1_000_000 * dp_cp)


def _pad(n: int, divisor: int) -> int:
    return -(-n // divisor) * divisor


def buckets(tensors: list[Tensor], bucket_size: int | None, dp: int, distributed: bool,
             shared_embedding: bool) -> list[tuple[int, int]]:
    """Megatron-core's gradient buckets of one DDP buffer: ``(elements, lowest layer or -1)``
    per bucket, in the order backward fills them.

    Tensors are taken in reverse registration order (backward order); a bucket closes after the
    tensor that brings it to ``bucket_size`` elements or more (tensors are never split;
    ``None``: one bucket). With the distributed optimizer (ZeRO-1/2) every tensor starts on a
    multiple of 64 elements and every bucket ends on a multiple of ``lcm(dp, 128)``
    (``megatron/core/optimizer/param_layout.py``: ``pad_param_start``, ``pad_bucket_end``), and a
    shared (tied) word embedding gets a bucket of its own
    (``DistributedOptimizer._compute_per_buffer_param_layout``); without it nothing is padded
    (``param_and_grad_buffer._compute_default_per_buffer_param_layout``).
    """
    out: list[tuple[int, int]] = []
    divisor = math.lcm(dp, 128)
    start = end = 0          # bucket start, param end (element indices in the buffer)
    low, open_ = -1, False

    def close(at: int) -> int:
        nonlocal low, open_
        stop = _pad(at, divisor) if distributed else at
        out.append((stop - start, low))
        low, open_ = -1, False
        return stop

    for t in reversed(tensors):
        pstart = _pad(end, 64) if distributed else end
        shared = distributed and shared_embedding and t.name == "embedding.word_embeddings.weight"
        if shared and open_:
            start = close(pstart)
            pstart = start
        end = pstart + t.elements
        open_ = True
        if t.layer >= 0:
            low = t.layer if low < 0 else min(low, t.layer)
        if (bucket_size is not None and end - start >= bucket_size) or shared:
            start = end = close(end)
    if open_:
        close(end)
    return out


def dp_families(s: Scenario, layout: RankLayout, st: int, sh: ShardParameters, n_mb: int,
                 fam) -> None:  # type: ignore[no-untyped-def]
    p, t = s.parallelism, s.training
    e_act, e_grad = DTYPE_BYTES[t.precision], DTYPE_BYTES[t.grad_reduce_dtype]
    kinds = [("dense", [g for g in layout.groups("dp") if layout.coords(g[0]).pp == st])]
    if sh.expert:
        kinds.append(("expert", [g for g in layout.groups("edp")
                                 if layout.coords(g[0]).pp == st]))
    tensors = rank_tensors(s.model, p.tp, p.pp, st, p.ep, p.stage_layer_counts(s.model.layers))
    chunks = chunk_tensors(s, st, tensors)
    for kind, groups in kinds:
        if len(groups[0]) < 2:
            continue
        if p.zero_stage == 3:
            layers = range(sh.last_layer, sh.first_layer - 1, -1)      # backward order
            if kind == "dense":
                units = [(-1, sh.post)] + [(L, sh.dense_of(L)) for L in layers] + [(-1, sh.pre)]
            else:
                units = [(L, sh.expert_of(L)) for L in layers]
            units = [u for u in units if u[1] > 0]
            for L, n in reversed(units):
                fam("dp", "forward", "AllGather", n * e_act, e_act, st, groups,
                    [Inst(L, j, op=f"{kind}_params") for j in range(n_mb)])
            for L, n in units:
                fam("dp", "backward", "AllGather", n * e_act, e_act, st, groups,
                    [Inst(L, j, op=f"{kind}_params") for j in range(n_mb)])
                fam("dp", "backward", "ReduceScatter", n * e_grad, e_grad, st, groups,
                    [Inst(L, j, op=f"{kind}_grads") for j in range(n_mb)])
            continue
        shared = s.model.tied_embeddings and p.pp > 1
        k = 0
        for c in reversed(range(len(chunks))):     # the last chunk's backward ends first
            mine = [x for x in chunks[c] if x.expert == (kind == "expert")]
            if not mine:
                continue
            cut = buckets(mine, dp_bucket_size(s, st) if c == 0 else None, len(groups[0]),
                          p.zero_stage in (1, 2), shared)
            tag = f"_chunk{c}" if len(chunks) > 1 else ""
            for n, low in cut:
                if p.zero_stage == 0:
                    fam("dp", "backward", "AllReduce", n * e_grad, e_grad, st, groups,
                        [Inst(low, -1, bucket=k, op=f"{kind}_grad_bucket{tag}")])
                else:
                    fam("dp", "backward", "ReduceScatter", n * e_grad, e_grad, st, groups,
                        [Inst(low, -1, bucket=k, op=f"{kind}_grad_bucket{tag}")])
                    fam("dp", "optimizer", "AllGather", n * e_act, e_act, st, groups,
                        [Inst(low, -1, bucket=k, op=f"{kind}_param_bucket{tag}")])
                k += 1


def chunk_tensors(s: Scenario, st: int, tensors: list[Tensor]) -> list[list[Tensor]]:
    """``tensors`` of pipeline ``st`` (:func:`tokenpcap.model.rank_tensors`) split into the
    gradient buffers of its model chunks (:mod:`tokenpcap.plan.pipeline`: one DDP per chunk with
    interleaving), each in registration order with its layers' global indices: the embeddings
    in chunk 0, the final norm and output layer in the last chunk; one list without
    interleaving (interleaving needs one layer kind:
    :func:`tokenpcap.config.feasibility.check_feasible`; the chunks may differ in length:
    :func:`tokenpcap.config.pipeline.chunk_layer_counts`)."""
    chunks = chunk_layers(s, st)
    if len(chunks) == 1:
        return [tensors]
    flat = [L for r in chunks for L in r]
    chunk_of = [c for c, r in enumerate(chunks) for _ in r]
    first = min(x.layer for x in tensors if x.layer >= 0)
    out: list[list[Tensor]] = [[] for _ in chunks]
    seen_layer = False
    for x in tensors:
        if x.layer < 0:
            out[-1 if seen_layer else 0].append(x)
            continue
        seen_layer = True
        i = x.layer - first
        out[chunk_of[i]].append(x._replace(layer=flat[i]))
    return out
