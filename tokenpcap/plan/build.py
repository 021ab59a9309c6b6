"""Stage 3: the analytic traffic plan of one training iteration, and the per-call API.

``build_plan(scenario, tokens=None, *, scale=1) -> Plan``. A :class:`Plan` holds:

* ``scale``: every call's ``message_bytes`` is the scenario's divided by it
  (:func:`tokenpcap.plan.calls.scaled_bytes`: whole elements, at least one per piece of the call),
  so rows, totals and the pcap estimate describe the iteration that ``generate --scale`` writes
  (one iteration; a capture of N iterations holds N times the per-iteration totals);

* ``layout``: the :class:`tokenpcap.collectives.layout.RankLayout` (rank ↔ (pp, dp, tp), groups, node, NIC);
* ``rows``: one :class:`PhaseRow` per phase label (``tokenpcap.records.phase_label``, e.g.
  ``"tp/forward/AllReduce"``, ``"dp/backward/AllReduce"``) with the bytes every rank sends on its
  NIC and on NVLink, computed by :mod:`tokenpcap.collectives.traffic` (the same function the collectives stage
  uses, so totals agree to the byte);
* ``totals`` per iteration and ``epoch`` totals over the corpus (whole iterations of one pass,
  incomplete global batches dropped as Megatron-LM does: :meth:`Plan.epoch`);
* ``pcap``: the expected size of a capture of every NIC-sent packet of one iteration (estimate,
  see :func:`pcap_estimate`).

Per-call API for the schedule (stage 4/5), stable::

    plan.layout                              # RankLayout
    plan.calls(iteration=0)                  # Iterator[CollectiveCall], every call of every group
    plan.calls(iteration=0, ranks={0, 8})    # only calls whose group contains one of the ranks
    plan.calls_per_iteration                 # int; call_id = iteration * this + index
    plan.call_table(iteration=0)             # CallTable: the same calls as columns
    plan.call(call_id)                       # CollectiveCall: one call, made alone
    plan.algorithm                           # scenario collectives.algorithm
    tokenpcap.collectives.traffic.hops(call, plan.algorithm, plan.layout)            # point-to-point hops
    tokenpcap.collectives.traffic.per_rank_bytes(call, plan.algorithm, plan.layout)  # (nic, nvlink) per rank

:class:`tokenpcap.plan.calls.CollectiveCall` lists what a call carries (call_id, dim, phase, collective,
group in ring order, message_bytes S, elem_bytes, layer, microbatch, stage, src/dst for SendRecv,
token_start/token_end and seq_start/seq_end, bucket, recompute, op).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np

from tokenpcap.plan.calls import CollectiveCall, Family, build_families, scale_families
from tokenpcap.plan.calltable import CallTable, call_by_id, expand
from tokenpcap.errors import InfeasiblePlanError, InputError
from tokenpcap.collectives.layout import RankLayout
from tokenpcap.records import COLLECTIVES, DIMS, PHASES
from tokenpcap.config.profiles import Scenario, check_feasible
from tokenpcap.plan.feasibility import check_plan_size
from tokenpcap.tokens import TokenizedCorpus
from tokenpcap.collectives.rails import rank_nic_bytes
from tokenpcap.collectives.traffic import CallLike, CallShape, nic_hop_sizes, per_rank_bytes
from tokenpcap.collectives.algorithms import effective_algorithm
from tokenpcap.collectives.p2p_chunks import (NCCL_STEPS, P2pNet, channels_per_net_peer,
                                              channels_per_nvlink_peer, p2p_chunk_bytes)
from tokenpcap.collectives.transfers import P2P_ALGORITHMS, Transfers, transfers
from tokenpcap.collectives.tuning import compcap_of
from tokenpcap.plan.protocol import CallProtocols
from tokenpcap.plan.sizing import pcap_estimate
from tokenpcap.plan.wirebytes import p2p_wire_bytes, protocol_wire_bytes
from tokenpcap.plan.report import plan_json
from tokenpcap.plan.rows import PhaseRow, bytes_per_nic, wire_time_ns
from tokenpcap.plan.workload import workload_families

__all__ = ["CollectiveCall", "Plan", "build_plan", "rank_layout", "scenario_p2p_net"]


@dataclass
class Plan:
    """The plan of one iteration (module docstring). Build it with :func:`build_plan`."""

    scenario: Scenario
    layout: RankLayout
    families: list[Family]
    rows: list[PhaseRow]
    nic_bytes_per_rank: np.ndarray      # int64 (world_size,) all phases
    nvlink_bytes_per_rank: np.ndarray   # int64 (world_size,)
    nic_bytes_by_rank_nic: np.ndarray   # int64 (world_size, nics_per_node) all phases
    pcap: dict
    tokens: TokenizedCorpus | None = None
    scale: int = 1
    #: Network messages of one iteration's Simple SendRecv and AllToAll calls between nodes
    #: (NCCL's p2p chunks, :mod:`tokenpcap.collectives.p2p_chunks`), among ``pcap["messages"]``:
    #: the engine's memory estimate counts them apart (:mod:`tokenpcap.schedule.limits`).
    p2p_messages: int = 0

    @property
    def algorithm(self) -> str:
        return self.scenario.collectives.algorithm

    def line_protocols(self) -> np.ndarray | None:
        """uint8 ``(calls_per_iteration,)``: per call index (``call_id % calls_per_iteration``)
        the :data:`tokenpcap.wire.lines.LINE_PROTOCOLS` code of its protocol (0 Simple, 1 LL,
        2 LL128), what the lowering marks the data packets with; None when every call is
        Simple."""
        if self._resolver().all_simple:
            return None
        codes = {"Simple": 0, "LL": 1, "LL128": 2}
        return np.fromiter((codes[self.protocol(c)] for c in self.calls(0)), np.uint8,
                           self.calls_per_iteration)

    def _resolver(self) -> CallProtocols:
        res = self.__dict__.get("_protocols")
        if res is None:
            res = self.__dict__["_protocols"] = CallProtocols(self.scenario, self.layout)
        return res

    def protocol(self, call: CallLike) -> str:
        """NCCL's protocol of a call (``LL``, ``LL128``, ``Simple``): :mod:`tokenpcap.plan.protocol`."""
        return self._resolver().protocol(call.collective, tuple(call.group), int(call.message_bytes))

    def channels(self, call: CallLike) -> int:
        """The channels a call runs on (:meth:`tokenpcap.plan.protocol.CallProtocols.channels`)."""
        return self._resolver().channels(call.collective, tuple(call.group), int(call.message_bytes))

    def call_transfers(self, call: CallLike, channels: int | None = None) -> Transfers:
        """The transfers of a call as the schedule sends them: its channels (or ``channels``),
        the scenario's slice, its protocol, NCCL's network p2p path (:meth:`p2p_net`) and the
        ``NCCL_STEPS`` window (:func:`tokenpcap.collectives.transfers.transfers`); p2p calls
        with ``NCCL_P2P_NET_CHUNKSIZE: 0`` are plain flows, without the window."""
        net = self.p2p_net()
        flows = net is None and effective_algorithm(call.collective, self.algorithm) in P2P_ALGORITHMS
        return transfers(call, self.algorithm, self.layout,
                         self.channels(call) if channels is None else channels,
                         self.scenario.collectives.slice_bytes, self.protocol(call),
                         net, 0 if flows else NCCL_STEPS,
                         empty_steps=self.scenario.collectives.empty_ring_steps)

    def p2p_net(self) -> P2pNet | None:
        """NCCL's network p2p path of the scenario (:func:`scenario_p2p_net`)."""
        if "_p2p_net" not in self.__dict__:
            self.__dict__["_p2p_net"] = scenario_p2p_net(self.scenario)
        return self.__dict__["_p2p_net"]

    @property
    def microbatches(self) -> int:
        """Microbatches of an iteration (a workload scenario: 1, its calls' one pass)."""
        if self.scenario.workload is not None:
            return 1
        t = self.scenario.training
        return t.global_batch_size // (t.micro_batch_size * self.layout.dp)

    @property
    def calls_per_iteration(self) -> int:
        return sum(f.n_calls for f in self.families)

    @property
    def tokens_per_iteration(self) -> int:
        """Tokens one iteration trains on (0 for a workload scenario: it has no model)."""
        if self.scenario.model is None:
            return 0
        return self.scenario.training.global_batch_size * self.scenario.model.seq_length

    def calls(self, iteration: int = 0, ranks: Iterable[int] | None = None
              ) -> Iterator[CollectiveCall]:
        """Every collective call of ``iteration`` (only those whose group holds one of ``ranks``
        when given), in the fixed enumeration order; ``call_id`` is the same with or without
        ``ranks``.

        Raises:
            InputError: a negative iteration or a rank outside the world.
        """
        if iteration < 0:
            raise InputError(f"iteration {iteration} < 0")
        sel = None
        if ranks is not None:
            sel = frozenset(int(r) for r in ranks)
            bad = [r for r in sel if not 0 <= r < self.layout.world_size]
            if bad:
                raise InputError(f"ranks {sorted(bad)} outside [0, {self.layout.world_size})")
        return expand(self.families, self.scenario, self.layout, iteration, sel)

    def call_table(self, iteration: int = 0) -> CallTable:
        """Every call of ``iteration`` as columns (:class:`~tokenpcap.plan.calltable.CallTable`:
        12 bytes a call; its rows are :meth:`calls` in order).

        Raises:
            InputError: a negative iteration.
        """
        if iteration < 0:
            raise InputError(f"iteration {iteration} < 0")
        return CallTable.of_iteration(self.families, self.scenario, self.layout, iteration)

    def call(self, call_id: int) -> CollectiveCall:
        """The call ``call_id`` (of any iteration), equal to the one :meth:`calls` yields.

        Raises:
            KeyError: a negative ``call_id`` (or a plan without calls).
        """
        return call_by_id(self.families, self.scenario, self.layout, call_id)

    def nic_bytes_per_nic(self) -> np.ndarray:
        """Bytes each NIC sends in one iteration: int64 ``(nodes * nics_per_node,)``."""
        return bytes_per_nic(self.nic_bytes_by_rank_nic, self.layout)

    def totals(self) -> dict:
        """Totals of one iteration (all ranks, all phases)."""
        per_nic = self.nic_bytes_per_nic()
        link = self.scenario.cluster.link_gbps
        return {
            "nic_bytes": int(self.nic_bytes_per_rank.sum()),
            "nvlink_bytes": int(self.nvlink_bytes_per_rank.sum()),
            "calls": self.calls_per_iteration,
            "nic_bytes_per_rank_max": int(self.nic_bytes_per_rank.max(initial=0)),
            "nic_bytes_per_nic_max": int(per_nic.max(initial=0)),
            "wire_time_ns": wire_time_ns(int(per_nic.max(initial=0)), link),
            "tokens": self.tokens_per_iteration,
        }

    def epoch(self) -> dict | None:
        """One epoch of the corpus, or ``None`` without tokens.

        An epoch is what Megatron-LM trains on one pass over the corpus: ``sequences = tokens //
        seq_length`` whole samples, taken ``global_batch_size`` at a time; the last incomplete
        global batch is dropped (``MegatronPretrainingSampler(drop_last=True)``). So an epoch has
        ``iterations = sequences // global_batch_size`` whole iterations, and its byte totals are
        those of that many iterations (integers: no partial iteration is trained).
        ``iterations_exact`` is ``tokens / tokens_per_iteration`` (how many iterations the corpus
        would make, for comparison); ``dropped_sequences``/``dropped_tokens`` what the dropped
        batch and the tail shorter than one sequence leave out. A corpus that does not fill one
        global batch has ``iterations == 0``, zero per-epoch bytes and ``fills_batch`` False:
        training on it wraps around the corpus, so one iteration reads it
        ``reads_per_iteration = tokens_per_iteration / tokens`` times over.
        """
        if self.tokens is None:
            return None
        n, per = self.tokens.tokens, self.tokens_per_iteration
        g = self.scenario.training.global_batch_size
        seqs = n // self.scenario.model.seq_length
        whole = seqs // g
        tot = self.totals()
        return {
            "tokens": n,
            "sequences": seqs,
            "iterations": whole,
            "iterations_exact": n / per,
            "fills_batch": whole > 0,
            "reads_per_iteration": per / n if n else None,
            "dropped_sequences": seqs - whole * g,
            "dropped_tokens": n - whole * per,
            "nic_bytes": tot["nic_bytes"] * whole,
            "nvlink_bytes": tot["nvlink_bytes"] * whole,
            "pcap_bytes": self.pcap["file_bytes"] * whole,
        }

    def to_json(self) -> dict:
        """The plan as plain JSON types (:func:`tokenpcap.plan.report.plan_json`)."""
        return plan_json(self)


