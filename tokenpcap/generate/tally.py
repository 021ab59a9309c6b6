"""A chunk's kept packets added to a run's totals (:class:`~tokenpcap.generate.options.
GenerateResult`): data packets and payload bytes per phase label and payload bytes per sending
NIC, clear-to-send packets and payload, ACKs, CNPs and PFC frames, and the first and last time,
by one compiled pass over the rows (a dozen numpy passes and bincounts per chunk before)."""
from __future__ import annotations

import numpy as np
from numba import njit

from tokenpcap.generate.options import GenerateResult
from tokenpcap.records import LABELS, PKT_ACK, PKT_CNP, PKT_CTS, PKT_DATA, PKT_PFC

__all__ = ["tally"]

def tally(res: GenerateResult, tx: np.ndarray, pay: np.ndarray, kind: np.ndarray,
          label: np.ndarray) -> None:
    """Add a chunk's rows to ``res``.

    Args:
        tx: ``TX_DTYPE (n,)``, the kept rows in time order (``time_ns`` and ``nic`` read).
        pay: int ``(n,)``, their packets' payload bytes, in the order of ``tx`` (the lowering
            writes them beside the rows: :func:`tokenpcap.wire.expand.expand_rows`).
        kind: int ``(n,)``, the rows' ``PKT_*`` kinds; label: int64 ``(n,)``, each row's index
            into :data:`~tokenpcap.records.LABELS` (PFC rows: any value, not read).
    """
    if tx.size == 0:
        return
    per, cnt = np.zeros(len(LABELS), np.int64), np.zeros(len(LABELS), np.int64)
    by_kind, by_kind_pay = np.zeros(256, np.int64), np.zeros(256, np.int64)
    nic_pay = np.zeros(res.nic_payload.size, np.int64)
    _tally(pay, np.ascontiguousarray(kind, np.int64), np.ascontiguousarray(label, np.int64),
           tx["nic"], np.int64(PKT_DATA), per, cnt, nic_pay, by_kind, by_kind_pay)
    for i in np.flatnonzero(cnt).tolist():
        res.phase_payload[LABELS[i]] = res.phase_payload.get(LABELS[i], 0) + int(per[i])
        res.phase_packets[LABELS[i]] = res.phase_packets.get(LABELS[i], 0) + int(cnt[i])
    res.nic_payload += nic_pay
    res.cts_packets += int(by_kind[PKT_CTS])
    res.cts_payload += int(by_kind_pay[PKT_CTS])
    res.ack_packets += int(by_kind[PKT_ACK])
    res.cnp_packets += int(by_kind[PKT_CNP])
    res.pfc_packets += int(by_kind[PKT_PFC])
    t = tx["time_ns"]
    res.first_ns = int(t[0]) if res.first_ns < 0 else min(res.first_ns, int(t[0]))
    res.last_ns = max(res.last_ns, int(t[-1]))


@njit(cache=True)
def _tally(pay, kind, label, nic, data_kind, per, cnt, nic_pay, by_kind, by_kind_pay):
    for r in range(kind.size):
        k = kind[r]
        p = np.int64(pay[r])
        by_kind[k] += 1
        by_kind_pay[k] += p
        if k == data_kind:
            per[label[r]] += p
            cnt[label[r]] += 1
            nic_pay[nic[r]] += p
