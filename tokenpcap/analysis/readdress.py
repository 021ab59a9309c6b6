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

The mapping (:class:`Mapping`, YAML or ``OLD=NEW`` pairs): see :func:`load_mapping`.
"""
from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tokenpcap.analysis.decode import decode_batch
from tokenpcap.errors import CaptureError, InputError, OutputError
from tokenpcap.pcap import Comments, Interface, PcapngWriter, PcapWriter
from tokenpcap.pcap.formats import MAX_SNAPLEN
from tokenpcap.pcap.reader import open_capture
from tokenpcap.pcap.timestamps import NO_TIME
from tokenpcap.analysis.readdress_patch import patch_batch

__all__ = ["Mapping", "load_mapping", "parse_pair", "readdress", "output_format", "retarget_text"]


@dataclass
class Mapping:
    """What to change. Address maps are old → new as integers (MAC 48-bit, IPv4 32-bit, IPv6
    128-bit); ``vlan`` is ``None`` (keep), ``-1`` (strip) or a VID; the rest ``None`` keeps.
    ``udp_sport`` maps ports; ``udp_sport_offset`` rotates ports inside 0xC000-0xFFFF."""

    mac: dict[int, int] = field(default_factory=dict)
    ipv4: dict[int, int] = field(default_factory=dict)
    ipv6: dict[int, int] = field(default_factory=dict)
    vlan: int | None = None
    pcp: int | None = None
    dscp: int | None = None
    ecn: int | None = None
    ttl: int | None = None
    udp_sport: dict[int, int] = field(default_factory=dict)
    udp_sport_offset: int | None = None

    def add_address(self, old: str, new: str, where: str = "--map") -> None:
        """Add one ``old → new`` pair, recognising MACs, IPv4 and IPv6 by their syntax.

        Raises:
            InputError: not the same kind of address on both sides, or not an address.
        """
        a, b = _address(old, where), _address(new, where)
        if a[0] != b[0]:
            kind = {"mac": "a MAC", "ipv4": "an IPv4", "ipv6": "an IPv6"}
            raise InputError(f"{where}: {old} -> {new}: got {kind[a[0]]} and {kind[b[0]]} address, "
                             "expected two addresses of one kind (MAC, IPv4 or IPv6)")
        self.put(a[0], a[1], b[1], where)

    def put(self, kind: str, old: int, new: int, where: str) -> None:
        """Map address ``old`` to ``new`` in table ``kind`` (``mac``, ``ipv4``, ``ipv6``).

        Raises:
            InputError: ``old`` is already mapped to another address, or another address is
                already mapped to ``new`` (two NICs would become one: their flows would merge
                and the capture would no longer be a trace of a job).
        """
        table = getattr(self, kind)
        if table.get(old, new) != new:
            raise InputError(f"{where}: {_text(kind, old)}: got two new addresses "
                             f"({_text(kind, table[old])} and {_text(kind, new)}), expected one")
        other = next((k for k, v in table.items() if v == new and k != old), None)
        if other is not None:
            raise InputError(f"{where}: {_text(kind, new)}: got it as the new address of both "
                             f"{_text(kind, other)} and {_text(kind, old)}, expected one old "
                             "address per new one (two NICs would become one)")
        table[old] = new

    def merge(self, other: "Mapping", where: str) -> None:
        """Add the addresses and options of ``other`` (later options win); as :meth:`put`.

        Raises:
            InputError: as :meth:`put`.
        """
        for kind in ("mac", "ipv4", "ipv6"):
            for old, new in getattr(other, kind).items():
                self.put(kind, old, new, where)
        self.udp_sport.update(other.udp_sport)
        for name in ("vlan", "pcp", "dscp", "ecn", "ttl", "udp_sport_offset"):
            if getattr(other, name) is not None:
                setattr(self, name, getattr(other, name))


def _text(kind: str, value: int) -> str:
    """An address of table ``kind`` as people write it."""
    if kind == "mac":
        return ":".join(f"{b:02x}" for b in value.to_bytes(6, "big"))
    return str(ipaddress.IPv4Address(value) if kind == "ipv4" else ipaddress.IPv6Address(value))


def _address(text: str, where: str) -> tuple[str, int]:
    t = str(text).strip()
    parts = t.replace("-", ":").split(":")
    if len(parts) == 6 and all(len(p) == 2 for p in parts):
        try:
            return "mac", int("".join(parts), 16)
        except ValueError:
            pass
    try:
        ip = ipaddress.ip_address(t)
    except ValueError:
        raise InputError(f"{where}: address: got {text!r}, expected a MAC (02:00:00:00:00:01), "
                         "an IPv4 or an IPv6 address") from None
    return ("ipv4" if ip.version == 4 else "ipv6"), int(ip)


def retarget_text(text: str | None, m: Mapping) -> str | None:
    """``text`` (a pcapng interface description such as generate writes, "198.18.0.1
    02:00:00:00:00:00") with every space-separated address that ``m`` maps replaced by its new
    address, so the description names the addresses the rewritten frames carry. Raises nothing."""
    if not text:
        return text
    words = text.split(" ")
    for i, w in enumerate(words):
        try:
            kind, old = _address(w, "")
        except InputError:
            continue
        new = getattr(m, kind).get(old)
        if new is not None:
            words[i] = _text(kind, new)
    return " ".join(words)


def _int(value, key: str, lo: int, hi: int, where: str) -> int:
    try:
        v = int(value, 0) if isinstance(value, str) else int(value)
    except (TypeError, ValueError):
        v = None
    if v is None or isinstance(value, bool) or not lo <= v <= hi:
        raise InputError(f"{where}: {key}: got {value!r}, expected an integer {lo}..{hi}")
    return v


_KEYS = {"addresses", "vlan", "pcp", "dscp", "ecn", "ttl", "udp_sport", "udp_sport_offset"}


def load_mapping(path: str | os.PathLike) -> Mapping:
    """Read a mapping file (YAML)::

        addresses:                      # old: new, MAC / IPv4 / IPv6 (each NIC you retarget)
          198.18.0.1: 10.10.1.1         # node 0 NIC 0: its IP and its MAC together
          "02:00:00:00:00:00": "b8:ce:f6:12:34:00"
        vlan: 100                       # VID, or "none" to strip the tag
        pcp: 3                          # 802.1Q priority (the lossless class of the lab)
        dscp: 26                        # IP DSCP; ecn: 0..3 (2 = ECT(0)); ttl: 1..255
        udp_sport: {0xC000: 0xD000}     # exact port map, and/or
        udp_sport_offset: 4096          # rotate every port inside 0xC000-0xFFFF

    Raises:
        InputError: unreadable file, unknown key, or a value out of range (names file and key).
    """
    import yaml

    from tokenpcap.config.yamlcheck import (PROFILE_MAX_BYTES, FileRefused, check_node,
                                            read_limited)

    p = Path(path)
    try:
        text = read_limited(p, PROFILE_MAX_BYTES, "YAML mapping").decode("utf-8")
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            if node is not None:
                check_node(p, node)         # duplicate keys, alias bombs: as in profiles
            doc = (loader.construct_document(node) if node is not None else None) or {}
        finally:
            loader.dispose()
    except FileRefused as err:
        raise InputError(f"{p}: cannot read the mapping: {err}") from None
    except (OSError, ValueError) as err:
        if isinstance(err, UnicodeDecodeError):
            raise InputError(f"{p}: got byte 0x{err.object[err.start]:02x} at offset "
                             f"{err.start} that is not UTF-8, expected a YAML text file") from None
        raise InputError(f"{p}: cannot read the mapping: "
                         f"{getattr(err, 'strerror', None) or err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        what = getattr(err, "problem", None) or type(err).__name__
        raise InputError(f"{p}: {where}got invalid YAML ({what}), expected a mapping of keys "
                         f"{sorted(_KEYS)}") from None
    except RecursionError:
        raise InputError(f"{p}: got YAML nested too deeply, expected a mapping of keys "
                         f"{sorted(_KEYS)}") from None
    if not isinstance(doc, dict):
        raise InputError(f"{p}: got {type(doc).__name__}, expected a mapping of keys "
                         f"{sorted(_KEYS)}")
    unknown = set(doc) - _KEYS
    if unknown:
        raise InputError(f"{p}: key {sorted(unknown)[0]!r}: got unknown, expected one of "
                         f"{sorted(_KEYS)}")
    m = Mapping()
    addrs = doc.get("addresses") or {}
    if not isinstance(addrs, dict):
        raise InputError(f"{p}: addresses: got {type(addrs).__name__}, expected old: new pairs")
    for old, new in addrs.items():
        m.add_address(str(old), str(new), f"{p}: addresses")
    for key, value in doc.items():
        if key != "addresses":
            set_option(m, key, value, str(p))
    return m


def set_option(m: Mapping, key: str, value, where: str) -> None:
    """Set one non-address option on ``m`` (shared by the YAML and the command line).

    Raises:
        InputError: a value out of range.
    """
    if key == "vlan":
        m.vlan = -1 if str(value).lower() in ("none", "strip", "untagged") else \
            _int(value, "vlan", 0, 4095, where)
    elif key in ("pcp", "dscp", "ecn", "ttl"):
        hi = {"pcp": 7, "dscp": 63, "ecn": 3, "ttl": 255}[key]
        setattr(m, key, _int(value, key, 0 if key != "ttl" else 1, hi, where))
    elif key == "udp_sport":
        if not isinstance(value, dict):
            raise InputError(f"{where}: udp_sport: got {value!r}, expected old: new ports")
        for a, b in value.items():
            m.udp_sport[_int(a, "udp_sport", 0, 0xFFFF, where)] = \
                _int(b, "udp_sport", 0, 0xFFFF, where)
    elif key == "udp_sport_offset":
        m.udp_sport_offset = _int(value, key, 0, 0x3FFF, where)


def parse_pair(text: str) -> tuple[str, str]:
    """``OLD=NEW`` → (old, new). Raises: InputError without exactly one ``=``."""
    if text.count("=") != 1:
        if "=" not in text and (text.endswith((".yaml", ".yml")) or os.sep in text):
            raise InputError(f"--map: got {text!r}, a file that does not exist, expected an "
                             "existing YAML mapping file or OLD=NEW (an address pair)")
        raise InputError(f"--map: got {text!r}, expected OLD=NEW (an address pair) or a YAML file")
    a, b = text.split("=")
    return a, b


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


def readdress(src: str | os.PathLike, dst: str | os.PathLike, mapping: Mapping, *,
              usec: bool = False, batch: int = 1 << 16) -> dict:
    """Rewrite ``src`` into ``dst`` (written to a temporary file, renamed at the end).

    Output format (:func:`output_format`): pcapng for a ``.pcapng`` name (interfaces and packet
    comments kept, ns resolution), a nanosecond pcap for a ``.pcap`` name, otherwise the
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
            (checked before writing).
    """
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
                    writer = PcapngWriter(dst, itfs, snaplen=snaplen)
                elif ng:
                    writer.new_section(itfs)
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
                                        for i in cap.interfaces] or [Interface(name="if0")])
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    writer.close()
    seen = stats.pop("mapped", set())
    stats["unmatched"] = [_text(kind, a) for kind in ("mac", "ipv4", "ipv6")
                          for a in getattr(mapping, kind) if (kind, a) not in seen]
    return stats
