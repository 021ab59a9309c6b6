"""The pcapng comment of every packet tokenpcap writes: written by ``generate``, read by ``inspect``.

Grammar (one line, fields separated by one space, optional fields left out when not known)::

    [cts |ack ]DIM/PHASE/COLLECTIVE it I [call C] [step K] [layer L] [mb M] [tokens A-B]

* the prefix names the packet kind (:data:`PACKET_PREFIXES`, indexed by
  :data:`~tokenpcap.records.PKT_DATA`, ``PKT_CTS``, ``PKT_ACK``): a data packet has none;
* ``DIM/PHASE/COLLECTIVE`` is :func:`~tokenpcap.records.phase_label` of the message;
* ``it`` the iteration, ``call`` the plan's call id, ``step`` the algorithm step, ``layer`` and
  ``mb`` the layer and microbatch, ``tokens A-B`` the corpus token positions the message's bytes
  hold (activations only; half-open ``[A, B)``).

Example: ``pp/forward/SendRecv it 0 call 996 step 0 layer 5 mb 0 tokens 0-128``.
"""
from __future__ import annotations

from tokenpcap.records import LABELS, PKT_ACK, PKT_CTS, PKT_DATA

__all__ = ["PACKET_PREFIXES", "CONTROL_PREFIXES", "comment_text"]

#: Comment prefix of each packet kind, indexed by ``PKT_DATA``, ``PKT_CTS``, ``PKT_ACK``.
PACKET_PREFIXES: tuple[str, ...] = tuple(
    {PKT_DATA: "", PKT_CTS: "cts ", PKT_ACK: "ack "}[k] for k in range(3))
#: The prefixes of control packets (clear-to-send and ACK), as ``inspect`` tells them apart.
CONTROL_PREFIXES: tuple[str, ...] = tuple(x for x in PACKET_PREFIXES if x)


def comment_text(kind: int, label: int, iteration: int, call_id: int, step: int, layer: int,
                 microbatch: int, token_start: int, token_end: int) -> str:
    """The comment of a packet of kind ``kind`` (``PKT_*``) whose message has phase label
    ``LABELS[label]`` (module docstring); a negative ``call_id``, ``step``, ``layer``,
    ``microbatch`` or ``token_start`` leaves its field out."""
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
        parts.append(f"tokens {token_start}-{token_end}")
    return " ".join(parts)
