"""The declaration machinery: a header is a table of fields in wire order, declared once.

Every header of :mod:`tokenpcap.wire.headers` is one :class:`Header` built from :class:`Field`
rows (spec name, width in bits, default, display format, tshark field name). Everything else is
derived from that table, so the pieces cannot drift apart:

* :meth:`Header.pack` (values → bytes, :class:`~tokenpcap.errors.EncodeError` when a value does
  not fit its width) and :meth:`Header.unpack` (bytes → values, :class:`~tokenpcap.errors.DecodeError`
  on short input),
* :meth:`Header.pretty` (one line per header, as a pretty-printer shows it),
* :meth:`Header.tshark_fields` (spec name → TShark field, for the decode tests),
* :meth:`Header.put` and :meth:`Header.get` (vectorized: write/read one field for many packets
  into/out of the columns of a ``uint8 (n, width)`` array; the frame builder uses these).

The declaration is checked when the module is imported: field widths must add up to whole bytes,
names must be unique, defaults must fit. Bit numbering is network order (most significant bit of
the first byte first), as in the IBTA, IETF and IEEE header drawings.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from tokenpcap.errors import DecodeError, EncodeError

__all__ = ["Field", "Header"]

_FORMATS = ("dec", "hex", "bool", "mac", "ipv4", "ipv6")
# little-endian integer container for an aligned field of n bytes (its bytes, LSB first, via a view)
_CONTAINER = {1: np.dtype("u1"), 2: np.dtype("<u2"), 3: np.dtype("<u4"), 4: np.dtype("<u4"),
              5: np.dtype("<u8"), 6: np.dtype("<u8"), 7: np.dtype("<u8"), 8: np.dtype("<u8")}


@dataclass(frozen=True)
class Field:
    """One field of a header, as the specification names and draws it.

    Attributes:
        name: the spec's name (``"DestQP"``, ``"P_Key"``, ``"TotalLength"`` ...).
        bits: width in bits (1..128).
        default: value when a packer is not given one.
        fmt: display format for :meth:`Header.pretty`: ``dec``, ``hex``, ``bool``, ``mac``,
            ``ipv4`` or ``ipv6``.
        tshark: the TShark (Wireshark 4.0) field that shows this value, or ``None``.
        little_endian: the field is written least-significant byte first (ICRC, VCRC); only for
            byte-aligned whole-byte fields.
        icrc_masked: the ICRC treats the field's bits as ones (IBTA vol.1 7.8.1; RoCEv2 Annex
            A17.4.1.3): a switch may change it in flight without invalidating the ICRC.
    """

    name: str
    bits: int
    default: int = 0
    fmt: str = "dec"
    tshark: str | None = None
    little_endian: bool = False
    icrc_masked: bool = False


@dataclass(frozen=True)
class _Slot:
    """Where a field sits: bit offset from the header start and the byte span it touches."""

    field: Field
    bit_offset: int
    first_byte: int
    nbytes: int      # bytes of the span first_byte .. last_byte
    shift: int       # bits between the field's LSB and the end of the span
    aligned: bool    # starts and ends on byte boundaries


@dataclass(frozen=True)
class Header:
    """A header declared once, in wire order.

    Args:
        name: the spec's name of the header (``"BTH"``, ``"IPv4"`` ...).
        fields: the fields in wire order.
        spec: where the layout comes from (``"IBTA vol.1 9.2"``).
        tshark: the TShark protocol/field that marks the header, or ``None``.

    Raises:
        TypeError: at import, when the widths do not add up to whole bytes, a name repeats, a
            width is out of 1..128, a default does not fit, or a little-endian field is not
            byte-aligned.
    """

    name: str
    fields: tuple[Field, ...]
    spec: str
    tshark: str | None = None
    _slots: dict[str, _Slot] = field(default_factory=dict, init=False, repr=False, compare=False)
    _size: int = field(default=0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        offset = 0
        for f in self.fields:
            if f.name in self._slots:
                raise TypeError(f"{self.name}: field {f.name!r} declared twice")
            if not 1 <= f.bits <= 128:
                raise TypeError(f"{self.name}.{f.name}: width {f.bits} bits, expected 1..128")
            if not 0 <= f.default < (1 << f.bits):
                raise TypeError(f"{self.name}.{f.name}: default {f.default} does not fit {f.bits} bits")
            if f.fmt not in _FORMATS:
                raise TypeError(f"{self.name}.{f.name}: format {f.fmt!r}, expected one of {_FORMATS}")
            first = offset // 8
            last = (offset + f.bits - 1) // 8
            aligned = offset % 8 == 0 and f.bits % 8 == 0
            if f.little_endian and not aligned:
                raise TypeError(f"{self.name}.{f.name}: little-endian fields must be byte-aligned")
            self._slots[f.name] = _Slot(f, offset, first, last - first + 1,
                                        (last + 1) * 8 - (offset + f.bits), aligned)
            offset += f.bits
        if offset % 8:
            raise TypeError(f"{self.name}: fields add up to {offset} bits, not a whole number of bytes")
        object.__setattr__(self, "_size", offset // 8)

    # ------------------------------------------------------------------ layout
    @property
    def size(self) -> int:
        """Length of the header in bytes."""
        return self._size

    @property
    def names(self) -> tuple[str, ...]:
        """Field names in wire order."""
        return tuple(f.name for f in self.fields)

    def slot(self, name: str) -> _Slot:
        """Position of field ``name``. Raises: EncodeError for a name the header does not have."""
        try:
            return self._slots[name]
        except KeyError:
            raise EncodeError(f"{self.name}: no field {name!r}, expected one of "
                              f"{', '.join(self.names)}") from None

    def byte_offset(self, name: str) -> int:
        """Offset in bytes of a byte-aligned field from the start of the header."""
        return self.slot(name).first_byte

    def defaults(self) -> dict[str, int]:
        """Every field's default value, in wire order."""
        return {f.name: f.default for f in self.fields}

    def tshark_fields(self) -> dict[str, str]:
        """Spec name → TShark field name, for the fields TShark shows."""
        return {f.name: f.tshark for f in self.fields if f.tshark}

    def bit_mask(self, names: Iterable[str]) -> np.ndarray:
        """uint8 ``(size,)``: the bits of fields ``names`` set, from their declared bit offsets."""
        bits = np.zeros(self.size * 8, np.uint8)
        for name in names:
            s = self.slot(name)
            bits[s.bit_offset:s.bit_offset + s.field.bits] = 1
        return np.packbits(bits)

    def icrc_mask(self) -> np.ndarray:
        """uint8 ``(size,)``: the bits the ICRC treats as ones (fields declared ``icrc_masked``)."""
        return self.bit_mask(f.name for f in self.fields if f.icrc_masked)

    # ------------------------------------------------------------------ scalar codec
    def pack(self, values: Mapping[str, int] | None = None, **kw: int) -> bytes:
        """Encode one header; missing fields take their default.

        Args:
            values, kw: field name → non-negative int (bool accepted).

        Returns:
            ``self.size`` bytes.

        Raises:
            EncodeError: an unknown field, a value that is not an integer, or one outside
                ``0 .. 2**bits - 1``; the message names header, field, value and range.
        """
        merged = dict(values or {})
        merged.update(kw)
        for key in merged:
            if key not in self._slots:
                raise EncodeError(f"{self.name}: no field {key!r}, expected one of {', '.join(self.names)}")
        acc = 0
        total = self.size * 8
        for f in self.fields:
            v = merged.get(f.name, f.default)
            if isinstance(v, (bool, np.bool_)):
                v = int(v)
            if not isinstance(v, (int, np.integer)):
                raise EncodeError(f"{self.name}.{f.name}: got {v!r}, expected an integer "
                                  f"0..{(1 << f.bits) - 1} ({f.bits} bits)")
            v = int(v)
            if not 0 <= v < (1 << f.bits):
                raise EncodeError(f"{self.name}.{f.name}: got {v}, expected 0..{(1 << f.bits) - 1} "
                                  f"({f.bits} bits)")
            if f.little_endian:
                v = int.from_bytes(v.to_bytes(f.bits // 8, "little"), "big")
            s = self._slots[f.name]
            acc |= v << (total - s.bit_offset - f.bits)
        return acc.to_bytes(self.size, "big")

    def unpack(self, data: bytes | bytearray | memoryview, offset: int = 0) -> dict[str, int]:
        """Decode one header starting at ``offset`` of ``data``.

        Returns:
            field name → int, in wire order.

        Raises:
            DecodeError: fewer than ``self.size`` bytes at ``offset`` (names both offsets).
        """
        end = offset + self.size
        if offset < 0 or len(data) < end:
            raise DecodeError(f"{self.name} at byte {offset}: need {self.size} bytes "
                              f"(to byte {end}), got {max(0, len(data) - offset)} (input ends at byte {len(data)})")
        acc = int.from_bytes(bytes(data[offset:end]), "big")
        total = self.size * 8
        out: dict[str, int] = {}
        for f in self.fields:
            s = self._slots[f.name]
            v = (acc >> (total - s.bit_offset - f.bits)) & ((1 << f.bits) - 1)
            if f.little_endian:
                v = int.from_bytes(v.to_bytes(f.bits // 8, "big"), "little")
            out[f.name] = v
        return out

    def pretty(self, values: Mapping[str, int]) -> str:
        """One line: ``BTH: OpCode=0x0a SE=0 ... PSN=7``, each field in its display format."""
        parts = [f"{f.name}={_fmt(f, values[f.name])}" for f in self.fields if f.name in values]
        return f"{self.name}: " + " ".join(parts)

    # ------------------------------------------------------------------ vectorized
    def template(self, values: Mapping[str, int] | None = None) -> np.ndarray:
        """:meth:`pack` as a ``uint8 (size,)`` array (the constant part a builder tiles)."""
        return np.frombuffer(self.pack(values), dtype=np.uint8).copy()

    def put(self, out: np.ndarray, col: int, name: str, values: np.ndarray | int) -> None:
        """Write field ``name`` of this header for many packets at once.

        Args:
            out: ``uint8 (n, m)``; the header starts at column ``col`` of every row.
            col: column of the header's first byte.
            name: field name.
            values: ``(n,)`` unsigned integers (fields up to 64 bits), an int, or, for
                byte-aligned fields wider than 64 bits, ``uint8 (n, bits/8)`` in network order.
                Values are not range-checked here (the hot path); the caller masks to width.
        """
        s = self.slot(name)
        f = s.field
        c0 = col + s.first_byte
        if f.bits > 64:
            out[:, c0:c0 + s.nbytes] = values
            return
        if s.aligned:   # whole bytes: one cast to a little-endian container, one strided copy
            container = _CONTAINER[s.nbytes]
            lanes = np.asarray(values).astype(container, copy=False).reshape(-1, 1).view(np.uint8)
            out[:, c0:c0 + s.nbytes] = lanes[:, :s.nbytes] if f.little_endian else lanes[:, s.nbytes - 1::-1]
            return
        v = np.asarray(values, dtype=np.uint64)
        wide = (v & np.uint64((1 << f.bits) - 1)) << np.uint64(s.shift)
        fmask = ((1 << f.bits) - 1) << s.shift
        for j in range(s.nbytes):
            sh = 8 * (s.nbytes - 1 - j)
            keep = np.uint8(~(fmask >> sh) & 0xFF)
            part = (wide >> np.uint64(sh)).astype(np.uint8) if sh else wide.astype(np.uint8)
            out[:, c0 + j] = (out[:, c0 + j] & keep) | part

    def get(self, data: np.ndarray, col: int, name: str) -> np.ndarray:
        """Read field ``name`` from ``uint8 (n, m)`` rows whose header starts at column ``col``.

        Returns:
            ``uint64 (n,)`` for fields up to 64 bits, else ``uint8 (n, bits/8)``.
        """
        s = self.slot(name)
        f = s.field
        c0 = col + s.first_byte
        cols = np.asarray(data[:, c0:c0 + s.nbytes], dtype=np.uint64)
        if f.bits > 64:
            return np.asarray(data[:, c0:c0 + s.nbytes], dtype=np.uint8)
        if f.little_endian:
            cols = cols[:, ::-1]
        acc = np.zeros(len(data), dtype=np.uint64)
        for j in range(s.nbytes):
            acc = (acc << np.uint64(8)) | cols[:, j]
        return (acc >> np.uint64(s.shift)) & np.uint64((1 << f.bits) - 1)


def _fmt(f: Field, v: int) -> str:
    if f.fmt == "hex":
        return f"0x{v:0{(f.bits + 3) // 4}x}"
    if f.fmt == "bool":
        return str(int(v))
    if f.fmt == "mac":
        return ":".join(f"{b:02x}" for b in v.to_bytes(6, "big"))
    if f.fmt == "ipv4":
        return str(ipaddress.IPv4Address(v))
    if f.fmt == "ipv6":
        return str(ipaddress.IPv6Address(v))
    return str(v)


def fields_of(headers: Iterable[Header]) -> dict[str, str]:
    """``"HEADER.Field"`` → TShark field for every mapped field of ``headers``."""
    return {f"{h.name}.{k}": v for h in headers for k, v in h.tshark_fields().items()}
