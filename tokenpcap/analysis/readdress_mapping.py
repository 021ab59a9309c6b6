"""What :func:`tokenpcap.analysis.readdress.readdress` changes: the :class:`Mapping` of old to new
addresses (MAC, IPv4, IPv6) and of the marking (802.1Q VID/PCP, DSCP/ECN, TTL, UDP source
ports), read from a YAML file (:func:`load_mapping`, checked like a profile: size, duplicate keys,
aliases) or from ``OLD=NEW`` pairs and options on the command line (:func:`parse_pair`,
:func:`set_option`). Two NICs never become one: an address mapped twice, or two addresses mapped
to one, is an :class:`~tokenpcap.errors.InputError`.
"""
from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field
from pathlib import Path

from tokenpcap.errors import InputError

__all__ = ["Mapping", "load_mapping", "set_option", "parse_pair", "retarget_text",
           "mapped_address_text"]


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

        def text(a: int) -> str:
            return mapped_address_text(kind, a)

        if table.get(old, new) != new:
            raise InputError(f"{where}: {text(old)}: got two new addresses "
                             f"({text(table[old])} and {text(new)}), expected one")
        other = next((k for k, v in table.items() if v == new and k != old), None)
        if other is not None:
            raise InputError(f"{where}: {text(new)}: got it as the new address of both "
                             f"{text(other)} and {text(old)}, expected one old "
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


def mapped_address_text(kind: str, value: int) -> str:
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
            words[i] = mapped_address_text(kind, new)
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

    from tokenpcap.config.yamlfile import (PROFILE_MAX_BYTES, FileRefused, check_node,
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
