"""The queued fabric's ingress accounting (part of :mod:`tokenpcap.schedule.engine.fabric`): per
(ingress port, lossless priority) the guaranteed reserve, the shared pool under a dynamic
threshold and the headroom, and when a (port, priority) must be paused or may resume: HPCC ns-3
``simulation/src/point-to-point/model/switch-mmu.cc`` (``UpdateIngressAdmission``,
``RemoveFromIngressAdmission``, ``CheckShouldPause``, ``CheckShouldResume``,
``GetPfcThreshold``, ``GetSharedUsed``), whose knobs are those of SONiC's buffer profiles (size,
xoff, dynamic_th, xon_offset). A lossless packet that would overflow the headroom (where ns-3's
``CheckIngressAdmission`` drops) is admitted and counted in ``sc[HDRM_OVER]``.
"""
from __future__ import annotations


from tokenpcap.schedule.engine.compiled import part
from tokenpcap.schedule.engine.events import *  # noqa: F401,F403 - columns and constants

__all__ = ["admit", "release"]



@part
def _thresh(S, s, q):
    """Dynamic PFC threshold of ingress port ``q`` of switch ``s`` (bytes)."""
    fsw = S.fsw
    free = fsw[s, FS_BUF] - fsw[s, FS_HDRM] - fsw[s, FS_RSRV] - fsw[s, FS_SHARED]
    if free < 0:
        free = 0
    sh = S.fp[q, FP_SHIFT]
    return free >> sh if sh >= 0 else free << (-sh)


@part
def _shared_used(cf, fi, i):
    u = fi[i, I8_BYTES] - cf[F_RESERVE]
    return u if u > 0 else 0


@part
def admit(S, cf, sc, s, q, p, bb):
    """Ingress accounting of ``bb`` bytes arriving on port ``q`` (priority ``p``) of switch ``s``.
    Returns True when the (port, priority) must now be paused (send XOFF upstream)."""
    fi = S.fi
    i = q * 8 + p
    th = _thresh(S, s, q)
    if bb + fi[i, I8_HDRM] > S.fp[q, FP_HDRM] and bb + _shared_used(cf, fi, i) > th:
        sc[HDRM_OVER] += 1                           # ns-3 drops here; a lossless class does not
    new = fi[i, I8_BYTES] + bb
    res = cf[F_RESERVE]
    if new <= res:
        fi[i, I8_BYTES] = new
    elif new - res > th:
        fi[i, I8_HDRM] += bb
    else:
        fi[i, I8_BYTES] = new
        S.fsw[s, FS_SHARED] += bb if bb < new - res else new - res
    if fi[i, I8_PAUSED] == 0 and (fi[i, I8_HDRM] > 0 or _shared_used(cf, fi, i) >= _thresh(S, s, q)):
        fi[i, I8_PAUSED] = 1
        return True
    return False


@part
def release(S, cf, s, q, p, bb):
    """``bb`` bytes that came in on port ``q`` (priority ``p``) leave switch ``s``. Returns True
    when the paused (port, priority) may resume (send XON upstream)."""
    fi = S.fi
    i = q * 8 + p
    res = cf[F_RESERVE]
    fh = fi[i, I8_HDRM] if fi[i, I8_HDRM] < bb else bb
    above = fi[i, I8_BYTES] - res if fi[i, I8_BYTES] > res else 0
    fs = bb - fh if bb - fh < above else above
    fi[i, I8_HDRM] -= fh
    fi[i, I8_BYTES] -= bb - fh
    S.fsw[s, FS_SHARED] -= fs
    if fi[i, I8_PAUSED]:
        su = _shared_used(cf, fi, i)
        if fi[i, I8_HDRM] == 0 and (su == 0 or su + cf[F_RESUME] <= _thresh(S, s, q)):
            fi[i, I8_PAUSED] = 0
            return True
    return False

