"""What every picture of :mod:`tokenpcap.analysis` shares: matplotlib with the Agg backend (no
display needed), one palette, the unit of a time axis, and a PNG that lands whole or not at all.
"""
from __future__ import annotations

import os
from pathlib import Path

from tokenpcap.errors import OutputError
from tokenpcap.pcap.filekind import refuse_special_output
from tokenpcap.records import DIMS

__all__ = ["COLORS", "FAMILY_COLORS", "family_of", "family_color", "phase_colors", "address_key", "pyplot",
           "time_axis", "save_figure"]

#: the palette of every figure, in order of use (phases, dimensions, series)
COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3",
          "#8C8C8C", "#CCB974", "#64B5CD"]

#: The colour of each phase family (the first part of a phase label, :data:`tokenpcap.records.
#: DIMS`), of the control packets (clear-to-send writes and ACKs) and of frames without a phase:
#: one fixed table, so that ``dp`` has the same colour in every picture of every capture. The
#: colours are matplotlib's ``tab10`` (Tableau 10), one each.
FAMILY_COLORS: dict[str, str] = {
    "dp": "#1f77b4", "pp": "#ff7f0e", "tp": "#2ca02c", "ep": "#d62728", "cp": "#9467bd",
    "emb": "#8c564b", "mp": "#e377c2", "wl": "#bcbd22", "control": "#17becf",
    "(no phase)": "#7f7f7f"}


def family_of(label: str) -> str:
    """The family of a phase label as the capture pictures name it: its first part (``dp`` of
    ``dp/backward/AllReduce``), ``control`` for the control packets (a label starting
    ``control``), ``(no phase)`` for anything else (no label, a foreign comment)."""
    if label.startswith("control"):
        return "control"
    head = label.split("/", 1)[0]
    return head if head in DIMS else "(no phase)"


def family_color(label: str) -> str:
    """The colour of ``label``'s family in :data:`FAMILY_COLORS`."""
    return FAMILY_COLORS[family_of(label)]


def phase_colors(labels: list[str]) -> list[str]:
    """A colour per phase label for a stacked picture: each label in its family's colour
    (:data:`FAMILY_COLORS`), the second, third, ... label of the same family lighter (blended
    25 %, 45 %, 60 %, 70 % with white, then repeating), so that phases stay apart within a
    family and families keep their colour across pictures. Returns ``'#rrggbb'`` strings, one
    per label, in order."""
    from matplotlib.colors import to_hex, to_rgb
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        fam = family_of(label)
        k = seen.get(fam, 0)
        seen[fam] = k + 1
        mix = (0.0, 0.25, 0.45, 0.6, 0.7)[k % 5]
        out.append(to_hex(tuple(c + (1.0 - c) * mix for c in to_rgb(FAMILY_COLORS[fam]))))
    return out


def address_key(text: str) -> tuple:
    """Sort key of an address text (IPv4, IPv6, ``lid 0x..``): numeric, IPv4 before IPv6."""
    import ipaddress
    if text.startswith("lid "):
        return (0, int(text[4:], 16))
    ip = ipaddress.ip_address(text)
    return (ip.version, int(ip))


def pyplot():
    """``matplotlib.pyplot`` with the Agg backend (PNG only, no display), imported on first use
    so that the commands that draw nothing do not pay for matplotlib."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def time_axis(span_ns: int) -> tuple[str, int]:
    """``(unit, ns per unit)`` of a time axis spanning ``span_ns``: ms from 10 ms, µs from 10 µs,
    otherwise ns, so that the tick labels stay short."""
    if span_ns >= 10_000_000:
        return "ms", 1_000_000
    if span_ns >= 10_000:
        return "µs", 1_000
    return "ns", 1


def save_figure(fig, out: str | os.PathLike) -> Path:
    """Lay out ``fig``, write it as a PNG (110 dpi) to a temporary name beside ``out`` and rename
    it to ``out``; the figure is closed in every case.

    Raises:
        OutputError: ``out`` is a device, a FIFO or a socket (never replaced), or the file
            system refuses (read-only, no space, no permission); nothing is left behind.
    """
    import matplotlib.pyplot as plt

    out = Path(out)
    tmp = out.with_name(f".{out.name}.part.png")
    try:
        refuse_special_output(out)
    except OutputError:
        plt.close(fig)
        raise
    fig.tight_layout()
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, out)
    except OSError as err:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise OutputError(f"{out}: cannot write: {err.strerror or err}") from None
    finally:
        plt.close(fig)
    return out
