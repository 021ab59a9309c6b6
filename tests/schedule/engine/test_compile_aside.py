"""tokenpcap.schedule.engine.compile_aside and compiled.OneSignature: the engine's first compile
split between two processes, and one specialization per function. The oracle for the guessed
signatures is numba's own type inference of ``kernel.run`` (the signature it resolves at each
call); for the specializations, numba's dispatcher's list of compiled signatures."""
from __future__ import annotations

import inspect
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest
from numba.core import compiler, types
from numba.core.errors import CompilerError
from numba.core.typed_passes import NopythonTypeInference

from tokenpcap.config.profiles import load_scenario
from tokenpcap.plan.build import build_plan
from tokenpcap.schedule.engine import compile_aside, kernel
from tokenpcap.schedule.engine.compiled import OneSignature, one_type, shared
from tokenpcap.schedule.runner import Schedule
from tests.schedule.test_schedule import tiny_scenario

ROOT = Path(__file__).resolve().parents[3]


class _TypeOnly(compiler.CompilerBase):
    """numba's untyped pipeline (with its dead-branch pruning) and type inference, no lowering."""

    def define_pipelines(self):
        pm = compiler.DefaultPassBuilder.define_untyped_pipeline(self.state)
        pm.add_pass(NopythonTypeInference, "nopython frontend")
        pm.finalize()
        return [pm]


def _run_types(tmp_path, fabric: str):
    """``kernel.run``'s argument types for a tiny job on an ``ideal`` or ``queued`` fabric."""
    s = load_scenario(tiny_scenario(tmp_path, "t", 8, 1, 1, 8), {"cluster.fabric.model": fabric})
    sched = Schedule(build_plan(s, scale=8), nics=())
    e = sched._eng
    return tuple(numba.typeof(x) for x in (e.S, e.cf, e.sc, e.heap, e.acks, e.out, e.launch,
                                           e.fabric))


def _called_with(run_types) -> dict:
    """The argument types numba's typing of ``kernel.run`` resolves at each call, by callee."""
    d = kernel.run
    flags = compiler.Flags()
    d.targetdescr.options.parse_as_flags(flags, d.targetoptions)     # as numba's dispatcher
    c = _TypeOnly(d.typingctx, d.targetctx, None, run_types, None, flags, {})
    c.state.cr = None                # no pipeline lowers: numba reads it after each
    try:
        c.compile_extra(kernel.run.py_func)
    except CompilerError:           # "all available pipelines exhausted": nothing lowered
        pass
    found: dict = {}
    for call, sig in c.state.calltypes.items():
        fn = c.state.typemap.get(call.func.name) if getattr(call, "op", "") == "call" else None
        if isinstance(fn, types.Dispatcher):
            found.setdefault(fn.dispatcher, set()).add(sig.args)
    return found


@pytest.mark.parametrize("fabric", ["ideal", "queued"])
def test_the_guessed_signatures_are_those_run_calls_with(tmp_path, fabric):
    """Every function compiled aside or ahead is called by ``run`` with exactly the signature
    :func:`compile_aside.signature` guesses (else the helper's work would be lost)."""
    run_types = _run_types(tmp_path, fabric)
    named = dict(zip(inspect.signature(kernel.run.py_func).parameters, run_types))
    called = _called_with(run_types)
    ahead = compile_aside.ASIDE + compile_aside.HERE
    if fabric == "queued":
        ahead += compile_aside.ASIDE_QUEUED + compile_aside.HERE_QUEUED
    else:       # an ideal fabric's run calls none of the fabric's functions
        assert not set(compile_aside.ASIDE_QUEUED + compile_aside.HERE_QUEUED) & set(called)
    for f in ahead:
        assert called[f] == {compile_aside.signature(f, named)}, f.__name__


def test_every_integer_and_literal_argument_is_passed_as_int64():
    assert one_type(types.literal(3)) == types.int64
    assert one_type(types.int32) == types.int64
    assert one_type(types.uint32) == types.int64
    assert one_type(types.uint64) == types.uint64          # would not fit
    assert one_type(types.literal(True)) == types.boolean
    assert one_type(types.float64) == types.float64
    assert one_type(types.none) == types.none


def test_a_function_called_with_literals_and_int32_compiles_once():
    """numba alone compiles ``f`` once per literal value and integer width; a OneSignature
    dispatcher once, and the values are those of Python's integer arithmetic."""
    def body(x, k):
        return x * k + 1

    plain = numba.njit(body)
    one = shared(body)

    def caller_of(f):
        @numba.njit
        def g(a):
            return f(a[0], 3) + f(a[1], 4) + f(np.int32(a[0]), np.int32(7))
        return g

    a = np.array([2**31 - 1, -5], np.int32)
    want = (2**31 - 1) * 3 + 1 + (-5 * 4 + 1) + (2**31 - 1) * 7 + 1
    assert caller_of(one)(a) == want
    assert caller_of(plain)(a) == want
    assert isinstance(one, OneSignature) and len(one.signatures) == 1
    assert len(plain.signatures) == 3


def test_the_helper_compiles_what_it_is_sent_and_nothing_without_input(tmp_path):
    """The helper process exits at once when its input ends, and compiles (into numba's cache)
    the jobs it is sent."""
    aside = compile_aside.start()
    aside.proc.stdin.close()
    assert aside.proc.wait(timeout=120) == 0
    (tmp_path / "mod_aside.py").write_text(
        "from numba import njit\n\n\n@njit(cache=True)\ndef f(x):\n    return x + 1\n")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    proc = subprocess.run([sys.executable, "-m", compile_aside.__name__],
                          input=pickle.dumps((None, [("mod_aside", "f", (types.int64,))], [])),
                          env=env, timeout=120)
    assert proc.returncode == 0
    assert list((tmp_path / "cache").rglob("mod_aside.f-*.nbi"))


def test_a_process_done_with_its_own_jobs_takes_the_other_s_and_none_twice(tmp_path):
    """The helper, alone, compiles its own jobs and then this process's (from their end); this
    process then finds every job taken and compiles none (the oracle: numba's ``numba:compile``
    events in this process, and the helper's cache index files)."""
    from numba.core import event

    src = "from numba import njit\n\n\n" + "".join(
        f"@njit(cache=True)\ndef f{i}(x):\n    return x + {i}\n\n\n" for i in range(6))
    (tmp_path / "mod_steal.py").write_text(src)
    here = [("mod_steal", f"f{i}", (types.int64,)) for i in range(3)]
    there = [("mod_steal", f"f{i}", (types.int64,)) for i in range(3, 6)]
    claims = tmp_path / "claims"
    claims.mkdir()
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    proc = subprocess.run([sys.executable, "-m", compile_aside.__name__],
                          input=pickle.dumps((str(claims), there, here)), env=env, timeout=300)
    assert proc.returncode == 0
    cached = {p.name.split("-")[0] for p in (tmp_path / "cache").rglob("mod_steal.f*.nbi")}
    assert cached == {f"mod_steal.f{i}" for i in range(6)}
    assert sorted(p.name for p in claims.iterdir()) == sorted(f"mod_steal.f{i}" for i in range(6))
    compiled_here = []

    class Seen(event.Listener):
        def on_start(self, ev):
            compiled_here.append(ev.data["dispatcher"].__name__)

        def on_end(self, ev):
            pass

    sys.path.insert(0, str(tmp_path))
    try:
        with event.install_listener("numba:compile", Seen()):
            compile_aside._compile_jobs(str(claims), here, there)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("mod_steal", None)
    assert compiled_here == []
