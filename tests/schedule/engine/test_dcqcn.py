"""DCQCN reaction point kernels (:mod:`tokenpcap.schedule.engine.dcqcn`) and pacing.

Oracles:

* ``tests/cases/hpcc/dcqcn-rp-ns3.json``: HPCC ns-3's own code (alibaba-edu/High-Precision-
  Congestion-Control at the commit ``docs/compare.md`` builds, ``libns3.18-*-optimized.so``)
  on one QP: a small C++ driver (not committed) creates ``RdmaHw`` with ``CcMode`` 1 and the
  scenario's ``EwmaGain``, ``RateAI``, ``RateHAI``, ``MinRate``, ``FastRecoveryTimes``,
  ``ClampTargetRate``, ``RPTimer``, ``AlphaResumInterval``, ``RateDecreaseInterval``
  (``RateOnFirstCnp`` 1.0), a ``QbbNetDevice`` at the line rate as its NIC, an
  ``RdmaQueuePair`` at the line rate, schedules ``RdmaHw::cnp_received_mlx(qp)`` at each
  scripted ``cnp_ns``, and from 1 ns on, every ns until ``end_ns``, prints ``(now, m_rate,
  mlx.m_targetRate, mlx.m_alpha)`` when rate or target changed (``%.17g``); ``tx_time_ns`` is
  ``Seconds(DataRate(r).CalculateTxTime(b)).GetTimeStep()``. Compiled with ``g++ -std=gnu++11
  -O1 -I build`` and linked with the build's libraries. CNP times avoid the timers' grids (at an
  equal ns ns-3 runs the event scheduled first).
* :mod:`tests.schedule.engine.dcqcn_oracle`: an eager re-statement of the rules, every timer
  firing every period (itself checked against ns-3 here).
* Closed forms of one CNP, written from the formulas.
* google/isekai's own unit test of its ConnectX-named DCQCN (``rdma_roce_cc_dcqcn_test.cc``),
  replayed step by step on the connectx variant.
"""
from __future__ import annotations

import heapq
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from tests.schedule.engine.dcqcn_oracle import ReactionPoint, Settings
from tokenpcap.schedule.engine import dcqcn as d
from tokenpcap.schedule.engine.dcqcn_params import (CONNECTX_DEFAULTS, dcqcn_params,
                                                    hpcc_ns3_settings)
from tokenpcap.schedule.engine.pacing import next_send_ns, tx_time_ns_ceil, tx_time_ns_ns3

FIXTURE = Path(__file__).parents[2] / "cases" / "hpcc" / "dcqcn-rp-ns3.json"
G400 = 400_000_000_000


def drive(p, inputs, end_ns, n_qp=1, inputs_first=False):
    """An engine's use of the kernels: one heap; a returned time is pushed as the QP's timer
    event, a stale one is dropped by the kernel. ``inputs``: (t, qp, "cnp") or (t, qp,
    "bytes", n). Returns the rate log (rows of ``NRL``), the state and the most timer events
    (live or stale) one QP ever had in the heap."""
    st = d.dcqcn_state(n_qp, p)
    log = np.zeros((100_000, d.NRL))
    nlog = np.zeros(1, np.int64)
    rank_in, rank_timer = (0, 1) if inputs_first else (1, 0)
    heap = [(x[0], rank_in, i, x) for i, x in enumerate(inputs)]
    heapq.heapify(heap)
    seq, held, most = len(heap), [0] * n_qp, 0
    while heap and heap[0][0] <= end_ns:
        t, _, _, x = heapq.heappop(heap)
        q = x[1]
        if x[2] == "timer":
            held[q] -= 1
            due = d.dcqcn_on_timer(st, q, t, p, log, nlog)
        elif x[2] == "cnp":
            due = d.dcqcn_on_cnp(st, q, t, p, log, nlog)
        else:
            due = d.dcqcn_on_bytes_sent(st, q, t, x[3], p, log, nlog)
        if due >= 0:
            assert due > t
            seq += 1
            heapq.heappush(heap, (int(due), rank_timer, seq, (int(due), q, "timer")))
            held[q] += 1
            most = max(most, held[q])
    assert nlog[0] <= log.shape[0]
    return log[: nlog[0]], st, most


