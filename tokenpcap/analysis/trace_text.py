"""Where a text of the corpus is, and who trains it: the first two steps of ``tokenpcap trace``
(:mod:`tokenpcap.analysis.trace` has the method and its sources).

1. **Find it.** TEXT is looked up in the corpus text, exactly first, then with any run of
   whitespace matching any other (``"vita mi"`` finds ``"vita\\nmi"``). Its characters become a
   byte range of the UTF-8 corpus and the tokens are those whose bytes
   (:func:`tokenpcap.tokens.token_bytes`) overlap it: a token may hold a space or a line break
   beside the text.
2. **Place it.** Sample ``j`` holds tokens ``[j·s, (j+1)·s)``; iteration ``j // G``, and inside
   the global batch of ``G`` samples microbatch ``(j mod G) // (b·dp)``, DP replica ``(j mod G)
   mod (b·dp) // b`` and position ``j mod b`` in the microbatch (Megatron-LM's
   ``MegatronPretrainingSampler``, as :mod:`tokenpcap.plan.calls`). An epoch trains ``(sequences
   // G)·G`` samples and drops the rest (``drop_last``): text there is never trained on. A
   corpus that does not fill one global batch is read over and over within each iteration (the
   plan's token rule: token index ``i`` is corpus token ``i mod tokens``); the text is placed at
   its first read, its own token indices in iteration 0. The
   replica's ranks of every stage hold the tokens; with sequence parallelism TP rank ``t`` holds
   positions ``[t·s/tp, (t+1)·s/tp)`` outside the TP regions.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tokenpcap.config.types import Scenario
from tokenpcap.errors import InputError

__all__ = ["TraceError", "Located", "Held", "find_text", "locate", "place"]


class TraceError(InputError):
    """The text is not in the corpus, lies where no iteration trains it, or cannot be followed
    into the capture given."""


@dataclass(frozen=True)
class Located:
    """Where TEXT is in the corpus: ``char_*``/``byte_*`` half-open offsets of the match in the
    text and in its UTF-8 bytes, ``token_start``/``token_end`` the tokens overlapping it (corpus
    token indices of the first epoch), ``ids`` and ``strings`` (each token's text; bytes that are
    part of a character show as ``\\xNN``)."""

    text: str
    match: str
    exact: bool
    occurrence: int
    occurrences: int
    char_start: int
    char_end: int
    byte_start: int
    byte_end: int
    token_start: int
    token_end: int
    ids: list[int]
    strings: list[str]


@dataclass(frozen=True)
class Held:
    """The traced tokens ``[token_start, token_end)`` that one sequence (sample) holds, and
    who trains them: ``positions`` in the sequence, ``iteration``, ``microbatch``, DP
    ``replica``, ``index`` in the microbatch; ``ranks[stage]`` the replica's TP ranks of each
    stage; ``sp_ranks[stage]`` the TP ranks whose sequence-parallel shard holds the positions
    (all of ``ranks`` without SP)."""

    sample: int
    token_start: int
    token_end: int
    positions: tuple[int, int]
    iteration: int
    microbatch: int
    replica: int
    index: int
    ranks: list[list[int]]
    sp_ranks: list[list[int]]


def find_text(corpus: str, text: str, occurrence: int = 1) -> tuple[int, int, bool, int]:
    """The ``occurrence``-th (1-based) match of ``text`` in ``corpus``: ``(start, end, exact,
    count)`` character offsets, whether it matched exactly, and how many matches there are;
    exact matches are tried first, then whitespace-insensitive ones (words of ``text`` separated
    by any whitespace). ``None`` fields never: raises instead.

    Raises:
        TraceError: an empty text, no match, or fewer than ``occurrence`` matches.
    """
    words = text.split()
    if not words:
        raise TraceError(f"TEXT: got {text!r}, expected some non-blank text")
    exact = [m.start() for m in re.finditer(re.escape(text), corpus)] if text.strip() else []
    if exact:
        spans, is_exact = [(a, a + len(text)) for a in exact], True
    else:
        pat = r"\s+".join(re.escape(w) for w in words)
        spans, is_exact = [m.span() for m in re.finditer(pat, corpus)], False
    if not spans:
        raise TraceError(f"TEXT: {_short(text)!r} is not in the corpus (exactly or with other "
                         "whitespace)")
    if occurrence > len(spans):
        raise TraceError(f"--occurrence: got {occurrence}, expected 1..{len(spans)} "
                         f"({_short(text)!r} occurs {len(spans)} time(s) in the corpus)")
    a, b = spans[occurrence - 1]
    return a, b, is_exact, len(spans)


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."


def locate(corpus: str, pieces: list[bytes], ids: np.ndarray, text: str,
           occurrence: int = 1) -> Located:
    """Find ``text`` in the ``corpus`` text and the tokens that hold it (module docstring, 1).

    Args:
        corpus: the corpus text; pieces: each token's bytes (:func:`tokenpcap.tokens.token_bytes`,
            concatenating to the UTF-8 corpus); ids: int32 ``(tokens,)`` the token ids.

    Raises:
        TraceError: as :func:`find_text`; a tokenizer whose tokens do not spell the corpus.
    """
    c0, c1, exact, count = find_text(corpus, text, occurrence)
    b0 = len(corpus[:c0].encode())
    b1 = b0 + len(corpus[c0:c1].encode())
    lens = np.fromiter((len(p) for p in pieces), np.int64, len(pieces))
    ends = np.cumsum(lens)
    if not len(ends) or ends[-1] != len(corpus.encode()):
        raise TraceError("tokenizer: its tokens do not spell the corpus byte for byte, expected "
                         "a byte-level tokenizer (utf8, bpe, tiktoken) to follow text to tokens")
    t0 = int(np.searchsorted(ends, b0, side="right"))          # first token ending after b0
    t1 = int(np.searchsorted(ends - lens, b1, side="left"))    # first token starting at/after b1
    return Located(text, corpus[c0:c1], exact, occurrence, count, c0, c1, b0, b1, t0, t1,
                   [int(i) for i in ids[t0:t1]],
                   [p.decode("utf-8", "backslashreplace") for p in pieces[t0:t1]])


def place(s: Scenario, layout, token_start: int, token_end: int, corpus_tokens: int) -> list[Held]:
    """Which sequences, iterations, microbatches, replicas and ranks hold tokens ``[token_start,
    token_end)`` of the first epoch (module docstring, 2).

    Raises:
        TraceError: the tokens lie in the tail an epoch drops (the message says which tokens an
            epoch trains); never when the corpus does not fill one global batch (then every
            iteration reads it whole, module docstring).
    """
    t, p = s.training, s.parallelism
    seq, G, b, dp, tp = s.model.seq_length, t.global_batch_size, t.micro_batch_size, p.dp, p.tp
    trained = corpus_tokens // seq // G * G * seq
    if token_end > trained and trained > 0:
        iters = corpus_tokens // seq // G
        raise TraceError(f"tokens {token_start}-{token_end}: in the dropped tail of an epoch: "
                         f"an epoch trains tokens 0-{trained} ({iters} iteration(s) of {G} "
                         f"sequences of {seq} tokens); Megatron drops the incomplete global batch")
    sp = p.sequence_parallel and tp > 1
    out = []
    for j in range(token_start // seq, (token_end - 1) // seq + 1):
        a, e = max(token_start, j * seq), min(token_end, (j + 1) * seq)
        r = j % G
        d = r % (b * dp) // b
        ranks = [[layout.rank(st, d, k) for k in range(tp)] for st in range(p.pp)]
        shard = [k for k in range(tp) if not sp or
                 (k * seq // tp < e - j * seq and (k + 1) * seq // tp > a - j * seq)]
        out.append(Held(j, a, e, (a - j * seq, e - j * seq), j // G, r // (b * dp), d, r % b,
                        ranks, [[row[k] for k in shard] for row in ranks]))
    return out
