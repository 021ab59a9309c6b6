"""Reading one YAML file safely: the bytes of a regular file no larger than a limit, UTF-8 text,
one document parsed with ``yaml.SafeLoader`` whose node tree is checked before it is built (no key
twice in a mapping, no alias bomb).

Profiles (:mod:`tokenpcap.config.profiles`, through :func:`load_yaml`), the corpus
(:mod:`tokenpcap.tokens`, through :func:`read_limited`) and readdress's mapping file (through
:func:`read_limited` and :func:`check_node`) are read here, so that each refuses the same files
the same way. Errors are :class:`~tokenpcap.errors.ProfileError` naming the file, or
:class:`FileRefused` for the callers that word their own.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from tokenpcap.errors import ProfileError
from tokenpcap.pcap.filekind import file_kind

__all__ = ["PROFILE_MAX_BYTES", "PROFILE_MAX_VALUES", "FileRefused", "Raw", "read_limited",
           "load_yaml", "check_node", "join_key"]


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
        raise FileRefused(file_kind(st.st_mode), f"a regular {what} file")
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
            sub = join_key(prefix, str(name))
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


def join_key(prefix: str, key: str) -> str:
    """The dotted key of ``key`` inside ``prefix`` (``"cluster"``, ``"nodes"`` → ``"cluster.nodes"``)."""
    return f"{prefix}.{key}" if prefix else key