def ns3_params(s):
    """dcqcn_params for a fixture scenario (ns-3's attributes in NVIDIA's names)."""
    g = round(1024 - s["ewma_gain"] * 1024)
    assert (1024 - g) / 1024 == s["ewma_gain"]
    cfg = dict(hpcc_ns3_settings(s["line_bps"]), rpg_ai_rate=s["ai_bps"] // 10**6,
               rpg_hai_rate=s["hai_bps"] // 10**6, rpg_min_rate=s["min_bps"] // 10**6,
               dce_tcp_g=g, rpg_threshold=s["fast_recovery_times"],
               clamp_tgt_rate=bool(s["clamp_target_rate"]), rpg_time_reset=s["rp_timer_us"],
               dce_tcp_rtt=s["alpha_resume_interval_us"],
               rate_reduce_monitor_period=s["rate_decrease_interval_us"])
    return dcqcn_params(cfg, s["line_bps"])


def oracle_settings(s):
    return Settings("hpcc-ns3", s["line_bps"], s["ai_bps"], s["hai_bps"], s["min_bps"],
                    g=s["ewma_gain"], alpha_us=s["alpha_resume_interval_us"],
                    dec_us=s["rate_decrease_interval_us"], inc_us=s["rp_timer_us"],
                    threshold=s["fast_recovery_times"], clamp=bool(s["clamp_target_rate"]))


SCENARIOS = json.loads(FIXTURE.read_text())["scenarios"]


