"""Checkers that turn YAML values into typed values or raise :class:`ProfileError`.

A private helper of :mod:`tokenpcap.config.profiles`: each checker is a callable ``(file, key, value) ->
value`` that either returns the converted value or raises
:class:`tokenpcap.errors.ProfileError` naming the file, the dotted key, the value got and the value
expected. :func:`read_mapping` applies a table of checkers to one YAML mapping and rejects unknown
and missing keys. The file itself is read by :mod:`tokenpcap.config.yamlfile`; its
:func:`~tokenpcap.config.yamlfile.load_yaml` and :class:`~tokenpcap.config.yamlfile.Raw` are
imported here for the profile loaders.
"""
from __future__ import annotations

import ipaddress
import math
import re
from pathlib import Path
from typing import Any, Callable, Mapping

from tokenpcap.config.yamlfile import Raw, join_key as _join, load_yaml
from tokenpcap.errors import ProfileError

__all__ = ["REQUIRED", "Raw", "load_yaml", "read_mapping", "mapping", "integer", "number", "string",
           "path_text", "file_name", "boolean", "enum", "optional", "ipv4", "ipv6", "mac_prefix", "priorities"]

Checker = Callable[[Path | None, str, Any], Any]

#: Sentinel for "this key has no default: it must be present".
REQUIRED = object()


def mapping(file: Path | None, key: str, value: Any) -> dict:
    """Check that ``value`` is a mapping with string keys."""
    if not isinstance(value, dict):
        raise ProfileError(file, key or "<document>", value, "a mapping (key: value)")
    for k in value:
        if not isinstance(k, str):
            raise ProfileError(file, _join(key, str(k)), k, "a string key")
    return value


def read_mapping(
    file: Path | None, prefix: str, data: Any, spec: Mapping[str, tuple[Checker, Any]]
) -> dict[str, Any]:
    """Apply ``spec`` (key -> (checker, default or REQUIRED)) to the mapping ``data``.

    Returns a dict with one entry per spec key (defaults filled in). Keys whose default is
    ``None`` and that are absent map to ``None``.

    Raises:
        ProfileError: ``data`` is not a mapping, a key is unknown, a required key is missing, or a
            checker rejects a value.
    """
    data = mapping(file, prefix, data)
    for k in sorted(data):
        if k not in spec:
            raise ProfileError(
                file, _join(prefix, k), k, f"a known key (one of: {', '.join(sorted(spec))})"
            )
    out: dict[str, Any] = {}
    for k, (check, default) in spec.items():
        if k in data:
            out[k] = check(file, _join(prefix, k), data[k])
        elif default is REQUIRED:
            raise ProfileError(file, _join(prefix, k), "missing", f"a value for required key {k!r}")
        else:
            out[k] = default
    return out


def integer(lo: int | None = None, hi: int | None = None) -> Checker:
    """An integer (not a bool) in ``[lo, hi]``."""

    def check(file: Path | None, key: str, value: Any) -> int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and (lo is None or value >= lo) and (hi is None or value <= hi):
            return int(value)
        raise ProfileError(file, key, value, _range_text("an integer", lo, hi))

    return check


def number(gt: float | None = None, le: float | None = None, ge: float | None = None) -> Checker:
    """A finite int or float ``> gt`` (or ``>= ge``) and ``<= le``; returned as float.

    ``.inf``, ``-.inf`` and ``.nan`` (YAML 1.1/1.2 float literals) are refused: no rate, time or
    fraction of a profile is infinite, and they would reach integer arithmetic later.
    """

    def check(file: Path | None, key: str, value: Any) -> float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and isinstance(value, float) and not math.isfinite(value):
            ok = False
        if ok and ((gt is not None and not value > gt) or (ge is not None and not value >= ge)
                   or (le is not None and not value <= le)):
            ok = False
        if ok:
            return float(value)
        parts = []
        if gt is not None:
            parts.append(f"> {_num(gt)}")
        if ge is not None:
            parts.append(f">= {_num(ge)}")
        if le is not None:
            parts.append(f"<= {_num(le)}")
        raise ProfileError(file, key, value, "a finite number " + " and ".join(parts))

    return check


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


def string(file: Path | None, key: str, value: Any) -> str:
    """A non-empty string."""
    if isinstance(value, str) and value.strip():
        return value
    raise ProfileError(file, key, value, "a non-empty string")


