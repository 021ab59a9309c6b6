"""Retarget a capture to a lab's own addresses and marking, keeping it valid RoCE.

``readdress(src, dst, mapping, usec=False)`` rewrites MACs, IPv4/IPv6 addresses, the 802.1Q tag
(VID/PCP, added, replaced or stripped), DSCP/ECN, TTL/hop limit and UDP source ports of every
Ethernet frame, keeping integer-ns timestamps (or writing a microsecond pcap, rounded half up
with the carry into the seconds, case C9), and then repairs what those fields feed:

* the IPv4 header checksum (RFC 791/1071), recomputed over the header;
* a non-zero UDP checksum (IPv6 RoCE), updated incrementally (RFC 1624 eqn. 3) for the changed
  addresses and port;
* the ICRC, by CRC linearity (IBTA vol.1 7.8.1; :mod:`tokenpcap.wire.linear`): for equal-length
  data ``crc(new) = crc(old) ^ L(old ^ new)`` with ``L`` the linear part, so only the changed
  bytes of the covered head (addresses, UDP port; DSCP/ECN/TTL are masked out of the ICRC, case C1)
  enter, one table look-up each. A frame whose ICRC was wrong before stays wrong by the same
  error (readdress never launders corruption).

Truncated records (caplen < wire length: a ``--snaplen`` trace, ``editcap -s``, whatever the
file's snaplen says) stay truncated at the same length (± the 4 bytes of a tag added or removed;
an added tag grows the snaplen by 4 too, so no captured byte is lost). The headers they hold
whole are rewritten (MACs, tag, IP addresses and marking, UDP port, the IPv4 header checksum); a
header cut short is copied unchanged. Their ICRC lies beyond the cut, is not in the capture, and
cannot be recomputed: the summary counts them.

tcprewrite changes addresses but leaves the ICRC stale, so RDMA NICs drop its output.
Every container is read (pcap, pcapng, raw ERF, ERF records in pcap/pcapng): Ethernet frames are
rewritten, and a native InfiniBand frame (LRH/LIDs) anywhere is refused with its record number and
offset before anything is written: its addresses are not Ethernet/IP. Records that contradict
their header (caplen above orig_len or the snaplen) and pcapng Simple Packet Blocks (no time) are
refused the same way; the output is a valid capture or nothing.

The mapping (:class:`Mapping`, YAML or ``OLD=NEW`` pairs) is :mod:`tokenpcap.analysis.readdress_mapping`
(imported from here too); the vectorized rewrite of a batch is
:mod:`tokenpcap.analysis.readdress_patch`.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tokenpcap.analysis.decode import decode_batch
from tokenpcap.errors import CaptureError, InputError, OutputError
from tokenpcap.pcap import Comments, Interface, PcapngWriter, PcapWriter
from tokenpcap.pcap.formats import MAX_SNAPLEN
from tokenpcap.pcap.output import make_directory
from tokenpcap.pcap.reader import open_capture
from tokenpcap.pcap.timestamps import NO_TIME
from tokenpcap.analysis.readdress_mapping import (Mapping, load_mapping, mapped_address_text,
                                                  parse_pair, retarget_text, set_option)
from tokenpcap.analysis.readdress_patch import patch_batch

__all__ = ["Mapping", "load_mapping", "parse_pair", "set_option", "readdress", "output_format",
           "retarget_text"]


def output_format(src_format: str, dst: str | os.PathLike, usec: bool) -> str:
    """``"pcapng"`` or ``"pcap"``: what :func:`readdress` writes to ``dst``.

    A ``.pcapng`` name gets pcapng (nanoseconds, interfaces and packet comments kept), a
    ``.pcap`` name a classic pcap (nanosecond magic; ``usec``: microsecond magic), any other
    name the input's format. ``usec`` needs a classic pcap: the pcapng writer keeps ns.

    Raises:
        InputError: ``usec`` with a ``.pcapng`` name.
    """
    suffix = Path(dst).suffix.lower()
    if usec and suffix == ".pcapng":
        raise InputError(f"{dst}: --usec: got an output named .pcapng, expected a .pcap name "
                         "(--usec writes a classic microsecond pcap; pcapng output keeps "
                         "nanoseconds, interfaces and comments)")
    if usec or suffix == ".pcap":
        return "pcap"
    if suffix == ".pcapng":
        return "pcapng"
    return "pcapng" if src_format == "pcapng" else "pcap"


def _limit(snaplen: int, grow: int) -> int:
    """A file's snaplen as the output's record limit, ``grow`` bytes more (a tag added): 0
    ("not set", pcapng) and values above libpcap's maximum mean no limit below 262144 bytes."""
    return min(snaplen + grow, MAX_SNAPLEN) if 0 < snaplen <= MAX_SNAPLEN else MAX_SNAPLEN


