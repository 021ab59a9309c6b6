"""The dependency countdowns held per call in flight (tokenpcap.schedule.engine.slabs).

Right values: the allocator's own invariants on random sequences of takes and give-backs (no
two held slabs share a word, a size class's free slab is reused before the pool's end moves, the
words held are counted); in the engine, at every return of the kernel, the countdowns of each
call recomputed from what the run has launched (a held slab for every call with a transfer not
launched, word 0 its count of them, each one's countdown above 0, no slab for a call with none
left); and the run with the slabs equal, message by message and frame by frame, to the
discrete-event reference engine (tokenpcap.schedule.reference), which keeps a countdown per
transfer for the whole run.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.config.profiles import load_scenario
from tokenpcap.errors import InputError
from tokenpcap.plan.build import build_plan
from tokenpcap.schedule.engine import kernel as K
from tokenpcap.schedule.engine import slabs
from tokenpcap.schedule.engine.access import CT_WAIT, HANDLE_SHIFT
from tokenpcap.schedule.engine.interpreted import twin
from tokenpcap.schedule.reference import ReferenceSchedule
from tokenpcap.schedule.runner import Schedule
from tests.schedule.test_schedule import VARIANTS, tiny_scenario


# the allocator's parts uncompiled (a compiled part has no entry point Python may call)
_class, take, give_back = twin(slabs._class), twin(slabs.take), twin(slabs.give_back)


@given(n=st.integers(1, slabs.MAX_CALL_TRANSFERS))
def test_a_slab_is_the_least_power_of_two_above_its_countdowns(n):
    k = int(slabs.slab_class(np.asarray([n]))[0])
    assert k == _class(n) and k >= 1
    assert 2 ** k >= n + 1 and (k == 1 or 2 ** (k - 1) < n + 1)


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(1, 40)), max_size=80))
def test_held_slabs_never_share_a_word_and_free_ones_are_reused_first(ops):
    """Takes (a call of n transfers) and give-backs (the oldest held call) in any order."""
    calls = len(ops)
    sc = [0] * K.NSC
    for k in range(32):
        sc[K.SLAB_FREE + k] = -1
    S = SimpleNamespace(tw=[0] * (64 * calls + 2), c_slab=[-1] * max(1, calls))
    held: dict[int, tuple[int, int]] = {}
    free_words = {k: 0 for k in range(32)}
    for c, (give, n) in enumerate(ops):
        if give and held:
            g = min(held)
            o, m = held.pop(g)
            give_back(S, sc, g, m)
            free_words[_class(m)] += 1
            assert S.c_slab[g] == -1 and sc[K.SLAB_FREE + _class(m)] == o
            continue
        k = _class(n)
        top = sc[K.SLAB_TOP]
        o = take(S, sc, c, n)
        assert S.c_slab[c] == o and S.tw[o] == n
        if free_words[k]:
            free_words[k] -= 1
            assert sc[K.SLAB_TOP] == top and o < top             # a free slab of its class
        else:
            assert o == top and sc[K.SLAB_TOP] == top + 2 ** k   # the pool's end
        held[c] = (o, n)
        spans = sorted((o, o + 2 ** _class(m)) for o, m in held.values())
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
        assert spans[-1][1] <= sc[K.SLAB_TOP]
    assert sc[K.SLAB_LIVE] == sum(2 ** _class(m) for _, m in held.values())


def _launched(eng) -> np.ndarray:
    """Handles of every transfer launched so far: its messages, NVLink copies and launch list."""
    ms = eng.S.ms[: int(eng.sc[K.NMSG])]
    nv = eng.S.nv[: int(eng.sc[K.NNV])]
    return np.unique(np.concatenate([ms[:, K.M_TR], nv[:, 0],
                                     eng.launch[: int(eng.sc[K.NLAUNCH])]]))


def _check_countdowns(eng) -> int:
    """The slabs' state recomputed from what the run launched (module docstring); returns the
    calls held."""
    S = eng.S
    ntr = np.diff(S.tr_base)
    done = np.bincount(_launched(eng) >> HANDLE_SHIFT, minlength=ntr.size)
    launched = set(_launched(eng).tolist())
    started = np.zeros(ntr.size, bool)
    started[S.part[S.part[:, K.A_STARTED] == 1, K.A_CALL]] = True
    held = np.flatnonzero(S.c_slab >= 0)
    for c in np.flatnonzero(started & (ntr > 0) & (eng.S.call_ab < 0)):
        o = int(S.c_slab[c])
        if done[c] == ntr[c]:
            assert o < 0, f"call {c}: every transfer launched, its slab still held"
            continue
        # a transfer of a started call may wait for its other rank: its slab is held from the
        # call's first start with a transfer on (progs._start)
        if o < 0:
            assert done[c] == 0
            continue
        assert S.tw[o] == ntr[c] - done[c]
        for j in range(int(ntr[c])):
            left = int(S.tw[o + 1 + j])
            if (c << HANDLE_SHIFT) | j in launched:
                assert left == 0
            else:
                assert 0 < left <= int(S.ct[S.c_row[c] + j, CT_WAIT])
    spans = sorted((int(S.c_slab[c]), int(S.c_slab[c]) + int(slabs.slab_words(ntr[c:c + 1])[0]))
                   for c in held)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert int(eng.sc[K.SLAB_LIVE]) == sum(b - a for a, b in spans)
    return held.size


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(variant=st.sampled_from(sorted(VARIANTS)), scale=st.sampled_from([8, 64]),
       iterations=st.integers(1, 2), pool=st.sampled_from([None, 2]))
def test_slabs_follow_the_calls_in_flight_and_time_as_the_reference_engine(tmp_path, variant, scale,
                                                                           iterations, pool):
    """At every return of the kernel (a chunk of 64 frames) the countdowns are those the launches
    so far leave; at the end no slab is held; the run equals the reference engine's. ``pool=2``
    starts the pool at two words, so that it grows while calls are held."""
    kw = dict(VARIANTS[variant])
    path = tiny_scenario(tmp_path, variant, kw.pop("dp"), kw.pop("tp"), kw.pop("pp"), kw.pop("gbs"), **kw)
    plan = build_plan(load_scenario(path), scale=scale)
    new = Schedule(plan, iterations=iterations, chunk_rows=64)
    if pool is not None:
        new._eng.S = new._eng.S._replace(tw=slabs.pool(pool))
        new._eng.tr.S = new._eng.S
    most = 0
    chunks = []
    for tx in new.run():
        chunks.append(tx)
        most = max(most, _check_countdowns(new._eng))
    eng = new._eng
    assert most > 0                               # calls were held at some return
    assert (eng.S.c_slab == -1).all() and eng.sc[K.SLAB_LIVE] == 0
    # the pool's high-water mark is what the calls held at once needed, not the whole run's
    assert eng.sc[K.SLAB_TOP] <= int(slabs.slab_words(np.diff(eng.S.tr_base)).sum())
    old = ReferenceSchedule(plan, iterations=iterations, canonical=new.canonical_order)
    tx_old = np.concatenate(list(old.run()))
    assert new.messages.tobytes() == old.messages.tobytes()
    assert np.concatenate(chunks).tobytes() == tx_old.tobytes()
    assert new.nvlink.tobytes() == old.nvlink.tobytes()


def test_a_call_of_too_many_transfers_is_refused_in_one_line():
    with pytest.raises(InputError) as e:
        slabs.slab_words(np.asarray([slabs.MAX_CALL_TRANSFERS + 1]))
    assert "collective call transfers: got" in str(e.value) and "\n" not in str(e.value)
