"""A file's headers-only pcap records built where the writer process finds its rows: straight
from the shared buffer (:mod:`tokenpcap.generate.feed`) into the bytes the file is written
from, with no copy of the rows in between.

A writer process otherwise copies each part of a chunk (its file's ``PACKET_DTYPE`` rows, 91
bytes each) out of the shared buffer into the rows its file holds until the next batch
(:class:`~tokenpcap.generate.pending.PendingRows`), then lays out the batch's record headers,
builds its frames and writes it (:meth:`tokenpcap.pcap.writer.PcapWriter.write_batch`), a dozen
numpy passes per batch around the compiled loops. :class:`InPlaceRecords` does the same work
per part, at once, in one compiled pass over the part's rows (:func:`_build_records`): each
row's time, length and opcode decide whether the part is one it serves, the row is checked
(:func:`tokenpcap.wire.checks.row_ok`), its record header laid out after the file's records so
far (:func:`tokenpcap.pcap.layout.pcap_record_header`) and its frame built right behind it
(:func:`tokenpcap.wire.directrow.build_row`), the row read once while it is in the cache.
The records of a file are written
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
from tokenpcap.pcap.formats import PCAP_RECORD
from tokenpcap.pcap.gather import MIN_HOLE_BYTES
from tokenpcap.pcap.layout import pcap_record_header, record_second
from tokenpcap.records import PACKET_DTYPE
from tokenpcap.wire.checks import check_rows, row_ok, row_tables
from tokenpcap.wire.direct import CRC_PAYLOAD_MAX_BYTES
from tokenpcap.wire.directrow import build_row

__all__ = ["InPlaceRecords"]

_ROW = PACKET_DTYPE.itemsize
PCAP_RECORD_BYTES = PCAP_RECORD.size
#: Byte offsets in a row of time_ns, frame_bytes, opcode, payload_bytes, line_protocol.
_FIELDS = np.array([PACKET_DTYPE.fields[f][1] for f in (
    "time_ns", "frame_bytes", "opcode", "payload_bytes", "line_protocol")], np.int64)
_NS = 1_000_000_000
#: Record bytes a file's buffer holds before it is written: small enough that the buffer is
#: still in the CPU's caches when the records are built and written, and that a process's
#: buffers (two per file) fault in few pages. Measured (benchmarks/README.md, packet_path.py):
#: buffered writes of GPT-3 --scale 20 (two forked writers of four files each) took 0.71-0.75
#: CPU-s of the writers' system time at 8 MiB, 0.20 at 2 MiB, 0.14 at 1 MiB; one writer's
#: 16 Dante files replayed with the writes past the page cache, 51-91 ns a record of system
#: time at 1 MiB, 19-29 at 256 KiB (6,900 against 3,300 page faults).
WRITE_BYTES = 1 << 18
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
        # a record served here keeps fewer than MIN_HOLE_BYTES; a whole chunk's records
        self.record_max = PCAP_RECORD.size + min(self.snaplen, MIN_HOLE_BYTES - 1)
        self.part = SLOT_ROWS * self.record_max
        self._checks = None     # tokenpcap.wire.checks.row_tables, once the builder is used
        self.held = 0           # record bytes in the file's buffer, not yet written
        self._at = 0            # where they start in it (after the file's tail)
        self._n = 0             # their records

    @staticmethod
    def serves(writer) -> bool:
        """Whether ``writer``'s file takes records built here: classic pcap over Ethernet."""
        return getattr(writer, "record_layout", None) is not None

    def may_serve(self, packets: np.ndarray) -> bool:
        """Whether every row of ``packets`` (``PACKET_DTYPE (n,)``) is one this serves by its
        opcode, lengths and time (module docstring; the checks and the seconds aside): for a
        caller that writes other rows first only for a part that will be built here."""
        d = self.builder.direct
        if not d.ready:
            return False
        packets = np.ascontiguousarray(packets)
        return bool(_all_served(packets.view(np.uint8).reshape(len(packets), _ROW), _FIELDS,
                                d.hb, d.l4_checksum_end, self.snaplen, CRC_PAYLOAD_MAX_BYTES,
                                MIN_HOLE_BYTES))

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
        if not d.ready:                 # no opcode met yet: no row is served
            return None
        if self._checks is None:
            self._checks = row_tables(self.builder.ctx, self.builder.header_bytes_by_opcode)
        if self.held == 0:
            _, self._at = self.writer.record_room()
        start = self._at + self.held
        buf = self.writer.record_buffer(max(start + n * self.record_max, self.room + self.part))
        rec = packets.view(np.uint8).reshape(n, _ROW)
        end = _build_records(packets, rec, _FIELDS, self.snaplen, CRC_PAYLOAD_MAX_BYTES,
                             MIN_HOLE_BYTES, d.hb, d.l4_checksum_end, self.frac,
                             _NS // self.frac, self.big, _MAX_SEC, buf, start,
                             d.pattern[None, :], self._checks, *d.tables())
        if end == _BAD_ROW:     # the numpy checks name the row (or find none: the general way)
            check_rows(self.builder.ctx, self.builder.header_bytes_by_opcode, packets,
                       np.minimum(packets["frame_bytes"], self.snaplen).astype(np.int64), 0,
                       None)
        if end < 0:
            return None
        self.held = end - self._at
        self._n += n
        return end - start

    def write(self, release: bool = False) -> None:
        """Hand the records held to the writer (:meth:`~tokenpcap.pcap.writer.PcapWriter.
        write_records`, which goes on in its other buffer); ``release``: give the buffers back
        (a process writing many files, where idle buffers would add up).

        Raises:
            OutputError: the write failed.
        """
        if self.held:
            self.writer.write_records(self._at + self.held, self._n)
            self.held = self._n = 0
        if release:
            self.writer.release_records()


