"""A paced QP's wait when DCQCN changes its rate (tokenpcap.schedule.engine.rpoint), checked
against the rate limiter written as an integral: a ConnectX QP that sent a packet of ``b``
timing bytes at ``t0`` starts its next one when ``8 b`` bits have been paid at the rates in
force since ``t0`` (the engine's own rate log, integrated here piecewise, independently of the
engine's pacing code), rounded up to whole ns once per rate change; HPCC ns-3's Mellanox DCQCN
keeps the rate the packet was sent at (its ``*Mlx`` functions assign ``m_rate`` without
``ChangeRate``), which the HPCC ns-3 fixtures of ``test_cc.py`` pin.

The case: 63 -> 1 x 4 MiB on one Tomahawk 5 switch with ConnectX's DCQCN defaults, sender NIC 63
(one QP, one message: it always has a packet to send, so every wait below its line rate is the
rate limiter's or the fabric's).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tokenpcap.config.profiles import load_scenario
from tokenpcap.plan.build import build_plan
from tokenpcap.records import PKT_DATA
from tokenpcap.schedule.runner import Schedule

ROOT = Path(__file__).resolve().parents[3]
INCAST = ROOT / "profiles" / "scenarios" / "incast-63x16m.yaml"
SENDER = 63
LINE_BPS = 400e9
L1_BYTES = 24           # FCS, preamble and inter-frame gap: a frame's timing bytes (rocev2 timing)


@pytest.fixture(scope="module")
def incast():
    s = load_scenario(INCAST, {"cluster.fabric.cc": "dcqcn", "workload.bytes": 4 << 20})
    sched = Schedule(build_plan(s), keep_history=False, nics=[SENDER])
    tx = np.concatenate(list(sched.run()))
    d = tx[(tx["kind"] == PKT_DATA) & (tx["nic"] == SENDER)]
    d = d[np.argsort(d["time_ns"], kind="stable")]
    log = sched.cc_log()
    ce = log["ce_qps"]
    q = int(ce["qp"][ce["src_nic"] == SENDER][0])
    rates = log["rates"][log["rates"]["qp"] == q]
    return sched, d, rates


def _paid_at(t0: int, bits: float, lt: np.ndarray, lr: np.ndarray) -> tuple[float, int]:
    """When ``bits`` are paid from ``t0`` at the piecewise-constant rate of the log (``lt`` times,
    ``lr`` the rate from each on; the line rate before the first), and how many changes fell
    inside."""
    i = int(np.searchsorted(lt, t0, side="right"))
    t, left, changes = float(t0), bits, 0
    while True:
        rate = LINE_BPS if i == 0 else float(lr[i - 1])
        nxt = float(lt[i]) if i < len(lt) else float("inf")
        if t + left / rate * 1e9 <= nxt:
            return t + left / rate * 1e9, changes
        left -= (nxt - t) * rate / 1e9
        t, i, changes = nxt, i + 1, changes + 1


def _paced_waits(d: np.ndarray, rates: np.ndarray) -> np.ndarray:
    """float64 ``(n, 3)``: for each packet the sender started below its line rate, the next
    packet's start (ns), when the packet's bits were paid (:func:`_paid_at`) and the rate
    changes inside that wait."""
    lt, lr = rates["time_ns"], rates["new_bps"]
    t, tb = d["time_ns"], d["frame_bytes"].astype(np.int64) + L1_BYTES
    rows = []
    for i in range(len(t) - 1):
        k = int(np.searchsorted(lt, t[i], side="right"))
        if k == 0 or lr[k - 1] >= LINE_BPS:
            continue                                    # at the line rate: not paced
        due, changes = _paid_at(int(t[i]), 8.0 * tb[i], lt, lr)
        rows.append((float(t[i + 1]), due, float(changes)))
    return np.array(rows, np.float64).reshape(-1, 3)


def test_a_connectx_qp_waits_for_its_bits_at_the_rates_in_force(incast):
    """Never faster than the limiter allows (one rounding up per change at most)."""
    _, d, rates = incast
    w = _paced_waits(d, rates)
    assert len(w) > 500 and (w[:, 2] > 0).sum() >= 20
    assert (w[:, 0] >= w[:, 1] - 1e-6).all(), w[w[:, 0] < w[:, 1] - 1e-6][:5]


def test_waits_that_a_rate_change_moved_mostly_end_when_the_bits_are_paid(incast):
    """Of the waits with a rate change inside, all but a few (the fabric's: PFC, ACKs ahead)
    end within a ns per change of the paid time; before the rule, an increase inside left the
    packet at the old rate's time (33 ms for 4 KiB at rpg_min_rate), a cut let it leave early."""
    _, d, rates = incast
    w = _paced_waits(d, rates)
    moved = w[w[:, 2] > 0]
    late = moved[:, 0] - moved[:, 1]
    near = (late >= -1e-6) & (late <= moved[:, 2] + 1)
    assert len(moved) >= 20 and near.sum() >= 0.9 * len(moved)


def test_the_incast_ends_near_the_receivers_line_rate(incast):
    """63 x 4 MiB through one 400 Gb/s port: at least the frames' serialization (the physics
    bound); with the limiter paid at the rates in force the last frame arrives within 10 % of
    it (the waits at a floor rate that DCQCN had already raised held it until 15.8 ms)."""
    sched, d, _ = incast
    bound_ns = 63 * int((d["frame_bytes"].astype(np.int64) + L1_BYTES).sum()) * 8 / LINE_BPS * 1e9
    end = int(sched.messages["arrival_ns"].max())
    assert bound_ns <= end <= 1.10 * bound_ns, (end, bound_ns)
