"""A file's headers-only pcap records built where the writer process finds its rows: straight
from the shared buffer (:mod:`tokenpcap.generate.feed`) into the bytes the file is written
from, with no copy of the rows in between.

A writer process otherwise copies each part of a chunk (its file's ``PACKET_DTYPE`` rows, 91
bytes each) out of the shared buffer into the rows its file holds until the next batch
(:class:`~tokenpcap.generate.pending.PendingRows`), then lays out the batch's record headers,
builds its frames and writes it (:meth:`tokenpcap.pcap.writer.PcapWriter.write_batch`), a dozen
numpy passes per batch around the compiled loops. :class:`InPlaceRecords` does the same work
per part, at once, in three compiled passes over the part's rows: one reads each row's time,
length and opcode and decides whether the part is one it serves, the next lays out the record
headers (:func:`tokenpcap.pcap.layout.pcap_records`) after the file's records so far, the last
checks the rows and builds the frames into the room left for them
(:meth:`tokenpcap.wire.builder.FrameBuilder.fill_direct`). The records of a file are written
when they reach the sink's batch size, from one of two alternating buffers.

It serves a part when the file is classic pcap over Ethernet (no comments, no ERF header) and
every row of the part is one the headers-only loop builds whole without looking further:
an opcode the loop has met (:attr:`FrameBuilder.direct`), no NCCL lines, kept bytes ending
before the pad and CRCs or a payload of at most
:data:`~tokenpcap.wire.direct.CRC_PAYLOAD_MAX_BYTES` (IPv6 with the UDP checksum: before that
checksum), fewer than :data:`~tokenpcap.pcap.gather.MIN_HOLE_BYTES` kept bytes (no payload a
gather write would take from the pattern instead) and a time not before the epoch. Any other
part goes the general way (the caller's), which also names a bad row; a record's bytes are the
same either way (the general way's batch boundaries never change a record).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tokenpcap.generate.feed import SLOT_ROWS
from tokenpcap.pcap.gather import MIN_HOLE_BYTES
from tokenpcap.pcap.layout import pcap_records
from tokenpcap.pcap.formats import PCAP_RECORD
from tokenpcap.records import PACKET_DTYPE
from tokenpcap.wire.direct import CRC_PAYLOAD_MAX_BYTES

__all__ = ["InPlaceRecords"]

_ROW = PACKET_DTYPE.itemsize
#: Byte offsets in a row of time_ns, frame_bytes, opcode, payload_bytes, line_protocol.
_FIELDS = np.array([PACKET_DTYPE.fields[f][1] for f in (
    "time_ns", "frame_bytes", "opcode", "payload_bytes", "line_protocol")], np.int64)
_IFACE = np.zeros(1, np.int64)          # the interface of every record (pcap has none)
#: Record bytes a file's buffer holds before it is written: small enough that the buffer is
#: still in the CPU's caches when the kernel copies it. Measured (benchmarks/README.md,
#: packet_path.py, GPT-3 --scale 20, two forked writers of four files each): 8 MiB writes
#: took 0.71-0.75 CPU-s of the writers' system time, 2 MiB 0.20, 1 MiB 0.14.
WRITE_BYTES = 1 << 20
_MAX_SEC = 0xFFFFFFFF


class InPlaceRecords:
    """The records of one pcap file built part by part (module docstring).

    Args:
        builder: the writer process's :class:`~tokenpcap.wire.builder.FrameBuilder`.
        writer: the file's :class:`~tokenpcap.pcap.writer.PcapWriter`.
        snaplen: frame bytes kept per record.
        room_bytes: the record bytes a buffer is made for besides a whole chunk's (the sink
            writes it at :data:`WRITE_BYTES`).
    """

    def __init__(self, builder, writer, snaplen: int, room_bytes: int):
        self.builder, self.writer = builder, writer
        self.frac, self.big = writer.record_layout
        self.snaplen = int(snaplen)
        self.room = int(room_bytes)
        # a whole chunk's records (a record served here keeps fewer than MIN_HOLE_BYTES)
        self.part = SLOT_ROWS * (PCAP_RECORD.size + min(self.snaplen, MIN_HOLE_BYTES - 1))
        self._bufs = [np.zeros(0, np.uint8), np.zeros(0, np.uint8)]
        self._i = 0
        self.held = 0           # record bytes in the current buffer, not yet written
        self._n = 0             # their records

    @staticmethod
    def serves(writer) -> bool:
        """Whether ``writer``'s file takes records built here: classic pcap over Ethernet."""
        return getattr(writer, "record_layout", None) is not None

    def add(self, packets: np.ndarray) -> int | None:
        """Build the records of ``packets`` (``PACKET_DTYPE (n,)``; read, not kept) after the
        records held, and return their bytes; None, with nothing built, when the part is not
        one this serves (module docstring).

        Raises:
            EncodeError: a row out of range (the builder's checks).
            OutputError: writing the records held before failed.
        """
        n = len(packets)
        if n == 0:
            return 0
        packets = np.ascontiguousarray(packets)         # a part of a chunk is: no copy
        d = self.builder.direct
        t, fb, caplen = np.empty(n, np.int64), np.empty(n, np.int64), np.empty(n, np.int64)
        rec = packets.view(np.uint8).reshape(n, _ROW)
        need = _lay_rows(rec, _FIELDS, d.hb, d.l4_checksum_end, self.snaplen,
                         CRC_PAYLOAD_MAX_BYTES, MIN_HOLE_BYTES, PCAP_RECORD.size, t, fb, caplen)
        if need < 0:
            return None
        buf = self._room(need)
        at = self.held
        out = buf[at:at + need]
        offsets = np.empty(n, np.int64)
        if pcap_records(out, t, fb, caplen, self.frac, True, False, _IFACE, self.big,
                        offsets) > _MAX_SEC:
            return None         # a time past the format's last second: the general way says so
        self.builder.fill_direct(packets, out, offsets, caplen)
        self.held = at + need
        self._n += n
        return need

    def _room(self, need: int) -> np.ndarray:
        """The current buffer with room for ``need`` more bytes after the records held: made
        once at the batch size plus the records of a whole chunk (:data:`SLOT_ROWS` rows), so
        that a file's two buffers are faulted in once, not per batch; a larger one, the
        records held copied into it, only for a part larger than a chunk."""
        buf = self._bufs[self._i]
        if self.held + need > buf.size:
            grown = np.empty(max(self.held + need, self.room + self.part), np.uint8)
            grown[:self.held] = buf[:self.held]
            buf = self._bufs[self._i] = grown
        return buf

    def write(self, release: bool = False) -> None:
        """Hand the records held to the writer and go on in the other buffer (which the
        writer's previous write no longer reads once this one is queued); ``release``: drop
        the buffers (a process writing many files, where idle buffers would add up).

        Raises:
            OutputError: the write failed.
        """
        if self.held:
            self.writer.write_records(self._bufs[self._i][:self.held], self._n)
            self.held = self._n = 0
            self._i ^= 1
        if release:
            self._bufs = [np.zeros(0, np.uint8), np.zeros(0, np.uint8)]


