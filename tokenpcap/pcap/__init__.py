"""Capture files: writing (pcap, pcapng, ERF) and reading them back, vectorized (stage 7 and the
reading half of stage 8). Every header layout is declared once in :mod:`tokenpcap.pcap.formats`;
see ``docs/pcap.md``."""
from __future__ import annotations

from tokenpcap.pcap.capture import RECORD_DTYPE, Capture, InterfaceInfo
from tokenpcap.pcap.pcapng import Comments, Interface, PcapngWriter
from tokenpcap.pcap.reader import open_capture
from tokenpcap.pcap.timestamps import NO_TIME
from tokenpcap.pcap.writer import ErfWriter, PcapWriter

__all__ = ["PcapWriter", "PcapngWriter", "ErfWriter", "Interface", "Comments", "open_capture",
           "Capture", "InterfaceInfo", "RECORD_DTYPE", "NO_TIME"]
