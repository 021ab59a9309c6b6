"""Stage 5 (part): where the distributed optimizer's parameter AllGathers run with Megatron's
``--overlap-param-gather``.

Without the option the updated parameters of every bucket are AllGathered after the optimizer
step (:mod:`tokenpcap.schedule.program`). With it (``megatron/core/distributed/
distributed_data_parallel.py`` and ``param_and_grad_buffer.py``, Megatron-LM commit d98e8a64)
nothing is gathered after the step; the gathers run during the next iteration's forward:

* ``DistributedDataParallel._make_forward_pre_hook`` registers a forward pre-hook on every
  module; before a module's forward it calls ``finish_param_sync`` of the bucket group of each
  of its parameters (``_finish_param_sync_for_bucket_group``).
* ``_ParamAndGradBucketGroup.finish_param_sync`` (``param_and_grad_buffer.py``): if the group's
  AllGather was not dispatched yet, dispatch it (``start_param_sync``); wait for it; then,
  unless ``skip_next_bucket_dispatch``, dispatch the AllGather of ``next_param_gather_bucket_group``.
* ``next_param_gather_bucket_group`` (``DistributedDataParallel.__init__``: "all-gathers happen
  in reverse order of buckets") of bucket ``k`` is bucket ``k - 1``; dense and expert buffers
  are separate chains (``bucket_groups``, ``expert_parallel_bucket_groups``). Buckets are
  numbered in backward order, so the forward meets them from the highest index down.
* Without interleaving ``arguments.py`` sets ``align_param_gather = False``: a chain starts at
  the first module's hook, whose bucket is gathered and waited for at once (exposed), and every
  wait then dispatches the next bucket, which runs beside the layers of the one before.
* With interleaving ``align_param_gather`` defaults to true (``--no-align-param-gather``):
  ``training.py`` sets ``config.param_sync_func`` to each chunk's ``start_param_sync``, which
  dispatches every bucket group of the chunk (dense in index order, then expert);
  ``forward_backward_pipelining_with_interleaving`` calls it for chunks 0 and 1 before the
  first forward, and for chunk ``c + 1`` (``2 <= c + 1 < v``) in the preprocessing of forward
  ``k`` where ``k + stage`` is the virtual microbatch of chunk ``c``'s first microbatch
  (``is_first_microbatch_for_model_chunk``: ``k = c * g - stage`` with the microbatch group
  ``g``); the pre-hooks only wait (``skip_next_bucket_dispatch``).

Where a bucket is needed: the dense bucket with the highest index of chunk 0 on a stage that
holds the embedding, before the embedding; a bucket whose lowest layer is ``L``, before layer
``L``'s forward (a bucket ending inside a layer is waited for with the layer's first, at the
layer's start: the schedule's compute is per layer); a bucket without a transformer layer (the
output layer's), before the output layer; whatever is left of the chunk, at the end of its
first forward. Every gather runs in the first microbatch's forward of its chunk.

Each gather is a ``SEND`` call (started, then waited for by a ``WAIT``); the gathers of one
chain never overlap each other (the next starts after the last wait), but in the aligned case
the engine starts a chunk's buckets together where NCCL runs one communicator's in order: the
last of them ends when NCCL's would, the first ones later. Not modelled: Megatron disables the
hooks for the first iteration of a run (``train``: ``disable_forward_pre_hook``); the schedule
is a steady-state iteration.
"""
from __future__ import annotations

from collections.abc import Callable

from tokenpcap.schedule.interleave import schedule_table

__all__ = ["ParamGather", "PRE", "POST"]

#: Positions in a chunk's forward before the layers (the embedding) and after them (the output
#: layer); a layer's position is its global index.
PRE, POST = -2, 1 << 30
_END = POST + 1


class ParamGather:
    """The parameter AllGathers of one rank with ``overlap_param_gather`` (module docstring).

    Args:
        opt_keys: the rank's parameter-gather slot keys ``("opt", op, bucket)`` (op
            ``<kind>_param_bucket[_chunk<c>]``).
        lows: ``{key: lowest transformer layer of the bucket or -1}``.
        chunk_of: a key's model chunk.
        holds_pre: whether the stage holds the embedding (first stage).
        stage, pp, microbatches, chunks: the rank's place and schedule (``chunks`` > 1:
            interleaved, aligned dispatch).
        emit: ``emit(key, mode)`` appends the call of ``key`` (``"send"`` or ``"wait"``) to
            the program.
    """

    def __init__(self, opt_keys: list[tuple], lows: dict, chunk_of: Callable[[tuple], int],
                 holds_pre: bool, stage: int, pp: int, microbatches: int, chunks: int,
                 emit: Callable[[tuple, str], None]):
        self.emit, self.aligned, self.v = emit, chunks > 1, chunks
        self.chunk_of = chunk_of
        by_op: dict[str, list[tuple]] = {}
        for k in opt_keys:
            by_op.setdefault(k[1], []).append(k)
        self.chains = {op: sorted(ks, key=lambda k: -k[2]) for op, ks in by_op.items()}
        top = {op: ks[0] for op, ks in self.chains.items()}

        def need(k: tuple) -> int:
            if holds_pre and chunk_of(k) == 0 and k[1].startswith("dense") and top[k[1]] == k:
                return PRE
            return lows[k] if lows[k] >= 0 else POST

        self.need = {k: need(k) for ks in self.chains.values() for k in ks}
        self.posted: set = set()
        self.waited: set = set()
        self.forwards = 0           # forwards made so far (the virtual microbatch id)
        self.launch_at: dict[int, int] = {}
        if self.aligned:            # chunk c + 1's dispatch at forward c * g - stage
            table = schedule_table(microbatches, chunks, pp)
            firsts = {c: table.index((0, c)) for c in range(chunks)}
            self.launch_at = {firsts[c] - stage: c + 1 for c in range(1, chunks - 1)}

    def _send(self, k: tuple) -> None:
        if k not in self.posted:
            self.posted.add(k)
            self.emit(k, "send")

    def _dispatch_chunk(self, c: int) -> None:
        """``start_param_sync`` of chunk ``c``: dense bucket groups in index order, then
        expert."""
        ks = [k for op, chain in self.chains.items() if self.chunk_of(chain[0]) == c
              for k in chain]
        for k in sorted(ks, key=lambda k: (not k[1].startswith("dense"), k[2])):
            self._send(k)

    def start_forward(self) -> None:
        """Before each forward of the iteration (chunk-aligned dispatches)."""
        if self.aligned:
            if self.forwards == 0:
                for c in range(min(2, self.v)):
                    self._dispatch_chunk(c)
            if self.forwards in self.launch_at:
                self._dispatch_chunk(self.launch_at[self.forwards])
        self.forwards += 1

    def before(self, chunk: int, where: int | None) -> None:
        """Wait for the buckets of ``chunk`` needed at ``where`` (:data:`PRE`, a layer,
        :data:`POST`; None: all that are left), in chain order, each wait followed (without
        interleaving) by the dispatch of the next bucket of its chain."""
        at = _END if where is None else where
        for chain in self.chains.values():
            if self.chunk_of(chain[0]) != chunk:
                continue
            for i, k in enumerate(chain):
                if k in self.waited or self.need[k] > at:
                    continue
                self._send(k)
                self.waited.add(k)
                self.emit(k, "wait")
                if not self.aligned and i + 1 < len(chain):
                    self._send(chain[i + 1])
