"""The congestion control of a queued fabric's profile against what ``export --to hpcc`` writes
into HPCC ns-3's config, one warning line per difference.

The config's congestion control is ``CC_MODE`` (``--hpcc-cc``, :data:`tokenpcap.export.hpcc.
CC_MODES`) with run.py's parameters at the NIC rate (``KMIN_MAP``/``KMAX_MAP``/``PMAX_MAP``,
``RATE_AI``, ``RATE_HAI``, ``MIN_RATE``, ``RP_TIMER``, ``EWMA_GAIN``, ...: the simulator's own
values, not the profile's). What those values mean in the profile's terms is written once, as
the ``hpcc-ns3`` preset (:data:`tokenpcap.config.fabric_presets.PRESETS`: its ``ecn``,
``dcqcn`` and ``np`` sections, resolved at the cluster's rate): every key of a profile that runs
DCQCN whose value differs from the preset's is a setting the simulator does not run, and is
named with the value it runs instead. A profile whose ``fabric.cc`` is not the mode written is
named too: the two simulators would run different congestion controls.

Without ``--hpcc-cc`` the mode is the queued fabric's own ``fabric.cc`` (``none``: ``CC_MODE 0``,
PFC only; ``dcqcn``: ``CC_MODE 1``), and HPCC (``CC_MODE 3``) for an ideal fabric, which has no
congestion control of its own to follow.
"""
from __future__ import annotations

from tokenpcap.config.fabric_presets import PRESETS, FabricContext

__all__ = ["default_cc", "cc_gaps"]

#: The preset whose ecn/dcqcn/np sections are what ``CC_MODE 1`` with run.py's values runs.
NS3_PRESET = "hpcc-ns3"


def default_cc(cluster) -> str:  # type: ignore[no-untyped-def]
    """``--hpcc-cc`` when not given (module docstring): ``fabric.cc`` of a queued fabric, else
    ``"hpcc"``."""
    fabric = cluster.fabric
    return fabric.cc if fabric.queued else "hpcc"


def _context(cluster) -> FabricContext:  # type: ignore[no-untyped-def]
    return FabricContext(nodes=cluster.nodes, nics_per_node=cluster.nics_per_node,
                         link_gbps=cluster.link_gbps, latency_ns=cluster.network.latency_ns,
                         pcp=cluster.network.pcp)


def _shown(v) -> str:  # type: ignore[no-untyped-def]
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (tuple, list)):
        return str(list(v))
    if isinstance(v, float):
        return f"{v:g}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def cc_gaps(cluster, cc: str) -> list[str]:  # type: ignore[no-untyped-def]
    """What of ``cluster``'s fabric congestion control the simulator's config with ``CC_MODE``
    ``cc`` does not run, one line each (``fabric.<key>: got <value>, HPCC ns-3 <does>``);
    ``[]`` for an ideal fabric, or a queued one whose ``cc`` and settings the config expresses.
    """
    fabric = cluster.fabric
    if not fabric.queued:
        return []
    out: list[str] = []
    if fabric.cc != cc:
        out.append(f"fabric.cc: got {fabric.cc}, HPCC ns-3 runs --hpcc-cc {cc} (our engine runs "
                   f"{'PFC only' if fabric.cc == 'none' else fabric.cc}: the two simulators run "
                   "different congestion controls)")
    if cc != "dcqcn" or fabric.cc != "dcqcn":
        return out
    if not fabric.ecn.enabled:
        out.append("fabric.ecn.enabled: got false, HPCC ns-3 marks ECN (ENABLE_QCN 1)")
    ctx = _context(cluster)
    for section in ("ecn", "dcqcn", "np"):
        ours = getattr(fabric, section)
        for key, value in PRESETS[NS3_PRESET][section].items():
            want = value(ctx) if callable(value) else value
            got = getattr(ours, key)
            if isinstance(got, tuple):
                want = tuple(want)
            if got != want:
                out.append(f"fabric.{section}.{key}: got {_shown(got)}, HPCC ns-3 runs "
                           f"{_shown(want)} (the {NS3_PRESET} preset's value at "
                           f"{_shown(cluster.link_gbps)} Gb/s)")
    return out
