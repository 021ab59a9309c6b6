"""Wording shared by every message and report: counts with their noun."""
from __future__ import annotations

__all__ = ["counted"]


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` with thousands separators and ``noun`` in the number it takes: ``counted(1,
    "sequence")`` → ``"1 sequence"``, ``counted(1726, "token")`` → ``"1,726 tokens"``,
    ``counted(2, "NIC pair")`` → ``"2 NIC pairs"``. ``plural`` overrides the default ``noun + "s"``
    (``counted(3, "late/duplicate", "late/duplicate")``)."""
    return f"{n:,} {noun if n == 1 else (plural if plural is not None else noun + 's')}"