def _check_space(cap, dst, mapping: Mapping) -> None:
    """Refuse before writing when the output cannot fit: its least possible size (every
    record's captured bytes, 4 fewer when a tag may be stripped, and a 16-byte record header:
    a classic pcap; pcapng records are larger) against the free space of ``dst``'s directory.
    Reads record headers only.

    Raises:
        OutputError: naming both numbers.
    """
    import shutil

    least = 24
    for rec in cap.batches():
        c = rec["caplen"].astype(np.int64)
        if mapping.vlan == -1:
            c = np.maximum(c - 4, 0)
        least += int(c.sum()) + 16 * rec.size
    parent = Path(dst).parent
    try:
        free = shutil.disk_usage(parent if str(parent) else ".").free
    except OSError:
        return                          # no such directory: the writer says so
    if least > free:
        raise OutputError(f"{dst}: free space got {free:,} bytes, expected at least the "
                          f"{least:,} bytes the rewritten capture needs")


def _check_records(src, cap, rec: np.ndarray) -> None:
    """Refuse a batch readdress cannot rewrite into a valid capture (each error names the
    first such record, its number in the file and its byte offset).

    Raises:
        InputError: a record that is not an Ethernet frame (native InfiniBand in any container:
            its addresses are LIDs and GIDs in the LRH/GRH, not MACs and IPs; or any other
            link type), or a record without a timestamp (a pcapng Simple Packet Block: the
            output keeps every packet's time and cannot invent one).
        CaptureError: a record that contradicts its own header: more bytes captured than the
            frame had on the wire (caplen > orig_len), or than its interface's snaplen.
    """
    def where(i: int, what: str) -> str:
        return (f"{src}: record {done + i} at byte offset {int(rec['record'][i]):,}: {what}")

    done = getattr(cap, "_readdress_done", 0)
    lt = rec["linktype"]
    bad = np.flatnonzero(lt != 1)
    if bad.size:
        i = int(bad[0])
        kind = "native InfiniBand" if int(lt[i]) == 247 else f"link type {int(lt[i])}"
        raise InputError(where(i, f"got a {kind} frame, expected Ethernet (linktype 1): "
                                  "readdress rewrites MAC/IP addresses; native InfiniBand "
                                  "addresses (LIDs, GIDs) are not readdressed"))
    bad = np.flatnonzero(rec["time_ns"] == NO_TIME)
    if bad.size:
        raise InputError(where(int(bad[0]), "got a Simple Packet Block (no timestamp), expected "
                                            "Enhanced Packet Blocks: readdress keeps each "
                                            "packet's time"))
    cap_len = rec["caplen"].astype(np.int64)
    orig = rec["orig_len"].astype(np.int64)
    limit = np.array([_limit(i.snaplen, 0) for i in cap.interfaces] or [MAX_SNAPLEN], np.int64)
    lim = limit[np.clip(rec["interface"].astype(np.int64), 0, limit.size - 1)]
    bad = np.flatnonzero((cap_len > orig) | (cap_len > lim))
    if bad.size:
        i = int(bad[0])
        what = (f"orig_len {int(orig[i])}" if cap_len[i] > orig[i] else
                f"the interface's snaplen {int(lim[i])}")
        raise CaptureError(where(i, f"caplen got {int(cap_len[i])}, expected at most {what} "
                                    "(the record contradicts its header; readdress writes only "
                                    "valid captures)"))
    cap._readdress_done = done + rec.size


def _section_comment(cap) -> str | None:
    """The ``opt_comment`` of the input's latest pcapng section (tokenpcap's provenance, which
    ``inspect --against`` and ``trace --capture`` read), or None (no comment, or not pcapng)."""
    sections = getattr(cap, "sections", None)
    text = sections[-1]["options"].get("opt_comment") if sections else None
    return None if text is None else str(text)


