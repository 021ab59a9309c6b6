"""Checkers that turn YAML values into typed values or raise :class:`ProfileError`.

A private helper of :mod:`tokenpcap.config.profiles`: each checker is a callable ``(file, key, value) ->
value`` that either returns the converted value or raises
:class:`tokenpcap.errors.ProfileError` naming the file, the dotted key, the value got and the value
expected. :func:`read_mapping` applies a table of checkers to one YAML mapping and rejects unknown
and missing keys.
"""
from __future__ import annotations

import ipaddress
import math
import os
import re
import stat
from pathlib import Path
from typing import Any, Callable, Mapping

import yaml

from tokenpcap.errors import ProfileError

Checker = Callable[[Path | None, str, Any], Any]

#: Sentinel for "this key has no default: it must be present".
REQUIRED = object()


#: Largest profile file read (bytes). Profiles are a few KB; a bigger file is a mistake (a
#: capture or a corpus given as a profile), refused before it is read or parsed.
PROFILE_MAX_BYTES = 1 << 20
#: Largest number of values a profile may hold once its aliases are expanded (every scalar,
#: sequence and mapping counted as often as it is reached). The shipped profiles hold a few
#: hundred; YAML aliases can make a file of a few hundred bytes stand for billions of values
#: (the "billion laughs" of XML entities), which every later step (checks, messages) would walk.
PROFILE_MAX_VALUES = 100_000


