"""Which corpus tokens a piece of an activation buffer holds: Megatron's ``[s, b, h]`` layout.

Megatron-LM keeps activations, their gradients and the sequence-parallel pieces of a microbatch
as ``[s, b, h]`` tensors (sequence first: ``megatron/core/transformer/transformer_block.py``
takes ``hidden_states`` of shape ``[s, b, h]``; the p2p communication of
``megatron/core/pipeline_parallel/p2p_communication.py`` sends tensors of ``(seq_length,
micro_batch_size, hidden_size)``, divided along ``s`` by the TP size with sequence parallelism).
Row-major, so the buffer is a sequence of *rows* of ``h`` elements in the order
``(position p, sample k)``: row ``r = (p - p0)·b + k`` holds position ``p`` of sample ``k``.

A buffer over positions ``[p0, p1)`` of the ``b`` samples of one microbatch therefore has
``R = (p1 - p0)·b`` rows; a buffer of ``S`` bytes puts byte ``o`` in row ``floor(o·R/S)`` (with
``--scale`` a buffer is smaller than its rows and a byte stands for several of them). Bytes
``[o0, o1)`` hold rows ``[floor(o0·R/S), ceil(o1·R/S))``: contiguous in ``(p, k)`` order, so of
each sample a contiguous run of positions, and the runs of two samples differ by at most one
position at each end. With ``b = 1`` that is one range of tokens; with ``b > 1`` the bytes
interleave ``b`` sequences and hold a range of each.

Sample ``j`` of the corpus holds tokens ``[j·s, (j+1)·s)``; a microbatch's ``b`` samples are
consecutive and the first is a multiple of ``b`` (Megatron-LM's ``MegatronPretrainingSampler``
hands each DP replica ``b`` consecutive samples per step, and the global batch is a multiple of
``b``). So a piece is written down exactly by two corpus token indices in *byte order*: the
token of its first row and one past the token of its last row (:func:`piece_bounds`);
:func:`held_spans` turns them back into one half-open range per sample. With ``b = 1`` the two
numbers are the half-open range itself.
"""
from __future__ import annotations

__all__ = ["piece_bounds", "held_spans", "spans_text", "parse_spans"]


def piece_bounds(token_start: int, seq_start: int, seq_end: int, samples: int, seq_length: int,
                 offset: int, nbytes: int, buffer_bytes: int) -> tuple[int, int]:
    """The bytes ``[offset, offset + nbytes)`` of a buffer of ``buffer_bytes`` over positions
    ``[seq_start, seq_end)`` of the ``samples`` samples that start at corpus token
    ``token_start`` (a multiple of ``samples·seq_length``): ``(first, end)``, the corpus token
    of the first row they touch and one past the token of the last (module docstring). ``(-1,
    -1)`` when the buffer has no per-token data (``token_start < 0``, no positions, no bytes).

    Raises:
        ValueError: ``samples`` or ``seq_length`` < 1, or a byte range outside the buffer.
    """
    if samples < 1 or seq_length < 1:
        raise ValueError(f"samples {samples}, seq_length {seq_length}: expected >= 1")
    if token_start < 0 or seq_end <= seq_start or buffer_bytes <= 0:
        return -1, -1
    if offset < 0 or nbytes < 1 or offset + nbytes > buffer_bytes:
        raise ValueError(f"bytes [{offset}, {offset + nbytes}) outside a buffer of {buffer_bytes}")
    rows = (seq_end - seq_start) * samples
    r0 = offset * rows // buffer_bytes
    r1 = min(rows, -(-(offset + nbytes) * rows // buffer_bytes))

    def token(r: int) -> int:
        p, k = divmod(r, samples)
        return token_start + k * seq_length + seq_start + p

    return token(r0), token(r1 - 1) + 1


def held_spans(first: int, end: int, samples: int, seq_length: int) -> list[tuple[int, int]]:
    """The tokens a piece with :func:`piece_bounds` ``(first, end)`` holds: one half-open range
    ``[a, b)`` per sample it touches, in sample order (``[]`` for ``first < 0``). With
    ``samples == 1`` that is ``[(first, end)]``.

    Raises:
        ValueError: ``samples``/``seq_length`` < 1, or bounds that no piece has (tokens of
            different microbatches, or the last row before the first).
    """
    if samples < 1 or seq_length < 1:
        raise ValueError(f"samples {samples}, seq_length {seq_length}: expected >= 1")
    if first < 0:
        return []
    last = end - 1
    base = first // seq_length // samples * samples          # first sample of the microbatch
    k0, p0 = first // seq_length - base, first % seq_length
    k1, p1 = last // seq_length - base, last % seq_length
    if not (0 <= k1 < samples) or last < 0 or (p1, k1) < (p0, k0):
        raise ValueError(f"tokens {first}-{end}: not a piece of one microbatch of {samples} "
                         f"samples of {seq_length} tokens")
    out = []
    for k in range(samples):
        lo = p0 if k >= k0 else p0 + 1                      # (p, k) >= (p0, k0)
        hi = p1 + 1 if k <= k1 else p1                      # (p, k) <= (p1, k1)
        if hi > lo:
            t = (base + k) * seq_length
            out.append((t + lo, t + hi))
    return out


def spans_text(spans: list[tuple[int, int]]) -> str:
    """``A-B`` ranges joined by ``,`` (the packet comment's ``tokens`` field)."""
    return ",".join(f"{a}-{b}" for a, b in spans)


def parse_spans(text: str) -> list[tuple[int, int]]:
    """The ranges of :func:`spans_text`.

    Raises:
        ValueError: text that is not ``A-B[,C-D...]`` with ``0 <= A < B``.
    """
    out = []
    for part in text.split(","):
        a, sep, b = part.partition("-")
        if not sep or not a.isdigit() or not b.isdigit() or int(a) >= int(b):
            raise ValueError(f"tokens: got {text!r}, expected A-B[,C-D...] with A < B")
        out.append((int(a), int(b)))
    return out
