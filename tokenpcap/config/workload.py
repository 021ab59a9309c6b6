"""Microbenchmark workloads: a scenario's ``workload:`` mapping in place of a model and training.

A workload scenario names a cluster, a ``workload`` and the ``collectives`` and ``generation``
settings; it has no corpus, tokenizer, model, parallelism or training. Ranks are the cluster's
GPUs (``nodes * gpus_per_node``; rank ``r`` on node ``r // gpus_per_node``, as a training
scenario's ranks with ``dp`` equal to the world). The kinds, one registered checker each
(:data:`WORKLOAD_KINDS`; the plan's registry of the calls each kind makes is
:data:`tokenpcap.plan.workload.WORKLOAD_PLANNERS`, keyed by the same names):

* ``incast``: ``senders`` (a count ``n``: ranks ``1..n`` when ``receiver`` is 0, else the
  first ``n`` ranks other than the receiver; or a list of ranks) each send ``bytes`` to one
  ``receiver`` (default 0): perftest's ``ib_write_bw`` run by many clients against one server.
* ``alltoall``: every rank of ``ranks`` (default all) sends ``bytes`` to every other one
  (nccl-tests ``alltoall_perf``: the buffer ``S = bytes * len(ranks)``, ``S/N`` per peer).
* ``allreduce``, ``allgather``, ``reducescatter``: one collective of ``S = bytes`` (nccl-tests'
  size, the whole buffer) over ``ranks``, with the scenario's ``collectives.algorithm`` and
  channels as the training plan's calls of those collectives.
* ``sendrecv``: ``pairs: [[src, dst], ...]``, each sending ``bytes``.
* ``flows``: ``file``, a flow file (HPCC ns-3's ``FLOW_FILE`` format, what ``export --to hpcc``
  writes): every line one transfer of its own size at its own start time, open loop
  (:mod:`tokenpcap.config.flowfile`); ``bytes``, ``repeat`` and ``start_offsets_ns`` are not
  given (the file has them).

Common keys: ``bytes`` (required), ``dtype`` (element type: ``fp32``, nccl-tests' default ``-d
float``; ``bytes`` must be a whole number of elements), ``repeat`` (back-to-back repetitions of
the calls, nccl-tests' ``-n`` iterations), ``start_offsets_ns`` (when each rank starts: a
list aligned with ``senders`` (incast), ``ranks`` (collectives, alltoall) or ``pairs``
(sendrecv: the pair's sender; two pairs of one sender must agree), or a mapping ``{rank: ns}``).

Every error is a :class:`~tokenpcap.errors.ProfileError` naming the file, the key
(``workload.pairs[2]``), the value got and the value expected.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from tokenpcap.config import yamlcheck as yc
from tokenpcap.config.flowfile import read_flow_file
from tokenpcap.config.bounds import MAX_REPEAT, MAX_START_OFFSET_NS, MAX_WORKLOAD_BYTES
from tokenpcap.config.types import DTYPE_BYTES
from tokenpcap.errors import ProfileError

__all__ = ["Workload", "WORKLOAD_KINDS", "register_workload_kind", "workload_from"]

@dataclass(frozen=True)
class Workload:
    """A loaded ``workload:`` mapping (module docstring), normalized.

    ``ranks``: the ranks of the calls (incast: the receiver, then the senders; sendrecv: every
    rank of a pair, first appearance order); ``pairs``: ``(src, dst)`` of each point-to-point
    transfer (incast, sendrecv; empty otherwise); ``receiver``: the incast's receiver (-1
    otherwise); ``start_offsets_ns``: one per rank of the world (ns, >= 0); ``elem_bytes``:
    bytes of one ``dtype`` element; ``flows``: the ``flows`` kind's
    :data:`~tokenpcap.config.flowfile.FLOW_DTYPE` rows (None for the other kinds; ``bytes`` is
    then their total) and ``flow_file`` the file they were read from.
    """

    kind: str
    bytes: int
    ranks: tuple[int, ...]
    pairs: tuple[tuple[int, int], ...] = ()
    receiver: int = -1
    start_offsets_ns: tuple[int, ...] = ()
    repeat: int = 1
    dtype: str = "fp32"
    flows: Any = field(default=None, compare=False, repr=False)
    flow_file: str = ""

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def to_json(self) -> dict:
        if self.flows is not None:
            return {"kind": self.kind, "file": self.flow_file, "flows": int(self.flows.size),
                    "bytes": self.bytes, "ranks": list(self.ranks), "repeat": self.repeat}
        return {"kind": self.kind, "bytes": self.bytes, "ranks": list(self.ranks),
                "pairs": [list(p) for p in self.pairs], "receiver": self.receiver,
                "repeat": self.repeat, "dtype": self.dtype,
                "start_offsets_ns": list(self.start_offsets_ns)}


@dataclass(frozen=True)
class _Kind:
    name: str
    spec: dict            # the kind's own keys: key -> (checker, default)
    check: Callable       # (file, prefix, values, world) -> (ranks, pairs, receiver, starters)
    summary: str


#: kind name -> its keys and checker (:func:`register_workload_kind`).
WORKLOAD_KINDS: dict[str, _Kind] = {}


def _kind(file: Path | None, key: str, value: Any) -> str:
    """``kind``: the name of a registered kind (:data:`WORKLOAD_KINDS`)."""
    if isinstance(value, str) and value in WORKLOAD_KINDS:
        return value
    raise ProfileError(file, key, value, f"one of: {', '.join(sorted(WORKLOAD_KINDS))}")


#: The keys of every kind (each kind adds its own: :func:`register_workload_kind`).
_COMMON = {
    "kind": (_kind, yc.REQUIRED),
    "bytes": (yc.integer(1, MAX_WORKLOAD_BYTES), yc.REQUIRED),
    "dtype": (yc.enum(*DTYPE_BYTES), "fp32"),
    "repeat": (yc.integer(1, MAX_REPEAT), 1),
    "start_offsets_ns": (lambda f, k, v: v, None),
}


def register_workload_kind(name: str, spec: dict, summary: str):  # type: ignore[no-untyped-def]
    """Register ``check(file, prefix, values, world) -> (ranks, pairs, receiver, starters)`` as
    workload kind ``name`` with its own keys ``spec`` (``starters``: the ranks a list of
    ``start_offsets_ns`` is aligned with)."""
    def deco(check):  # type: ignore[no-untyped-def]
        WORKLOAD_KINDS[name] = _Kind(name, spec, check, summary)
        return check
    return deco


def _rank(file: Path | None, key: str, value: Any, world: int) -> int:
    return yc.integer(0, world - 1)(file, key, value)


def _rank_list(file: Path | None, key: str, value: Any, world: int, least: int) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) < least:
        raise ProfileError(file, key, value, f"a list of at least {least} ranks in [0, {world - 1}]")
    out = tuple(_rank(file, f"{key}[{i}]", v, world) for i, v in enumerate(value))
    seen: set[int] = set()
    for i, r in enumerate(out):
        if r in seen:
            raise ProfileError(file, f"{key}[{i}]", r, "a rank not already in the list")
        seen.add(r)
    return out


def _group(file: Path | None, prefix: str, v: dict, world: int):  # type: ignore[no-untyped-def]
    if world < 2:
        raise ProfileError(file, f"{prefix}.kind", v["kind"], f"a kind for {world} GPU (a "
                           "collective needs a cluster of at least 2 GPUs)")
    ranks = tuple(range(world)) if v["ranks"] is None else \
        _rank_list(file, f"{prefix}.ranks", v["ranks"], world, 2)
    return ranks, (), -1, ranks


_GROUP_SPEC = {"ranks": (lambda f, k, v: v, None)}
for _name, _what in (("alltoall", "every rank of `ranks` sends `bytes` to every other one"),
                     ("allreduce", "an AllReduce of S = `bytes` over `ranks`"),
                     ("allgather", "an AllGather of S = `bytes` (the gathered buffer) over `ranks`"),
                     ("reducescatter", "a ReduceScatter of S = `bytes` (the input buffer) over "
                      "`ranks`")):
    register_workload_kind(_name, _GROUP_SPEC, _what)(_group)


@register_workload_kind("incast", {"senders": (lambda f, k, v: v, yc.REQUIRED),
                                   "receiver": (lambda f, k, v: v, 0)},
                        "`senders` each send `bytes` to one `receiver`")
def _incast(file: Path | None, prefix: str, v: dict, world: int):  # type: ignore[no-untyped-def]
    recv = _rank(file, f"{prefix}.receiver", v["receiver"], world)
    s = v["senders"]
    if isinstance(s, int) and not isinstance(s, bool):
        n = yc.integer(1, world - 1)(file, f"{prefix}.senders", s)
        senders = tuple(r for r in range(world) if r != recv)[:n]
    else:
        senders = _rank_list(file, f"{prefix}.senders", s, world, 1)
        if recv in senders:
            raise ProfileError(file, f"{prefix}.senders[{senders.index(recv)}]", recv,
                               f"a rank other than the receiver {recv}")
    return (recv, *senders), tuple((x, recv) for x in senders), recv, senders


@register_workload_kind("sendrecv", {"pairs": (lambda f, k, v: v, yc.REQUIRED)},
                        "each `[src, dst]` of `pairs` sends `bytes`")
def _sendrecv(file: Path | None, prefix: str, v: dict, world: int):  # type: ignore[no-untyped-def]
    key = f"{prefix}.pairs"
    if not isinstance(v["pairs"], list) or not v["pairs"]:
        raise ProfileError(file, key, v["pairs"], "a non-empty list of [src, dst] rank pairs")
    pairs, ranks = [], []
    for i, p in enumerate(v["pairs"]):
        if not isinstance(p, list) or len(p) != 2:
            raise ProfileError(file, f"{key}[{i}]", p, "a pair [src, dst] of ranks")
        a, b = (_rank(file, f"{key}[{i}][{j}]", x, world) for j, x in enumerate(p))
        if a == b:
            raise ProfileError(file, f"{key}[{i}]", p, "two different ranks [src, dst]")
        if (a, b) in pairs:
            raise ProfileError(file, f"{key}[{i}]", p, "a pair not already in the list")
        pairs.append((a, b))
        ranks += [r for r in (a, b) if r not in ranks]
    return tuple(ranks), tuple(pairs), -1, tuple(a for a, _ in pairs)


def _offsets(file: Path | None, key: str, value: Any, world: int,
             starters: tuple[int, ...]) -> tuple[int, ...]:
    """``start_offsets_ns`` -> one offset per rank of the world (module docstring)."""
    out = [0] * world
    if value is None:
        return tuple(out)
    ns = yc.integer(0, MAX_START_OFFSET_NS)
    if isinstance(value, dict):
        for k in sorted(value, key=str):
            r = _rank(file, f"{key}.{k}", k, world)
            if r not in starters:
                raise ProfileError(file, f"{key}.{k}", k, "a rank of the workload")
            out[r] = ns(file, f"{key}.{k}", value[k])
        return tuple(out)
    if not isinstance(value, list) or len(value) != len(starters):
        raise ProfileError(file, key, value, f"a list of {len(starters)} offsets (ns) or a "
                           "mapping {rank: ns}")
    given: dict[int, int] = {}
    for i, (r, x) in enumerate(zip(starters, value)):
        t = ns(file, f"{key}[{i}]", x)
        if given.setdefault(r, t) != t:
            raise ProfileError(file, f"{key}[{i}]", x, f"{given[r]}, the offset given before "
                               f"for rank {r}")
        out[r] = t
    return tuple(out)


def workload_from(file: Path | None, prefix: str, data: Any, world: int) -> Workload:
    """The :class:`Workload` of the mapping ``data`` at ``prefix`` (``"workload"``) of ``file``,
    on a world of ``world`` ranks.

    Raises:
        ProfileError: an unknown kind or key, a missing key, a value out of range (a rank
            outside the world, ``bytes < 1`` or not a whole number of ``dtype`` elements, a pair
            with ``src == dst``, a repeated rank or pair, the receiver among the senders, a
            list of offsets of the wrong length).
    """
    d = yc.mapping(file, prefix, data)
    if "kind" not in d:
        raise ProfileError(file, f"{prefix}.kind", "missing", "a value for required key 'kind'")
    kind = _kind(file, f"{prefix}.kind", d["kind"])
    k = WORKLOAD_KINDS[kind]
    v = yc.read_mapping(file, prefix, d, {**_COMMON, **k.spec})
    elem = DTYPE_BYTES[v["dtype"]]
    if v["bytes"] is not None and v["bytes"] % elem:
        raise ProfileError(file, f"{prefix}.bytes", v["bytes"],
                           f"a multiple of {elem} (whole {v['dtype']} elements)")
    ranks, pairs, receiver, starters, *flows = k.check(file, prefix, v, world)
    if flows:
        return Workload(kind=kind, bytes=int(flows[0]["size_bytes"].sum()), ranks=tuple(ranks),
                        flows=flows[0], flow_file=str(v["file"]))
    offsets = _offsets(file, f"{prefix}.start_offsets_ns", v["start_offsets_ns"], world,
                       tuple(starters))
    return Workload(kind=kind, bytes=v["bytes"], ranks=tuple(ranks), pairs=tuple(pairs),
                    receiver=receiver, start_offsets_ns=offsets, repeat=v["repeat"],
                    dtype=v["dtype"])


def _not_given(file: Path | None, key: str, value: Any) -> Any:
    raise ProfileError(file, key, value, "no value: a flows workload's file has every flow's "
                       "size and start")


@register_workload_kind("flows", {"file": (lambda f, k, v: v, yc.REQUIRED),
                                  "bytes": (_not_given, None), "repeat": (_not_given, None),
                                  "start_offsets_ns": (_not_given, None)},
                        "every line of the flow file `file` started at its own time (open loop)")
def _flows(file: Path | None, prefix: str, v: dict, world: int):  # type: ignore[no-untyped-def]
    flows = read_flow_file(file, f"{prefix}.file", v["file"], world)
    ranks = tuple(int(r) for r in np.unique(np.concatenate([flows["src"], flows["dst"]])))
    return ranks, (), -1, (), flows
