"""One declaration of every capture-file header tokenpcap writes or reads.

Each header is a table of fields in file order (name, numpy type, default, fixed byte order). The
writers build their numpy record arrays from :meth:`Header.dtype`, the readers decode with the same
dtype, and the scalar helpers (:meth:`Header.pack`, :meth:`Header.unpack`, :meth:`Header.struct`)
are derived from it too, so that a reader and a writer cannot disagree about a layout (the
dpkt ``FileHdr``/``PktHdr`` idea; the counterexample is scapy's pcap record header spelled twice).

Sources:

* classic pcap: draft-ietf-opsawg-pcap (File Header §4, Packet Record §5); nanosecond magic
  0xA1B23C4D as libpcap ``NSEC_TCPDUMP_MAGIC``.
* pcapng: draft-ietf-opsawg-pcapng (General Block Structure §3.1, Options §3.5, SHB §4.1,
  IDB §4.2 with ``if_tsresol`` §4.2 and Table 7, EPB §4.3, SPB §4.4, NRB §4.5, ISB §4.6; the
  obsolete Packet Block, appendix A).
* ERF: Endace "Extensible Record Format" (EDM11-01), the generic 16-byte record header: 64-bit
  little-endian fixed-point timestamp (upper 32 bits seconds, lower 32 bits binary fraction),
  type, flags, then rlen, lctr/color and wlen big-endian. LINKTYPE_ERF is 197 (tcpdump.org
  link-layer header types).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tokenpcap.errors import EncodeError

__all__ = [
    "Field", "Header", "PCAP_FILE_HEADER", "PCAP_RECORD", "BLOCK", "SHB", "IDB", "EPB", "SPB",
    "OPB", "OPTION", "TRAILER", "ERF_RECORD", "PCAP_MAGIC_USEC", "PCAP_MAGIC_NSEC", "PCAP_VERSION",
    "BYTE_ORDER_MAGIC", "BT_SHB", "BT_IDB", "BT_OPB", "BT_SPB", "BT_NRB", "BT_ISB", "BT_EPB",
    "OPT_ENDOFOPT", "OPT_COMMENT", "SHB_OPTIONS", "IDB_OPTIONS", "EPB_OPTIONS",
    "LINKTYPE_ETHERNET", "LINKTYPE_ERF", "LINKTYPE_INFINIBAND", "LINKTYPE_IPV4", "LINKTYPE_IPV6",
    "ERF_TYPE_ETH", "ERF_TYPE_INFINIBAND", "ERF_TYPE_PAD", "ERF_ETH_TYPES", "ERF_FLAG_VLEN",
    "ERF_LINKTYPE", "MAX_SNAPLEN", "encode_options", "decode_options", "pad4", "stacked_dtype",
]

# --- constants ------------------------------------------------------------------------------
PCAP_MAGIC_USEC = 0xA1B2C3D4      #: classic pcap, microsecond fraction (pcap draft §4)
PCAP_MAGIC_NSEC = 0xA1B23C4D      #: classic pcap, nanosecond fraction (libpcap NSEC_TCPDUMP_MAGIC)
PCAP_VERSION = (2, 4)
MAX_SNAPLEN = 262144              #: libpcap MAXIMUM_SNAPLEN; records longer are refused by libpcap

BT_SHB = 0x0A0D0D0A               #: pcapng block types (pcapng draft §10.1)
BT_IDB = 0x00000001
BT_OPB = 0x00000002               #: obsolete Packet Block (appendix A), still read
BT_SPB = 0x00000003
BT_NRB = 0x00000004
BT_ISB = 0x00000005
BT_EPB = 0x00000006
BYTE_ORDER_MAGIC = 0x1A2B3C4D     #: SHB byte-order magic (§4.1)

LINKTYPE_ETHERNET = 1
LINKTYPE_ERF = 197
LINKTYPE_IPV4 = 228
LINKTYPE_IPV6 = 229
LINKTYPE_INFINIBAND = 247         #: names the bytes of an unwrapped ERF type-21 record; never a file's

ERF_TYPE_ETH = 2
ERF_TYPE_INFINIBAND = 21
ERF_TYPE_PAD = 48                 #: padding record: no packet, readers skip it
ERF_ETH_TYPES = (2, 11, 16, 20)   #: ETH, COLOR_ETH, DSM_COLOR_ETH, COLOR_HASH_ETH: 2-byte pad first
ERF_FLAG_VLEN = 0x04              #: flags bit 2: varying-length record
#: link type of the bytes that follow the ERF header (and pad) for the ERF types we unwrap
ERF_LINKTYPE = {2: LINKTYPE_ETHERNET, 11: LINKTYPE_ETHERNET, 16: LINKTYPE_ETHERNET,
                20: LINKTYPE_ETHERNET, 21: LINKTYPE_INFINIBAND, 22: LINKTYPE_IPV4,
                23: LINKTYPE_IPV6}


# --- the header tables -----------------------------------------------------------------------
@dataclass(frozen=True)
class Field:
    """One header field: ``type`` is a numpy type without byte order (``"u4"``); ``order`` sets
    the byte order (ERF mixes both) or is ``None`` to follow the file/section."""

    name: str
    type: str
    default: int | None = 0
    order: str | None = None
    doc: str = ""


@dataclass(frozen=True)
class Header:
    """A fixed-size header declared once as a table of :class:`Field` in file order."""

    name: str
    fields: tuple[Field, ...]
    source: str = ""

    @property
    def size(self) -> int:
        """Size of the header in bytes."""
        return self.dtype("<").itemsize

    def offset(self, name: str) -> int:
        """Byte offset of field ``name`` inside the header."""
        return self.dtype("<").fields[name][1]

    def dtype(self, order: str = "<") -> np.dtype:
        """Packed numpy structured dtype of the header in byte order ``order`` (``"<"``/``">"``)."""
        return _dtype(self, order)

    def struct(self, name: str, order: str = "<") -> struct.Struct:
        """A :class:`struct.Struct` reading field ``name`` alone (for scalar hot loops)."""
        f = next(f for f in self.fields if f.name == name)
        return struct.Struct((f.order or order) + np.dtype(f.type).char)

    def array(self, n: int, order: str = "<") -> np.ndarray:
        """Structured array of shape ``(n,)`` with every field set to its default."""
        a = np.zeros(n, self.dtype(order))
        for f in self.fields:
            if f.default:
                a[f.name] = f.default
        return a

    def pack(self, order: str = "<", **values: int) -> bytes:
        """Encode one header; missing fields take their defaults.

        Raises:
            EncodeError: a field is unknown, required and missing, or out of its range.
        """
        a = self.array(1, order)
        for k, v in values.items():
            if k not in a.dtype.names:
                raise EncodeError(f"{self.name}: field {k!r}: got unknown, expected one of {a.dtype.names}")
            info = np.iinfo(a.dtype[k])
            if not info.min <= int(v) <= info.max:
                raise EncodeError(f"{self.name}: {k}: got {v}, expected {info.min}..{info.max}")
            a[k] = v
        for f in self.fields:
            if f.default is None and f.name not in values:
                raise EncodeError(f"{self.name}: {f.name}: got missing, expected an integer")
        return a.tobytes()

    def unpack(self, buf, offset: int = 0, order: str = "<") -> dict[str, int]:
        """Decode one header at ``buf[offset:]`` into ``{field: int}`` (caller checks length)."""
        rec = np.frombuffer(buf, self.dtype(order), count=1, offset=offset)[0]
        return {name: int(rec[name]) for name in rec.dtype.names}


@lru_cache(maxsize=None)
def _dtype(h: Header, order: str) -> np.dtype:
    if order not in "<>":
        raise EncodeError(f"{h.name}: byte order: got {order!r}, expected '<' or '>'")
    return np.dtype([(f.name, (f.order or order) + f.type) for f in h.fields])


def _h(name: str, source: str, *fields: tuple) -> Header:
    return Header(name, tuple(Field(*f) for f in fields), source)


PCAP_FILE_HEADER = _h(
    "pcap file header", "draft-ietf-opsawg-pcap §4",
    ("magic", "u4", None, None, "0xA1B2C3D4 (us) or 0xA1B23C4D (ns), in the file's byte order"),
    ("version_major", "u2", 2), ("version_minor", "u2", 4),
    ("thiszone", "i4", 0, None, "always 0; readers ignore it"), ("sigfigs", "u4", 0),
    ("snaplen", "u4", MAX_SNAPLEN), ("linktype", "u4", LINKTYPE_ETHERNET))

PCAP_RECORD = _h(
    "pcap record header", "draft-ietf-opsawg-pcap §5",
    ("ts_sec", "u4", 0), ("ts_frac", "u4", 0, None, "us or ns after ts_sec, by the magic"),
    ("caplen", "u4", 0), ("orig_len", "u4", 0))

BLOCK = _h("pcapng block header", "draft-ietf-opsawg-pcapng §3.1",
           ("block_type", "u4", None), ("block_length", "u4", None))

TRAILER = _h("pcapng trailing block length", "draft-ietf-opsawg-pcapng §3.1",
             ("length", "u4", None))

SHB = _h("pcapng Section Header Block", "draft-ietf-opsawg-pcapng §4.1",
         ("block_type", "u4", BT_SHB), ("block_length", "u4", None),
         ("byte_order_magic", "u4", BYTE_ORDER_MAGIC), ("major", "u2", 1), ("minor", "u2", 0),
         ("section_length", "i8", -1, None, "-1: not given"))

IDB = _h("pcapng Interface Description Block", "draft-ietf-opsawg-pcapng §4.2",
         ("block_type", "u4", BT_IDB), ("block_length", "u4", None),
         ("linktype", "u2", LINKTYPE_ETHERNET), ("reserved", "u2", 0), ("snaplen", "u4", 0))

EPB = _h("pcapng Enhanced Packet Block", "draft-ietf-opsawg-pcapng §4.3",
         ("block_type", "u4", BT_EPB), ("block_length", "u4", None),
         ("interface_id", "u4", 0), ("ts_high", "u4", 0), ("ts_low", "u4", 0),
         ("caplen", "u4", 0), ("orig_len", "u4", 0))

SPB = _h("pcapng Simple Packet Block", "draft-ietf-opsawg-pcapng §4.4",
         ("block_type", "u4", BT_SPB), ("block_length", "u4", None), ("orig_len", "u4", 0))

OPB = _h("pcapng obsolete Packet Block", "draft-ietf-opsawg-pcapng appendix A",
         ("block_type", "u4", BT_OPB), ("block_length", "u4", None),
         ("interface_id", "u2", 0), ("drops_count", "u2", 0), ("ts_high", "u4", 0),
         ("ts_low", "u4", 0), ("caplen", "u4", 0), ("orig_len", "u4", 0))

OPTION = _h("pcapng option header", "draft-ietf-opsawg-pcapng §3.5",
            ("code", "u2", 0), ("length", "u2", 0))

ERF_RECORD = _h(
    "ERF record header", "Endace ERF (EDM11-01) generic header",
    ("ts", "u8", 0, "<", "little-endian 32.32 fixed point seconds"),
    ("type", "u1", ERF_TYPE_INFINIBAND, None, "bit 7: an extension header follows"),
    ("flags", "u1", ERF_FLAG_VLEN, None, "bits 0-1 interface, bit 2 vlen, bit 3 truncated"),
    ("rlen", "u2", 16, ">", "record length including this header"),
    ("lctr", "u2", 0, ">", "loss counter / color"),
    ("wlen", "u2", 0, ">", "length of the packet on the wire"))

# --- pcapng options ----------------------------------------------------------------------------
OPT_ENDOFOPT = 0
OPT_COMMENT = 1
#: code -> (name, codec) per block kind; codecs: str (UTF-8), u8/u32/u64/i64 (section byte order), bytes
_COMMON = {OPT_COMMENT: ("opt_comment", "str")}
SHB_OPTIONS = {**_COMMON, 2: ("shb_hardware", "str"), 3: ("shb_os", "str"),
               4: ("shb_userappl", "str")}
IDB_OPTIONS = {**_COMMON, 2: ("if_name", "str"), 3: ("if_description", "str"),
               6: ("if_MACaddr", "bytes"), 8: ("if_speed", "u64"), 9: ("if_tsresol", "u8"),
               12: ("if_os", "str"), 13: ("if_fcslen", "u8"), 14: ("if_tsoffset", "i64"),
               15: ("if_hardware", "str")}
EPB_OPTIONS = {**_COMMON, 2: ("epb_flags", "u32"), 4: ("epb_dropcount", "u64"),
               5: ("epb_packetid", "u64"), 6: ("epb_queue", "u32")}
_CODEC = {"u8": "B", "u32": "I", "u64": "Q", "i64": "q"}


def pad4(n):
    """``n`` rounded up to a multiple of 4 (pcapng §3.1); works on ints and int arrays."""
    return (n + 3) & ~3


def encode_options(options: list[tuple[int, object]], table: dict, order: str = "<") -> bytes:
    """Encode pcapng options ``[(code, value), ...]`` followed by ``opt_endofopt``.

    Returns ``b""`` for an empty list (a block may omit options altogether, §3.5).

    Raises:
        EncodeError: unknown code for the block, or a value too long for the 16-bit length.
    """
    if not options:
        return b""
    out = bytearray()
    for code, value in options:
        if code not in table:
            raise EncodeError(f"pcapng option: code {code}: got unknown, expected one of {sorted(table)}")
        codec = table[code][1]
        if codec == "str":
            raw = str(value).encode("utf-8")
        elif codec == "bytes":
            raw = bytes(value)
        else:
            raw = struct.pack(order + _CODEC[codec], value)
        if len(raw) > 0xFFFF:
            raise EncodeError(f"pcapng option {table[code][0]}: length got {len(raw)}, expected <= 65535")
        out += OPTION.pack(order, code=code, length=len(raw)) + raw + bytes(pad4(len(raw)) - len(raw))
    return bytes(out + OPTION.pack(order))


def decode_options(buf, start: int, end: int, table: dict, order: str = "<") -> dict[str, object]:
    """Decode the options in ``buf[start:end]`` into ``{name: value}``.

    Unknown codes are kept as ``"opt_<code>"`` with raw bytes; a repeated option keeps the first
    value. Decoding stops at ``opt_endofopt`` or ``end``. Malformed strings decode with
    replacement characters.

    Raises:
        CaptureError: an option runs past ``end``, or a numeric option has the wrong length; the
            message names its byte offset.
    """
    from tokenpcap.errors import CaptureError

    out: dict[str, object] = {}
    hdr = struct.Struct(order + "HH")
    p = start
    while p + 4 <= end:
        code, length = hdr.unpack_from(buf, p)
        if code == OPT_ENDOFOPT:
            break
        if p + 4 + length > end:
            raise CaptureError(f"pcapng option at byte offset {p}: length got {length}, "
                               f"expected <= {end - p - 4} (the rest of the block)")
        raw = bytes(buf[p + 4:p + 4 + length])
        name, codec = table.get(code, (f"opt_{code}", "bytes"))
        if codec == "str":
            value: object = raw.decode("utf-8", errors="replace")
        elif codec == "bytes":
            value = raw
        elif length != struct.calcsize(_CODEC[codec]):
            raise CaptureError(f"pcapng option {name} at byte offset {p}: length got {length}, "
                               f"expected {struct.calcsize(_CODEC[codec])}")
        else:
            value = struct.unpack(order + _CODEC[codec], raw)[0]
        out.setdefault(name, value)
        p += 4 + pad4(length)
    return out


def stacked_dtype(parts: list[tuple[str, Header]], order: str = "<") -> np.dtype:
    """One packed structured dtype of several headers back to back, field names prefixed.

    Used for a record header immediately followed by an ERF header (pcap linktype 197, pcapng
    EPB on an ERF interface), so that both are written with a single scatter.
    """
    names, formats, offsets, pos = [], [], [], 0
    for prefix, header in parts:
        dt = header.dtype(order)
        for name in dt.names:
            names.append(prefix + name)
            formats.append(dt.fields[name][0])
            offsets.append(pos + dt.fields[name][1])
        pos += dt.itemsize
    return np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": pos})
