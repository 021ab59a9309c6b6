"""NCCL's three protocols, LL, LL128 and Simple: buffer and step sizes, wire encodings.

NCCL moves a collective's data through a per-connection FIFO of ``NCCL_STEPS`` = 8 slots
(``src/include/device.h``); one slot (a *step*) is what the network proxy sends as one RDMA
message (``src/transport/net.cc``, ``sendProxyProgress``: one ``isend`` per step). The protocols
differ in how data sits in the slot:

* **Simple** (``NCCL_PROTO_SIMPLE``): raw data. Buffer ``DEFAULT_BUFFSIZE`` = 4 MiB
  (``src/init.cc``), step 512 KiB; the wire carries exactly the payload.
* **LL** (``NCCL_PROTO_LL``, ``src/device/prims_ll.h``): 16-byte lines ``union ncclLLFifoLine {
  uint32_t data1, flag1, data2, flag2; }`` (``device.h``): every 8 data bytes travel with two
  copies of a 4-byte flag, so the wire carries twice the payload. ``storeLL`` writes
  ``{(uint32)val, flag, (uint32)(val >> 32), flag}`` with ``flag = NCCL_LL_FLAG(step + 1)`` =
  ``step + 1`` (``sendFlag``); a message of ``n`` data bytes is ``ceil(n / 8)`` lines
  (``waitSend(divUp(nelem, EltPerLine) * sizeof(ncclLLFifoLine))``). Buffer
  ``DEFAULT_LL_BUFFSIZE`` = ``NCCL_LL_LINES_PER_THREAD`` (8) × ``NCCL_LL_MAX_NTHREADS`` (512) ×
  ``NCCL_STEPS`` × 16 = 512 KiB: a step of 64 KiB of lines, 32 KiB of data
  (``calcCollChunking``: ``chunkSize /= 2``).
* **LL128** (``NCCL_PROTO_LL128``, ``src/device/prims_ll128.h``): 128-byte lines of
  ``NCCL_LL128_LINEELEMS`` = 16 eight-byte words, the last one (``NCCL_LL128_FLAGTHREAD``, bytes
  120..127) the flag ``sendStep + 1`` (uint64), the other 15 (``NCCL_LL128_DATAELEMS``) data: 120 of
  every 128 bytes are payload. A warp writes whole slices of ``WireWordPerSlice`` = 32 × 8 words
  = 2048 bytes (16 lines, 1920 data bytes), and a message of ``n`` data bytes is
  ``ceil(n / 1920)`` such slices (``waitSend(divUp(nelem, DataEltPerSlice) * WireWordPerSlice *
  sizeof(uint64_t))``), every line of them flagged. Buffer ``DEFAULT_LL128_BUFFSIZE`` =
  ``NCCL_LL128_ELEMS_PER_THREAD`` (120) × ``NCCL_LL128_MAX_NTHREADS`` (640) × ``NCCL_STEPS`` × 8 =
  4,915,200 bytes: a step of 614,400 wire bytes, 576,000 data bytes (``chunkSize /
  NCCL_LL128_LINEELEMS * NCCL_LL128_DATAELEMS``).

GPU memory is little-endian, so data and flag words are written little-endian into the
payload. The data words of a line are the next bytes of the payload pattern (the content of
the user buffer is not modelled; NCCL's LL128 also permutes data words among a warp's lines,
which a synthetic payload cannot show). Line flags are the step of the message on its
connection counted from the call's first message, plus one (NCCL's ``conn->step`` carries on
across calls; a capture of one call on a fresh communicator has exactly these flags).

Sources: NVIDIA/nccl commit 5067397c (2026-06-11), files as named.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tokenpcap.wire import lines

__all__ = ["Protocol", "PROTOCOLS", "PROTOCOL_IDS", "NCCL_STEPS", "wire_bytes", "encode_lines",
           "decode_flags"]

#: Slots per connection FIFO (``src/include/device.h``).
NCCL_STEPS = 8


@dataclass(frozen=True)
class Protocol:
    """One NCCL protocol (module docstring).

    Attributes:
        name: NCCL's name (``ncclProtoStr``: ``LL``, ``LL128``, ``Simple``).
        index: NCCL's ``NCCL_PROTO_*`` value (0, 1, 2), the index of the tuner's tables.
        buffer_bytes: the connection buffer (``comm->buffSizes[p]``).
        line_bytes: bytes of one wire line (Simple: 1, no lines).
        line_data_bytes: data bytes a line carries.
        grain_bytes: the unit a message's wire size is rounded up to (LL: a 16-byte line;
            LL128: a warp's 2048-byte slice; Simple: 1).
        grain_data_bytes: data bytes of a grain.
    """

    name: str
    index: int
    buffer_bytes: int
    line_bytes: int
    line_data_bytes: int
    grain_bytes: int
    grain_data_bytes: int

    @property
    def step_bytes(self) -> int:
        """Wire bytes of one FIFO slot: ``buffer_bytes / NCCL_STEPS``."""
        return self.buffer_bytes // NCCL_STEPS

    @property
    def step_data_bytes(self) -> int:
        """Data bytes one step carries (``calcCollChunking``'s chunk for one step): Simple the
        step, LL half of it, LL128 15/16 of it."""
        return self.step_bytes // self.line_bytes * self.line_data_bytes


PROTOCOLS: dict[str, Protocol] = {
    "LL": Protocol("LL", 0, 8 * 512 * NCCL_STEPS * 16, 16, 8, 16, 8),
    "LL128": Protocol("LL128", 1, 120 * 640 * NCCL_STEPS * 8, 128, 120, 2048, 1920),
    "Simple": Protocol("Simple", 2, 1 << 22, 1, 1, 1, 1),
}
#: Protocol names by NCCL index (0 LL, 1 LL128, 2 Simple).
PROTOCOL_IDS = tuple(sorted(PROTOCOLS, key=lambda p: PROTOCOLS[p].index))


def wire_bytes(protocol: str, data_bytes: np.ndarray | int) -> np.ndarray | int:
    """Wire bytes of messages carrying ``data_bytes`` each: ``ceil(n / grain_data) * grain``
    (Simple: ``n``). Accepts an int or an int64 array (same shape back). 0 stays 0.

    Raises:
        KeyError: an unknown protocol.
    """
    p = PROTOCOLS[protocol]
    if p.grain_bytes == 1:
        return data_bytes
    return -(-data_bytes // p.grain_data_bytes) * p.grain_bytes


def encode_lines(protocol: str, data: np.ndarray, flag: int) -> np.ndarray:
    """The wire bytes of a message as the protocol writes them: ``uint8`` array of
    :func:`wire_bytes` of ``len(data)`` bytes (:func:`tokenpcap.wire.lines.encode_lines`:
    LL ``data[0:4], flag (u32 LE), data[4:8], flag`` per 8 data bytes; LL128 120 data bytes
    then the flag (u64 LE) per line, up to whole 2048-byte slices). Simple: ``data`` itself.

    Args:
        protocol: a :data:`PROTOCOLS` name.
        data: ``uint8`` ``(n,)``: the payload bytes.
        flag: the line flag, ``step + 1``.
    """
    p = PROTOCOLS[protocol]
    data = np.asarray(data, np.uint8)
    if p.grain_bytes == 1:
        return data.copy()
    return lines.encode_lines(protocol, data, flag, int(wire_bytes(protocol, data.size)) // p.line_bytes)


def decode_flags(protocol: str, wire: np.ndarray) -> np.ndarray:
    """The flag words of a payload of whole lines: LL ``uint32 (lines, 2)`` (flag1, flag2),
    LL128 ``uint64 (lines,)`` (:func:`tokenpcap.wire.lines.decode_flags`).

    Raises:
        ValueError: a payload that is not whole lines; Simple (which has no lines).
    """
    if PROTOCOLS[protocol].line_bytes == 1:
        raise ValueError("Simple: no lines, no flags")
    f = lines.decode_flags(protocol, wire)
    return f.reshape(-1) if protocol == "LL128" else f
