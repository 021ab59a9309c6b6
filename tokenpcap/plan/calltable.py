"""Stage 3 (part): the collective calls of one iteration as columns, and the call objects made
from them.

A plan enumerates its calls family by family (:func:`tokenpcap.plan.calls.build_families`), each
family instance by instance (:class:`~tokenpcap.plan.family.Inst`) and each instance group by
group. A call is therefore named by three small indices, ``(family, inst, group)``, and every
attribute of :class:`~tokenpcap.plan.calls.CollectiveCall` follows from them: the family's own
(dim, phase, collective, sizes, stage), the instance's (layer, microbatch, bucket, recompute,
op), the group's (its ranks; ``src``/``dst`` of a SendRecv), and the call id and the token range
by arithmetic (:class:`CallTable`). A table holds those three indices, int32 ``(C,)`` each (12
bytes a call: a family, an instance and a group index are positions in Python lists of the
plan, far below 2**31 entries), and gives every other column with numpy on demand; call objects
are made only when asked for (:meth:`CallTable.objects`, :func:`expand`,
:func:`call_by_id`), a bounded number at a time.

Tokens (the rule of :mod:`tokenpcap.plan.calls`, written here once): a call of a family that
carries per-token data (``Family.tokens`` ``"mb"`` or ``"sp"``) of microbatch ``j >= 0`` in
iteration ``it``, whose group's first rank has data-parallel index ``d`` and tensor-parallel
index ``t``, holds samples ``k = it*G + j*b*dp + d*b`` ... ``k + b - 1`` (``G`` global batch,
``b`` micro batch, Megatron-LM's ``MegatronPretrainingSampler``): ``token_start = k*s``,
``token_end = (k + b)*s``, and positions ``[0, s)`` (``"mb"``) or ``[t*s/tp, (t+1)*s/tp)``
(``"sp"``) of each sample; every other call has -1 in all four.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from tokenpcap.collectives.layout import RankLayout
from tokenpcap.config.profiles import Scenario
from tokenpcap.plan.calls import CollectiveCall
from tokenpcap.plan.family import Family

__all__ = ["CallTable", "expand", "call_by_id"]

#: ``Family.tokens`` codes of the token rule (module docstring).
_TOKEN_MODES = {"": 0, "mb": 1, "sp": 2}
#: Rows turned into objects at a time by :meth:`CallTable.objects` (bounds the columns' lists).
_CHUNK = 1 << 15


class CallTable:
    """Calls of iteration ``iteration`` of the families ``fams`` as columns (module docstring);
    build the table of an iteration with :meth:`of_iteration`. ``call_base``: the call id of the
    first call of ``fams[0]`` (default ``iteration`` times the calls of ``fams``).

    Attributes:
        family, inst, group: int32 ``(C,)``: the call's family (index into ``fams``), its
            instance (index into the family's ``insts``) and group (into its ``groups``).
        families: ``fams``; ``iteration``: the iteration.
        fam_groups, fam_insts: int64 ``(F + 1,)``: the first row of each family's groups /
            instances in the flat per-group / per-instance order (all families' groups one after
            another) that :meth:`family_group` and :meth:`family_inst` index.
    """

    __slots__ = ("families", "iteration", "family", "inst", "group", "fam_groups", "fam_insts",
                 "_first_call", "_s", "_layout", "_cache")

    def __init__(self, fams: list[Family], s: Scenario, layout: RankLayout, iteration: int,
                 family, inst, group, *, call_base: int | None = None):
        self.families, self.iteration, self._s, self._layout = fams, iteration, s, layout
        self.family, self.inst, self.group = (np.asarray(x, np.int32) for x in (family, inst, group))
        ng = np.array([len(f.groups) for f in fams], np.int64)
        ni = np.array([len(f.insts) for f in fams], np.int64)
        self.fam_groups = np.concatenate([[0], np.cumsum(ng)]).astype(np.int64)
        self.fam_insts = np.concatenate([[0], np.cumsum(ni)]).astype(np.int64)
        base = iteration * int(ng @ ni) if call_base is None else call_base
        first = np.zeros(len(fams), np.int64)           # each family's first call id
        first[1:] = np.cumsum(ng * ni)[:-1]
        self._first_call = base + first
        self._cache: dict = {}

    @classmethod
    def of_iteration(cls, fams: list[Family], s: Scenario, layout: RankLayout, iteration: int,
                     ranks: frozenset[int] | None = None) -> "CallTable":
        """Every call of ``iteration`` in the plan's enumeration order (family, instance, group),
        only those whose group holds one of ``ranks`` when given."""
        fam, inst, grp = [], [], []
        for k, f in enumerate(fams):
            if ranks is None:
                gsel = np.arange(len(f.groups), dtype=np.int32)
            else:
                gsel = np.array([gi for gi, g in enumerate(f.groups) if not ranks.isdisjoint(g)],
                                np.int32)
            if gsel.size and f.insts:
                fam.append(np.full(gsel.size * len(f.insts), k, np.int32))
                inst.append(np.repeat(np.arange(len(f.insts), dtype=np.int32), gsel.size))
                grp.append(np.tile(gsel, len(f.insts)))
        cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int32))
        return cls(fams, s, layout, iteration, cat(fam), cat(inst), cat(grp))

    def __len__(self) -> int:
        return int(self.family.size)

    def __eq__(self, other) -> bool:
        return (isinstance(other, CallTable) and self.iteration == other.iteration
                and self.families == other.families
                and np.array_equal(self.call_id(), other.call_id()))

    __hash__ = None  # type: ignore[assignment]

    def first_groups(self) -> "CallTable":
        """One row per (family, instance) pair, in :meth:`family_inst` order: the call of the
        instance on the family's first group (every family of a plan has a group)."""
        fam = np.repeat(np.arange(len(self.families)), np.diff(self.fam_insts))
        return CallTable(self.families, self._s, self._layout, self.iteration, fam,
                         np.arange(fam.size) - self.fam_insts[fam], np.zeros(fam.size),
                         call_base=int(self._first_call[0]) if self.families else 0)

    # ---------------------------------------------------------------- per family, group, inst
    def family_group(self, rows=slice(None)) -> np.ndarray:
        """int64: the row of each call's (family, group) pair among all families' groups."""
        return self.fam_groups[self.family[rows]] + self.group[rows]

    def family_inst(self, rows=slice(None)) -> np.ndarray:
        """int64: the row of each call's (family, instance) pair among all families' instances."""
        return self.fam_insts[self.family[rows]] + self.inst[rows]

    def _per_family(self, name: str, fn) -> np.ndarray:
        """int64 ``(F,)`` ``fn(family)`` of every family, computed once per table."""
        if name not in self._cache:
            self._cache[name] = np.fromiter((fn(f) for f in self.families), np.int64,
                                            count=len(self.families))
        return self._cache[name]

    def _per_group(self, name: str, fn) -> np.ndarray:
        """int64 ``fn(family, group)`` of every family's every group, computed once per table."""
        if name not in self._cache:
            self._cache[name] = np.fromiter((fn(f, g) for f in self.families for g in f.groups),
                                            np.int64, count=int(self.fam_groups[-1]))
        return self._cache[name]

    def _per_inst(self, name: str, fn) -> np.ndarray:
        """int64 ``fn(inst)`` of every family's every instance, computed once per table."""
        if name not in self._cache:
            self._cache[name] = np.fromiter((fn(i) for f in self.families for i in f.insts),
                                            np.int64, count=int(self.fam_insts[-1]))
        return self._cache[name]

    # ---------------------------------------------------------------- columns
    def call_id(self, rows=slice(None)) -> np.ndarray:
        """int64 ``call_id`` of each call (``iteration * calls_per_iteration + index``)."""
        f = self.family[rows]
        ng = np.diff(self.fam_groups)[f]
        return self._first_call[f] + self.inst[rows].astype(np.int64) * ng + self.group[rows]

    def layer(self, rows=slice(None)) -> np.ndarray:
        """int64 ``layer`` of each call."""
        return self._per_inst("layer", lambda i: i.layer)[self.family_inst(rows)]

    def microbatch(self, rows=slice(None)) -> np.ndarray:
        """int64 ``microbatch`` of each call."""
        return self._per_inst("microbatch", lambda i: i.microbatch)[self.family_inst(rows)]

    def message_bytes(self, rows=slice(None)) -> np.ndarray:
        """int64 ``message_bytes`` of each call (at the plan's scale)."""
        return self._per_family("message_bytes", lambda f: f.message_bytes)[self.family[rows]]

    def src_dst(self, rows=slice(None)) -> tuple[np.ndarray, np.ndarray]:
        """int64 ``src``, ``dst`` of each call: a SendRecv's two ranks, -1 for the others."""
        fg = self.family_group(rows)
        p2p = lambda f: f.collective == "SendRecv"
        return (self._per_group("src", lambda f, g: g[0] if p2p(f) else -1)[fg],
                self._per_group("dst", lambda f, g: g[1] if p2p(f) else -1)[fg])

    def tokens(self, rows=slice(None)) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """int64 ``token_start``, ``token_end``, ``seq_start``, ``seq_end`` of each call (the
        module docstring's rule)."""
        s, lay = self._s, self._layout
        if s.model is None:                 # a workload scenario: no per-token data
            none = np.full(self.family[rows].size, -1, np.int64)
            return none, none, none, none
        t, seq = s.training, s.model.seq_length
        b, dp, tp = t.micro_batch_size, s.parallelism.dp, s.parallelism.tp
        f = self.family[rows]
        mode = self._per_family("tokens", lambda x: _TOKEN_MODES[x.tokens])[f]
        mb = self.microbatch(rows)
        if "coords" not in self._cache:
            _, cdp, ctp, _ = lay.coords_array(self._per_group("first", lambda x, g: g[0]))
            self._cache["coords"] = cdp, ctp
        cdp, ctp = self._cache["coords"]
        fg = self.family_group(rows)
        cdp, ctp = cdp[fg], ctp[fg]
        has = (mode > 0) & (mb >= 0)
        sample = self.iteration * t.global_batch_size + mb * (b * dp) + cdp * b
        s0 = np.where(mode == 1, 0, ctp * seq // tp)
        s1 = np.where(mode == 1, seq, (ctp + 1) * seq // tp)
        return (np.where(has, sample * seq, -1), np.where(has, (sample + b) * seq, -1),
                np.where(has, s0, -1), np.where(has, s1, -1))

    # ---------------------------------------------------------------- objects
    def objects(self, rows: np.ndarray | None = None) -> Iterator[CollectiveCall]:
        """The :class:`CollectiveCall` of each row of ``rows`` (int array; default every row in
        order), made :data:`_CHUNK` at a time."""
        if rows is None:
            for lo in range(0, len(self), _CHUNK):
                yield from self._objects(slice(lo, min(lo + _CHUNK, len(self))))
        else:
            rows = np.asarray(rows, np.int64)
            for lo in range(0, rows.size, _CHUNK):
                yield from self._objects(rows[lo: lo + _CHUNK])

    def _objects(self, rows) -> Iterator[CollectiveCall]:
        fams, it = self.families, self.iteration
        src, dst = self.src_dst(rows)
        cols = (self.call_id(rows), self.family[rows], self.inst[rows], self.group[rows],
                src, dst, *self.tokens(rows))
        for cid, k, ii, gi, a, b, t0, t1, s0, s1 in zip(*(c.tolist() for c in cols)):
            f = fams[k]
            inst = f.insts[ii]
            yield CollectiveCall(cid, it, f.dim, f.phase, f.collective, f.groups[gi],
                                 f.message_bytes, f.elem_bytes, inst.layer, inst.microbatch,
                                 f.stage, a, b, t0, t1, s0, s1, inst.bucket, inst.recompute,
                                 inst.op)


def expand(fams: list[Family], s: Scenario, layout: RankLayout, iteration: int,
           ranks: frozenset[int] | None = None) -> Iterator[CollectiveCall]:
    """Yield the calls of ``fams`` for ``iteration`` (only groups touching ``ranks`` if given),
    in the plan's enumeration order."""
    return CallTable.of_iteration(fams, s, layout, iteration, ranks).objects()


def call_by_id(fams: list[Family], s: Scenario, layout: RankLayout, call_id: int
               ) -> CollectiveCall:
    """The call ``call_id`` of the families ``fams`` (any iteration), made alone.

    Raises:
        KeyError: ``call_id`` negative, or ``fams`` make no call.
    """
    total = sum(f.n_calls for f in fams)
    if call_id < 0 or total == 0:
        raise KeyError(call_id)
    iteration, index = divmod(int(call_id), total)
    for f in fams:
        if index < f.n_calls:
            ii, gi = divmod(index, len(f.groups))
            one = CallTable([f], s, layout, iteration, [0], [ii], [gi],
                            call_base=int(call_id) - index)
            return next(one.objects())
        index -= f.n_calls
    raise AssertionError("unreachable")  # pragma: no cover
