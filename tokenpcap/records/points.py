"""Capture points: where on the fabric a capture's frames are seen (``generate --point``).

======================= =====================================================================
text                    what a file holds (one row per frame, time = its first bit there)
======================= =====================================================================
``nic-tx`` (default)    the frames a NIC sends (egress of its port): one file per sending NIC
``nic-rx``              the frames a NIC receives after the fabric, at their arrival times,
                        PFC frames from its ToR among them: one file per receiving NIC
``switch:NAME:PORT``    a port mirror of the egress of port ``PORT`` of switch ``NAME``
                        (``leaf0-3``, ``spine1-0``, ``switch0``): every frame leaving that
                        port, PFC frames included, in one file
======================= =====================================================================

:func:`parse_point` reads the text; whether switch ``NAME`` and its port ``PORT`` exist is the
topology's to say (the engine refuses an unknown one). ``str(point)`` gives the text back.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tokenpcap.errors import InputError

__all__ = ["CapturePoint", "NIC_TX", "NIC_RX", "POINT_KINDS", "parse_point"]

#: The kinds of capture point.
POINT_KINDS = ("nic-tx", "nic-rx", "switch")
_SWITCH = re.compile(r"switch:([A-Za-z][A-Za-z0-9_.-]*):(\d+)")


@dataclass(frozen=True)
class CapturePoint:
    """One capture point (module docstring).

    Attributes:
        kind: ``"nic-tx"``, ``"nic-rx"`` or ``"switch"``.
        switch: the switch's name (``kind == "switch"``), else None.
        port: the port number on that switch (>= 0), else None.

    Raises:
        InputError: an unknown kind, or a switch name/port given with a NIC kind or missing
            with ``"switch"``.
    """

    kind: str = "nic-tx"
    switch: str | None = None
    port: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in POINT_KINDS:
            raise InputError(f"--point: got kind {self.kind!r}, expected one of {', '.join(POINT_KINDS)}")
        if (self.kind == "switch") != (self.switch is not None and self.port is not None):
            raise InputError(f"--point: got kind {self.kind!r} with switch {self.switch!r} port "
                             f"{self.port!r}, expected a switch name and port for 'switch' only")
        if self.port is not None and int(self.port) < 0:
            raise InputError(f"--point: got port {self.port}, expected an integer >= 0")

    @property
    def at_switch(self) -> bool:
        """A switch port mirror."""
        return self.kind == "switch"

    @property
    def receive(self) -> bool:
        """Files are keyed by the receiving NIC (``nic-rx``)."""
        return self.kind == "nic-rx"

    def __str__(self) -> str:
        return f"switch:{self.switch}:{self.port}" if self.at_switch else self.kind


#: The default point: what NICs send.
NIC_TX = CapturePoint("nic-tx")
#: What NICs receive.
NIC_RX = CapturePoint("nic-rx")


def parse_point(text: str) -> CapturePoint:
    """``"nic-tx"``, ``"nic-rx"`` or ``"switch:NAME:PORT"`` → :class:`CapturePoint`.

    Raises:
        InputError: any other text (``--point: got 'x', expected nic-tx, nic-rx or
            switch:NAME:PORT ...``).
    """
    t = str(text).strip()
    if t in ("nic-tx", "nic-rx"):
        return CapturePoint(t)
    m = _SWITCH.fullmatch(t)
    if m is None:
        raise InputError(f"--point: got {text!r}, expected nic-tx, nic-rx or switch:NAME:PORT "
                         f"(e.g. switch:leaf0-3:2)")
    return CapturePoint("switch", m.group(1), int(m.group(2)))
