"""Stage 5 (part): the order of the interleaved 1F1B schedule (Narayanan et al. 2021, Sec. 2.2.2).

Megatron-core ``forward_backward_pipelining_with_interleaving``
(``megatron/core/pipeline_parallel/schedules.py``) with ``v`` model chunks per stage, ``p``
stages, ``m`` microbatches and ``microbatch_group_size_per_vp_stage = g`` (default ``p``):

* the schedule table (``get_schedule_table``): the microbatches in groups of ``g``; for each
  group, chunk 0 of every microbatch of the group, then chunk 1 ..., so virtual microbatch ``k``
  is ``(microbatch, chunk)``;
* forward ``k`` runs that chunk; backward ``k`` runs the same microbatch on chunk ``v - 1 -
  chunk`` (``get_model_chunk_id(k, forward=False)``);
* stage ``st`` first runs ``w = min((p - st - 1) * 2 + (v - 1) * g, v*m)`` warm-up forwards
  (``get_pp_rank_microbatches``), then ``v*m - w`` pairs (forward ``w + i``, backward ``i``),
  then the remaining backwards.

With ``v = 1`` this is :func:`tokenpcap.schedule.program.one_f_one_b` (the table is the
microbatches in order, ``w = p - st - 1``). The pipeline bubble shrinks from ``(p-1)`` to
``(p-1)/v`` slots of ``t_f + t_b`` (Sec. 2.2.2).
"""
from __future__ import annotations

from tokenpcap.errors import InputError

__all__ = ["schedule_table", "interleaved_one_f_one_b"]


def schedule_table(microbatches: int, chunks: int, group: int) -> list[tuple[int, int]]:
    """``(microbatch, chunk)`` of every virtual microbatch in order (module docstring)."""
    out: list[tuple[int, int]] = []
    for lo in range(0, microbatches, group):
        hi = microbatches if lo + group >= microbatches else lo + group
        out += [(j, c) for c in range(chunks) for j in range(lo, hi)]
    return out


def interleaved_one_f_one_b(pp: int, stage: int, microbatches: int, chunks: int,
                            group: int | None = None) -> list[tuple[str, int, int]]:
    """The interleaved 1F1B order of one stage: ``[("F", microbatch, chunk), ..., ("B",
    microbatch, chunk)]`` (module docstring; ``group`` defaults to ``pp``).

    Raises:
        InputError: ``stage`` outside ``[0, pp)``, ``microbatches`` or ``chunks`` < 1, or a
            ``group`` outside ``[pp, microbatches]`` with ``chunks > 1`` (Megatron-core refuses
            it).
    """
    if not 0 <= stage < pp or microbatches < 1 or chunks < 1:
        raise InputError(f"stage {stage} of pp {pp}, microbatches {microbatches}, "
                         f"chunks {chunks}")
    g = pp if group is None else group
    if chunks > 1 and not pp <= g <= microbatches:
        raise InputError(f"microbatch group {g}: expected pp {pp} <= group <= microbatches "
                         f"{microbatches}")
    table = schedule_table(microbatches, chunks, g if chunks > 1 else microbatches)
    total = len(table)
    w = pp - stage - 1 if chunks == 1 else (pp - stage - 1) * 2 + (chunks - 1) * g
    w = min(w, total)

    def fwd(k: int) -> tuple[str, int, int]:
        return ("F", table[k][0], table[k][1])

    def bwd(k: int) -> tuple[str, int, int]:
        return ("B", table[k][0], chunks - 1 - table[k][1])

    out = [fwd(k) for k in range(w)]
    for i in range(total - w):
        out += [fwd(w + i), bwd(i)]
    return out + [bwd(k) for k in range(total - w, total)]
