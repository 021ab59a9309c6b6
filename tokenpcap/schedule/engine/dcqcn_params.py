"""The parameter vector of :mod:`tokenpcap.schedule.engine.dcqcn`, from NVIDIA-named settings.

:func:`dcqcn_params` reads an object (``fabric.dcqcn``'s config dataclass) or a mapping with
NVIDIA's parameter names (mlx5 sysfs / mlxconfig, NVIDIA DOCA "DCQCN CC Parameters"), units as
NVIDIA gives them: ``rpg_time_reset``, ``dce_tcp_rtt``, ``rate_reduce_monitor_period`` us;
``rpg_ai_rate``, ``rpg_hai_rate``, ``rpg_min_rate``, ``rate_to_set_on_first_cnp`` Mb/s;
``rpg_byte_reset`` in units of ``RPG_BYTE_RESET_UNIT_BYTES`` (64) bytes (0 off, see
:mod:`~tokenpcap.schedule.engine.dcqcn_rules`); ``dce_tcp_g`` and ``initial_alpha_value`` in 1/1024; ``rpg_min_dec_fac`` %;
``rpg_gd`` the alpha-to-rate shift; ``rpg_threshold`` stages; ``clamp_tgt_rate`` and
``clamp_tgt_rate_after_time_inc`` booleans. A name it does not find takes
:data:`CONNECTX_DEFAULTS`. The variant (``connectx`` or ``hpcc-ns3``) is the ``variant``
argument, else a ``variant`` attribute or key of ``cfg``, else ``connectx``; the engine passes
``hpcc-ns3`` when the fabric's ``timing`` is ``hpcc-ns3`` (the variant is not one of NVIDIA's
settings: it is which arithmetic runs them).

hpcc-ns3 in these names (``export --to hpcc``'s ns-3 config at r Gb/s, HPCC ``rdma-hw.cc``):
``rpg_ai_rate`` 5r/25, ``rpg_hai_rate`` 50r/25 (80 / 800 at 400G), ``rpg_min_rate`` 1000,
``dce_tcp_g`` 1020 (g = 4/1024 = ``EWMA_GAIN`` 0.00390625), ``initial_alpha_value`` 1024 (alpha
1 on the first CNP), ``rpg_byte_reset`` 0 (ns-3 has no byte counter: the builder forces 0),
``rpg_gd`` 11 (cut alpha/2), ``clamp_tgt_rate`` false (``CLAMP_TARGET_RATE`` 0),
``rate_to_set_on_first_cnp`` 0 (``RateOnFirstCnp`` 1.0 keeps the rate); the periods are
``RP_TIMER`` 300, ``ALPHA_RESUME_INTERVAL`` 1, ``RATE_DECREASE_INTERVAL`` 4 us
(:func:`hpcc_ns3_settings`).
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from tokenpcap.schedule.engine import dcqcn_rules as d

__all__ = ["CONNECTX_DEFAULTS", "dcqcn_params", "hpcc_ns3_settings"]

#: NVIDIA ConnectX firmware defaults (DOCA "DCQCN CC Parameters"; ``mlxconfig -q`` dumps:
#: RPG_TIME_RESET 300, RPG_BYTE_RESET 32767, RPG_THRESHOLD 1, RPG_AI_RATE 5, RPG_HAI_RATE 50,
#: RPG_GD 11, RPG_MIN_DEC_FAC 50, RPG_MIN_RATE 1, RATE_TO_SET_ON_FIRST_CNP 0, DCE_TCP_G 1019,
#: DCE_TCP_RTT 1, RATE_REDUCE_MONITOR_PERIOD 4, INITIAL_ALPHA_VALUE 1023; clamp_tgt_rate 0,
#: clamp_tgt_rate_after_time_inc 1 as in google/isekai's ``RdmaCcDcqcnOptions``).
CONNECTX_DEFAULTS: dict[str, Any] = {
    "variant": "connectx", "rpg_time_reset": 300, "rpg_byte_reset": 32767, "rpg_threshold": 1,
    "rpg_ai_rate": 5, "rpg_hai_rate": 50, "rpg_gd": 11, "rpg_min_dec_fac": 50,
    "rpg_min_rate": 1, "rate_to_set_on_first_cnp": 0, "dce_tcp_g": 1019, "dce_tcp_rtt": 1,
    "initial_alpha_value": 1023, "rate_reduce_monitor_period": 4, "clamp_tgt_rate": False,
    "clamp_tgt_rate_after_time_inc": True,
}

_MBPS = 1_000_000
_US = 1000


def hpcc_ns3_settings(line_rate_bps: int) -> dict[str, Any]:
    """The hpcc-ns3 settings at ``line_rate_bps`` (module docstring), as a mapping."""
    r = int(line_rate_bps) // 1_000_000_000
    return dict(CONNECTX_DEFAULTS, variant="hpcc-ns3", rpg_byte_reset=0, rpg_ai_rate=5 * r // 25,
                rpg_hai_rate=50 * r // 25, rpg_min_rate=1000, dce_tcp_g=1020,
                initial_alpha_value=1024)


def _get(cfg: Any, name: str) -> Any:
    if isinstance(cfg, Mapping):
        return cfg.get(name, CONNECTX_DEFAULTS[name])
    return getattr(cfg, name, CONNECTX_DEFAULTS[name])


def dcqcn_params(cfg: Any, line_rate_bps: int, variant: str | None = None) -> np.ndarray:
    """float64 ``(NDP,)`` for the kernels of :mod:`~tokenpcap.schedule.engine.dcqcn`.

    ``cfg``: object (``fabric.dcqcn``'s ``DcqcnConfig``) or mapping with NVIDIA's names
    (module docstring); ``line_rate_bps``: the NIC's rate, bit/s (a whole number of Mb/s for
    connectx); ``variant``: ``connectx`` or ``hpcc-ns3`` (default: ``cfg``'s, else connectx). Raises ``ValueError`` naming the
    key on a value outside its range (the profile loader reports these per file and key).
    """
    g = {k: _get(cfg, k) for k in CONNECTX_DEFAULTS}
    if variant is not None:
        g["variant"] = variant
    line = int(line_rate_bps)
    variant = d.DCQCN_VARIANTS.get(g["variant"])
    if variant is None:
        raise ValueError(f"variant: got {g['variant']!r}, "
                         f"expected one of {sorted(d.DCQCN_VARIANTS)}")
    cx = variant == d.DCQCN_CONNECTX
    if line <= 0 or (cx and line % _MBPS):
        raise ValueError(f"line_rate_bps: got {line}, expected a positive whole number of Mb/s")
    for k in ("rpg_time_reset", "dce_tcp_rtt", "rate_reduce_monitor_period", "rpg_ai_rate",
              "rpg_hai_rate", "rpg_min_rate"):
        if not 0 < g[k] or (k.endswith("rate") and g[k] * _MBPS > line):
            raise ValueError(f"{k}: got {g[k]}, expected > 0" + (
                f" and at most the line rate {line // _MBPS} Mb/s" if k.endswith("rate") else ""))
    if not 0 <= g["rate_to_set_on_first_cnp"] * _MBPS <= line:
        raise ValueError(f"rate_to_set_on_first_cnp: got {g['rate_to_set_on_first_cnp']}, "
                         f"expected 0..{line // _MBPS} Mb/s")
    if not 0 <= g["dce_tcp_g"] <= 1023:
        raise ValueError(f"dce_tcp_g: got {g['dce_tcp_g']}, expected 0..1023")
    if not 0 <= g["initial_alpha_value"] <= (1023 if cx else 1024):
        raise ValueError(f"initial_alpha_value: got {g['initial_alpha_value']}, "
                         f"expected 0..{1023 if cx else 1024}")
    if g["rpg_gd"] not in (10, 11):
        raise ValueError(f"rpg_gd: got {g['rpg_gd']}, expected 10 or 11")
    if not 0 <= g["rpg_min_dec_fac"] <= 100:
        raise ValueError(f"rpg_min_dec_fac: got {g['rpg_min_dec_fac']}, expected 0..100")
    if not 0 <= g["rpg_byte_reset"] <= 32767:
        raise ValueError(f"rpg_byte_reset: got {g['rpg_byte_reset']}, expected 0..32767")
    if g["rpg_threshold"] < 0:
        raise ValueError(f"rpg_threshold: got {g['rpg_threshold']}, expected >= 0")
    p = np.zeros(d.NDP, np.float64)
    p[d.DP_VARIANT] = variant
    p[d.DP_LINE_BPS] = line
    p[d.DP_MIN_BPS] = g["rpg_min_rate"] * _MBPS
    p[d.DP_AI_BPS] = g["rpg_ai_rate"] * _MBPS
    p[d.DP_HAI_BPS] = g["rpg_hai_rate"] * _MBPS
    p[d.DP_FIRST_CNP_BPS] = g["rate_to_set_on_first_cnp"] * _MBPS
    p[d.DP_G] = g["dce_tcp_g"] if cx else (1024 - g["dce_tcp_g"]) / 1024.0
    p[d.DP_ALPHA_INIT] = g["initial_alpha_value"] if cx else g["initial_alpha_value"] / 1024.0
    p[d.DP_GD] = g["rpg_gd"]
    p[d.DP_MIN_DEC_FAC_PCT] = g["rpg_min_dec_fac"] if cx else 0
    p[d.DP_ALPHA_PERIOD_NS] = g["dce_tcp_rtt"] * _US
    p[d.DP_DEC_PERIOD_NS] = g["rate_reduce_monitor_period"] * _US
    p[d.DP_DEC_OFFSET_NS] = 0 if cx else 1
    p[d.DP_INC_PERIOD_NS] = g["rpg_time_reset"] * _US
    p[d.DP_BYTE_RESET_BYTES] = g["rpg_byte_reset"] * d.RPG_BYTE_RESET_UNIT_BYTES if cx else 0
    p[d.DP_THRESHOLD] = g["rpg_threshold"]
    p[d.DP_CLAMP] = bool(g["clamp_tgt_rate"])
    p[d.DP_CLAMP_AFTER_TIME] = bool(g["clamp_tgt_rate_after_time_inc"]) if cx else 1
    p[d.DP_RATE_UNIT_BPS] = _MBPS if cx else 1
    return p
