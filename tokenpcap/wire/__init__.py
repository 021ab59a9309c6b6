"""The frame layer: header declarations, RC opcodes and segmentation, CRCs, frame building.

Modules: :mod:`~tokenpcap.wire.fields` (declaration machinery), :mod:`~tokenpcap.wire.headers`
(every header, once), :mod:`~tokenpcap.wire.rdma` (opcodes, segmentation at PMTU, frame lengths),
:mod:`~tokenpcap.wire.qpn` (the seeded QPNs, PSNs and UDP source ports of a run's QP pairs).
See docs/wire.md.
"""
from __future__ import annotations

from tokenpcap.wire.builder import FrameBuilder
from tokenpcap.wire.context import WireContext
from tokenpcap.wire.fields import Field, Header
from tokenpcap.wire.frame import build_frame, build_pfc_frame
from tokenpcap.wire.rdma import (
    OPCODES,
    PMTUS,
    Opcode,
    SegmentedMessages,
    Segments,
    frame_bytes,
    header_bytes,
    packets_per_message,
    pad_bytes,
    rocev2_flow_label,
    rocev2_udp_sport,
    segment,
    segment_many,
)

__all__ = [
    "FrameBuilder", "WireContext", "build_frame", "build_pfc_frame", "Field", "Header", "OPCODES", "PMTUS", "Opcode", "Segments", "SegmentedMessages", "segment",
    "segment_many", "packets_per_message", "pad_bytes", "header_bytes", "frame_bytes",
    "rocev2_flow_label", "rocev2_udp_sport",
]
