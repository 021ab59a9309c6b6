"""A small protobuf encoder for the Chakra execution-trace messages (no dependency).

Chakra's schema (mlcommons/chakra ``schema/protobuf/et_def.proto``, proto3, package
``ChakraProtoMsg``) is encoded here by hand with the protobuf wire format
(protobuf.dev "Encoding": a field is a key ``field_number << 3 | wire_type`` as a varint, then
a varint (wire type 0) or a varint length and that many bytes (wire type 2); proto3 leaves a
scalar at its default value out and packs repeated scalars into one length-delimited field).
The fields written, with their numbers in ``et_def.proto``:

* ``GlobalMetadata``: ``version`` 1 (string), ``attr`` 2 (repeated AttributeProto);
* ``Node``: ``id`` 1 (uint64), ``name`` 2 (string), ``type`` 3 (NodeType), ``ctrl_deps`` 4 and
  ``data_deps`` 5 (repeated uint64, packed), ``duration_micros`` 7 (uint64), ``attr`` 10;
* ``AttributeProto``: ``name`` 1 and one value of the ``value`` oneof: ``int32_val`` 7,
  ``int64_val`` 9, ``uint64_val`` 13, ``bool_val`` 27, ``string_val`` 29. A oneof member is
  written even at its default value (proto3 keeps a set oneof's presence).

An ET file is these messages one after another, each preceded by its length as a varint
(Chakra ``src/third_party/utils/protolib.py`` ``encodeMessage``: ``_VarintBytes(len)`` then the
message): first one ``GlobalMetadata``, then the ``Node`` s. :func:`read_frames` splits such a
stream back (the tests decode the frames with the ``protobuf`` package as the oracle).
"""
from __future__ import annotations

from typing import Iterable, Iterator

__all__ = ["NODE_TYPES", "COMM_TYPES", "varint", "frame", "attr", "node", "global_metadata",
           "read_frames"]

#: ``NodeType`` of ``et_def.proto``.
NODE_TYPES = {"METADATA_NODE": 1, "MEM_LOAD_NODE": 2, "MEM_STORE_NODE": 3, "COMP_NODE": 4,
              "COMM_SEND_NODE": 5, "COMM_RECV_NODE": 6, "COMM_COLL_NODE": 7}
#: ``CollectiveCommType`` of ``et_def.proto``.
COMM_TYPES = {"ALL_REDUCE": 0, "REDUCE": 1, "ALL_GATHER": 2, "GATHER": 3, "SCATTER": 4,
              "BROADCAST": 5, "ALL_TO_ALL": 6, "REDUCE_SCATTER": 7, "REDUCE_SCATTER_BLOCK": 8,
              "BARRIER": 9}
#: AttributeProto value kind -> (field number, wire type 0 varint / 2 bytes).
_ATTR_FIELDS = {"int32": 7, "int64": 9, "uint64": 13, "bool": 27, "string": 29}
_MASK64 = (1 << 64) - 1


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL = tuple(_varint(i) for i in range(1 << 14))      # the one- and two-byte varints


def varint(n: int) -> bytes:
    """Base-128 varint of ``n`` (a negative int32/int64 as its 64-bit two's complement, ten
    bytes, as protobuf writes it). Raises ValueError: ``n`` outside the int64/uint64 range."""
    if 0 <= n < 16384:
        return _SMALL[n]
    if not -(1 << 63) <= n <= _MASK64:
        raise ValueError(f"varint: {n} outside the 64-bit range")
    return _varint(n & _MASK64)


def _key(field: int, wire: int) -> bytes:
    return _SMALL[field << 3 | wire]


def _bytes(field: int, payload: bytes) -> bytes:
    return _key(field, 2) + varint(len(payload)) + payload


def _uint(field: int, n: int) -> bytes:
    return _key(field, 0) + varint(n) if n else b""


def _str(field: int, s: str) -> bytes:
    return _bytes(field, s.encode("utf-8")) if s else b""


def frame(message: bytes) -> bytes:
    """``message`` preceded by its length as a varint (one record of an ET file)."""
    return varint(len(message)) + message


def attr(name: str, kind: str, value: int | bool | str) -> bytes:
    """An encoded ``AttributeProto`` ``name`` with ``value`` in the oneof member of ``kind``
    (``int32``, ``int64``, ``uint64``, ``bool``, ``string``). Raises KeyError: another kind."""
    f = _ATTR_FIELDS[kind]
    body = _str(1, name)
    if kind == "string":
        return body + _bytes(f, str(value).encode("utf-8"))
    return body + _key(f, 0) + varint(int(value))


def node(node_id: int, name: str, node_type: str, *, data_deps: Iterable[int] = (),
         ctrl_deps: Iterable[int] = (), duration_micros: int = 0,
         attrs: Iterable[bytes] = ()) -> bytes:
    """An encoded ``Node`` (``node_type`` a key of :data:`NODE_TYPES`; ``attrs`` from
    :func:`attr`)."""
    out = _uint(1, node_id) + _str(2, name) + _uint(3, NODE_TYPES[node_type])
    for field, deps in ((4, ctrl_deps), (5, data_deps)):
        packed = b"".join(varint(d) for d in deps)
        if packed:
            out += _bytes(field, packed)
    out += _uint(7, duration_micros)
    return out + b"".join(_bytes(10, a) for a in attrs)


def global_metadata(version: str, attrs: Iterable[bytes] = ()) -> bytes:
    """An encoded ``GlobalMetadata``."""
    return _str(1, version) + b"".join(_bytes(2, a) for a in attrs)


def read_frames(data: bytes) -> Iterator[bytes]:
    """The messages of a varint-length-delimited stream, in order.

    Raises:
        ValueError: a truncated length or message.
    """
    i, n = 0, len(data)
    while i < n:
        length = shift = 0
        while True:
            if i >= n or shift > 63:
                raise ValueError(f"truncated varint length at byte {i}")
            b = data[i]
            i += 1
            length |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
        if i + length > n:
            raise ValueError(f"message of {length} bytes at byte {i} runs past the end ({n})")
        yield data[i:i + length]
        i += length
