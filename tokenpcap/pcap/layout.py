"""Record and block headers of a batch laid out by one compiled loop, straight into the batch buffer.

The writers (:mod:`tokenpcap.pcap.writer`, :mod:`tokenpcap.pcap.pcapng`) hand a batch to these
kernels when its frame bytes are all written into the buffer (no gather write): one pass over
the records writes every header byte at its place (record header, ERF header, pcapng pad,
comment option and trailing block length) and the byte offset of every frame, which the frame
builder's ``fill`` then writes. No structured array of headers is built and scattered, and no
per-field numpy pass is made. An EPB starts and ends on a 4-byte boundary, so its words (header,
zeroed last pad word, comment option, trailing length) are stored a word at a time; a pcap record
(16 + 64/74 bytes: not always aligned) byte by byte, its seconds divided out only when a time
leaves the second of the record before. In a writer's batch (a 10 MiB buffer written while the
other is in flight) a headers-only record costs ~10 ns of layout, a commented EPB ~19 (~53 with
its option copied byte by byte), beside the kernel's copy of its bytes into the file
(benchmarks/README.md).

Layouts (the same bytes as :data:`~tokenpcap.pcap.formats.PCAP_RECORD`,
:data:`~tokenpcap.pcap.formats.EPB`, :data:`~tokenpcap.pcap.formats.ERF_RECORD`, whose tables
give the field order; 32-bit words in the file's byte order unless said otherwise):

* pcap record (draft-ietf-opsawg-pcap §5): ts_sec, ts_frac (ns, or us rounded half up with the
  carry into the seconds, :func:`tokenpcap.pcap.timestamps.split_ns`), caplen, orig_len; on a
  linktype-197 file both lengths count the 16-byte ERF header that follows;
* ERF header (Endace EDM11-01): 64-bit little-endian 32.32 fixed-point time
  (:func:`tokenpcap.pcap.timestamps.ns_to_erf`), type 21 (InfiniBand), flags ``vlen |
  interface & 3``, then big-endian rlen (16 + caplen), lctr 0 and wlen (the frame length);
* pcapng EPB (draft-ietf-opsawg-pcapng §4.3): block_type 6, block_length, interface_id,
  ts_high, ts_low (ns, ``if_tsresol`` 9), caplen, orig_len (both counting an ERF header), the
  data zero-padded to 4 bytes, the comment option's encoded bytes (with their own pad and
  ``opt_endofopt``), block_length again.

Errors: none raised here; the writers check every array before calling.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from tokenpcap.pcap.formats import ERF_FLAG_VLEN, ERF_RECORD, ERF_TYPE_INFINIBAND, EPB, PCAP_RECORD

__all__ = ["pcap_records", "pcapng_size", "pcapng_blocks", "PCAP_HEADER_BYTES",
           "EPB_FIXED_BYTES", "record_second", "pcap_record_header"]

_NS = 1_000_000_000
_ERF_BYTES = ERF_RECORD.size
PCAP_HEADER_BYTES = PCAP_RECORD.size           #: 16
EPB_FIXED_BYTES = EPB.size + 4                 #: 28-byte header + trailing block_length
_EPB_HEADER = EPB.size
_EPB_TYPE = 6


@njit(cache=True, nogil=True, inline="always")
def _u32(out, p, v, big):
    if big:
        out[p] = (v >> 24) & 0xFF
        out[p + 1] = (v >> 16) & 0xFF
        out[p + 2] = (v >> 8) & 0xFF
        out[p + 3] = v & 0xFF
    else:
        out[p] = v & 0xFF
        out[p + 1] = (v >> 8) & 0xFF
        out[p + 2] = (v >> 16) & 0xFF
        out[p + 3] = (v >> 24) & 0xFF


@njit(cache=True, nogil=True, inline="always")
def _u16be(out, p, v):
    out[p] = (v >> 8) & 0xFF
    out[p + 1] = v & 0xFF


@njit(cache=True, nogil=True, inline="always")
def _erf_header(out, p, t, fb, caplen, iface):
    """The 16-byte ERF type-21 header at ``out[p:]`` (module docstring)."""
    sec = t // _NS
    frac = ((np.uint64(t - sec * _NS) << np.uint64(32)) + np.uint64(_NS // 2)) // np.uint64(_NS)
    lo = np.int64(frac)
    _u32(out, p, lo, False)
    _u32(out, p + 4, sec, False)
    out[p + 8] = ERF_TYPE_INFINIBAND
    out[p + 9] = ERF_FLAG_VLEN | (iface & 3)
    _u16be(out, p + 10, caplen + _ERF_BYTES)
    _u16be(out, p + 12, 0)
    _u16be(out, p + 14, fb)


@njit(cache=True, nogil=True, inline="always")
def record_second(t, step, frac_per_sec, sec, lo, hi):
    """``(units, sec, lo, hi)`` of a record at ``t`` ns: its time in fractions (``step`` ns
    each, rounded half up; ``frac_per_sec`` a second) and its second ``sec``, whose fractions
    are ``[lo, hi)``; ``sec, lo, hi`` are the record before's, divided out again only when
    ``units`` leaves them (start with ``0, 0, 0``)."""
    units = t if step == 1 else (t + step // 2) // step
    if units < lo or units >= hi:
        sec = units // frac_per_sec
        lo = sec * frac_per_sec
        hi = lo + frac_per_sec
    return units, sec, lo, hi


@njit(cache=True, nogil=True, inline="always")
def pcap_record_header(out, p, sec, frac, caplen, orig_len, big):
    """The 16-byte pcap record header at ``out[p:]`` (module docstring): ts_sec, ts_frac,
    caplen, orig_len, in the file's byte order (``big``)."""
    _u32(out, p, sec, big)
    _u32(out, p + 4, frac, big)
    _u32(out, p + 8, caplen, big)
    _u32(out, p + 12, orig_len, big)


