"""NICs picked by what they carry (``generate --nics busiest[:K]``, ``--nics carrying:FAMILY``).

Both picks read the bytes of :func:`tokenpcap.plan.nics.nic_phase_table` (what ``plan --nics``
reports; nothing is counted again here):

* ``busiest[:K]``: the ``K`` NICs (default 1) with the most bytes sent over all phases, ties
  broken by the lowest NIC index. The table holds one iteration; every iteration of a run is the
  same plan, so the order over the whole job is the order of one iteration.
* ``carrying:FAMILY``: every NIC that sends a byte of a phase of that family, the first part of
  a phase label (``dp`` of ``dp/backward/AllReduce``; the families are
  :data:`tokenpcap.records.DIMS`, those a scenario sends on the NICs are the first parts of
  ``plan --nics``' columns).

Text that names no pick (``0-3,8``) is left to :func:`tokenpcap.generate.select.parse_index_set`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tokenpcap.errors import InputError
from tokenpcap.plan.nics import NicPhaseTable, index_ranges
from tokenpcap.records import DIMS

__all__ = ["NICS_WANT", "NicPick", "PICKS", "is_pick", "pick_nics"]

#: what ``--nics`` reads, for the messages of a bad selection
NICS_WANT = "busiest, busiest:K, carrying:FAMILY or indices like '0-3,8'"


@dataclass(frozen=True)
class NicPick:
    """``nics``: the NICs picked (global indices); ``text``: the selection as typed;
    ``why``: one line saying what they were picked by (for stderr)."""

    nics: frozenset[int]
    text: str
    why: str


def _busiest(arg: str | None, text: str, table: NicPhaseTable) -> NicPick:
    n = table.bytes.shape[0]
    if arg is None:
        k = 1
    elif re.fullmatch(r"\s*\d+\s*", arg) and 1 <= int(arg) <= n:
        k = int(arg)
    else:
        raise InputError(f"--nics: got {text!r}, expected busiest:K with K in 1..{n}")
    totals = table.bytes.sum(axis=1)
    order = np.lexsort((np.arange(n), -totals))       # most bytes first, then lowest index
    chosen = sorted(order[:k].tolist())
    hi, lo = int(totals[order[0]]), int(totals[order[k - 1]])
    each = f"{hi:,} B" if hi == lo else f"{hi:,} to {lo:,} B"
    return NicPick(frozenset(chosen), text,
                   f"--nics {text}: NICs {index_ranges(chosen)} (the {k} sending the most bytes "
                   f"per iteration, {each} each)")


def _carrying(arg: str | None, text: str, table: NicPhaseTable) -> NicPick:
    fams = [lab.split("/", 1)[0] for lab in table.phases]
    sent = ", ".join(dict.fromkeys(fams)) or "none"
    if arg is None or arg.strip() not in DIMS:
        raise InputError(f"--nics: got {text!r}, expected carrying:FAMILY with FAMILY one of "
                         f"{', '.join(DIMS)} (this scenario's NICs send {sent})")
    fam = arg.strip()
    cols = [j for j, f in enumerate(fams) if f == fam]
    chosen = np.flatnonzero(table.bytes[:, cols].sum(axis=1) > 0).tolist() if cols else []
    if not chosen:
        raise InputError(f"--nics: got {text!r}, expected a family some NIC sends bytes of: "
                         f"{sent} (no NIC sends {fam} bytes here)")
    return NicPick(frozenset(chosen), text,
                   f"--nics {text}: NICs {index_ranges(chosen)} ({len(chosen)} sending "
                   f"{fam} bytes: {', '.join(table.phases[j] for j in cols)})")


#: The picks by name: ``(argument after ':' or None, the text, the table) -> NicPick``.
PICKS: dict[str, Callable[[str | None, str, NicPhaseTable], NicPick]] = {
    "busiest": _busiest,
    "carrying": _carrying,
}


def is_pick(text: str) -> bool:
    """Whether ``text`` names a pick of :data:`PICKS` (``busiest``, ``carrying:dp`` ...) rather
    than NIC indices."""
    return text.split(":", 1)[0].strip() in PICKS


def pick_nics(text: str, table: NicPhaseTable) -> NicPick:
    """The NICs ``text`` (``busiest``, ``busiest:K``, ``carrying:FAMILY``) picks from ``table``.

    Raises:
        InputError: not a pick of :data:`PICKS`; ``K`` not an integer in 1..NICs; ``FAMILY``
            not one of :data:`tokenpcap.records.DIMS`, or a family no NIC sends bytes of
            (an empty selection would write nothing). The message starts ``--nics: got X,``.
    """
    name, sep, arg = text.partition(":")
    name = name.strip()
    if name not in PICKS:
        raise InputError(f"--nics: got {text!r}, expected {NICS_WANT}")
    return PICKS[name](arg if sep else None, text, table)
