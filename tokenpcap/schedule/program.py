"""Stage 5 (part): the program each rank runs in one iteration — compute and collective calls in
the order Megatron-LM issues them.

Pipeline order per stage: 1F1B without interleaving (Narayanan et al. 2021, Sec. 2.2.1, Fig. 4;
Megatron-LM ``forward_backward_pipelining_without_interleaving``): stage ``st`` of ``p`` runs
``w = min(p - st - 1, m)`` warm-up forwards, then ``m - w`` pairs (forward ``w + i``, backward
``i``), then the ``w`` remaining backwards (:func:`one_f_one_b`); with model chunks the
interleaved order (:func:`tokenpcap.schedule.interleave.interleaved_one_f_one_b`), every forward
and backward being one chunk's. A forward of a chunk that does not hold the model's first layer
starts by receiving its input activation (blocking), one that does not hold the last ends by
sending it on (asynchronous), and likewise backwards in the other direction.

Inside a forward (stage 0: embedding and its TP collective first), per layer: ZeRO-3 parameter
gathers, the SP AllGather, with context parallelism the attention block as ring attention
(:mod:`tokenpcap.plan.context`; Transformer Engine's double-buffered ``AttnFuncWithCPAndKVP2P``,
:meth:`_Builder.ring`: the projections, then ``cp`` partial attentions, the transfer of the K, V
chunk step ``i + 1`` needs posted when step ``i``'s compute starts and waited for when it ends),
otherwise the attention part, its TP collective (AllReduce, SP: ReduceScatter), the MLP part likewise (with
MoE the expert dispatch and combine AllToAll around the experts, or with DeepEP's node-limited
dispatch its IB call then its NVLink forwarding, the combine NVLink then IB,
:mod:`tokenpcap.plan.moe_nodelimited`; the dense layers of a model that
mixes both compute for their own dense MLP's time, :class:`~tokenpcap.schedule.compute.StageTimes`
``dense_mlp_*``); the last stage then runs the output layer and the three cross-entropy
AllReduces.
A backward mirrors it, layers last to first (the CP steps, sends to the previous CP rank,
double-buffered against the partial attentions' backward, the last one, dK and dV, after them); with full recomputation each layer's forward
(``recompute=True`` calls) is replayed right before its backward. TP, EP and ZeRO-3 gathers block
the rank (the next compute needs their result).

Gradient reduction (Megatron DDP with ``overlap_grad_reduce``): during the backward of the *last*
microbatch, DP bucket ``k`` is launched asynchronously as soon as its gradients are final — after
the backward of its lowest layer (a bucket holding only the output layer right after the output
layer's backward, the bucket holding the embeddings at the end). The buckets of one rank run one
after another on one stream (NCCL serialises a communicator's kernels). ZeRO-3 gradient
ReduceScatters go on the same stream. With model chunks (interleaving) each chunk's buckets are
launched during that chunk's backward of the last microbatch. Without ``overlap_grad_reduce``
nothing is launched during the backward: after the last one every bucket goes out, chunk 0's first
(``finalize_model_grads``: ``finish_grad_sync`` of each model chunk in order). After the last
backward the rank waits for its stream,
then (SP) AllReduces the TP-replicated gradients, then the tied-embedding gradients, then (MoE
with expert bias) the routers' tokens per expert, steps the optimizer, (ZeRO-1/2) gathers the
updated parameters bucket by bucket, and makes ``train_step``'s model-parallel reductions
(``update_successful``, ``grad_norm``), the loss AllReduce and ``training_log``'s learning rate.
A router with an auxiliary loss AllReduces its tokens per expert before the dispatch.

With ``overlap_param_gather`` the parameter AllGathers leave the optimizer phase for the first
forward of each model chunk, each waited for before the layers it holds
(:mod:`tokenpcap.schedule.paramgather`). With ``overlap_moe_expert_parallel_comm`` a stage runs
one more warm-up forward and each steady-state forward and backward as one combined step, layer
by layer, the EP AllToAlls of one beside the other's computation
(:mod:`tokenpcap.schedule.epoverlap`). The instructions and the layer templates are
:mod:`tokenpcap.schedule.instructions`.
"""
from __future__ import annotations

from collections import defaultdict