@njit(cache=True, nogil=True)
def pcap_records(out, time_ns, frame_bytes, caplen, frac_per_sec, pcap, erf, iface, big,
                 offsets):
    """Write n record headers back to back, each followed by room for its ``caplen[i]`` frame
    bytes: a pcap record header (``pcap``) followed by an ERF header (``erf``, linktype 197),
    or an ERF header alone (a raw ERF file).

    The seconds of a record are divided out only when its time leaves the second of the
    record before (a batch's times are mostly ordered): one compare per record instead of a
    64-bit division; the fields are the same.

    Args:
        out: uint8 (n * header + caplen.sum(),) the batch buffer.
        time_ns, frame_bytes, caplen: int64 (n,).
        frac_per_sec: 10**9 (ns fractions) or 10**6 (us, rounded half up).
        pcap: bool, a pcap record header first. erf: bool, an ERF header (after it).
        iface: int64 (n,) or (1,): the interface in the ERF flags.
        big: bool, big-endian words.
        offsets: int64 (n,), out: where frame i's bytes go in ``out``.

    Returns:
        the largest ``ts_sec`` written (the caller refuses a value above 2**32 - 1).
    """
    first = PCAP_HEADER_BYTES if pcap else 0
    extra = _ERF_BYTES if erf else 0
    hl = first + extra
    step = _NS // frac_per_sec
    one = iface.size == 1
    top = 0
    p = 0
    sec = 0
    lo = 0             # the fractions [lo, hi) are second ``sec``
    hi = 0
    for i in range(time_ns.size):
        t = time_ns[i]
        units, sec, lo, hi = record_second(t, step, frac_per_sec, sec, lo, hi)
        top = max(top, sec)
        c = caplen[i]
        if pcap:
            pcap_record_header(out, p, sec, units - lo, c + extra, frame_bytes[i] + extra, big)
        if erf:
            _erf_header(out, p + first, t, frame_bytes[i], c,
                        iface[0] if one else iface[i])
        offsets[i] = p + hl
        p += hl + c
    return top


