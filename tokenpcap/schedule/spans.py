"""Corpus tokens carried by a piece of a collective call's buffer (the provenance of a message
or copy: its ``token_start``/``token_end``), one at a time and vectorized.

Megatron's activations and TP buffers are laid out ``[s, b, h]``: a piece of bytes ``[offset,
offset + nbytes)`` of a buffer of ``message_bytes`` covers rows of ``s·b`` positions; the rule is
:func:`tokenpcap.records.tokenspans.piece_bounds`, written once there.

A message of NCCL's LL or LL128 carries fewer data bytes than its wire bytes (16-byte lines of 8
data bytes; 2048-byte slices of 1920): its data is taken as the most its wire bytes hold,
``wire // grain_bytes * grain_data_bytes`` (:data:`tokenpcap.collectives.protocols.PROTOCOLS`),
cut at the buffer's end. The data of a message ends on a grain's data except where a channel's
part of the buffer ends, so the range may take in at most the tokens of one grain's data
(8 or 1,920 bytes) past that point; under Simple it is exact.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.collectives.protocols import PROTOCOLS
from tokenpcap.records.tokenspans import piece_bounds
from tokenpcap.wire.lines import LINE_PROTOCOLS

__all__ = ["token_range", "token_ranges", "data_bytes"]

#: int64 ``(3, 2)``: per ``LINE_PROTOCOLS`` code (0 Simple, 1 LL, 2 LL128) the protocol's grain
#: and the data bytes of a grain.
_GRAINS = np.array([[PROTOCOLS[p].grain_bytes, PROTOCOLS[p].grain_data_bytes]
                    for p in sorted(LINE_PROTOCOLS, key=LINE_PROTOCOLS.get)], np.int64)


def data_bytes(line_code: np.ndarray | int, wire_bytes: np.ndarray | int,
               room_bytes: np.ndarray | int) -> np.ndarray | int:
    """Data bytes of messages of ``wire_bytes`` under the protocol of ``line_code`` (0 Simple,
    1 LL, 2 LL128; module docstring), at most ``room_bytes`` (what the buffer holds past the
    message's offset). Ints or int64 arrays of one shape."""
    g = _GRAINS[line_code]
    return np.minimum(wire_bytes // g[..., 0] * g[..., 1], room_bytes)


def token_range(call, offset: int, nbytes: int, message_bytes: int,
                seq_length: int, line_code: int = 0) -> tuple[int, int]:
    """Corpus tokens whose data at ``offset`` of ``call``'s buffer of ``message_bytes`` carry,
    a message of ``nbytes`` on the wire under the protocol of ``line_code`` (:func:`data_bytes`),
    as :func:`tokenpcap.records.tokenspans.piece_bounds`; ``call``: anything with a
    :class:`~tokenpcap.plan.calls.CollectiveCall`'s ``token_start``, ``token_end``,
    ``seq_start``, ``seq_end``. ``(-1, -1)`` for calls without per-token data."""
    if call.token_start < 0:
        return -1, -1
    nbytes = int(data_bytes(line_code, nbytes, message_bytes - offset))
    samples = max(1, (call.token_end - call.token_start) // seq_length)
    return piece_bounds(call.token_start, call.seq_start, call.seq_end, samples, seq_length,
                        offset, nbytes, message_bytes)


def token_ranges(call_attr: np.ndarray, offset: np.ndarray, nbytes: np.ndarray,
                 seq_length: int, line_code: np.ndarray | int = 0) -> tuple[np.ndarray, np.ndarray]:
    """:func:`token_range` of many transfers at once (the rows of
    :func:`tokenpcap.records.tokenspans.piece_bounds`, vectorized). ``call_attr``: int64
    ``(n, 5)`` token_start, token_end, seq_start, seq_end, message_bytes of each transfer's call;
    ``nbytes`` wire bytes, ``line_code`` uint8 ``(n,)`` (or one int) the protocol code of each;
    returns int64 ``(n,)`` firsts and ends."""
    ts, te, s0, s1, size = (call_attr[:, i] for i in range(5))
    nbytes = data_bytes(np.asarray(line_code, np.int64), nbytes, np.maximum(size - offset, 0))
    ok = (ts >= 0) & (s1 > s0) & (size > 0)
    safe = np.where(size > 0, size, 1)
    samples = np.maximum(1, (te - ts) // seq_length)
    rows = (s1 - s0) * samples
    r0 = offset * rows // safe
    r1 = np.minimum(rows, -(-(offset + nbytes) * rows // safe))

    def token(r):
        return ts + (r % samples) * seq_length + s0 + r // samples

    return np.where(ok, token(r0), -1), np.where(ok, token(r1 - 1) + 1, -1)