def path_text(file: Path | None, key: str, value: Any) -> str:
    """A non-empty string that can name a file: no NUL character (no operating system takes
    one in a path; Python raises ValueError for it)."""
    text = string(file, key, value)
    if "\0" in text:
        raise ProfileError(file, key, value, "a file path without NUL characters")
    return text


#: A name that becomes part of output file and directory names and of the one-line capture
#: provenance comment: no path separators, no "..", no spaces or shell metacharacters.
FILE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")


def file_name(file: Path | None, key: str, value: Any) -> str:
    """A name safe to put in a file name (:data:`FILE_NAME_RE`): 1-100 characters, letters,
    digits and ``. _ + -``, starting with a letter or digit (so never ``..`` or a hidden file)."""
    if isinstance(value, str) and FILE_NAME_RE.fullmatch(value):
        return value
    raise ProfileError(file, key, value, "a name of 1-100 letters, digits, '.', '_', '+' or '-' "
                                         "starting with a letter or digit (it names output files)")


def boolean(file: Path | None, key: str, value: Any) -> bool:
    """``true`` or ``false`` (YAML booleans, not strings or numbers)."""
    if isinstance(value, bool):
        return value
    raise ProfileError(file, key, value, "true or false")


def priorities(file: Path | None, key: str, value: Any) -> tuple[int, ...]:
    """A non-empty list of distinct IEEE 802.1p priorities 0..7, as a tuple."""
    if isinstance(value, list) and value and all(
            isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 7 for v in value) \
            and len(set(value)) == len(value):
        return tuple(int(v) for v in value)
    raise ProfileError(file, key, value, "a non-empty list of distinct priorities in [0, 7]")


def enum(*allowed: Any) -> Checker:
    """One of the listed values (compared with ``==``, type-exact for ints vs bools)."""

    def check(file: Path | None, key: str, value: Any) -> Any:
        for a in allowed:
            if type(a) is type(value) and a == value:
                return value
        raise ProfileError(file, key, value, "one of " + ", ".join(repr(a) for a in allowed))

    return check


def optional(inner: Checker) -> Checker:
    """``null`` or what ``inner`` accepts."""

    def check(file: Path | None, key: str, value: Any) -> Any:
        return None if value is None else inner(file, key, value)

    return check


def ipv4(file: Path | None, key: str, value: Any) -> str:
    """An IPv4 address in dotted-quad form."""
    try:
        return str(ipaddress.IPv4Address(value))
    except (ipaddress.AddressValueError, ValueError, TypeError):
        raise ProfileError(file, key, value, "an IPv4 address such as '198.18.0.0'") from None


def ipv6(file: Path | None, key: str, value: Any) -> str:
    """An IPv6 address."""
    try:
        return str(ipaddress.IPv6Address(value))
    except (ipaddress.AddressValueError, ValueError, TypeError):
        raise ProfileError(file, key, value, "an IPv6 address such as '2001:2::'") from None


def mac_prefix(file: Path | None, key: str, value: Any) -> str:
    """A unicast MAC prefix of 1 to 5 hex octets ``xx:xx...`` (the node and NIC fill the rest).

    The node takes the octets between the prefix and the last one, the NIC the last
    (:mod:`tokenpcap.config.addresses`), so 1 to 5 octets leave room for both. The first octet must
    have the I/G bit (0x01) clear: a unicast address (IEEE 802-2014 clause 8.2); the U/L bit
    (0x02, as in the default ``02:00:00``) marks it locally administered, which needs no OUI
    and so no particular length.
    """
    parts = value.split(":") if isinstance(value, str) else []
    if 1 <= len(parts) <= 5 and all(len(p) == 2 and _is_hex(p) for p in parts):
        if not int(parts[0], 16) & 1:
            return value.lower()
        raise ProfileError(file, key, value, "a unicast prefix: first octet even (I/G bit "
                           "clear), e.g. '02:00:00' (locally administered)")
    raise ProfileError(file, key, value, "1 to 5 hex octets separated by ':', such as '02:00:00'")


def _is_hex(text: str) -> bool:
    return bool(text) and all(c in "0123456789abcdefABCDEF" for c in text)


def _range_text(what: str, lo: int | None, hi: int | None) -> str:
    if lo is not None and hi is not None:
        return f"{what} in [{lo:,}, {hi:,}]" if hi >= 10_000 else f"{what} in [{lo}, {hi}]"
    if lo is not None:
        return f"{what} >= {lo}"
    if hi is not None:
        return f"{what} <= {hi}"
    return what
