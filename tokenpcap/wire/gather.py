"""A batch's ``fill`` for the capture writers that also names its payload for gather writes.

``BatchFill(builder, packets)`` is the ``fill(out, offsets, caplen)`` callable of the writers'
batch interface (:mod:`tokenpcap.pcap.writer`) bound to one batch of ``PACKET_DTYPE`` rows, plus the members a
writer uses to leave the payload pattern out of its buffer and let ``writev`` copy it from the
pattern (:mod:`tokenpcap.pcap.gather`): ``source``, ``holes(caplen)`` and
``fill_around(out, offsets, caplen, length)``. The file's bytes are the same either way.
"""
from __future__ import annotations

import numpy as np

from tokenpcap.wire.builder import FrameBuilder

__all__ = ["BatchFill"]


class BatchFill:
    """``fill`` of one batch; see the module docstring.

    Args:
        builder: the frame builder.
        packets: ``PACKET_DTYPE`` ``(n,)``, the batch in record order.
    """

    def __init__(self, builder: FrameBuilder, packets: np.ndarray):
        self.builder = builder
        self.packets = packets
        self.source = builder.payload_source

    def __call__(self, out: np.ndarray, offsets: np.ndarray, caplen: np.ndarray) -> None:
        """:meth:`FrameBuilder.fill` of the batch. Raises: EncodeError (as ``fill``)."""
        self.builder.fill(self.packets, out, offsets, caplen)

    def holes(self, caplen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(at, length)`` int64 ``(n,)``: :meth:`FrameBuilder.payload_holes`."""
        return self.builder.payload_holes(self.packets, caplen)

    def fill_around(self, out: np.ndarray, offsets: np.ndarray, caplen: np.ndarray,
                    length: np.ndarray) -> None:
        """Every kept byte but the first ``length[i]`` payload bytes: ``caplen[i] - length[i]``
        bytes of frame ``i`` at ``out[offsets[i]:]``. Raises: EncodeError (as ``fill``)."""
        self.builder.fill(self.packets, out, offsets, caplen, skip=length)