@njit(cache=True, nogil=True)
def _lay_rows(rec, fo, hb_t, l4_end, snaplen, crc_payload_max, min_hole, record_header, t, fb,
              caplen):
    """The record bytes of rows ``rec`` (uint8 ``(n, PACKET_DTYPE.itemsize)``; ``fo``: byte
    offsets of time_ns, frame_bytes, opcode, payload_bytes and line_protocol in a row), each
    ``record_header`` bytes plus ``min(frame_bytes, snaplen)``, with each row's time, frame
    length and kept bytes in ``t``, ``fb``, ``caplen`` (int64 ``(n,)``); -1 at the first row
    :class:`InPlaceRecords` does not serve (module docstring; ``hb_t``, ``l4_end``: the
    builder's direct tables)."""
    total = 0
    for r in range(rec.shape[0]):
        op = rec[r, fo[2]]
        h = hb_t[op]
        if h < 0 or rec[r, fo[4]] != 0:
            return -1
        pay = np.int64(0)
        f = np.int64(0)
        ti = np.int64(0)
        for b in range(4):
            pay |= np.int64(rec[r, fo[3] + b]) << (8 * b)
            f |= np.int64(rec[r, fo[1] + b]) << (8 * b)
        for b in range(8):
            ti |= np.int64(rec[r, fo[0] + b]) << (8 * b)
        c = min(f, snaplen)
        if (c > h + pay and pay > crc_payload_max) or (l4_end >= 0 and c > l4_end) \
                or c >= min_hole or ti < 0:
            return -1
        t[r] = ti
        fb[r] = f
        caplen[r] = c
        total += record_header + c
    return total