def read_limited(path: Path, limit: int, what: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, read with that limit.

    Devices, FIFOs, sockets and directories are refused from their ``stat`` without reading; a
    regular file larger than ``limit`` is refused from its size; the read itself stops at
    ``limit + 1`` bytes (a file that grows meanwhile is refused too).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        OSError: it cannot be opened or read.
        FileRefused: not a regular file, or larger than ``limit`` (``got``/``expected`` texts).
    """
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise FileRefused(_file_kind(st.st_mode), f"a regular {what} file")
    size_text = f"a {what} file of at most {limit:,} bytes"
    if st.st_size > limit:
        raise FileRefused(f"a file of {st.st_size:,} bytes", size_text)
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FileRefused(f"a file of more than {limit:,} bytes", size_text)
    return data


class FileRefused(ValueError):
    """A file refused by :func:`read_limited` before it was read whole: ``got`` (what the file is)
    and ``expected`` (what was wanted), texts for an error message."""

    def __init__(self, got: str, expected: str):
        super().__init__(f"got {got}, expected {expected}")
        self.got, self.expected = got, expected


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def load_yaml(path: Path) -> Any:
    """Read one YAML document: at most :data:`PROFILE_MAX_BYTES`, UTF-8 text, no duplicate keys.

    The file is checked before it is parsed: a regular file (not a device or FIFO) no larger than
    the limit, without NUL bytes (a binary file such as a capture is refused at once), valid
    UTF-8. It is parsed with ``yaml.SafeLoader`` and the node tree is checked for a key that
    appears twice in one mapping (YAML 1.2 sec. 3.2.1.1 requires keys to be unique; PyYAML's
    ``safe_load`` silently keeps the last one) before it is constructed.

    Raises:
        ProfileError: the file is missing, unreadable, not a regular file, too large, binary, not
            UTF-8, not valid YAML (line, column and the parser's reason), or holds a duplicate
            key (the dotted key and both line numbers).
    """
    try:
        data = read_limited(Path(path), PROFILE_MAX_BYTES, "YAML profile")
    except FileNotFoundError:
        raise ProfileError(path, "<file>", "missing", "an existing YAML file") from None
    except FileRefused as err:
        raise ProfileError(path, "<file>", Raw(err.got), err.expected) from None
    except ValueError:          # a path the OS cannot take (a NUL character)
        raise ProfileError(path, "<file>", Raw("a path with a NUL character"),
                           "a file path without NUL characters") from None
    except OSError as err:
        raise ProfileError(path, "<file>", Raw(f"an unreadable file ({err.strerror})"),
                           "a readable YAML file") from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise ProfileError(path, "<file>", Raw(f"a binary file (NUL byte at offset {nul})"),
                           "a YAML text file") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ProfileError(path, "<file>", Raw(f"byte 0x{data[err.start]:02x} at offset "
                                               f"{err.start} that is not UTF-8"),
                           "a UTF-8 YAML file") from None
    loader = None
    try:
        loader = yaml.SafeLoader(text)      # reads the stream: may raise ReaderError already
        node = loader.get_single_node()
        if node is None:
            return None
        check_node(path, node)
        return loader.construct_document(node)
    except yaml.reader.ReaderError as err:   # a control character YAML does not allow
        raise ProfileError(path, "<file>", Raw(f"character #x{err.character:04x} at offset "
                                               f"{err.position}"),
                           "YAML text (no control characters but tab and line breaks)") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = (f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None
                 else "the document")
        why = " ".join(str(getattr(err, "problem", None) or type(err).__name__).split())
        raise ProfileError(path, "<file>", Raw(f"invalid YAML at {where} ({why})"),
                           "valid YAML") from None
    except RecursionError:
        raise ProfileError(path, "<file>", "YAML nested too deeply", "a profile mapping") from None
    finally:
        if loader is not None:
            loader.dispose()


class Raw(str):
    """A description for :class:`ProfileError`'s ``got`` that is printed as it is (not quoted)."""

    def __repr__(self) -> str:
        return str(self)


def check_node(path: Path, root: yaml.Node) -> None:
    """The checks of a composed YAML document before it is constructed: at most
    :data:`PROFILE_MAX_VALUES` values with aliases expanded, no key twice in one mapping.

    Raises:
        ProfileError: naming ``path``, and the dotted key and both lines of a duplicate.
    """
    _check_expanded_size(path, root)
    _check_unique_keys(path, root, "", set())


def _check_expanded_size(path: Path, root: yaml.Node) -> None:
    """Raise :class:`ProfileError` when the document stands for more than
    :data:`PROFILE_MAX_VALUES` values with its aliases expanded. Each node is sized once (an
    alias is the same node object in PyYAML's tree, so the work is linear in the file); a node
    that contains itself (``&a [*a]``) counts as too large."""
    size: dict[int, int] = {}
    busy: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in size:
            continue
        kids = ([c for kv in node.value for c in kv] if isinstance(node, yaml.MappingNode)
                else list(node.value) if isinstance(node, yaml.SequenceNode) else [])
        if not done:
            if key in busy:                 # reached again below itself: a recursive alias
                size[key] = PROFILE_MAX_VALUES + 1
                continue
            busy.add(key)
            stack.append((node, True))
            stack.extend((c, False) for c in kids if id(c) not in size)
            continue
        busy.discard(key)
        size[key] = min(PROFILE_MAX_VALUES + 1, 1 + sum(size.get(id(c), 0) for c in kids))
    if size[id(root)] > PROFILE_MAX_VALUES:
        raise ProfileError(path, "<file>", Raw(f"more than {PROFILE_MAX_VALUES:,} values with "
                                               "its aliases expanded"),
                           "a profile of at most that many values (aliases count each time "
                           "they are used)")


def _check_unique_keys(path: Path, node: yaml.Node, prefix: str, visited: set[int]) -> None:
    """Raise :class:`ProfileError` for the first key found twice in one mapping of ``node``.
    Each node is checked once (``visited``: ids of nodes done; an alias reaches the same node)."""
    if id(node) in visited:
        return
    visited.add(id(node))
    if isinstance(node, yaml.MappingNode):
        seen: dict[tuple[str, str], int] = {}
        for k, v in node.value:
            name = k.value if isinstance(k, yaml.ScalarNode) else "?"
            sub = _join(prefix, str(name))
            if isinstance(k, yaml.ScalarNode) and k.tag != "tag:yaml.org,2002:merge":
                ident = (k.tag, k.value)
                line = k.start_mark.line + 1
                if ident in seen:
                    raise ProfileError(path, sub, Raw(
                        f"the key twice, at line {seen[ident]} and at line {line}"),
                        "each key once per mapping") from None
                seen[ident] = line
            _check_unique_keys(path, v, sub, visited)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            _check_unique_keys(path, v, f"{prefix}[{i}]", visited)


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