def scenario_p2p_net(scenario: Scenario) -> P2pNet | None:
    """The :class:`~tokenpcap.collectives.p2p_chunks.P2pNet` of a scenario: its
    ``collectives.NCCL_PXN_DISABLE``, ``NCCL_P2P_PXN_LEVEL``, ``NCCL_CROSS_NIC`` and
    ``NCCL_P2P_NET_CHUNKSIZE``, and the channels of a network and an NVLink peer on its
    cluster (the NIC's and the NVLink's rates, the GPU's compute capability). None with
    ``NCCL_P2P_NET_CHUNKSIZE: 0``: p2p is cut like a collective, on the sender's own NIC."""
    c, cl = scenario.collectives, scenario.cluster
    if c.NCCL_P2P_NET_CHUNKSIZE == 0:
        return None
    return P2pNet(pxn_level=0 if c.NCCL_PXN_DISABLE else c.NCCL_P2P_PXN_LEVEL,
                  cross_nic=c.NCCL_CROSS_NIC,
                  chunk_bytes=p2p_chunk_bytes(c.NCCL_P2P_NET_CHUNKSIZE),
                  net_peer_channels=channels_per_net_peer(
                      cl.link_gbps, max(1, cl.nics_per_node // cl.gpus_per_node)),
                  nvlink_peer_channels=channels_per_nvlink_peer(cl.nvlink_gbps,
                                                                compcap_of(cl.gpu.name)))


def rank_layout(scenario: Scenario) -> RankLayout:
    """The scenario's :class:`~tokenpcap.collectives.layout.RankLayout` (its parallelism on its
    cluster's nodes and NICs). Raises: InputError: the sizes do not fit (see RankLayout)."""
    p, c = scenario.parallelism, scenario.cluster
    return RankLayout(dp=p.dp, tp=p.tp, pp=p.pp, ep=p.ep, cp=p.cp, gpus_per_node=c.gpus_per_node,
                      nics_per_node=c.nics_per_node)


def build_plan(scenario: Scenario, tokens: TokenizedCorpus | None = None, *,
               scale: int = 1) -> Plan:
    """Plan one training iteration of ``scenario`` (``tokens`` adds per-epoch totals), every
    message size divided by ``scale`` (module docstring; ``Plan.scale``). A workload scenario's
    plan is its calls' one pass (:mod:`tokenpcap.plan.workload`), on the same path.

    Raises:
        InputError: ``scale`` is not an integer >= 1; ``tokens`` for a workload scenario.
        InfeasiblePlanError: the scenario's values cannot be combined
            (:func:`tokenpcap.config.profiles.check_feasible`), or ``tokens`` were made with another
            sequence length than the model's.
    """
    if isinstance(scale, bool) or not isinstance(scale, (int, np.integer)) or scale < 1:
        raise InputError(f"scale: got {scale!r}, expected an integer >= 1")
    scale = int(scale)
    check_feasible(scenario)
    if scenario.workload is not None:
        if tokens is not None:
            raise InputError(f"{scenario.path or '<scenario>'}: a workload scenario has no "
                             "model: it takes no tokens")
        layout = rank_layout(scenario)
        fams = workload_families(scenario)
    else:
        check_plan_size(scenario)
        if tokens is not None and tokens.seq_length != scenario.model.seq_length:
            raise InfeasiblePlanError(
                f"{scenario.path or '<scenario>'}: tokens.seq_length: got {tokens.seq_length}, "
                f"expected the model's seq_length {scenario.model.seq_length}")
        layout = rank_layout(scenario)
        fams = build_families(scenario, layout)
    alg = scenario.collectives.algorithm
    fams = scale_families(fams, scale, alg, layout, scenario.collectives.channels)
    world = layout.world_size
    acc: dict[str, dict] = {}
    nic_all = np.zeros(world, dtype=np.int64)
    nvl_all = np.zeros(world, dtype=np.int64)
    rn_all = np.zeros((world, layout.nics_per_node), dtype=np.int64)
    channels = scenario.collectives.channels
    slice_bytes = scenario.collectives.slice_bytes
    protos = CallProtocols(scenario, layout)
    p2p = scenario_p2p_net(scenario)
    nic_hops: dict[tuple[int, int], int] = defaultdict(int)   # (hop bytes, elem bytes) -> hops
    wire_msgs: dict[int, int] = defaultdict(int)   # LL/LL128 message wire bytes -> messages
    p2p_msgs = 0                                   # of which Simple network p2p messages
    for f in fams:
        a = acc.get(f.label)
        if a is None:
            a = acc[f.label] = {"f": f, "nic": np.zeros(world, np.int64),
                                "rn": np.zeros((world, layout.nics_per_node), np.int64),
                                "nvl": np.zeros(world, np.int64), "cnt": np.zeros(world, np.int64),
                                "pay": np.zeros(world, np.int64),
                                "protocols": defaultdict(int), "forced": defaultdict(int),
                                "sizes": defaultdict(int), "gmax": 0, "calls": 0}
        n = len(f.insts)
        for g in f.groups:
            call = CallShape(f.collective, g, f.message_bytes, f.elem_bytes)
            rb = per_rank_bytes(call, alg, layout)
            idx = np.asarray(g, dtype=np.int64)
            a["pay"][idx] += rb.nic_bytes * n
            a["cnt"][idx] += n
            proto = protos.protocol(f.collective, g, f.message_bytes)
            ch = protos.channels(f.collective, g, f.message_bytes)
            forced = protos.forced(f.collective, g, f.message_bytes)
            if forced is not None:
                a["forced"][forced] += n
            if proto != "Simple":
                a["protocols"][proto] += n
            is_p2p = (p2p is not None
                      and effective_algorithm(f.collective, alg) in P2P_ALGORITHMS)
            # a ring AllReduce's empty steps are messages (collectives.empty_steps)
            empty = (scenario.collectives.empty_ring_steps and f.collective == "AllReduce"
                     and effective_algorithm(f.collective, alg) == "ring")
            if proto != "Simple" or (ch != channels and not is_p2p) or empty:
                w = protocol_wire_bytes(call, alg, layout, ch, slice_bytes, proto, p2p, empty)
                a["nic"][idx] += w.nic_bytes * n
                a["rn"][idx] += w.by_nic * n
                a["nvl"][idx] += w.nvlink_bytes * n
                for size, k in w.nic_message_sizes:
                    wire_msgs[size] += k * n
                continue
            if is_p2p and rb.nic_bytes.any():
                w = p2p_wire_bytes(call, alg, layout, ch, p2p)
                a["nic"][idx] += w.nic_bytes * n
                a["rn"][idx] += w.by_nic * n
                a["nvl"][idx] += w.nvlink_bytes * n
                for size, k in w.nic_message_sizes:
                    wire_msgs[size] += k * n
                    p2p_msgs += k * n
                continue
            a["nic"][idx] += rb.nic_bytes * n
            if rb.nic_bytes.any():
                a["rn"][idx] += rank_nic_bytes(call, alg, layout, channels) * n
            a["nvl"][idx] += rb.nvlink_bytes * n
            for size, k in nic_hop_sizes(call, alg, layout):
                nic_hops[size, f.elem_bytes] += k * n
        a["sizes"][f.message_bytes] += f.n_calls
        a["gmax"] = max(a["gmax"], len(f.groups[0]))
        a["calls"] += f.n_calls
    rows = []
    for label, a in acc.items():
        f = a["f"]
        nic_all += a["nic"]
        nvl_all += a["nvl"]
        rn_all += a["rn"]
        part = a["cnt"] > 0
        nic_max = int(a["nic"].max(initial=0))
        rows.append(PhaseRow(
            name=label, dim=f.dim, phase=f.phase, collective=f.collective, calls=a["calls"],
            count=int(a["cnt"].max(initial=0)), group_size=a["gmax"],
            message_bytes=max(a["sizes"]), sizes=dict(a["sizes"]), ranks=int(part.sum()),
            nic_bytes=int(a["nic"].sum()), nvlink_bytes=int(a["nvl"].sum()),
            nic_bytes_per_rank=nic_max, nvlink_bytes_per_rank=int(a["nvl"].max(initial=0)),
            wire_time_ns=wire_time_ns(nic_max, scenario.cluster.link_gbps),
            nic_payload_bytes=int(a["pay"].sum()), protocols=dict(a["protocols"]),
            nccl_forced=dict(a["forced"]),
            nic_bytes_by_rank=a["nic"], nic_bytes_by_rank_nic=a["rn"]))
    hop = np.array(list(nic_hops.keys()) or np.zeros((0, 2)), np.int64).reshape(-1, 2)
    pcap = pcap_estimate(hop[:, 0], np.fromiter(nic_hops.values(), np.int64, len(nic_hops)),
                         scenario, hop_elem_bytes=hop[:, 1],
                         messages=tuple(sorted(wire_msgs.items())))
    order = {n: i for i, n in enumerate(DIMS)}, {n: i for i, n in enumerate(PHASES)}, \
        {n: i for i, n in enumerate(COLLECTIVES)}
    rows.sort(key=lambda r: (order[0][r.dim], order[1][r.phase], order[2][r.collective]))
    return Plan(scenario=scenario, layout=layout, families=fams, rows=rows,
                nic_bytes_per_rank=nic_all, nvlink_bytes_per_rank=nvl_all,
                nic_bytes_by_rank_nic=rn_all, pcap=pcap, p2p_messages=p2p_msgs,
                tokens=tokens, scale=scale)

