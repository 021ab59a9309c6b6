"""The capture formats tokenpcap writes, registered by name: what ``--format`` offers.

Each :class:`CaptureFormat` knows its file extension, the transports whose frames it can hold,
whether it carries per-packet comments and interfaces, how to open its writer, and the bytes of
its file header and of one record (from the header declarations of :mod:`tokenpcap.pcap.formats`,
so a size predicted before writing equals the file written). ``generate``'s choices, its checks,
its size prediction and its writers read :data:`CAPTURE_FORMATS`; adding a format is one
``register_format`` call here with its writer class.

========== ======== ===================== =================================================
name       ext      transports            record
========== ======== ===================== =================================================
pcap       .pcap    rocev2, infiniband    16-byte record header (+ 16-byte ERF header for
                                          native InfiniBand, linktype 197) + frame bytes
pcapng     .pcapng  rocev2, infiniband    EPB: 32 bytes of block + (frame [+ ERF header]
                                          padded to 4) + options (the packet comment)
erf        .erf     infiniband            16-byte ERF header + frame bytes (ERF type 21)
========== ======== ===================== =================================================
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from tokenpcap.errors import InputError
from tokenpcap.pcap.formats import EPB, ERF_RECORD, PCAP_FILE_HEADER, PCAP_RECORD, TRAILER
from tokenpcap.pcap.pcapng import Interface, PcapngWriter
from tokenpcap.pcap.writer import ErfWriter, PcapWriter

__all__ = ["CaptureFormat", "CAPTURE_FORMATS", "register_format", "capture_format",
           "transport_mismatch"]


@dataclass(frozen=True)
class CaptureFormat:
    """One capture format (module docstring).

    Attributes:
        name: the ``--format`` value. extension: the file name's ending, with the dot.
        transports: cluster transports whose frames it holds (``rocev2``, ``infiniband``).
        comments: it carries per-packet comments and one interface per NIC (pcapng).
        opener: ``opener(path, link=, snaplen=, interfaces=, section_comment=, threaded=)``
            returns the writer.
        file_header: bytes before the first record (pcapng: 0 here; its section is measured
            from the writer, since it holds the interfaces).
        record_header: bytes of one record before the frame, ERF header excluded.
        pad_to: records are padded to a multiple of this (pcapng: 4).
        why: what limits ``transports``, said when a transport is refused.
        wraps_erf: native InfiniBand frames get a 16-byte ERF header inside the record (pcap,
            pcapng: linktype 197); a raw ERF file's record header is the ERF header itself.
    """

    name: str
    extension: str
    transports: frozenset[str]
    comments: bool
    opener: Callable[..., object]
    file_header: int
    record_header: int
    pad_to: int = 1
    wraps_erf: bool = True
    why: str = ""

    def record_bytes(self, caplen: np.ndarray | int, *, erf_wrapped: bool) -> np.ndarray:
        """Bytes of records holding ``caplen`` frame bytes (comments excluded): int64 like
        ``caplen``. ``erf_wrapped``: each frame carries a 16-byte ERF header (native InfiniBand
        in pcap/pcapng; a raw ERF file's header is its record header)."""
        c = np.asarray(caplen, np.int64) + (ERF_RECORD.size if erf_wrapped and self.wraps_erf
                                            else 0)
        return self.record_header + (c + self.pad_to - 1) // self.pad_to * self.pad_to

    def open(self, path: str | Path, *, link: str, snaplen: int,
             interfaces: list[Interface] | None = None, section_comment: str | None = None,
             threaded: bool = True) -> object:
        """Open this format's writer at ``path``. Raises: EncodeError, OutputError (writers)."""
        return self.opener(path, link=link, snaplen=snaplen, interfaces=interfaces,
                           section_comment=section_comment, threaded=threaded)


#: name -> format, in the order ``--format`` lists them.
CAPTURE_FORMATS: dict[str, CaptureFormat] = {}


def register_format(fmt: CaptureFormat) -> CaptureFormat:
    """Put ``fmt`` into :data:`CAPTURE_FORMATS`. Raises: TypeError: the name is taken."""
    if fmt.name in CAPTURE_FORMATS:
        raise TypeError(f"capture format {fmt.name!r} registered twice")
    CAPTURE_FORMATS[fmt.name] = fmt
    return fmt


def transport_mismatch(name: str, transport: str) -> str | None:
    """Why format ``name`` cannot hold ``transport``'s frames (``got X for transport Y, expected
    ...``), or None when it can (or no such format is registered)."""
    fmt = CAPTURE_FORMATS.get(name)
    if fmt is None or transport in fmt.transports:
        return None
    ok = [n for n, f in CAPTURE_FORMATS.items() if transport in f.transports]
    return (f"got {name!r} for transport {transport!r}, expected {' or '.join(ok)}"
            + (f" ({fmt.why})" if fmt.why else ""))


def capture_format(name: str, transport: str | None = None) -> CaptureFormat:
    """The registered format ``name``, checked against ``transport`` when given.

    Raises:
        InputError: no such format, or it cannot hold that transport's frames.
    """
    fmt = CAPTURE_FORMATS.get(name)
    if fmt is None:
        raise InputError(f"--format: got {name!r}, expected one of {', '.join(CAPTURE_FORMATS)}")
    why = transport_mismatch(name, transport) if transport is not None else None
    if why:
        raise InputError(f"--format: {why}")
    return fmt


register_format(CaptureFormat(
    "pcap", ".pcap", frozenset({"rocev2", "infiniband"}), False,
    lambda path, link, snaplen, interfaces, section_comment, threaded:
        PcapWriter(path, link=link, snaplen=snaplen, threaded=threaded),
    PCAP_FILE_HEADER.size, PCAP_RECORD.size))
register_format(CaptureFormat(
    "pcapng", ".pcapng", frozenset({"rocev2", "infiniband"}), True,
    lambda path, link, snaplen, interfaces, section_comment, threaded:
        PcapngWriter(path, interfaces, snaplen=snaplen, section_comment=section_comment,
                     threaded=threaded),
    0, EPB.size + TRAILER.size, 4))
register_format(CaptureFormat(
    "erf", ".erf", frozenset({"infiniband"}), False,
    lambda path, link, snaplen, interfaces, section_comment, threaded:
        ErfWriter(path, snaplen=snaplen, threaded=threaded),
    0, ERF_RECORD.size, wraps_erf=False, why="ERF type 21 records hold native InfiniBand only"))
