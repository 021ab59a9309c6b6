"""The pcapng comment of every packet tokenpcap writes: written by ``generate``, read by ``inspect``.

Grammar (one line, fields separated by one space, optional fields left out when not known)::

    [cts |ack ]DIM/PHASE/COLLECTIVE it I [call C] [step K] [layer L] [mb M] [tokens A-B]

* the prefix names the packet kind (:data:`PACKET_PREFIXES`, indexed by
  :data:`~tokenpcap.records.PKT_DATA`, ``PKT_CTS``, ``PKT_ACK``): a data packet has none;
* ``DIM/PHASE/COLLECTIVE`` is :func:`~tokenpcap.records.phase_label` of the message;
* ``it`` the iteration, ``call`` the plan's call id, ``step`` the algorithm step, ``layer`` and
  ``mb`` the layer and microbatch, ``tokens A-B`` the corpus token positions the message's bytes
  hold (activations only; half-open ``[A, B)``; token ``i`` is corpus token ``i mod tokens``: the
  corpus repeats epoch after epoch).
* With ``micro_batch_size`` ``b > 1`` the bytes interleave ``b`` sequences (Megatron's ``[s, b,
  h]`` layout, :mod:`tokenpcap.records.tokenspans`) and ``tokens`` lists, comma-separated and
  without spaces, the half-open range the message holds of each sequence it touches:
  ``tokens 0-128,1024-1152`` is positions 0..127 of samples 0 and 1. The ranges of two sequences
  differ by at most one position at each end (a message that starts or ends inside the ``b``
  rows of one position).

Example: ``pp/forward/SendRecv it 0 call 996 step 0 layer 5 mb 0 tokens 0-128``.

A PFC frame (IEEE 802.1Qbb, sent by a switch port; it belongs to no message) has its own form::

    pfc xoff prio P[,P...] quanta Q        pause priorities P for Q quanta (1..65535)
    pfc xon prio P[,P...]                  resume them (pause time 0)

``P`` are the priorities of the class-enable vector in increasing order (``none`` for an empty
vector), e.g. ``pfc xoff prio 3 quanta 65535``, ``pfc xon prio 3``. Its prefix ``pfc `` is not a
control prefix: ``inspect`` gives such a packet no phase label.
"""
from __future__ import annotations

from tokenpcap.records import LABELS, PKT_ACK, PKT_CNP, PKT_CTS, PKT_DATA, PKT_PFC
from tokenpcap.records.tokenspans import held_spans, parse_spans, spans_text

__all__ = ["PACKET_PREFIXES", "CONTROL_PREFIXES", "PFC_PREFIX", "comment_text", "pfc_comment_text",
           "parse_comment"]

#: The first word of a PFC frame's comment (module docstring).
PFC_PREFIX = "pfc "
#: Comment prefix of each packet kind, indexed by ``PKT_DATA``, ``PKT_CTS``, ``PKT_ACK``,
#: ``PKT_PFC`` (its comment is :func:`pfc_comment_text`'s) and ``PKT_CNP`` (a CNP names the
#: message of the CE-marked packet it answers).
PACKET_PREFIXES: tuple[str, ...] = tuple(
    {PKT_DATA: "", PKT_CTS: "cts ", PKT_ACK: "ack ", PKT_PFC: PFC_PREFIX, PKT_CNP: "cnp "}[k]
    for k in range(5))
#: The prefixes of control packets (clear-to-send, ACK, CNP), as ``inspect`` tells them apart.
CONTROL_PREFIXES: tuple[str, ...] = tuple(x for x in PACKET_PREFIXES if x and x != PFC_PREFIX)


def comment_text(kind: int, label: int, iteration: int, call_id: int, step: int, layer: int,
                 microbatch: int, token_start: int, token_end: int, *, samples: int = 1,
                 seq_length: int = 1) -> str:
    """The comment of a packet of kind ``kind`` (``PKT_*``) whose message has phase label
    ``LABELS[label]`` (module docstring); a negative ``call_id``, ``step``, ``layer``,
    ``microbatch`` or ``token_start`` leaves its field out. ``token_start``/``token_end`` are
    the message's (``MESSAGE_DTYPE``: :func:`tokenpcap.records.tokenspans.piece_bounds`);
    ``samples`` (``micro_batch_size``) and ``seq_length`` say how to read them when
    ``samples > 1``."""
    parts = [PACKET_PREFIXES[kind] + LABELS[label], f"it {iteration}"]
    if call_id >= 0:
        parts.append(f"call {call_id}")
    if step >= 0:
        parts.append(f"step {step}")
    if layer >= 0:
        parts.append(f"layer {layer}")
    if microbatch >= 0:
        parts.append(f"mb {microbatch}")
    if token_start >= 0:
        if samples > 1:
            parts.append("tokens " + spans_text(held_spans(token_start, token_end, samples,
                                                           seq_length)))
        else:
            parts.append(f"tokens {token_start}-{token_end}")
    return " ".join(parts)


def pfc_comment_text(class_enable: int, quanta: int) -> str:
    """The comment of a PFC frame that pauses (``quanta`` 1..65535) or resumes (0) the priorities
    of ``class_enable`` (bit p = priority p, 0..255); module docstring."""
    prios = [str(p) for p in range(8) if int(class_enable) >> p & 1] or ["none"]
    if int(quanta) == 0:
        return f"{PFC_PREFIX}xon prio {','.join(prios)}"
    return f"{PFC_PREFIX}xoff prio {','.join(prios)} quanta {int(quanta)}"


def _parse_pfc(text: str) -> dict | None:
    words = text.split(" ")
    if len(words) not in (4, 6) or words[2] != "prio" or words[1] not in ("xon", "xoff"):
        return None
    xoff = words[1] == "xoff"
    if xoff != (len(words) == 6) or (xoff and words[4] != "quanta"):
        return None
    try:
        prios = [] if words[3] == "none" else [int(p) for p in words[3].split(",")]
        quanta = int(words[5]) if xoff else 0
    except ValueError:
        return None
    if prios != sorted(set(prios)) or not all(0 <= p < 8 for p in prios) \
            or not (1 <= quanta <= 0xFFFF if xoff else True):
        return None
    return {"kind": PKT_PFC, "xoff": xoff, "priorities": prios, "quanta": quanta}


_INT_FIELDS = ("it", "call", "step", "layer", "mb")


def parse_comment(text: str) -> dict | None:
    """Read a packet comment back (module docstring): ``{"kind": PKT_*, "label": str, "it":
    int, "call", "step", "layer", "mb": int or -1 when left out, "tokens": [(A, B), ...]}``
    (``[]`` without a ``tokens`` field); for a PFC frame ``{"kind": PKT_PFC, "xoff": bool,
    "priorities": [int, ...], "quanta": int}``; ``None`` for text that does not follow the
    grammar (another tool's comment)."""
    if text.startswith(PFC_PREFIX):
        return _parse_pfc(text)
    kind = PKT_DATA
    for k, prefix in enumerate(PACKET_PREFIXES):
        if prefix and text.startswith(prefix):
            kind, text = k, text[len(prefix):]
    words = text.split(" ")
    if len(words) % 2 != 1 or words[0] not in LABELS:
        return None
    out: dict = {"kind": kind, "label": words[0], "tokens": []}
    out.update({f: -1 for f in _INT_FIELDS})
    for key, value in zip(words[1::2], words[2::2]):
        try:
            if key == "tokens":
                out["tokens"] = parse_spans(value)
            elif key in _INT_FIELDS:
                out[key] = int(value)
            else:
                return None
        except ValueError:
            return None
    return out if out["it"] >= 0 else None
