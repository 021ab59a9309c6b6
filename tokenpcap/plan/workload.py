"""Stage 3 (part): the calls of a microbenchmark workload (a scenario's ``workload:``,
:mod:`tokenpcap.config.workload`), as the call families a training plan is made of.

One function per workload kind, registered by name in :data:`WORKLOAD_PLANNERS` (the same names
as :data:`tokenpcap.config.workload.WORKLOAD_KINDS`); each returns the
:class:`~tokenpcap.plan.family.Family` list of the workload, all of dim ``wl`` and phase
``run`` (:data:`tokenpcap.records.DIMS`, :data:`~tokenpcap.records.PHASES`), one instance
(:class:`~tokenpcap.plan.family.Inst`) per repetition: repetition ``k`` is the instance's
``microbatch`` (the message table's ``microbatch`` column of its messages). Everything after the
families is the training plan's path (:func:`tokenpcap.plan.build.build_plan`: bytes per phase,
rank and NIC from the algorithms' hops; the schedule's transfers from the same hops), so a
capture's payload per NIC and phase equals the plan to the byte.

* ``incast`` and ``sendrecv``: a ``SendRecv`` of ``bytes`` per ``(src, dst)`` pair (NCCL
  ``ncclSend``/``ncclRecv``; :mod:`tokenpcap.collectives.algorithms.p2p`): label
  ``wl/run/SendRecv``.
* ``alltoall``: one ``AllToAll`` over ``ranks`` of ``S = bytes * len(ranks)`` (nccl-tests
  ``alltoall_perf``'s size is the whole buffer, ``S/N`` to each peer;
  :mod:`tokenpcap.collectives.algorithms.direct`): label ``wl/run/AllToAll``.
* ``allreduce``, ``allgather``, ``reducescatter``: one call of ``S = bytes`` over ``ranks`` in
  the given order (the ring order), with the scenario's ``collectives.algorithm`` and channels:
  labels ``wl/run/AllReduce``, ``wl/run/AllGather``, ``wl/run/ReduceScatter``.
"""
from __future__ import annotations

from typing import Callable

from tokenpcap.config.profiles import Scenario
from tokenpcap.config.workload import Workload
from tokenpcap.plan.family import Family, Inst
from tokenpcap.plan.rows import wire_time_ns

__all__ = ["WORKLOAD_PLANNERS", "register_planner", "workload_families", "workload_json", "DIM",
           "PHASE"]

#: The dim and phase of every workload call (:func:`tokenpcap.records.phase_label`).
DIM, PHASE = "wl", "run"

#: kind -> ``planner(workload) -> [Family, ...]``.
WORKLOAD_PLANNERS: dict[str, Callable[[Workload], list[Family]]] = {}


def register_planner(kind: str):  # type: ignore[no-untyped-def]
    """Register the decorated ``planner(workload) -> [Family, ...]`` for workload ``kind``."""
    def deco(fn):  # type: ignore[no-untyped-def]
        WORKLOAD_PLANNERS[kind] = fn
        return fn
    return deco


def _insts(w: Workload) -> list[Inst]:
    return [Inst(microbatch=k, op=w.kind) for k in range(w.repeat)]


def _family(w: Workload, collective: str, size: int, groups) -> list[Family]:  # type: ignore[no-untyped-def]
    return [Family(DIM, PHASE, collective, size, w.elem_bytes, 0, [tuple(g) for g in groups],
                   _insts(w))]


@register_planner("incast")
@register_planner("sendrecv")
def _point_to_point(w: Workload) -> list[Family]:
    return _family(w, "SendRecv", w.bytes, w.pairs)


@register_planner("alltoall")
def _alltoall(w: Workload) -> list[Family]:
    return _family(w, "AllToAll", w.bytes * len(w.ranks), [w.ranks])


for _kind, _coll in (("allreduce", "AllReduce"), ("allgather", "AllGather"),
                     ("reducescatter", "ReduceScatter")):
    register_planner(_kind)(lambda w, _coll=_coll: _family(w, _coll, w.bytes, [w.ranks]))


def workload_families(s: Scenario) -> list[Family]:
    """The call families of ``s``'s workload (module docstring), in enumeration order.

    Raises:
        KeyError: a kind without a planner (the loader accepts only registered kinds).
    """
    assert s.workload is not None
    return WORKLOAD_PLANNERS[s.workload.kind](s.workload)


def workload_json(plan) -> dict:  # type: ignore[no-untyped-def]
    """``plan.to_json()`` of a workload scenario's :class:`~tokenpcap.plan.build.Plan`: the
    training plan's keys without the model's (``model`` None; no ``parameters``,
    ``parallelism``, ``microbatches``), ``workload`` its mapping
    (:meth:`~tokenpcap.config.workload.Workload.to_json`) and, for an incast,
    ``receiver_bytes`` (what the receiver's NIC takes: every sender's bytes at the plan's
    scale) and ``receiver_wire_time_ns`` (that at link rate,
    :func:`tokenpcap.plan.rows.wire_time_ns`)."""
    s = plan.scenario
    w = s.workload.to_json()
    if s.workload.kind == "incast":
        into = sum(f.message_bytes * f.n_calls for f in plan.families)
        w["receiver_bytes"] = into
        w["receiver_wire_time_ns"] = wire_time_ns(into, s.cluster.link_gbps)
    return {
        "scenario": s.name, "model": None, "cluster": s.cluster.name,
        "workload": w, "algorithm": plan.algorithm, "scale": plan.scale,
        "layout": {"world_size": plan.layout.world_size, "nodes": plan.layout.nodes,
                   "groups": plan.layout.intra_node_summary()},
        "phases": [r.to_json() for r in plan.rows], "totals": plan.totals(), "epoch": None,
        "pcap": plan.pcap, "tokens": None,
    }


from tokenpcap.plan import flows as _flows  # noqa: E402,F401 - registers the "flows" planner
