"""tokenpcap.schedule.engine.interpreted: the timing engine run uncompiled, for a first run's
small job. Right values: the discrete-event Python engine (tokenpcap.schedule.reference, itself
checked packet by packet against an independent oracle in test_nic.py) on every kind of call and
setting, and the compiled engine byte for byte (message table, frames, timeline, NVLink copies)
on the bundled scenarios with an ideal fabric; the choice of the uncompiled engine by its
estimates; the background compile's lock (compile_aside)."""
from __future__ import annotations

import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from numba.core.dispatcher import Dispatcher

from tests.schedule.test_schedule import VARIANTS, tiny_scenario
from tokenpcap.config.profiles import load_scenario
from tokenpcap.plan.build import build_plan
from tokenpcap.schedule.engine import compile_aside, interpreted, kernel
from tokenpcap.schedule.engine.port import TX_DTYPE
from tokenpcap.schedule.reference import ReferenceSchedule
from tokenpcap.schedule.runner import Schedule

ROOT = Path(__file__).resolve().parents[3]


def _uncompiled(plan, **kw) -> Schedule:
    sched = Schedule(plan, **kw)
    sched.time_uncompiled(None)
    return sched


def _frames(sched) -> np.ndarray:
    return np.concatenate(list(sched.run()) or [np.zeros(0, TX_DTYPE)])


def _assert_same(a, tx_a, b, tx_b) -> None:
    assert a.messages.tobytes() == b.messages.tobytes()
    assert tx_a.tobytes() == tx_b.tobytes()
    assert a.timeline.tobytes() == b.timeline.tobytes()
    assert a.nvlink.tobytes() == b.nvlink.tobytes()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_kind_of_call_times_uncompiled_as_the_reference_engine(tmp_path, variant):
    kw = dict(VARIANTS[variant])
    path = tiny_scenario(tmp_path, variant, kw.pop("dp"), kw.pop("tp"), kw.pop("pp"),
                         kw.pop("gbs"), **kw)
    plan = build_plan(load_scenario(path), scale=8)
    new = _uncompiled(plan, iterations=2, chunk_rows=1 << 12)
    old = ReferenceSchedule(plan, iterations=2, canonical=new.canonical_order)
    _assert_same(new, _frames(new), old, np.concatenate(list(old.run())))


def test_compute_beyond_int32_nanoseconds_times_uncompiled_as_the_reference_engine(tmp_path):
    # every layer's compute takes seconds: an int32 column of the instructions times 2**31
    # (numba widens it to int64; numpy's int32 element would overflow, a memoryview's int not)
    path = tiny_scenario(tmp_path, "slow", dp=2, tp=2, pp=2, gbs=4, extra=", mfu: 0.000000001")
    plan = build_plan(load_scenario(path), scale=8)
    new = _uncompiled(plan, iterations=2)
    old = ReferenceSchedule(plan, iterations=2, canonical=new.canonical_order)
    tx = _frames(new)
    assert (new.timeline["end_ns"] - new.timeline["start_ns"]).max() > 2 ** 32
    _assert_same(new, tx, old, np.concatenate(list(old.run())))


@pytest.mark.parametrize("gen", ["{clear_to_send: false}", "{ack_every_packets: 3}"])
def test_acks_and_clear_to_send_settings_time_uncompiled_as_the_reference_engine(tmp_path, gen):
    path = tiny_scenario(tmp_path, "acks", dp=2, tp=2, pp=2, gbs=4,
                         extra=", overlap_grad_reduce: true, bucket_size: 150000")
    path.write_text(path.read_text() + f"generation: {gen}\n")
    plan = build_plan(load_scenario(path), scale=4)
    new = _uncompiled(plan, chunk_rows=1 << 10, nics=(1, 3))
    old = ReferenceSchedule(plan, canonical=new.canonical_order)
    tx_old = np.concatenate(list(old.run()))
    _assert_same(new, _frames(new), old, tx_old[np.isin(tx_old["nic"], [1, 3])])


