"""An eager DCQCN reaction point in plain Python, written from the sources' rules and not from
the compiled kernels: every timer fires at every period, as ns-3 and isekai schedule them.

hpcc-ns3: HPCC ns-3 ``rdma-hw.cc`` (``cnp_received_mlx``, ``UpdateAlphaMlx``,
``CheckRateDecreaseMlx``, ``RateIncEventTimerMlx``, ``FastRecoveryMlx``, ``ActiveIncreaseMlx``,
``HyperIncreaseMlx``); ``DataRate`` is a uint64 of bit/s, ``DataRate * double`` and
``DataRate / double`` truncate. connectx: google/isekai ``rdma_roce_cc_dcqcn.cc`` with NVIDIA's
parameter names, rates in Mb/s, alpha in 1/1024, a byte counter of ``rpg_byte_reset`` x 64 B.
Equal times: alpha update, increase timer, decrease check, then the scripted CNP or send.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

ALPHA, INC, DEC, INPUT = 0, 1, 2, 3


@dataclass
class Settings:
    variant: str                 # "connectx" or "hpcc-ns3"
    line_bps: int
    ai_bps: int
    hai_bps: int
    min_bps: int
    first_cnp_bps: int = 0
    g: float = 1 / 256           # hpcc-ns3 EwmaGain
    dce_tcp_g: int = 1019        # connectx
    alpha_init: float = 1.0      # hpcc-ns3: 1; connectx: initial_alpha_value (1/1024)
    gd: int = 11
    min_dec_fac: int = 50
    alpha_us: int = 1
    dec_us: int = 4
    inc_us: int = 300
    byte_reset_bytes: int = 0
    threshold: int = 1
    clamp: bool = False
    clamp_after_time_inc: bool = True


@dataclass
class ReactionPoint:
    s: Settings
    rate: int = 0
    target: int = 0
    alpha: float = 0.0
    first_cnp: bool = True
    alpha_cnp: bool = False
    dec_cnp: bool = False
    time_stage: int = 0
    byte_stage: int = 0
    byte_count: int = 0
    inc_gen: int = 0             # timer generation: a restarted timer cancels the old one
    changes: list = field(default_factory=list)    # (t ns, old bit/s, new bit/s)
    cuts: list = field(default_factory=list)
    now: int = 0
    _q: list = field(default_factory=list)
    _n: int = 0

    def __post_init__(self) -> None:
        self.rate = self.target = self.s.line_bps

    # -- scheduling ------------------------------------------------------------------------
    def _at(self, t, kind, arg=None) -> None:
        self._n += 1
        heapq.heappush(self._q, (t, kind, self._n, arg))

    def run(self, inputs, end_ns) -> None:
        """``inputs``: (t ns, "cnp") or (t ns, "bytes", n); run every event up to ``end_ns``."""
        for x in inputs:
            self._at(x[0], INPUT, x)
        while self._q and self._q[0][0] <= end_ns:
            t, kind, _, arg = heapq.heappop(self._q)
            self.now = t
            old = self.rate
            if kind == ALPHA:
                self.update_alpha(t)
            elif kind == INC:
                if arg == self.inc_gen:
                    self._at(t + self.s.inc_us * 1000, INC, self.inc_gen)
                    self.increase(by_bytes=False)
                    self.time_stage += 1
            elif kind == DEC:
                self.check_rate_decrease(t)
            elif arg[1] == "cnp":
                self.cnp(t)
            else:
                self.sent(arg[2])       # logs each byte-counter change itself
                continue
            if self.rate != old:
                self.changes.append((t, old, self.rate))

    # -- the rules -------------------------------------------------------------------------
    def cnp(self, t) -> None:
        s = self.s
        self.alpha_cnp = True
        self.dec_cnp = True
        if self.first_cnp:
            self.first_cnp = False
            self.alpha = s.alpha_init
            self.alpha_cnp = False
            self._at(t + s.alpha_us * 1000, ALPHA)
            if s.variant == "hpcc-ns3":
                self._at(t + s.dec_us * 1000 + 1, DEC)     # "+1 ns: after the alpha update"
            else:
                self._at(t + s.dec_us * 1000, DEC)
                self._restart_increase_timer(t)          # isekai: from the first CNP
            if s.first_cnp_bps:
                self.rate = self.target = min(s.first_cnp_bps, s.line_bps)
                if s.variant == "connectx":
                    self.dec_cnp = False                 # the set rate is this CNP's cut

    def update_alpha(self, t) -> None:
        s = self.s
        if s.variant == "hpcc-ns3":
            self.alpha = (1 - s.g) * self.alpha + (s.g if self.alpha_cnp else 0.0)
        else:
            G = s.dce_tcp_g
            a = int(self.alpha)
            self.alpha = min(G * a // 1024 + 1024 - G, 1023) if self.alpha_cnp else G * a // 1024
        self.alpha_cnp = False
        self._at(t + s.alpha_us * 1000, ALPHA)

    def check_rate_decrease(self, t) -> None:
        s = self.s
        self._at(t + s.dec_us * 1000, DEC)
        if not self.dec_cnp:
            return
        if s.clamp or self.byte_stage > 0 or (s.clamp_after_time_inc and self.time_stage > 0):
            self.target = self.rate
        if s.variant == "hpcc-ns3":
            self.rate = max(s.min_bps, int(self.rate * (1 - self.alpha / 2 ** (s.gd - 10))))
        else:
            r = self.rate // 1_000_000
            cut = min(r * int(self.alpha) >> s.gd, r * (100 - s.min_dec_fac) // 100)
            self.rate = max(s.min_bps, (r - cut) * 1_000_000)
        self.time_stage = self.byte_stage = self.byte_count = 0
        self.dec_cnp = False
        self.cuts.append(t)
        self._restart_increase_timer(t)

    def _restart_increase_timer(self, t) -> None:
        self.inc_gen += 1
        self._at(t + self.s.inc_us * 1000, INC, self.inc_gen)

    def increase(self, by_bytes) -> None:
        s = self.s
        if s.variant == "hpcc-ns3":
            if self.time_stage == s.threshold:
                self.target = min(self.target + s.ai_bps, s.line_bps)
            elif self.time_stage > s.threshold:
                self.target = min(self.target + s.hai_bps, s.line_bps)
            self.rate = self.rate // 2 + self.target // 2
        else:
            mb = 1_000_000
            r, tg, line = self.rate // mb, self.target // mb, s.line_bps // mb
            if min(self.time_stage, self.byte_stage) > s.threshold:
                tg += s.hai_bps // mb
            elif max(self.time_stage, self.byte_stage) >= s.threshold:
                tg += s.ai_bps // mb
            tg = min(tg, line)
            self.rate, self.target = (r + tg) // 2 * mb, tg * mb

    def sent(self, nbytes) -> None:
        s = self.s
        if self.first_cnp or s.byte_reset_bytes == 0:
            return
        self.byte_count += nbytes
        while self.byte_count >= s.byte_reset_bytes:
            self.byte_count -= s.byte_reset_bytes
            old = self.rate
            self.increase(by_bytes=True)
            self.byte_stage += 1
            if self.rate != old:
                self.changes.append((self.now, old, self.rate))
