"""Integer-nanosecond timestamp conversions for pcap, pcapng and ERF (vectorized, no floats).

All inputs and outputs are numpy integer arrays; ``time_ns`` is int64 nanoseconds since the
Unix epoch. A double resolves about 238 ns at epoch scale (case C8), so nothing here touches
floating point.
"""
from __future__ import annotations

import numpy as np

__all__ = ["NS", "split_ns", "join_sec_frac", "ns_to_erf", "erf_to_ns", "tsresol_to_ns",
           "NO_TIME"]

NS = 1_000_000_000
#: ``time_ns`` of a record that has no timestamp (pcapng Simple Packet Block)
NO_TIME = np.iinfo(np.int64).min
_I64_MAX = np.iinfo(np.int64).max


def split_ns(time_ns: np.ndarray, frac_per_sec: int) -> tuple[np.ndarray, np.ndarray]:
    """Split int64 ns (n,) into (seconds, fraction) with ``frac_per_sec`` units per second.

    ``frac_per_sec`` is 10**9 (nanosecond pcap) or 10**6 (microsecond pcap). Microseconds are
    rounded to nearest, half up, and a fraction that rounds to one whole second carries into the
    seconds, so the fraction is always < ``frac_per_sec`` (case C9: 1332502747.5209900094 s is
    usec 520990, not 520989).

    Returns:
        two int64 arrays (n,): seconds and fraction.
    """
    t = np.asarray(time_ns, dtype=np.int64)
    if frac_per_sec != NS:
        step = NS // frac_per_sec
        t = (t + step // 2) // step           # round half up, then split (carry is automatic)
    sec = t // frac_per_sec                   # floor division by a scalar: libdivide, no divmod
    return sec, t - sec * frac_per_sec


def join_sec_frac(sec: np.ndarray, frac: np.ndarray, frac_per_sec: int) -> np.ndarray:
    """int64 ns from seconds and a fraction in ``frac_per_sec`` units (exact)."""
    return sec.astype(np.int64) * NS + frac.astype(np.int64) * (NS // frac_per_sec)


def ns_to_erf(time_ns: np.ndarray) -> np.ndarray:
    """ERF 64-bit timestamp (uint64) from int64 ns: seconds << 32 | round(frac_ns * 2**32 / 1e9).

    The binary fraction has 2**-32 s (0.23 ns) resolution, finer than 1 ns, so rounding to nearest
    here and in :func:`erf_to_ns` round-trips every integer ns exactly (no ties can occur:
    ``frac_ns * 2**32`` is a multiple of 2**9, ``5e8`` is not). Source: Endace ERF (EDM11-01),
    timestamp format.
    """
    sec, frac_ns = np.divmod(np.asarray(time_ns, dtype=np.int64), NS)
    frac = ((frac_ns.astype(np.uint64) << np.uint64(32)) + np.uint64(NS // 2)) // np.uint64(NS)
    return (sec.astype(np.uint64) << np.uint64(32)) | frac


def erf_to_ns(ts: np.ndarray) -> np.ndarray:
    """int64 ns from ERF 64-bit timestamps (uint64), rounding the fraction to nearest ns.

    Same rounding as Wireshark's wiretap (``erf.c``). The fraction never rounds to 1e9:
    ``(2**32 - 1) * 1e9 + 2**31 < 1e9 * 2**32``.
    """
    ts = np.asarray(ts, dtype=np.uint64)
    frac = ts & np.uint64(0xFFFFFFFF)
    frac_ns = (frac * np.uint64(NS) + np.uint64(1 << 31)) >> np.uint64(32)
    return (ts >> np.uint64(32)).astype(np.int64) * NS + frac_ns.astype(np.int64)


def tsresol_to_ns(ticks: np.ndarray, tsresol: int, tsoffset_s: int = 0
                  ) -> tuple[np.ndarray, np.ndarray]:
    """int64 ns from pcapng timestamps in units of ``if_tsresol`` (pcapng draft §4.2, Table 7).

    ``tsresol`` bit 7 clear: units of 10**-n s; set: units of 2**-n s (n = low 7 bits). Exact for
    n <= 9 decimal; finer decimal units round to nearest ns (half up); binary units split into
    whole seconds (exact) and a fraction rounded to nearest ns (half up), fractions finer than
    2**-34 s are first truncated to 2**-34 s (0.06 ns). ``if_tsoffset`` seconds are added.

    Args:
        ticks: uint64 (n,) the 64-bit EPB timestamp (ts_high << 32 | ts_low).
        tsresol: the interface's ``if_tsresol`` byte (default 6).
        tsoffset_s: the interface's ``if_tsoffset`` (seconds).

    Returns:
        (time_ns int64 (n,), bad bool (n,)): ``bad`` marks values that do not fit int64 ns
        (after year 2262) or a resolution that cannot be represented (10**-n with n > 19).
    """
    t = np.asarray(ticks, dtype=np.uint64)
    n = tsresol & 0x7F
    if tsresol & 0x80:
        n_eff = min(n, 34)
        sec = t >> np.uint64(n) if n < 64 else np.zeros_like(t)
        frac = t & np.uint64((1 << n) - 1) if n < 64 else t
        frac = frac >> np.uint64(n - n_eff) if n - n_eff < 64 else np.zeros_like(t)
        frac_ns = (frac * np.uint64(NS) + np.uint64((1 << n_eff) >> 1)) >> np.uint64(n_eff)
    elif n <= 19:
        per_sec = np.uint64(10 ** n)
        sec, frac = np.divmod(t, per_sec)
        if n <= 9:
            frac_ns = frac * np.uint64(10 ** (9 - n))
        else:
            div = np.uint64(10 ** (n - 9))
            frac_ns = (frac + div // np.uint64(2)) // div   # may reach 1e9: carried below
    else:
        return np.zeros(t.shape, np.int64), np.ones(t.shape, bool)
    sec_limit = (_I64_MAX // NS) - 1 - abs(int(tsoffset_s))
    bad = sec > np.uint64(max(sec_limit, 0))
    sec_i = np.where(bad, 0, sec).astype(np.int64) + int(tsoffset_s)
    return sec_i * NS + frac_ns.astype(np.int64), bad