@pytest.mark.parametrize("name,scale,nics", [
    ("dante", 1, None), ("gpt2-all-cross", 1, None), ("alltoall-64", 1, (0, 9, 63)),
("llama2-7b-a100-ib", 1, (0,))])
def test_bundled_scenarios_time_uncompiled_as_compiled(name, scale, nics):
    """Every message row, frame, compute block and NVLink copy byte for byte, and the engine's
    counters (events popped, stops, wakes) the same: the same events in the same order."""
    plan = build_plan(load_scenario(ROOT / "profiles" / "scenarios" / f"{name}.yaml"),
                      scale=scale)
    new = _uncompiled(plan, nics=nics)
    old = Schedule(plan, nics=nics)
    assert not old.fabric_queued
    _assert_same(new, _frames(new), old, _frames(old))
    assert new._eng.sc.tobytes() == old._eng.sc.tobytes()


def test_a_queued_fabric_is_not_timed_uncompiled():
    plan = build_plan(load_scenario(ROOT / "profiles" / "scenarios" / "incast-63x16m.yaml"))
    with pytest.raises(ValueError, match="queued"):
        Schedule(plan, nics=()).time_uncompiled(None)


def test_no_compiled_function_is_reachable_from_the_uncompiled_kernel():
    run = interpreted.twin(kernel.run)
    assert not isinstance(run, Dispatcher) and run.__code__ is kernel.run.py_func.__code__
    originals = {id(sys.modules[m].__dict__) for m in interpreted._modules}
    seen, todo = set(), [run.__globals__]
    while todo:
        g = todo.pop()
        if id(g) in seen:
            continue
        seen.add(id(g))
        for key, value in g.items():
            assert not isinstance(value, Dispatcher), key
            if isinstance(value, types.FunctionType):
                # a twin, or a plain Python helper of the module (not run by the kernel)
                if id(value.__globals__) not in originals:
                    todo.append(value.__globals__)
            elif isinstance(value, types.ModuleType) and value.__name__.startswith(
                    "tokenpcap.schedule.engine."):
                todo.append(value.__dict__)
    assert len(seen) >= 5           # kernel, events, link, progs, access, ring, ...


def test_a_store_that_does_not_fit_raises_instead_of_wrapping():
    # numba would wrap the int32 element; the uncompiled engine refuses it
    a = np.zeros(2, np.int32)
    with pytest.raises(ValueError):
        interpreted._view(a)[0] = 2 ** 31
    v = interpreted._view(a)
    v[1] = 2 ** 31 - 1
    assert a[1] == 2 ** 31 - 1 and type(v[1]) is int


def test_the_uncompiled_engine_is_chosen_when_its_estimate_is_below_the_compile():
    # dante: 6,240 messages, 412,576 NVLink copies, 337,088 frames
    s = interpreted.python_seconds(6_240, 412_576, 337_088)
    assert s == pytest.approx(6_240 / interpreted.PY_MESSAGES_PER_S
                              + 412_576 / interpreted.PY_COPIES_PER_S
                              + 337_088 / interpreted.PY_PACKETS_PER_S)
    assert interpreted.worth_it(False, s, s + 0.1)
    assert not interpreted.worth_it(False, s, s - 0.1)
    assert not interpreted.worth_it(True, 0.0, 1e9)         # a queued fabric: compiled


def test_a_background_compile_holds_its_lock_and_a_second_one_compiles_nothing(tmp_path,
                                                                                monkeypatch):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    path = compile_aside.lock_path()
    assert path == tmp_path / compile_aside.LOCK_NAME
    assert not compile_aside.compiling_in_background()
    hold = ("import fcntl, sys; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('held', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert compile_aside.compiling_in_background()
        # a helper told to compile in the background while the lock is held ends at once
        helper = compile_aside.start()
        helper.send((None, [("no.such.module", "f", ())], [], True))
        assert helper.proc.wait(timeout=120) == 0
    finally:
        holder.stdin.close()
        holder.wait()
        holder.stdout.close()
    assert not compile_aside.compiling_in_background()


def test_a_detached_helper_is_never_collected_while_it_runs():
    """A helper left compiling in the background (``Aside.detach``) stays referenced for the
    life of this process: collecting its ``Popen`` while the child runs would warn
    ``ResourceWarning: subprocess N is still running`` into a long-lived caller (a test
    session, where that warning is an error)."""
    import gc
    import warnings

    aside = compile_aside.Aside.__new__(compile_aside.Aside)
    aside.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    proc = aside.proc
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            aside.detach()
            del aside
            gc.collect()
        assert not [w for w in seen if issubclass(w.category, ResourceWarning)]
        assert proc in compile_aside._DETACHED and proc.poll() is None
    finally:
        proc.kill()
        proc.wait()
        compile_aside._DETACHED.remove(proc)