_NOT_SERVED, _BAD_ROW = -1, -2


@njit(cache=True, nogil=True, inline="always")
def _served_row(rec, r, fo, hb_t, l4_end, snaplen, crc_payload_max, min_hole):
    """``(kept bytes, frame bytes, time)`` of row ``r`` (see :func:`_build_records`), kept bytes
    -1 when :class:`InPlaceRecords` does not serve it (module docstring)."""
    op = rec[r, fo[2]]
    h = hb_t[op]
    if h < 0 or rec[r, fo[4]] != 0:
        return -1, 0, 0
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
        return -1, 0, 0
    return c, f, ti


@njit(cache=True, nogil=True)
def _all_served(rec, fo, hb_t, l4_end, snaplen, crc_payload_max, min_hole):
    """Whether :class:`InPlaceRecords` serves every row of ``rec`` (:func:`_served_row`)."""
    for r in range(rec.shape[0]):
        if _served_row(rec, r, fo, hb_t, l4_end, snaplen, crc_payload_max, min_hole)[0] < 0:
            return False
    return True


@njit(cache=True, nogil=True, _nrt=False)
def _build_records(packets, rec, fo, snaplen, crc_payload_max, min_hole, hb_t, l4_end,
                   frac_per_sec, step, big, max_sec, out, at, pats, checks, header, crc,
                   cache):
    """Lay out the pcap records of rows ``packets`` (``PACKET_DTYPE (n,)``, ``rec`` the same
    memory as uint8 ``(n, PACKET_DTYPE.itemsize)``; ``fo``: byte offsets of time_ns,
    frame_bytes, opcode, payload_bytes and line_protocol in a row) in ``out`` from byte ``at``
    on, each a record header (``frac_per_sec`` fractions of ``step`` ns, ``big``-endian) and
    the frame's first ``min(frame_bytes, snaplen)`` bytes, built from the builder's direct
    tables (``hb_t``, ``l4_end``, ``pats`` the pattern as uint8 ``(1, m)``, ``header``,
    ``crc``, ``cache``:
    :class:`~tokenpcap.wire.direct.DirectTables`) after the row's checks (``checks``:
    :func:`~tokenpcap.wire.checks.row_tables`). Returns the byte after the last record, or
    ``_NOT_SERVED`` at the first row :class:`InPlaceRecords` does not serve (module docstring;
    a time past ``max_sec`` seconds too), ``_BAD_ROW`` at the first that fails its checks;
    the bytes written before it are then not records of the file."""
    sec = lo = hi = 0
    p = at
    for r in range(rec.shape[0]):
        c, f, ti = _served_row(rec, r, fo, hb_t, l4_end, snaplen, crc_payload_max, min_hole)
        if c < 0:
            return _NOT_SERVED
        if not row_ok(packets[r], c, checks):
            return _BAD_ROW
        units, sec, lo, hi = record_second(ti, step, frac_per_sec, sec, lo, hi)
        if sec > max_sec:
            return _NOT_SERVED          # past the format's last second: the general way says so
        pcap_record_header(out, p, sec, units - lo, c, f, big)
        p += PCAP_RECORD_BYTES
        build_row(rec, r, out, p, c, 0, pats, header, crc, cache)
        p += c
    return p
