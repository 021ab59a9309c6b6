"""The [s, b, h] token layout against numpy's own row-major layout of an (s, b, h) array, and the
packet comment grammar read back."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from tokenpcap.records import LABELS, PKT_ACK, PKT_CTS, PKT_DATA
from tokenpcap.records.comments import comment_text, parse_comment
from tokenpcap.records.tokenspans import held_spans, parse_spans, piece_bounds, spans_text


def numpy_oracle(first_sample, samples, seq_length, seq_start, seq_end, hidden, elem, o0, o1):
    """Tokens whose elements bytes [o0, o1) of a C-order (positions, samples, hidden) array
    touch, each element holding its corpus token index: numpy decides the layout, not us."""
    npos = seq_end - seq_start
    p = np.arange(seq_start, seq_end)[:, None, None]
    k = np.arange(samples)[None, :, None]
    a = np.broadcast_to((first_sample + k) * seq_length + p, (npos, samples, hidden))
    flat = np.ascontiguousarray(a).reshape(-1)
    elems = flat[o0 // elem:-(-o1 // elem)]
    return set(elems.tolist())


@settings(max_examples=300, deadline=None)
@given(samples=st.integers(1, 5), seq_length=st.sampled_from([4, 6, 16]), hidden=st.integers(1, 4),
       elem=st.sampled_from([1, 2, 4]), mb=st.integers(0, 3), tp=st.sampled_from([1, 2]),
       tp_rank=st.integers(0, 1), data=st.data())
def test_piece_holds_what_numpy_puts_there(samples, seq_length, hidden, elem, mb, tp, tp_rank,
                                           data):
    tp_rank = min(tp_rank, tp - 1)
    seq_start, seq_end = tp_rank * seq_length // tp, (tp_rank + 1) * seq_length // tp
    size = (seq_end - seq_start) * samples * hidden * elem
    o0 = data.draw(st.integers(0, size - 1))
    o1 = data.draw(st.integers(o0 + 1, size))
    first_sample = mb * samples
    first, end = piece_bounds(first_sample * seq_length, seq_start, seq_end, samples, seq_length,
                              o0, o1 - o0, size)
    want = numpy_oracle(first_sample, samples, seq_length, seq_start, seq_end, hidden, elem,
                        o0, o1)
    spans = held_spans(first, end, samples, seq_length)
    got = {t for a, b in spans for t in range(a, b)}
    assert got == want
    # one range per sample it touches, each inside its sample
    assert len({a // seq_length for a, _ in spans}) == len(spans)
    assert all(a // seq_length == (b - 1) // seq_length for a, b in spans)
    if samples == 1:
        assert spans == [(first, end)]
    assert parse_spans(spans_text(spans)) == spans


def test_two_sequences_sharing_a_message():
    # b = 2, s = 8, one element of 1 byte per position: rows (p, k) = 0 1 | 1 1 | ...
    # bytes 3..10 are rows 3..10: (1,1) (2,0) (2,1) (3,0) (3,1) (4,0) (4,1) (5,0)
    first, end = piece_bounds(16, 0, 8, 2, 8, 3, 8, 16)
    assert (first, end) == (16 + 8 + 1, 16 + 5 + 1)      # token of row 3, one past row 10's
    assert held_spans(first, end, 2, 8) == [(18, 22), (25, 29)]
    text = comment_text(PKT_DATA, LABELS.index("pp/forward/SendRecv"), 0, 7, 0, 5, 1, first, end,
                        samples=2, seq_length=8)
    assert text.endswith("mb 1 tokens 18-22,25-29")


def test_scaled_buffer_smaller_than_its_rows():
    # --scale: 4 bytes for 16 rows (b = 2, 8 positions): each byte stands for 4 rows
    assert held_spans(*piece_bounds(0, 0, 8, 2, 8, 1, 1, 4), 2, 8) == [(2, 4), (10, 12)]


def test_no_tokens():
    assert piece_bounds(-1, -1, -1, 1, 8, 0, 4, 8) == (-1, -1)
    assert held_spans(-1, -1, 3, 8) == []


def test_comment_round_trip():
    lab = LABELS.index("pp/forward/SendRecv")
    for kind in (PKT_DATA, PKT_CTS, PKT_ACK):
        text = comment_text(kind, lab, 2, 996, 0, 5, 3, 4096, 4224)
        got = parse_comment(text)
        assert got == {"kind": kind, "label": "pp/forward/SendRecv", "it": 2, "call": 996,
                       "step": 0, "layer": 5, "mb": 3, "tokens": [(4096, 4224)]}
    g = parse_comment(comment_text(PKT_DATA, LABELS.index("dp/backward/AllReduce"), 0, 3, 1, -1,
                                   -1, -1, -1))
    assert g["tokens"] == [] and g["layer"] == -1 and g["mb"] == -1
    for other in ("", "hello world", "pp/forward/SendRecv it x", "pp/forward/SendRecv it 0 foo 1",
                  "pp/forward/SendRecv it 0 tokens 5-3"):
        assert parse_comment(other) is None