@njit(cache=True, nogil=True)
def pcapng_size(caplen, iface, erf_of, codes, option_bytes):
    """Bytes of the n EPBs: ``sum(28 + pad4(caplen + erf) + option + 4)``.

    Args:
        caplen: int64 (n,). iface: int64 (n,) or (1,) interface of each block.
        erf_of: int64 (interfaces,): 16 on an ERF (InfiniBand) interface, else 0.
        codes: int64 (n,) comment code per block (-1: none), or (0,) for no comments.
        option_bytes: int64 (labels,) or more: encoded option bytes per code.
    """
    one = iface.size == 1
    total = 0
    for i in range(caplen.size):
        e = erf_of[iface[0] if one else iface[i]]
        total += EPB_FIXED_BYTES + ((caplen[i] + e + 3) & ~3)
        if codes.size and codes[i] >= 0:
            total += option_bytes[codes[i]]
    return total


@njit(cache=True, nogil=True, inline="always")
def _word(words, p, v, swap):
    """32-bit word ``v`` at byte ``p`` (a multiple of 4) through the uint32 view ``words``,
    byte-swapped when the file's byte order is not the machine's."""
    x = np.uint32(v & 0xFFFFFFFF)
    if swap:
        x = np.uint32(((x & np.uint32(0xFF)) << np.uint32(24))
                      | ((x & np.uint32(0xFF00)) << np.uint32(8))
                      | ((x >> np.uint32(8)) & np.uint32(0xFF00)) | (x >> np.uint32(24)))
    words[p >> 2] = x


@njit(cache=True, nogil=True)
def pcapng_blocks(out, words, time_ns, frame_bytes, caplen, iface, erf_of, codes, option_bytes,
                  blob_at, blob_words, swap, offsets):
    """Write n EPBs back to back (module docstring), leaving room for each frame's bytes.

    Every block starts and ends on a 4-byte boundary, so its header words, the zeroed last
    word of a padded frame, the option words and the trailing length are stored a word at a
    time through ``words`` (the ERF header, 16 bytes with a 64-bit and 16-bit fields, byte by
    byte).

    Args:
        out: uint8 (:func:`pcapng_size`,) the batch buffer; words: the same bytes as uint32.
        time_ns, frame_bytes, caplen: int64 (n,).
        iface, erf_of, codes, option_bytes: as :func:`pcapng_size` (option bytes a multiple
            of 4, as every encoded option list is).
        blob_at: int64 (labels,) or more: where code k's option bytes start in the blob, in
            bytes (a multiple of 4).
        blob_words: uint32 (m,): every label's encoded option bytes (file byte order) as words.
        swap: bool, the file's byte order is not the machine's.
        offsets: int64 (n,), out: where frame i's bytes go in ``out``.
    """
    one = iface.size == 1
    p = 0
    for i in range(time_ns.size):
        f = iface[0] if one else iface[i]
        e = erf_of[f]
        c = caplen[i]
        data = c + e
        padded = (data + 3) & ~3
        k = codes[i] if codes.size else -1
        opt = option_bytes[k] if k >= 0 else 0
        blen = EPB_FIXED_BYTES + padded + opt
        t = time_ns[i]
        _word(words, p, _EPB_TYPE, swap)
        _word(words, p + 4, blen, swap)
        _word(words, p + 8, f, swap)
        _word(words, p + 12, t >> 32, swap)
        _word(words, p + 16, t, swap)
        _word(words, p + 20, data, swap)
        _word(words, p + 24, frame_bytes[i] + e, swap)
        q = p + _EPB_HEADER
        if padded != data:           # the pad bytes: zero the last word before the fill
            words[(q + padded - 4) >> 2] = 0
        if e:
            _erf_header(out, q, t, frame_bytes[i], c, f)
        offsets[i] = q + e
        q += padded
        if opt:
            a = blob_at[k] >> 2
            w = q >> 2
            for j in range(opt >> 2):
                words[w + j] = blob_words[a + j]
            q += opt
        _word(words, q, blen, swap)
        p = q + 4
