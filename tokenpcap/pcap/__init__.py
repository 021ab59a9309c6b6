"""Capture files: writing (pcap, pcapng, ERF) and reading them back, vectorized (stage 7 and the
reading half of stage 8). Every header layout is declared once in :mod:`tokenpcap.pcap.formats`."""
from __future__ import annotations

from tokenpcap.pcap.pcapng import Comments, Interface, PcapngWriter
from tokenpcap.pcap.writer import ErfWriter, PcapWriter

__all__ = ["PcapWriter", "PcapngWriter", "ErfWriter", "Interface", "Comments"]
