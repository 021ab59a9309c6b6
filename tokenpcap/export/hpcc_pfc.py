"""The HPCC simulator's ``pfc.txt`` (``PFC_OUTPUT_FILE``) read back.

``third.cc`` connects every QbbNetDevice's ``QbbPfc`` trace source to ``get_pfc``, which writes
one line ``time_ns node node_type if_index type`` (``"%lu %u %u %u %u\\n"``) each time a device
*receives* a PFC frame, so the line names the device that is paused or resumed (the upstream
side of the congested port), not the one that sent the frame:

* ``time_ns``: ``Simulator::Now().GetTimeStep()``, integer ns.
* ``node``: the receiving device's node id (``GetNode()->GetId()``): hosts and switches as
  numbered in the topology file.
* ``node_type``: ``GetNodeType()``, 0 host (NIC), 1 switch.
* ``if_index``: the device's ``GetIfIndex()`` on its node: 1.. in the order of the topology
  file's links touching the node (0 is the loopback).
* ``type``: 1 pause (XOFF: a frame with ``PauseHeader`` time > 0), 0 resume (XON: time 0); from
  ``QbbNetDevice::Receive`` (src/point-to-point/model/qbb-net-device.cc), whose trace source says
  "0: resume, 1: pause". (``QbbNetDevice::SendPfc`` numbers the other way round: its ``type`` 0
  sends a pause, 1 a resume.) A pause only sets ``m_paused[qIndex]``; nothing ends it but a
  resume, so the device stays paused until the next type-0 line for it.

The priority (``qIndex``) is not written. The file is in time order (the simulator's events).
A file named ``*.gz`` is read through gzip (the fixtures in tests/cases/hpcc/ keep large ones so).
"""
from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np

from tokenpcap.errors import InputError

__all__ = ["PFC_DTYPE", "PFC_RESUME", "PFC_PAUSE", "read_pfc", "pause_counts"]

#: ``type`` of a resume (XON) line and of a pause (XOFF) line (qbb-net-device.cc, ``Receive``).
PFC_RESUME = 0
PFC_PAUSE = 1
#: One row per line of pfc.txt: ``line`` its 1-based line number, then the file's five columns
#: (module docstring); ``type`` is :data:`PFC_PAUSE` or :data:`PFC_RESUME`.
PFC_DTYPE = np.dtype([("line", "<i8"), ("time_ns", "<i8"), ("node", "<i8"), ("node_type", "<i8"),
                      ("if_index", "<i8"), ("type", "<i8")])
_FIELDS = ("time_ns", "node", "node_type", "if_index", "type")
_ALLOWED = {"node_type": (0, 1), "type": (PFC_RESUME, PFC_PAUSE)}


def _text(path: Path) -> str:
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                return f.read().decode("ascii")
        return path.read_text(encoding="ascii")
    except FileNotFoundError:
        raise InputError(f"{path}: got no such file, expected the simulator's PFC_OUTPUT_FILE") \
            from None
    except (OSError, EOFError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: cannot read: {getattr(err, 'strerror', None) or err}") from None


def read_pfc(path: str | os.PathLike) -> np.ndarray:
    """Read ``pfc.txt`` (or ``pfc.txt.gz``): ``PFC_DTYPE (n,)`` in file order; blank lines are
    skipped (an empty file, a run without PFC, gives ``(0,)``).

    Raises:
        InputError: the file cannot be read, or a line has not 5 fields, a number that is not an
            integer from 0 to 10^18 - 1, a ``node_type`` other than 0/1 or a ``type`` other than
            0/1 (one line: file, line, column, value and what was expected).
    """
    path = Path(path)
    rows = []
    for n, line in enumerate(_text(path).splitlines(), 1):
        tok = line.split()
        if not tok:
            continue
        if len(tok) != len(_FIELDS):
            raise InputError(f"{path}: line {n}: got {len(tok)} fields, expected 5 ("
                             f"{' '.join(_FIELDS)})")
        vals = [n]
        for name, t in zip(_FIELDS, tok):
            if not (t.isascii() and t.isdigit()) or len(t) > 18:
                raise InputError(f"{path}: line {n}: {name}: got {t!r}, expected an integer "
                                 f"from 0 to 10^18 - 1")
            v = int(t)
            ok = _ALLOWED.get(name)
            if ok is not None and v not in ok:
                what = "0 (host) or 1 (switch)" if name == "node_type" else \
                    "0 (resume) or 1 (pause)"
                raise InputError(f"{path}: line {n}: {name}: got {v}, expected {what}")
            vals.append(v)
        rows.append(tuple(vals))
    return np.array(rows, PFC_DTYPE) if rows else np.empty(0, PFC_DTYPE)


def pause_counts(pfc: np.ndarray) -> dict[tuple[int, int], tuple[int, int, int]]:
    """Per paused device ``(node, if_index)``: ``(pauses, resumes, paused_ns)``.

    ``paused_ns`` adds up, for each pause, the time to the next resume of the same device (a
    pause lasts until its resume: module docstring); a pause that repeats while the device is
    already paused starts nothing new, and one never resumed counts up to the file's last line.

    Args:
        pfc: ``PFC_DTYPE (n,)`` in time order (:func:`read_pfc`).
    """
    out: dict[tuple[int, int], list[int]] = {}
    since: dict[tuple[int, int], int] = {}
    for t, node, dev, kind in zip(pfc["time_ns"].tolist(), pfc["node"].tolist(),
                                  pfc["if_index"].tolist(), pfc["type"].tolist()):
        key = (node, dev)
        c = out.setdefault(key, [0, 0, 0])
        if kind == PFC_PAUSE:
            c[0] += 1
            since.setdefault(key, t)
        else:
            c[1] += 1
            if key in since:
                c[2] += t - since.pop(key)
    end = int(pfc["time_ns"][-1]) if pfc.size else 0
    for key, t in since.items():
        out[key][2] += end - t
    return {k: (a, b, c) for k, (a, b, c) in out.items()}
