"""Corpus tokens carried by a piece of a collective call's buffer (the provenance of a message
or copy: its ``token_start``/``token_end``), one at a time and vectorized.

Megatron's activations and TP buffers are laid out ``[s, b, h]``: a piece of bytes ``[offset,
offset + nbytes)`` of a buffer of ``message_bytes`` covers rows of ``s·b`` positions; the rule is
:func:`tokenpcap.records.tokenspans.piece_bounds`, written once there.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.records.tokenspans import piece_bounds

__all__ = ["token_range", "token_ranges"]


def token_range(call, offset: int, nbytes: int, message_bytes: int,
                seq_length: int) -> tuple[int, int]:
    """Corpus tokens whose data bytes ``[offset, offset + nbytes)`` of ``call``'s buffer of
    ``message_bytes`` carry, as :func:`tokenpcap.records.tokenspans.piece_bounds`; ``call``:
    anything with a :class:`~tokenpcap.plan.calls.CollectiveCall`'s ``token_start``,
    ``token_end``, ``seq_start``, ``seq_end``. ``(-1, -1)`` for calls without per-token data."""
    if call.token_start < 0:
        return -1, -1
    samples = max(1, (call.token_end - call.token_start) // seq_length)
    return piece_bounds(call.token_start, call.seq_start, call.seq_end, samples, seq_length,
                        offset, nbytes, message_bytes)


def token_ranges(call_attr: np.ndarray, offset: np.ndarray, nbytes: np.ndarray,
                 seq_length: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`token_range` of many transfers at once (the rows of
    :func:`tokenpcap.records.tokenspans.piece_bounds`, vectorized). ``call_attr``: int64
    ``(n, 5)`` token_start, token_end, seq_start, seq_end, message_bytes of each transfer's call;
    returns int64 ``(n,)`` firsts and ends."""
    ts, te, s0, s1, size = (call_attr[:, i] for i in range(5))
    ok = (ts >= 0) & (s1 > s0) & (size > 0)
    safe = np.where(size > 0, size, 1)
    samples = np.maximum(1, (te - ts) // seq_length)
    rows = (s1 - s0) * samples
    r0 = offset * rows // safe
    r1 = np.minimum(rows, -(-(offset + nbytes) * rows // safe))

    def token(r):
        return ts + (r % samples) * seq_length + s0 + r // samples

    return np.where(ok, token(r0), -1), np.where(ok, token(r1 - 1) + 1, -1)