def readdress(src: str | os.PathLike, dst: str | os.PathLike, mapping: Mapping, *,
              usec: bool = False, batch: int = 1 << 16) -> dict:
    """Rewrite ``src`` into ``dst`` (written to a temporary file, renamed at the end). The
    directory of ``dst`` and its missing parents are made (``mkdir -p``, as ``generate``,
    ``export`` and ``plot`` make theirs) and removed again if the rewrite fails.

    Output format (:func:`output_format`): pcapng for a ``.pcapng`` name (interfaces, packet
    comments and each section's comment, the run's provenance, kept; ns resolution), a nanosecond pcap for a ``.pcap`` name, otherwise the
    input's format; ``usec=True`` writes a microsecond pcap and refuses a ``.pcapng`` name.

    Returns:
        ``{"packets", "icrc_updated", "ipv4_checksums", "truncated"}`` counts; ``truncated``
        records are kept cut (their ICRC is not in the capture and is not recomputed);
        ``"unmatched"``: the mapped old addresses (MAC, IPv4, IPv6, as text, in the mapping's
        order) that no frame carries, so a mistyped address does not pass unnoticed.

    Raises:
        CaptureError: the input cannot be read, or a record contradicts its header.
            InputError: a native InfiniBand (or other non-Ethernet) record, a record without a
            timestamp, or ``usec`` with a ``.pcapng`` name.
            OutputError: the output cannot be written, or cannot fit in the free space
            (checked before writing); its directory cannot be made (a file in the way, a
            read-only file system).
    """
    with make_directory(Path(dst).parent):
        return _readdress(src, dst, mapping, usec, batch)


def _readdress(src: str | os.PathLike, dst: str | os.PathLike, mapping: Mapping, usec: bool,
               batch: int) -> dict:
    """:func:`readdress` into an existing directory."""
    cap = open_capture(src)
    fmt = output_format(cap.format, dst, usec)
    _check_space(open_capture(src), dst, mapping)     # its own pass: pcapng interfaces are
                                                       # collected as the file is walked
    # pcapng IDBs are read as the file is walked, and SnapLen 0 there means "no limit": the
    # limit is taken per record from its interface (0 or above libpcap's maximum -> 262144);
    # a tag added grows it by 4 bytes, so that a cut record keeps every byte it had
    grow = 4 if mapping.vlan is not None and mapping.vlan >= 0 else 0
    snaplen = MAX_SNAPLEN
    if cap.format != "pcapng" and cap.interfaces:
        snaplen = _limit(max(i.snaplen for i in cap.interfaces), grow)
    ng = fmt == "pcapng"
    writer = None if ng else PcapWriter(dst, snaplen=snaplen, nanosecond=not usec)
    stats = {"packets": 0, "icrc_updated": 0, "ipv4_checksums": 0, "truncated": 0}
    known = 0
    try:
        for rec in cap.batches(batch):
            if writer is None or int(rec["interface"].max()) >= known:
                known = len(cap.interfaces)
                limits = np.array([min(_limit(i.snaplen, grow), snaplen) for i in cap.interfaces]
                                  or [snaplen], np.int64)
                itfs = [Interface(name=i.name or f"if{i.index}",
                                  description=retarget_text(i.description, mapping),
                                  speed_bps=i.speed_bps, snaplen=int(lim))
                        for i, lim in zip(cap.interfaces, limits)]
                if ng and writer is None:
                    writer = PcapngWriter(dst, itfs, snaplen=snaplen,
                                          section_comment=_section_comment(cap))
                elif ng:
                    writer.new_section(itfs, section_comment=_section_comment(cap))
            _check_records(src, cap, rec)
            dec = decode_batch(cap.data, rec, cap.views)
            plan = patch_batch(cap.data, rec, dec, mapping, stats,
                               snaplen=limits[rec["interface"].astype(np.int64)])
            kw = {}
            if ng:
                kw = {"interface": rec["interface"],
                      "comments": Comments(cap.comments, rec["comment"])}
            writer.write_batch(rec["time_ns"], plan.new_len, plan.fill, caplen=plan.caplen, **kw)
            stats["packets"] += rec.size
        if writer is None:                          # a pcapng without packets
            writer = PcapngWriter(dst, [Interface(name=i.name or f"if{i.index}")
                                        for i in cap.interfaces] or [Interface(name="if0")],
                                  section_comment=_section_comment(cap))
        # the report is made before the output lands: nothing can fail after it did
        seen = stats.pop("mapped", set())
        stats["unmatched"] = [mapped_address_text(kind, a) for kind in ("mac", "ipv4", "ipv6")
                              for a in getattr(mapping, kind) if (kind, a) not in seen]
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    writer.close()
    return stats
