"""One iteration of the plan as Chakra execution traces for ASTRA-sim (``export --to chakra``).

ASTRA-sim 2.0 reads a workload as one Chakra ET file per rank, ``<prefix>.<rank>.et``
(astra-sim ``astra-sim/workload/Workload.cc``: ``et_filename + "." + id + ".et"``), each a
varint-length-delimited protobuf stream: one ``GlobalMetadata``, then the ``Node`` s
(mlcommons/chakra ``schema/protobuf/et_def.proto``; encoder :mod:`tokenpcap.export.chakra_pb`).
``-o PREFIX`` writes, for a world of ``W`` ranks:

* ``PREFIX.<r>.et`` for ``r`` in ``[0, W)``: rank ``r``'s program of iteration 0
  (:func:`tokenpcap.schedule.program.build_programs`, or
  :func:`tokenpcap.schedule.workload.workload_programs` for a workload scenario), in order:

  - a :class:`~tokenpcap.schedule.program.Compute` becomes a ``COMP_NODE`` of
    ``duration_micros`` = its ns rounded to the nearest microsecond (half up; ASTRA-sim replays
    ``duration_micros * 1000`` ns, ``Workload::issue_replay``), the exact ns kept in the
    attribute ``duration_ns`` (int64; the Chakra feeder keeps unknown attributes in
    ``other_attrs``, ``src/feeder/et_feeder_node.cpp``), ``is_cpu_op`` false;
  - a call (:class:`~tokenpcap.schedule.program.Call`) of a collective becomes a
    ``COMM_COLL_NODE`` with ``comm_type`` (int64, :data:`COMM_TYPE_OF`), ``comm_size`` (int64,
    :func:`comm_size_bytes`: the buffer each rank passes in, as ASTRA-sim's collectives read it:
    the plan's ``message_bytes`` ``S`` (the nccl-tests buffer) for AllReduce, ReduceScatter,
    AllToAll and Broadcast, ``S / n`` for an AllGather of ``n`` ranks, whose ring sends
    ``comm_size`` per step and ends with ``n * comm_size``, astra-sim
    ``astra-sim/system/astraccl/native_collectives/collective_algorithm/Ring.cc``; an ASTRA-sim
    run of ``S`` takes ``n`` times too long, docs/chakra.md), ``buffer_bytes`` (int64, ``S``)
    and ``pg_name`` (string, the id of the call's rank set in ``PREFIX.comm_groups.json``, the
    ``--comm-group-configuration`` file ASTRA-sim reads: ``{"1": [ranks...], ...}``; ids from 1,
    since ASTRA-sim reads ``""`` and ``"0"`` as every rank, ``Workload::extract_comm_group``);
  - a SendRecv call (pipeline activations and gradients, ring-attention steps, a workload's
    point-to-point transfers) becomes a ``COMM_SEND_NODE`` on its sender and a
    ``COMM_RECV_NODE`` on its receiver, ``comm_src``, ``comm_dst`` (int32 ranks), ``comm_size``,
    ``comm_tag`` (int32): the ordinal of the transfer among all transfers from that sender to
    that receiver in the order (``call_id``, transfer index), which both sides compute alike;
  - with ``p2p`` (``--chakra-p2p``) every call, collective or not, becomes its transfers as our
    schedule runs them (:meth:`tokenpcap.plan.build.Plan.call_transfers`: channels, slices,
    protocol): per transfer the rank sends a ``COMM_SEND_NODE``, per transfer it receives a
    ``COMM_RECV_NODE``, each depending on the rank's own nodes of the transfers ours waits for
    (:attr:`tokenpcap.collectives.transfers.Transfers.deps`; a dependency on a transfer between
    two other ranks is carried by the receive that follows from it), so ASTRA-sim's network
    backend carries exactly our hops. Transfers inside a node (NVLink) are sends and receives
    too, marked ``nvlink`` true.

* Dependencies, all in ``data_deps`` (the only list the Chakra feeder resolves,
  ``src/feeder/et_feeder.cpp`` ``addNode``; ``ctrl_deps`` stay empty): program order: each
  node depends on the node(s) the rank last had to wait for (the last compute, blocking call or
  receive; a call in p2p form ends at its nodes without local dependents). A blocking call
  (TP, EP, ZeRO-3 gathers) and a receive advance that chain; a send does not (started, never
  waited for). An asynchronous call (DP gradient buckets, the optimizer's parameter gathers)
  depends on the chain where it is launched and on the previous asynchronous call (one NCCL
  stream per rank serialises them), and does not advance the chain: the backward goes on beside
  the buckets; a :class:`~tokenpcap.schedule.program.Wait` joins them (the next node also
  depends on the last asynchronous call). Node ids are 0, 1, ... in program order, every
  dependency on a smaller id.

* ``PREFIX.comm_groups.json``: the groups; ``PREFIX.summary.json``: node counts per type, the
  compute ns exact and as written, the rounding error (written - exact, ns: total, largest per
  node), the calls whose ``comm_type`` ASTRA-sim's ``Workload::issue_coll_comm`` does not
  generate (it generates AllReduce, AllToAll, AllGather, ReduceScatter; Broadcasts are written
  with ``BROADCAST``, so run such a workload with ``p2p``).

Memory: one rank's calls and program at a time (files are streamed node by node); the groups
map is built in one pass over the iteration's calls.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from tokenpcap.errors import InputError
from tokenpcap.export import chakra_pb as pb
from tokenpcap.export.registry import atomic_text, register_export
from tokenpcap.schedule.program import Call, CallMode, Compute, Wait

__all__ = ["COMM_TYPE_OF", "SCHEMA", "ChakraSummary", "comm_groups", "comm_size_bytes",
           "rank_trace", "write_chakra"]

#: Our collective -> Chakra ``CollectiveCommType``.
COMM_TYPE_OF = {"AllReduce": pb.COMM_TYPES["ALL_REDUCE"],
                "AllGather": pb.COMM_TYPES["ALL_GATHER"],
                "ReduceScatter": pb.COMM_TYPES["REDUCE_SCATTER"],
                "AllToAll": pb.COMM_TYPES["ALL_TO_ALL"],
                "Broadcast": pb.COMM_TYPES["BROADCAST"]}
#: What ASTRA-sim's Workload::issue_coll_comm generates.
_ASTRA_SIM_COLLECTIVES = frozenset({"AllReduce", "AllGather", "ReduceScatter", "AllToAll"})
#: GlobalMetadata ``schema`` attribute, as Chakra's converters write it (text_converter.py).
SCHEMA = "1.0.2-chakra.1.0.0"
_INT32_MAX = (1 << 31) - 1
_ADVANCE = (CallMode.BLOCK, CallMode.RECV)


@dataclass
class ChakraSummary:
    """What an export wrote (``PREFIX.summary.json``). ``*_ns``: integer ns."""

    granularity: str
    ranks: int
    nodes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    compute_ns: int = 0
    compute_written_ns: int = 0
    rounding_error_ns: int = 0
    max_node_rounding_error_ns: int = 0
    not_generated_by_astra_sim: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["nodes"] = dict(sorted(self.nodes.items()))
        d["not_generated_by_astra_sim"] = dict(sorted(self.not_generated_by_astra_sim.items()))
        return d


def comm_size_bytes(collective: str, message_bytes: int, ranks: int) -> int:
    """A collective's ``comm_size``: the bytes each of its ``ranks`` ranks passes in (module
    docstring): ``message_bytes`` (the nccl-tests buffer ``S``), divided by ``ranks`` for an
    AllGather (``S`` is its output, ``ranks`` times the input; exact for our plans, rounded up
    otherwise)."""
    return -(-message_bytes // ranks) if collective == "AllGather" else message_bytes


def comm_groups(plan) -> dict[tuple[int, ...], int]:  # type: ignore[no-untyped-def]
    """``{sorted ranks: pg id}`` of the collective calls of iteration 0 (ids 1, 2, ... in the
    plan's call order; SendRecv calls have no group)."""
    ids: dict[tuple[int, ...], int] = {}
    for c in plan.calls(0):
        if c.collective != "SendRecv":
            ids.setdefault(tuple(sorted(c.group)), len(ids) + 1)
    return ids


def _programs(plan, rank: int, calls: list) -> list:  # type: ignore[no-untyped-def]
    """Rank ``rank``'s instructions of iteration 0 (``calls``: its calls)."""
    s, lay = plan.scenario, plan.layout
    wl = s.workload
    if wl is not None:
        if wl.flows is not None:
            raise InputError(f"{s.name}: workload: got a flows workload, expected calls (the "
                             "chakra export writes collective calls, a flows workload has none)")
        from tokenpcap.schedule.workload import workload_programs

        return workload_programs(calls, range(rank, rank + 1), wl.start_offsets_ns,
                                 plan.scale)[rank]
    from tokenpcap.model import scenario_shards
    from tokenpcap.plan.pipeline import chunk_layers
    from tokenpcap.schedule.compute import stage_times
    from tokenpcap.schedule.program import Overlap, build_programs

    times = [stage_times(s, st, plan.scale) for st in range(lay.pp)]
    return build_programs(calls, range(rank, rank + 1), lay.coords, scenario_shards(s), times,
                          plan.microbatches, 0, s.training.recompute,
                          chunks=[chunk_layers(s, st) for st in range(lay.pp)],
                          overlap=Overlap.of(s.training))[rank]


class _Rank:
    """The nodes of one rank, made in program order (module docstring)."""

    def __init__(self, plan, rank: int, groups: dict, p2p: bool,  # type: ignore[no-untyped-def]
                 summary: ChakraSummary):
        self.plan, self.rank, self.groups, self.p2p, self.sum = plan, rank, groups, p2p, summary
        self.next_id = 0
        self.chain: list[int] = []       # the nodes the rank last waited for
        self.stream: list[int] = []      # the last asynchronous call's end nodes
        self.join: list[int] = []        # stream nodes a Wait adds to the next chain node
        self.posted: dict[int, list[int]] = {}   # a call started (SEND) to be waited for later
        self.tag_base: dict[int, dict[tuple[int, int], int]] = {}

    def _emit(self, name: str, kind: str, deps, **kw) -> tuple[int, bytes]:  # type: ignore[no-untyped-def]
        i = self.next_id
        self.next_id += 1
        self.sum.nodes[kind] += 1
        return i, pb.frame(pb.node(i, name, kind, data_deps=sorted(set(deps)), **kw))

    def _pairs(self, c) -> list[tuple[int, int]]:  # type: ignore[no-untyped-def]
        """(src, dst) of the rank's transfers of call ``c`` in transfer order."""
        if not self.p2p:
            return [(c.src, c.dst)] if c.collective == "SendRecv" else []
        return [(s, d) for _, s, d, _, _ in self._local(c)[0]]

    def _local(self, c):  # type: ignore[no-untyped-def]
        """The rank's transfers of call ``c`` as ``(index, src, dst, bytes, nic)`` in transfer
        order, and every transfer's dependencies."""
        tr = self.plan.call_transfers(c)
        t = tr.table
        ks = sorted(tr.by_src.get(self.rank, ()) + tr.by_dst.get(self.rank, ()))
        src, dst = t["src"][ks].tolist(), t["dst"][ks].tolist()
        nb, nic = t["bytes"][ks].tolist(), t["nic"][ks].tolist()
        return list(zip(ks, src, dst, nb, nic)), tr.deps

    def tags(self, calls: list) -> None:  # type: ignore[no-untyped-def]
        """Per call, the first tag of each (src, dst) pair (module docstring: comm_tag)."""
        count: dict[tuple[int, int], int] = defaultdict(int)
        for c in sorted(calls, key=lambda c: c.call_id):
            base = self.tag_base[c.call_id] = {}
            for pair in self._pairs(c):
                base.setdefault(pair, count[pair])
                count[pair] += 1
                if count[pair] > _INT32_MAX:
                    raise InputError(f"chakra: more than {_INT32_MAX} transfers from rank "
                                     f"{pair[0]} to rank {pair[1]} (comm_tag is an int32)")

    def instructions(self, prog: list, calls_by_id: dict):  # type: ignore[no-untyped-def]
        """Yield the framed nodes of ``prog``."""
        for ins in prog:
            if isinstance(ins, Compute):
                us = (ins.ns + 500) // 1000
                err = us * 1000 - ins.ns
                self.sum.compute_ns += ins.ns
                self.sum.compute_written_ns += us * 1000
                self.sum.rounding_error_ns += err
                self.sum.max_node_rounding_error_ns = max(self.sum.max_node_rounding_error_ns,
                                                          abs(err))
                i, b = self._emit("compute", "COMP_NODE", self.chain + self.join,
                                  duration_micros=us,
                                  attrs=[pb.attr("is_cpu_op", "bool", False),
                                         pb.attr("duration_ns", "int64", ins.ns)])
                self.chain, self.join = [i], []
                yield b
            elif isinstance(ins, Call) and ins.mode == CallMode.WAIT:
                self.join = self.join + self.posted.pop(ins.call_id, [])
            elif isinstance(ins, Call):
                yield from self._call(calls_by_id[ins.call_id], ins.mode)
            elif isinstance(ins, Wait):
                self.join = list(self.stream)

    def _call(self, c, mode: CallMode):  # type: ignore[no-untyped-def]
        deps = self.chain + self.join
        if mode == CallMode.ASYNC:
            deps = deps + self.stream
        name = f"{c.dim}/{c.phase}/{c.collective}/{c.op}/layer{c.layer}/mb{c.microbatch}"
        common = [pb.attr("call_id", "int64", c.call_id)]
        if c.collective != "SendRecv" and not self.p2p:
            if c.collective not in _ASTRA_SIM_COLLECTIVES:
                self.sum.not_generated_by_astra_sim[c.collective] += 1
            i, b = self._emit(name, "COMM_COLL_NODE", deps, attrs=[
                pb.attr("is_cpu_op", "bool", False),
                pb.attr("comm_type", "int64", COMM_TYPE_OF[c.collective]),
                pb.attr("comm_size", "int64",
                        comm_size_bytes(c.collective, c.message_bytes, len(c.group))),
                pb.attr("buffer_bytes", "int64", c.message_bytes),
                pb.attr("pg_name", "string", str(self.groups[tuple(sorted(c.group))])),
                *common])
            ends = [i]
            yield b
        else:
            ends = []
            yield from self._transfers(c, name, deps, common, ends)
        if mode == CallMode.ASYNC:              # the chain goes on beside the stream
            self.stream = ends or self.stream
        elif mode in _ADVANCE:                  # (no transfer of this rank: nothing to wait for)
            self.chain, self.join = (ends, []) if ends else (deps, [])
        else:                                   # a send: the chain goes on without it, unless
            self.posted[c.call_id] = ends       # a WAIT for the call comes later

    def _transfers(self, c, name: str, deps: list, common: list, ends: list):  # type: ignore[no-untyped-def]
        """The sends and receives of the rank in call ``c``; their nodes without local
        dependents go into ``ends``."""
        if self.p2p:
            rows, tdeps = self._local(c)
        else:
            rows, tdeps = [(0, c.src, c.dst, c.message_bytes, True)], ((),)
        base = self.tag_base[c.call_id]
        seen: dict[tuple[int, int], int] = defaultdict(int)
        node_of: dict[int, int] = {}
        used: set[int] = set()
        for k, src, dst, nbytes, nic in rows:
            tag = base[(src, dst)] + seen[(src, dst)]
            seen[(src, dst)] += 1
            local = [node_of[d] for d in tdeps[k] if d in node_of]
            used.update(local)
            kind = "COMM_SEND_NODE" if src == self.rank else "COMM_RECV_NODE"
            attrs = [pb.attr("is_cpu_op", "bool", False),
                     pb.attr("comm_src", "int32", src), pb.attr("comm_dst", "int32", dst),
                     pb.attr("comm_size", "int64", nbytes), pb.attr("comm_tag", "int32", tag),
                     *common]
            if not nic:
                attrs.append(pb.attr("nvlink", "bool", True))
            i, b = self._emit(f"{name}/{k}", kind, deps + local, attrs=attrs)
            node_of[k] = i
            yield b
        ends += [i for i in node_of.values() if i not in used]


def rank_trace(plan, rank: int, groups: dict, p2p: bool,  # type: ignore[no-untyped-def]
               summary: ChakraSummary):
    """Yield the framed messages of rank ``rank``'s ET file (GlobalMetadata first)."""
    calls = list(plan.calls(0, ranks={rank}))
    prog = _programs(plan, rank, calls)
    r = _Rank(plan, rank, groups, p2p, summary)
    r.tags(calls)
    yield pb.frame(pb.global_metadata("", [pb.attr("schema", "string", SCHEMA),
                                           pb.attr("rank", "int64", rank)]))
    yield from r.instructions(prog, {c.call_id: c for c in calls})


def write_chakra(plan, out: str | Path, *, p2p: bool = False) -> list[Path]:  # type: ignore[no-untyped-def]
    """Write the ET files, groups and summary of ``plan`` at prefix ``out`` (module docstring);
    returns the paths, the ET files in rank order.

    Raises:
        InputError: a flows workload; more than 2**31 - 1 transfers between two ranks.
        OutputError: a file cannot be written.
    """
    from tokenpcap.errors import OutputError

    out = Path(out)
    groups = comm_groups(plan)
    summary = ChakraSummary("p2p" if p2p else "coll", plan.layout.world_size)
    paths = []
    for rank in range(plan.layout.world_size):
        path = out.with_name(f"{out.name}.{rank}.et")
        try:
            with open(path, "wb") as f:
                for b in rank_trace(plan, rank, groups, p2p, summary):
                    f.write(b)
        except OSError as err:
            raise OutputError(f"{path}: cannot write: {err.strerror}") from err
        paths.append(path)
    gpath = out.with_name(f"{out.name}.comm_groups.json")
    atomic_text(gpath, [json.dumps({str(i): list(g) for g, i in groups.items()}) + "\n"])
    spath = out.with_name(f"{out.name}.summary.json")
    atomic_text(spath, [json.dumps(summary.to_json(), indent=1) + "\n"])
    return paths + [gpath, spath]


@register_export("chakra", "Chakra execution traces for ASTRA-sim, one per rank (no schedule)",
                 plan_only=True)
def _export(plan, out: Path, p2p: bool = False) -> list[Path]:  # type: ignore[no-untyped-def]
    return write_chakra(plan, out, p2p=p2p)