@pytest.mark.parametrize("s", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_hpcc_ns3_variant_gives_ns3s_rate_trajectory_to_the_bit_and_the_ns(s):
    log, _, most = drive(ns3_params(s), [(t, 0, "cnp") for t in s["cnp_ns"]], s["end_ns"])
    ns3 = [r for i, r in enumerate(s["trajectory"])
           if r[1] != (s["trajectory"][i - 1][1] if i else s["line_bps"])]
    got = [[int(r[d.RL_TIME_NS]), int(r[d.RL_NEW_BPS]), int(r[d.RL_TARGET_BPS]),
            float(r[d.RL_ALPHA])] for r in log]
    got = [r for i, r in enumerate(got) if i + 1 == len(got) or got[i + 1][0] != r[0]]
    assert got == ns3      # ns-3 is sampled once per ns: the last change of each ns
    assert len(got) >= 17 and most <= 2


@pytest.mark.parametrize("s", SCENARIOS, ids=[s["name"] for s in SCENARIOS])
def test_the_eager_oracle_agrees_with_ns3(s):
    rp = ReactionPoint(oracle_settings(s))
    rp.run([(t, "cnp") for t in s["cnp_ns"]], s["end_ns"])
    ns3 = [(r[0], r[1]) for i, r in enumerate(s["trajectory"])
           if r[1] != (s["trajectory"][i - 1][1] if i else s["line_bps"])]
    got = [(t, new) for i, (t, _, new) in enumerate(rp.changes)
           if i + 1 == len(rp.changes) or rp.changes[i + 1][0] != t]
    assert got == ns3


def test_one_cnp_closed_form_hpcc_ns3():
    """One CNP at t0: alpha = 1, four updates without CNP, the cut at t0 + 4 us + 1 ns takes
    R = trunc(L (1 - a/2)); then every 300 us R = R//2 + L//2 (fast recovery, then additive
    increases capped at L)."""
    p = dcqcn_params(hpcc_ns3_settings(G400), G400)
    t0 = 10_123
    log, st, _ = drive(p, [(t0, 0, "cnp")], 20_000_000)
    a = 1.0
    for _ in range(4):
        a = (1 - 1 / 256) * a
    r = int(G400 * (1 - a / 2))
    want = [(t0 + 4001, r)]
    t = t0 + 4001
    while True:
        t += 300_000
        nr = r // 2 + G400 // 2
        if nr == r:
            break
        want.append((t, nr))
        r = nr
    assert [(int(x[d.RL_TIME_NS]), int(x[d.RL_NEW_BPS])) for x in log] == want
    assert st[0, d.DQ_INC_DUE_NS] == -1 and st[0, d.DQ_DEC_DUE_NS] == -1   # recovered: no timer


def test_one_cnp_closed_form_connectx():
    """ConnectX defaults, one CNP at t0: alpha 1023, updates G a // 1024 at t0 + 1..4 us, the
    cut at t0 + 4 us: R -= R a >> 11 (Mb/s); the increase timer (restarted by the cut) every
    300 us: R = (R + L) // 2."""
    p = dcqcn_params(CONNECTX_DEFAULTS, G400)
    t0 = 10_123
    log, _, _ = drive(p, [(t0, 0, "cnp")], 20_000_000)
    a = 1023
    for _ in range(4):
        a = 1019 * a // 1024
    L = 400_000
    r = L - (L * a >> 11)
    want = [(t0 + 4000, r)]
    t = t0 + 4000
    while (r + L) // 2 != r:
        t += 300_000
        r = (r + L) // 2
        want.append((t, r))
    assert [(int(x[d.RL_TIME_NS]), int(x[d.RL_NEW_BPS]) // 10**6) for x in log] == want
    assert want[0][1] == 204_102


def test_byte_counter_connectx():
    """With the byte counter on, 2,097,088 B (32,767 x 64) sent after the cut is one increase
    event: (R + T) // 2 before the timer's first 300 us."""
    p = dcqcn_params(CONNECTX_DEFAULTS, G400)
    t0 = 10_123
    sends = [(t0 + 5000 + 100 * i, 0, "bytes", 4154) for i in range(505)]   # 2,097,770 B
    log, st, _ = drive(p, [(t0, 0, "cnp")] + sends, t0 + 200_000)
    assert [int(x[d.RL_CAUSE]) for x in log] == [d.CAUSE_CUT, d.CAUSE_BYTES]
    r = int(log[0][d.RL_NEW_BPS]) // 10**6
    assert int(log[1][d.RL_NEW_BPS]) // 10**6 == (r + 400_000) // 2
    assert int(log[1][d.RL_TIME_NS]) == t0 + 5000 + 100 * 504      # the packet crossing it
    assert st[0, d.DQ_BYTE_COUNT] == 505 * 4154 - 32767 * 64


def _settings_from(cfg, line):
    """The oracle's Settings for NVIDIA-named ``cfg`` (as dcqcn_params reads them)."""
    cx = cfg["variant"] == "connectx"
    mb = 10**6
    return Settings(cfg["variant"], line, cfg["rpg_ai_rate"] * mb, cfg["rpg_hai_rate"] * mb,
                    cfg["rpg_min_rate"] * mb, first_cnp_bps=cfg["rate_to_set_on_first_cnp"] * mb,
                    g=(1024 - cfg["dce_tcp_g"]) / 1024, dce_tcp_g=cfg["dce_tcp_g"],
                    alpha_init=cfg["initial_alpha_value"] / (1 if cx else 1024),
                    gd=cfg["rpg_gd"], min_dec_fac=cfg["rpg_min_dec_fac"] if cx else 0,
                    alpha_us=cfg["dce_tcp_rtt"], dec_us=cfg["rate_reduce_monitor_period"],
                    inc_us=cfg["rpg_time_reset"],
                    byte_reset_bytes=cfg["rpg_byte_reset"] * 64 if cx else 0,
                    threshold=cfg["rpg_threshold"], clamp=cfg["clamp_tgt_rate"],
                    clamp_after_time_inc=cfg["clamp_tgt_rate_after_time_inc"] if cx else True)


@hs.composite
def scripts(draw, byte_counter=False):
    """NVIDIA-named settings, a line rate and CNP / send inputs; ``byte_counter``: connectx
    with the byte counter on and packets sent throughout."""
    variant = "connectx" if byte_counter else draw(hs.sampled_from(["connectx", "hpcc-ns3"]))
    line = draw(hs.sampled_from([25, 100, 400])) * 10**9
    base = CONNECTX_DEFAULTS if variant == "connectx" else hpcc_ns3_settings(line)
    cfg = dict(base)
    cfg.update(rpg_threshold=draw(hs.integers(0, 4)), clamp_tgt_rate=draw(hs.booleans()),
               clamp_tgt_rate_after_time_inc=draw(hs.booleans()),
               rpg_time_reset=draw(hs.sampled_from([5, 20, 55, 300])),
               dce_tcp_rtt=draw(hs.sampled_from([1, 3, 50])),
               rate_reduce_monitor_period=draw(hs.sampled_from([1, 4, 50])),
               rpg_gd=draw(hs.sampled_from([10, 11])),
               rpg_min_dec_fac=draw(hs.sampled_from([0, 50, 90])),
               rpg_min_rate=draw(hs.sampled_from([1, 1000])),
               rpg_ai_rate=draw(hs.sampled_from([5, 80, 1000])),
               rpg_hai_rate=draw(hs.sampled_from([50, 800, 5000])),
               rpg_byte_reset=draw(hs.sampled_from([1, 16, 512] if byte_counter
                                                   else [0, 1, 16, 32767])),
               rate_to_set_on_first_cnp=draw(hs.sampled_from([0, 0, 10_000])))
    if variant == "connectx":
        cfg.update(dce_tcp_g=draw(hs.integers(900, 1023)),
                   initial_alpha_value=draw(hs.integers(0, 1023)))
    else:
        cfg.update(dce_tcp_g=draw(hs.sampled_from([960, 1020])), rate_to_set_on_first_cnp=0)
    n = draw(hs.integers(1, 40))
    ts = sorted(draw(hs.lists(hs.integers(1_000, 3_000_000), min_size=n, max_size=n)))
    inputs = [(t, 0, "cnp") for t in ts]
    if byte_counter or draw(hs.booleans()):
        gap = draw(hs.sampled_from([997, 10_000, 40_000]))
        inputs += [(t, 0, "bytes", 4154) for t in range(500, 4_000_000, gap)]
    return cfg, line, inputs


@settings(max_examples=60, deadline=None)
@given(hs.one_of(scripts(), scripts(byte_counter=True)))
def test_kernels_match_the_eager_oracle_in_any_event_order(case):
    cfg, line, inputs = case
    p = dcqcn_params(cfg, line)
    end = 4_000_000
    log, st, most = drive(p, inputs, end)
    log2, _, _ = drive(p, inputs, end, inputs_first=True)
    assert np.array_equal(log, log2)                 # ties: the result ignores event order
    rp = ReactionPoint(_settings_from(cfg, line))
    rp.run([(x[0], *x[2:]) for x in inputs], end)
    got = [(int(r[d.RL_TIME_NS]), int(r[d.RL_OLD_BPS]), int(r[d.RL_NEW_BPS])) for r in log]
    assert got == rp.changes
    assert most <= 2
    # invariants: rates within [min, line], alpha in [0, 1], at most one cut per period
    mn, per = p[d.DP_MIN_BPS], p[d.DP_DEC_PERIOD_NS]
    assert all(min(mn, p[d.DP_FIRST_CNP_BPS] or mn) <= r[d.RL_NEW_BPS] <= line for r in log)
    assert all(0.0 <= r[d.RL_ALPHA] <= 1.0 for r in log)
    assert all(b - a >= per for a, b in zip(rp.cuts, rp.cuts[1:]))
    cuts = [r[d.RL_TIME_NS] for r in log if r[d.RL_CAUSE] == d.CAUSE_CUT]
    assert all(b - a >= per for a, b in zip(cuts, cuts[1:]))
    assert 0.0 <= d.dcqcn_alpha(st, 0, end, p) <= 1.0


@settings(max_examples=20, deadline=None)
@given(scripts())
def test_a_qp_without_cnp_has_no_timer(case):
    cfg, line, inputs = case
    p = dcqcn_params(cfg, line)
    fresh = d.dcqcn_state(2, p)
    sends = [(x[0], 1, *x[2:]) for x in inputs if x[2] == "bytes"] + \
        [(t, 1, "bytes", 4154) for t in range(0, 100_000, 1000)]
    log, st, most = drive(p, [x for x in inputs if x[2] == "cnp"] + sends, 4_000_000, n_qp=2)
    assert np.array_equal(st[1], fresh[1])
    assert all(r[d.RL_QP] == 0 for r in log)
    assert d.dcqcn_next_due_ns(st, 1) == -1 and d.dcqcn_alpha(st, 1, 10**7, p) == 0.0


def test_pacing_reproduces_ns3s_tx_time():
    tx = json.loads(FIXTURE.read_text())["tx_time_ns"]
    assert len(tx) == 64
    for b, r, ns in tx:
        assert tx_time_ns_ns3(b, r) == ns, (b, r)
    assert tx_time_ns_ns3(1000, G400) == 19             # ns-3 truncates 20 ns to 19


@settings(max_examples=300, deadline=None)
@given(hs.integers(1, 10_000), hs.integers(1_000_000, 1_600_000_000_000), hs.integers(0, 10**15))
def test_pacing_ceil_is_exact_and_ns3_floor_is_close(b, r, now):
    exact = Fraction(b * 8 * 10**9, r)
    assert tx_time_ns_ceil(b, r) == math.ceil(exact)
    assert next_send_ns(now, b, r, d.DCQCN_CONNECTX) == now + math.ceil(exact)
    ns3 = tx_time_ns_ns3(b, r)
    assert math.floor(exact) - 1 <= ns3 <= math.floor(exact)
    assert next_send_ns(now, b, r, d.DCQCN_HPCC_NS3) == now + ns3


@pytest.mark.parametrize("key,value", [("rpg_time_reset", 0), ("dce_tcp_rtt", 0),
                                       ("rate_reduce_monitor_period", 0),
                                       ("rpg_ai_rate", 400_001), ("rpg_min_rate", 500_000),
                                       ("dce_tcp_g", 1024), ("initial_alpha_value", 1024),
                                       ("rpg_gd", 12), ("rpg_min_dec_fac", 101),
                                       ("rpg_byte_reset", 32768), ("variant", "dcqcn")])
def test_bad_settings_name_their_key(key, value):
    with pytest.raises(ValueError, match=f"^{key}: got"):
        dcqcn_params(dict(CONNECTX_DEFAULTS, **{key: value}), G400)


def test_params_from_a_config_object_as_from_a_mapping():
    """``fabric.dcqcn`` arrives as a frozen dataclass with NVIDIA's names; the variant comes
    from the fabric's timing."""
    from types import SimpleNamespace
    ns3 = hpcc_ns3_settings(G400)
    obj = SimpleNamespace(**{k: v for k, v in ns3.items() if k != "variant"})
    assert np.array_equal(dcqcn_params(obj, G400, variant="hpcc-ns3"), dcqcn_params(ns3, G400))
    assert np.array_equal(dcqcn_params(SimpleNamespace(), G400),
                          dcqcn_params(CONNECTX_DEFAULTS, G400))
    p = dcqcn_params(ns3, G400)
    assert p[d.DP_G] == 1 / 256 and p[d.DP_ALPHA_INIT] == 1.0 and p[d.DP_BYTE_RESET_BYTES] == 0
    assert p[d.DP_AI_BPS] == 80_000_000 and p[d.DP_HAI_BPS] == 800_000_000


class _Rp:
    """One QP driven as a simulator drives it: ``run_for`` fires its timer events in order."""

    def __init__(self, p):
        self.p, self.t, self.heap = p, 0, []
        self.st = d.dcqcn_state(1, p)
        self.log, self.nlog = np.zeros((10_000, d.NRL)), np.zeros(1, np.int64)

    def _push(self, due):
        if due >= 0:
            heapq.heappush(self.heap, int(due))

    def cnp(self):
        self._push(d.dcqcn_on_cnp(self.st, 0, self.t, self.p, self.log, self.nlog))

    def sent(self, nbytes):
        self._push(d.dcqcn_on_bytes_sent(self.st, 0, self.t, nbytes, self.p, self.log, self.nlog))

    def run_for(self, ns):
        end = self.t + ns
        while self.heap and self.heap[0] <= end:
            t = heapq.heappop(self.heap)
            self._push(d.dcqcn_on_timer(self.st, 0, t, self.p, self.log, self.nlog))
        self.t = end

    def __getattr__(self, name):      # rate, target (Mb/s), alpha (1/1024), stages, byte count
        col = {"rate": d.DQ_RATE_BPS, "target": d.DQ_TARGET_BPS}.get(name)
        if col is not None:
            return int(self.st[0, col]) // 10**6
        if name == "alpha":
            return round(d.dcqcn_alpha(self.st, 0, self.t, self.p) * 1024)
        col = {"by_timer": d.DQ_TIME_STAGE, "by_byte": d.DQ_BYTE_STAGE,
               "byte_count": d.DQ_BYTE_COUNT}[name]
        return int(self.st[0, col])


def _clamped_cut(rp):
    """A CNP, then the next decrease check: target clamped to the rate, a cut, stages reset."""
    rate = rp.rate
    rp.cnp()
    rp.run_for(4000)
    assert rp.target == rate and rp.rate < rate
    assert (rp.by_timer, rp.by_byte, rp.byte_count) == (0, 0, 0)


def test_isekais_own_dcqcn_script():
    """google/isekai ``rdma_roce_cc_dcqcn_test.cc`` ``RateUpdate``, step by step, with its
    options (``RdmaCcDcqcnOptions``: 100,000 Mb/s line, ``rate_to_set_on_first_cnp`` 85,000,
    ``min_rate`` 100 as the test sets, the rest NVIDIA's defaults); each assertion is one of
    its CHECKs. (Its counters are read here where the kernel keeps them.)"""
    us = 1000
    p = dcqcn_params(dict(CONNECTX_DEFAULTS, rate_to_set_on_first_cnp=85_000, rpg_min_rate=100),
                     100_000 * 10**6)
    rp = _Rp(p)
    ai, hai, g, reset = 5, 50, 1019, 32_767 * 64
    rp.cnp()                                                  # the first CNP
    assert (rp.rate, rp.target, rp.alpha) == (85_000, 85_000, 1023)
    rp.run_for(1)
    rate, target = rp.rate, rp.target
    rp.run_for(300 * us)                                      # timer-based increase
    assert rp.target == target and rp.rate == (rate + target) // 2
    rate, target, alpha = rp.rate, rp.target, rp.alpha
    rp.cnp()                                                  # alpha timer with a CNP
    rp.run_for(1 * us)
    assert rp.alpha == g * alpha // 1024 + 1024 - g
    alpha = rp.alpha
    rp.run_for(1 * us)                                        # alpha timer without
    assert rp.alpha == g * alpha // 1024
    rate = rp.rate
    rp.run_for(4 * us - 2 * us)                               # the first rate reduction
    assert rp.rate < rate and rp.target == rate
    rate, target = rp.rate, rp.target
    rp.cnp()                                                  # consecutive reduction
    rp.run_for(4 * us)
    assert rp.rate < rate and rp.target == target
    rate, target = rp.rate, rp.target
    rp.run_for(300 * us - 2)                                  # timer-based increase
    assert (rp.rate, rp.target) == (rate, target)
    rp.run_for(2)
    assert rp.target == target and rp.rate == (rate + target) // 2
    assert (rp.by_timer, rp.by_byte) == (1, 0)
    _clamped_cut(rp)                                          # after a timer increase
    rate, target = rp.rate, rp.target
    rp.sent(reset)                                            # byte-based increase
    assert rp.target == target and rp.rate == (rate + target) // 2
    assert (rp.by_timer, rp.by_byte) == (0, 1)
    _clamped_cut(rp)                                          # after a byte increase
    rate, target = rp.rate, rp.target
    rp.sent(2 * reset)                                        # additive increase
    assert rp.target == target + ai
    assert rp.rate == ((rate + target) // 2 + target + ai) // 2
    assert (rp.by_timer, rp.by_byte) == (0, 2)
    for by_timer, step in ((1, ai), (2, ai), (3, hai)):      # then hyper increase
        rate, target = rp.rate, rp.target
        rp.run_for(300 * us)
        assert rp.target == target + step and rp.rate == (rate + target + step) // 2
        assert (rp.by_timer, rp.by_byte) == (by_timer, 2)
    _clamped_cut(rp)                                          # after hyper increases
    target = rp.target
    for _ in range(1000):                                     # the minimum rate
        rp.cnp()
        rp.run_for(1 * us)
        assert rp.target == target and rp.rate >= 100
        assert (rp.by_timer, rp.by_byte, rp.byte_count) == (0, 0, 0)
    assert rp.rate == 100
