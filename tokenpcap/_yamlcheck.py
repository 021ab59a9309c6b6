"""Checkers that turn YAML values into typed values or raise :class:`ProfileError`.

A private helper of :mod:`tokenpcap.profiles`: each checker is a callable ``(file, key, value) ->
value`` that either returns the converted value or raises
:class:`tokenpcap.errors.ProfileError` naming the file, the dotted key, the value got and the value
expected. :func:`read_mapping` applies a table of checkers to one YAML mapping and rejects unknown
and missing keys.
"""
from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from tokenpcap.errors import ProfileError

Checker = Callable[[Path | None, str, Any], Any]

#: Sentinel for "this key has no default: it must be present".
REQUIRED = object()


def load_yaml(path: Path) -> Any:
    """Read one YAML document with ``yaml.safe_load``.

    Raises:
        ProfileError: the file is missing, unreadable, not UTF-8 or not valid YAML.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ProfileError(path, "<file>", "missing", "an existing YAML file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ProfileError(path, "<file>", type(err).__name__, "a readable UTF-8 YAML file") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else "the document"
        raise ProfileError(path, "<file>", f"invalid YAML at {where}", "valid YAML") from None


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


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def integer(lo: int | None = None, hi: int | None = None) -> Checker:
    """An integer (not a bool) in ``[lo, hi]``."""

    def check(file: Path | None, key: str, value: Any) -> int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        if ok and (lo is None or value >= lo) and (hi is None or value <= hi):
            return int(value)
        raise ProfileError(file, key, value, _range_text("an integer", lo, hi))

    return check


def number(gt: float | None = None, le: float | None = None) -> Checker:
    """An int or float strictly greater than ``gt`` and at most ``le``; returned as float."""

    def check(file: Path | None, key: str, value: Any) -> float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok and value == value and (gt is None or value > gt) and (le is None or value <= le):
            return float(value)
        parts = []
        if gt is not None:
            parts.append(f"> {gt:g}")
        if le is not None:
            parts.append(f"<= {le:g}")
        raise ProfileError(file, key, value, "a number " + " and ".join(parts))

    return check


def string(file: Path | None, key: str, value: Any) -> str:
    """A non-empty string."""
    if isinstance(value, str) and value.strip():
        return value
    raise ProfileError(file, key, value, "a non-empty string")


def boolean(file: Path | None, key: str, value: Any) -> bool:
    """``true`` or ``false`` (YAML booleans, not strings or numbers)."""
    if isinstance(value, bool):
        return value
    raise ProfileError(file, key, value, "true or false")


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
    """Three octets ``xx:xx:xx`` in hex (the node and NIC fill the other three)."""
    parts = value.split(":") if isinstance(value, str) else []
    if len(parts) == 3 and all(len(p) == 2 and _is_hex(p) for p in parts):
        return value.lower()
    raise ProfileError(file, key, value, "three hex octets such as '02:00:00'")


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True


def _range_text(what: str, lo: int | None, hi: int | None) -> str:
    if lo is not None and hi is not None:
        return f"{what} in [{lo}, {hi}]"
    if lo is not None:
        return f"{what} >= {lo}"
    if hi is not None:
        return f"{what} <= {hi}"
    return what