from tokenpcap.errors import InputError
from tokenpcap.model import ShardParameters
from tokenpcap.plan.calls import CollectiveCall
from tokenpcap.schedule.compute import StageTimes
from tokenpcap.schedule.epoverlap import combined_order, combined_step
from tokenpcap.schedule.instructions import (ASYNC, BACKWARD_LAYER_OPS, BATCH_OPS, BLOCK,
                                             BWD_LAYER, FORWARD_LAYER_OPS, FWD_LAYER, RECV,
                                             SEND, WAIT, Call, CallMode, Compute, Instruction,
                                             Mark, Overlap, Wait, _WAIT)
from tokenpcap.schedule.interleave import interleaved_one_f_one_b
from tokenpcap.schedule.paramgather import POST, PRE, ParamGather

__all__ = ["one_f_one_b", "build_programs", "CallMode", "Compute", "Call", "Wait", "Mark",
           "Instruction", "Overlap", "FORWARD_LAYER_OPS", "BACKWARD_LAYER_OPS"]


def one_f_one_b(pp: int, stage: int, microbatches: int) -> list[tuple[str, int]]:
    """1F1B order of one stage: ``[("F", 0), ..., ("B", m-1)]`` (module docstring).

    Raises:
        InputError: ``stage`` outside ``[0, pp)`` or ``microbatches < 1``.
    """
    if not 0 <= stage < pp or microbatches < 1:
        raise InputError(f"stage {stage} of pp {pp}, microbatches {microbatches}")
    w = min(pp - stage - 1, microbatches)
    out = [("F", j) for j in range(w)]
    for i in range(microbatches - w):
        out += [("F", w + i), ("B", i)]
    return out + [("B", j) for j in range(microbatches - w, microbatches)]


def _slot_key(c: CollectiveCall, rank: int) -> tuple:
    if c.dim == "cp":                                # a ring-attention step
        return ("cp", "send" if rank == c.src else "recv", c.phase, c.recompute, c.microbatch,
                c.layer, c.op)
    if c.dim == "pp":       # layer: the sender's last (forward) or first (backward) layer
        return ("send" if rank == c.src else "recv", c.phase, c.microbatch, c.layer)
    if c.bucket >= 0 and c.phase == "backward":      # a DP gradient bucket
        return ("bucket", c.op, c.bucket)
    if c.bucket >= 0 and c.phase == "optimizer":     # a ZeRO-1/2 parameter AllGather bucket
        return ("opt", c.op, c.bucket)
    return (c.phase, c.recompute, c.microbatch, c.layer, c.op)


def build_programs(calls: list[CollectiveCall], ranks: range, coords, shards: list[ShardParameters],
                   times: list[StageTimes], microbatches: int, iteration: int,
                   recompute: str, *, chunks: list[list[range]] | None = None,
                   overlap: Overlap = Overlap()) -> dict[int, list[Instruction]]:
    """Instructions of every rank for one iteration.

    Args:
        calls: every call of the iteration (``plan.calls(iteration)``, possibly scaled).
        ranks: the ranks to build programs for (all of the world).
        coords: ``rank -> (pp, dp, tp)`` (``RankLayout.coords``).
        shards: per stage, the parameters a rank holds (where the DP buckets' gradients come from).
        times: per stage, :class:`~tokenpcap.schedule.compute.StageTimes`.
        microbatches: ``m``.
        iteration: the iteration (for timeline marks).
        recompute: ``none`` | ``selective`` | ``full``.
        chunks: per stage, the layers of each model chunk (:func:`tokenpcap.plan.pipeline.
            chunk_layers`); default one chunk, the shard's layers (no interleaving).
        overlap: DP buckets launched during the last backward (module docstring), the
            parameter gathers in the next forward (:mod:`tokenpcap.schedule.paramgather`),
            forward and backward steps combined (:mod:`tokenpcap.schedule.epoverlap`).

    Returns ``{rank: [instruction, ...]}`` of :data:`Instruction` (:class:`Compute`,
    :class:`Call`, :class:`Wait`, :class:`Mark`).

    Raises:
        RuntimeError: a call the program does not place (an inconsistency with :mod:`calls`).
    """
    slots: dict[int, dict[tuple, list[int]]] = defaultdict(lambda: defaultdict(list))
    lows: dict[int, dict[tuple, int]] = defaultdict(dict)
    for c in calls:
        for r in c.group:
            key = _slot_key(c, r)
            slots[r][key].append(c.call_id)
            if key[0] in ("bucket", "opt"):
                lows[r][key] = c.layer
    if chunks is None:
        chunks = [[range(sh.first_layer, sh.last_layer + 1)] for sh in shards]
    progs = {}
    for r in ranks:
        st = coords(r).pp
        progs[r] = _Builder(slots[r], lows[r], shards[st], times[st], st, len(shards),
                            microbatches, iteration, recompute, chunks[st], overlap).build()
        left = {k: v for k, v in slots[r].items() if v}
        if left:
            raise RuntimeError(f"internal: rank {r}: calls not placed in its program: {left}")
    return progs


class _Builder:
    def __init__(self, slots, lows: dict, shard: ShardParameters, times: StageTimes, stage: int,
                 pp: int, m: int, iteration: int, recompute: str, chunks: list[range],
                 overlap: Overlap):
        self.s, self.lows, self.sh, self.t = slots, lows, shard, times
        self.st, self.pp, self.m, self.it, self.rc = stage, pp, m, iteration, recompute
        self.chunks, self.overlap, self.ov = chunks, overlap.grad_reduce, overlap
        # whether each of the stage's layers is an MoE layer, by global index (chunk by chunk)
        self.moe_of = dict(zip((L for r in chunks for L in r), shard.moe))
        self.p: list[Instruction] = []
        self.waits: dict[tuple, int] = {}
        self.bucket_keys = sorted((k for k in slots if k[0] == "bucket"), key=lambda k: (k[2], k[1]))
        self.launched: set = set()
        self.pg = ParamGather([k for k in slots if k[0] == "opt"], lows, self.chunk_of,
                              shard.pre > 0 and stage == 0, stage, pp, m, len(chunks),
                              self.emit) if overlap.param_gather else None

    def emit(self, key: tuple, mode: str) -> None:
        """A parameter gather's call started (``send``) or waited for (``wait``)."""
        if mode == "send":
            self.p.append(Call(self.s[key].pop(0), SEND))
            self.waits[key] = self.p[-1].call_id
        else:
            self.p.append(Call(self.waits.pop(key), WAIT))

    def take(self, key: tuple, mode: CallMode) -> None:
        lst = self.s.get(key)
        if lst:
            self.p.append(Call(lst.pop(0), mode))

    def compute(self, ns: int) -> None:
        if ns > 0:
            self.p.append(Compute(ns))

    def build(self) -> list[Instruction]:
        v = len(self.chunks)
        if self.ov.moe_a2a:
            order = combined_order(self.pp, self.st, self.m, v)
        else:
            order = [(k, j, 0) for k, j in one_f_one_b(self.pp, self.st, self.m)] if v == 1 \
                else interleaved_one_f_one_b(self.pp, self.st, self.m, v)
        for kind, j, c in order:      # (absent calls, e.g. the first stage's receive, are skipped)
            if kind == "FB":
                combined_step(self, j, c)
                continue
            if kind == "F":
                self.begin_forward()
            self.take_pp(kind, "recv", j, c)
            self.mark(True, kind, j)
            self.forward(j, c) if kind == "F" else self.backward(j, c)
            self.mark(False, kind, j)
            self.take_pp(kind, "send", j, c)
        if not self.overlap:                       # finalize_model_grads: chunk by chunk
            for c in range(v):
                self.buckets(lambda k, c=c: self.chunk_of(k) == c)
        self.p.append(_WAIT)
        self.take(("backward", False, -1, -1, "tp_replicated_grads"), BLOCK)
        self.take(("backward", False, -1, -1, "tied_embedding_grads"), BLOCK)
        self.take(("backward", False, -1, -1, "expert_bias"), BLOCK)
        self.p.append(Mark(True, "O", -1, self.it))
        self.take(("optimizer", False, -1, -1, "found_inf"), BLOCK)
        self.take(("optimizer", False, -1, -1, "grad_norm"), BLOCK)
        self.compute(self.t.optimizer)
        for key in sorted((k for k in self.s if k[0] == "opt" and self.pg is None),
                          key=lambda k: (k[2], k[1])):
            self.take(key, ASYNC)
        self.p.append(_WAIT)
        self.take(("optimizer", False, -1, -1, "update_successful"), BLOCK)
        self.take(("optimizer", False, -1, -1, "grad_norm_max"), BLOCK)
        self.take(("optimizer", False, -1, -1, "loss"), BLOCK)
        self.take(("optimizer", False, -1, -1, "learning_rate_max"), BLOCK)
        self.p.append(Mark(False, "O", -1, self.it))
        return self.p

    def take_pp(self, kind: str, way: str, j: int, c: int) -> None:
        """The pipeline receive (``way`` ``recv``, blocking) or send (``send``) of forward
        (``kind`` ``F``) or backward ``B`` of microbatch ``j`` on chunk ``c``."""
        lo, hi = self.chunks[c][0], self.chunks[c][-1]
        if kind == "F":
            key = (way, "forward", j, lo - 1 if way == "recv" else hi)
        else:
            key = (way, "backward", j, hi + 1 if way == "recv" else lo)
        self.take(key, RECV if way == "recv" else SEND)

    def mark(self, begin: bool, kind: str, j: int) -> None:
        self.p.append(Mark(begin, kind, j, self.it))

    def post(self, key: tuple) -> int | None:
        """Start the call of ``key`` (``SEND``, waited for later); its id, or None if absent."""
        lst = self.s.get(key)
        if not lst:
            return None
        self.p.append(Call(lst.pop(0), SEND))
        return self.p[-1].call_id

    def wait_for(self, ids: list[int]) -> None:
        self.p.extend(Call(cid, WAIT) for cid in ids)

    def layer(self, template, phase: str, rec: bool, j: int, L: int) -> None:
        dense = not self.moe_of[L]
        skip = False                                # the ring computed the attention block
        for typ, name in template:
            if typ == "t" and skip and name.startswith("attn"):
                skip = False
            elif typ == "t":
                # the dense layers of a model that mixes dense and MoE layers: their own MLP time
                self.compute(getattr(self.t, f"dense_{name}" if dense and name.startswith("mlp")
                                     else name))
            elif typ == "r":                        # ring attention, double-buffered
                ring = self.ring_steps(phase, rec, j, L, name)
                if ring:
                    core = "attn_core_fwd" if phase == "forward" else "attn_core_bwd"
                    self.ring(ring, getattr(self.t, core),
                              getattr(self.t, "attn_fwd" if phase == "forward" else "attn_bwd"),
                              phase == "forward")
                    skip = True
            else:
                self.take((phase, rec, j, L, name), ASYNC if typ == "a" else BLOCK)

    def ring_steps(self, phase: str, rec: bool, j: int, L: int, name: str) -> list[tuple]:
        """The ``(send key, recv key)`` of each ring-attention step of a layer, step 0 first."""
        out, i = [], 0
        while ("cp", "recv", phase, rec, j, L, f"{name}_{i}") in self.s:
            op = f"{name}_{i}"
            out.append((("cp", "send", phase, rec, j, L, op), ("cp", "recv", phase, rec, j, L, op)))
            i += 1
        return out

    def ring(self, steps: list[tuple], core_ns: int, block_ns: int, forward: bool) -> None:
        """One layer's attention block with ring attention as Transformer Engine runs it
        (``AttnFuncWithCPAndKVP2P``, double-buffered ``send_recv_reqs[i % 2]``): the projections
        (``block_ns - core_ns``), then ``cp`` partial attentions of ``core_ns / cp`` each; the
        transfer that feeds step ``i + 1`` is posted (send and receive) when step ``i``'s compute
        starts and waited for when it ends. Forward has ``cp - 1`` transfers (K, V to the next
        rank); backward ``cp`` (K, V, then K, V with dK, dV, then dK, dV): its last one leaves
        after the last partial attention, the accumulated gradients being final only then."""
        cp = len(steps) + 1 if forward else len(steps)
        ids = [[self.s[k].pop(0) for k in pair if self.s.get(k)] for pair in steps]
        self.compute(block_ns - core_ns)
        per, extra = divmod(core_ns, cp)

        def post(mine: list[int]) -> None:
            for cid in mine:
                self.p.append(Call(cid, SEND))

        def wait(mine: list[int]) -> None:
            for cid in mine:
                self.p.append(Call(cid, WAIT))

        for i in range(cp):
            if i < cp - 1:
                post(ids[i])
            self.compute(per + (1 if i < extra else 0))
            if i < cp - 1:
                wait(ids[i])
        for mine in ids[cp - 1:]:                   # backward: dK, dV after the last step
            post(mine)
            wait(mine)

    def gather(self, j: int, c: int, where: int | None) -> None:
        """With ``overlap_param_gather``: the first forward of chunk ``c`` waits for the
        parameters it needs at ``where`` (:meth:`ParamGather.before`)."""
        if self.pg is not None and j == 0:
            self.pg.before(c, where)

    def forward(self, j: int, c: int) -> None:
        self.forward_head(j, c)
        for L in self.chunks[c]:
            self.gather(j, c, L)
            self.layer(FWD_LAYER, "forward", False, j, L)
        self.forward_tail(j, c)

    def begin_forward(self) -> None:
        """Before a forward and its receive: the chunk-aligned parameter gathers it starts."""
        if self.pg is not None:
            self.pg.start_forward()

    def forward_head(self, j: int, c: int) -> None:
        """The batch broadcasts and, on the first chunk of the first stage, the embedding."""
        for op in BATCH_OPS:                       # get_batch: TP rank 0 broadcasts the batch
            self.take(("forward", False, j, -1, op), BLOCK)
        if self.st == 0 and c == 0:
            self.gather(j, c, PRE)
            self.take(("forward", False, j, -1, "dense_params"), BLOCK)      # ZeRO-3: embedding
            self.take(("forward", False, j, -1, "embedding"), BLOCK)

    def forward_tail(self, j: int, c: int) -> None:
        """On the last chunk of the last stage the output layer and the cross entropy."""
        if self.st == self.pp - 1 and c == len(self.chunks) - 1:
            self.gather(j, c, POST)
            self.take(("forward", False, j, -1, "dense_params"), BLOCK)      # ZeRO-3: output layer
            self.take(("forward", False, j, -1, "lm_head_in"), BLOCK)
            self.compute(self.t.logits_fwd)
            for op in ("xent_max", "xent_logit", "xent_sum_exp"):
                self.take(("forward", False, j, -1, op), BLOCK)
        self.gather(j, c, None)

    def backward(self, j: int, c: int) -> None:
        self.backward_head(j, c)
        for L in reversed(self.chunks[c]):
            if self.rc == "full":
                self.p.append(Mark(True, "R", j, self.it))
                self.layer(FWD_LAYER, "forward", True, j, L)
                self.p.append(Mark(False, "R", j, self.it))
            self.layer(BWD_LAYER, "backward", False, j, L)
            self.backward_done(j, c, L)
        self.backward_tail(j, c)

    def final(self, j: int) -> bool:
        """Whether the gradients are final after microbatch ``j``'s backward (buckets go)."""
        return j == self.m - 1 and self.overlap

    def backward_head(self, j: int, c: int) -> None:
        """On the last chunk of the last stage the output layer's backward."""
        if self.st == self.pp - 1 and c == len(self.chunks) - 1:
            self.take(("backward", False, j, -1, "dense_params"), BLOCK)
            self.compute(self.t.logits_bwd)
            self.take(("backward", False, j, -1, "lm_head_in_grad"), BLOCK)
            self.take(("backward", False, j, -1, "lm_head_in_regather"), BLOCK)
            self.take(("backward", False, j, -1, "dense_grads"), ASYNC)
            if self.final(j):
                self.buckets(lambda k: self.chunk_of(k) == c and k[2] == 0
                             and self.low(k) == -1 and self.sh.post > 0)

    def backward_done(self, j: int, c: int, L: int) -> None:
        """After layer ``L``'s backward: the buckets whose gradients are then final."""
        if self.final(j):
            self.buckets(lambda k: self.chunk_of(k) == c and self.low(k) == L
                         and not self.holds_pre(k))

    def backward_tail(self, j: int, c: int) -> None:
        """On the first chunk of the first stage the embedding's backward; the chunk's last
        buckets."""
        if self.st == 0 and c == 0:
            self.take(("backward", False, j, -1, "embedding_grad"), BLOCK)
            self.take(("backward", False, j, -1, "dense_params"), BLOCK)
            self.take(("backward", False, j, -1, "dense_grads"), ASYNC)
        if self.final(j):
            self.buckets(lambda k: self.chunk_of(k) == c)

    def low(self, key: tuple) -> int:
        return self.lows[key]

    @staticmethod
    def chunk_of(key: tuple) -> int:
        """Model chunk of a bucket key (op ``..._chunk<c>`` with interleaving, else 0)."""
        head, _, tail = key[1].rpartition("_chunk")
        return int(tail) if head and tail.isdigit() else 0

    def holds_pre(self, key: tuple) -> bool:
        """The dense bucket holding the embeddings (the last one) is final only at the end."""
        return (key[1].startswith("dense") and self.sh.pre > 0
                and key[2] == max(k[2] for k in self.bucket_keys if k[1] == key[1]))

    def buckets(self, ready) -> None:
        for k in self.bucket_keys:
            if k not in self.launched and ready(k):
                self.launched.add(k)
                self.take(k, ASYNC)
