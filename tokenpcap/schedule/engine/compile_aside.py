"""The engine's first compile on two cores: a helper process compiles the programs' side of
:func:`~tokenpcap.schedule.engine.kernel.run` (:data:`ASIDE`: ``progs.step``, ``arrived``,
``ab_done`` and what they call) into numba's on-disk cache while this process
compiles the NIC side (:data:`HERE`: the heap's ``pop``, ``link.ready``, ``advance``, ``rewake``,
``queue_ack``, ``ring.room``, ``progs.flush_out``), and the helper then also
:func:`~tokenpcap.schedule.engine.kernel.commit` (last: it links ``advance`` and ``rewake``, which
this process compiles first and has put in the cache by then);
with a queued fabric, the helper also the switches' events (:data:`ASIDE_QUEUED`) and this
process the NICs' PFC and reaction point (:data:`HERE_QUEUED`); then this
process compiles ``run`` itself, which loads the helper's functions from the cache (numba's
``Dispatcher.compile`` looks in its cache before compiling, and a cached function keeps the
LLVM bitcode a caller links: ``CPUCodeLibrary.serialize_using_object_code``). numba compiles on
one core per process (a process-wide compiler lock), so the split is by process. The split
balances itself: a process that is done with its own list takes the other's from its end (a
function is compiled by the process that first creates its file in a directory both share,
``O_EXCL``), so neither waits while the other has a function left to start.

In the background. A first run of a job that the engine times faster uncompiled than numba
compiles it (:mod:`~tokenpcap.schedule.engine.interpreted`) hands the helper the whole engine
instead (:func:`compile_in_background`): the helper compiles it at a lower priority, under a lock
file (:func:`lock_path`) that a second run started meanwhile sees (it then starts no compile of
its own), and outlives the run.

Signatures. Every function compiled here is a
:class:`~tokenpcap.schedule.engine.compiled.OneSignature` dispatcher, so numba compiles it once
for the types its caller passes with every integer as ``int64``: a parameter named like one of
``run``'s (``S``, ``cf``, ``sc``, ``h``, ``a``, ``o``, ``lst``, ``fabric``) is given that
argument's type, one named like an array ``run`` makes itself (``row``, :data:`LOCALS`) that
array's, every other one ``int64`` (:func:`signature`). Were a function's signature
guessed wrong, the helper's (or this process's) compile of it fails or compiles a
specialization nobody calls, and ``run``'s compile compiles the one it calls in this process:
the same machine code, later (``tests/schedule/engine/test_compile_aside.py`` checks the
guesses against what ``run`` compiles).

The helper is started before the plan is made (:func:`start`: Python and numba import while
this process plans and builds the engine's state), only when the engine is not in numba's cache
(:func:`~tokenpcap.schedule.engine.compiled.engine_compiled`); it reads the functions and their
signatures (one pickle on its standard input: not the input's end, which a process forked
later, such as a writer, holds open) and exits, compiling nothing when the input ends first (the
schedule was never run). Nothing it does changes a result: a helper that fails or is killed
only leaves its functions to this process.
"""
from __future__ import annotations

import fcntl
import importlib
import inspect
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numba
from numba.core import types
from numba.core.errors import TypingError

from tokenpcap.errors import raise_if_stopped
from tokenpcap.schedule.engine import (events, fabric, fabric_fast, kernel, link, nicpfc, progs,
                                       ring, rpoint)

__all__ = ["ASIDE", "HERE", "ASIDE_QUEUED", "HERE_QUEUED", "LOCALS", "Aside", "start",
           "signature", "compile_engine", "compile_in_background", "LOCK_NAME", "lock_path",
           "compiling_in_background"]

#: The functions ``kernel.run`` calls that the helper process compiles (the programs, calls
#: and transfers: about half of the engine's compile, ``benchmarks/README.md``).
ASIDE = (progs.step, progs.arrived, progs.ab_done)
#: The functions ``kernel.run`` calls that this process compiles meanwhile (the NICs' side).
HERE = (events.pop, link.ready, link.advance, link.rewake, link.queue_ack, ring.room,
        progs.flush_out)
#: With a queued fabric, the helper also compiles the switches' events ``run`` handles...
ASIDE_QUEUED = (fabric.hop, fabric.free_event, fabric.pfc_event, fabric_fast.drain)
#: ... and this process, after :data:`HERE` (they call ``link.advance`` and ``rewake``), the
#: NICs' PFC and DCQCN reaction point.
HERE_QUEUED = (nicpfc.nic_pfc, nicpfc.nic_pause_end, rpoint.cc_arrival, rpoint.cc_timer)


#: The arrays ``kernel.run`` makes itself and passes by the same name: its popped event's
#: ``row`` (``np.empty(5, np.int64)``).
LOCALS = {"row": types.Array(types.int64, 1, "C")}


def signature(f, named: dict) -> tuple:
    """The argument types ``kernel.run`` calls ``f`` (a numba dispatcher) with: ``named[p]``
    for a parameter ``p`` named in ``named`` or in :data:`LOCALS`, ``int64`` for every other
    (module docstring)."""
    return tuple(named.get(p, LOCALS.get(p, types.int64))
                 for p in inspect.signature(f.py_func).parameters)


class Aside:
    """The helper process (:func:`start`): :meth:`send` hands it its functions, :meth:`wait`
    waits for its end, :meth:`close` ends it (a run stopped or never timed)."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc

    def send(self, jobs: tuple) -> None:
        """Hand the helper ``jobs``: ``(claims, own, other)`` as :func:`_compile_jobs` takes
        them."""
        try:
            self.proc.stdin.write(pickle.dumps(jobs))
            self.proc.stdin.close()
        except OSError:             # the helper is gone: this process compiles everything
            pass

    def wait(self) -> None:
        """Wait for the helper to end (its functions are then in numba's cache)."""
        try:
            self.proc.wait()
        except BaseException:
            self.close()
            raise

    def detach(self) -> None:
        """Leave the helper running on its own (a compile in the background, which outlives
        this process: :func:`compile_in_background`). Its ``Popen`` is kept in
        :data:`_DETACHED` for the life of this process: one collected while its child runs
        would warn ``ResourceWarning: subprocess N is still running`` (``Popen.__del__``), and a
        long-lived caller (a test session, a notebook) would see it."""
        if self.proc is not None:
            _DETACHED.append(self.proc)
        self.proc = None

    def close(self) -> None:
        """End the helper if it still runs."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass


def start() -> Aside | None:
    """Start the helper process: this interpreter on this module, with this package first on
    its path (the same sources, hence the same numba cache); None when it cannot start."""
    here = str(Path(__file__).resolve().parents[3])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [here] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    try:
        proc = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    except OSError:
        return None
    return Aside(proc)


def _claim(claims: str | None, module: str, name: str) -> bool:
    """True when this process takes the job ``module.name``: the first of the two processes to
    create its file in the directory ``claims`` (``O_EXCL``: one of them only); True without a
    directory."""
    if claims is None:
        return True
    try:
        os.close(os.open(os.path.join(claims, f"{module}.{name}"),
                         os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    except OSError:             # the directory is gone (the run ended): nothing left to do
        return False
    return True


def _compile_jobs(claims: str | None, own: list, other: list) -> None:
    """Compile the jobs of ``own`` (``(module name, function name, argument types)`` each) in
    order, then those of ``other`` from its end, each unless the other process took it first
    (:func:`_claim`): the process that finishes its own jobs first takes the other's last ones
    (``commit`` for this process, ``flush_out`` for the helper), instead of waiting."""
    for module, name, sig in list(own) + list(reversed(other)):
        if _claim(claims, module, name):
            try:
                getattr(importlib.import_module(module), name).compile(sig)
            except TypingError:     # a wrong guess: ``run`` compiles it (module docstring)
                pass
            raise_if_stopped()


def compile_engine(run_args: tuple, commit_args: tuple | None, aside: Aside | None) -> None:
    """Compile (or load from numba's cache) ``kernel.run`` for ``run_args`` (its eight
    arguments) and, unless None, ``kernel.commit`` for ``commit_args``: with ``aside``, the
    functions of :data:`HERE` here and those of :data:`ASIDE` and ``commit`` in that helper
    process meanwhile (with a queued fabric :data:`HERE_QUEUED` and :data:`ASIDE_QUEUED` too),
    the one that finishes first taking the other's last ones (module docstring).

    Raises:
        Whatever numba raises compiling ``run`` or ``commit``; a stop (Ctrl-C) noted during the
        compile (:func:`~tokenpcap.errors.raise_if_stopped`), the helper then ended."""
    run_types = tuple(numba.typeof(x) for x in run_args)
    commit_types = None if commit_args is None else tuple(numba.typeof(x) for x in commit_args)
    named = dict(zip(inspect.signature(kernel.run.py_func).parameters, run_types))
    queued = run_types[-1] != types.none
    if aside is not None:
        def jobs(fs):
            return [(f.py_func.__module__, f.__name__, signature(f, named)) for f in fs]

        there = jobs(ASIDE + (ASIDE_QUEUED if queued else ()))
        if commit_types is not None:    # last: it links HERE's advance and rewake, cached by then
            there.append((kernel.__name__, kernel.commit.__name__, commit_types))
        here = jobs(HERE + (HERE_QUEUED if queued else ()))
        claims = tempfile.mkdtemp(prefix="tokenpcap-compile-")
        try:
            aside.send((claims, there, here))
            _compile_jobs(claims, here, there)
            aside.wait()
        finally:
            aside.close()
            shutil.rmtree(claims, ignore_errors=True)
    kernel.run.compile(run_types)
    raise_if_stopped()              # a stop lost in numba's compiler callbacks
    if commit_types is not None:    # with the helper, loaded from the cache it filled
        kernel.commit.compile(commit_types)
        raise_if_stopped()


#: The file a compile in the background holds locked (``flock``) while it runs, in numba's
#: cache directory of the engine (:func:`lock_path`).
LOCK_NAME = "tokenpcap-engine-compile.lock"

#: The helpers left compiling in the background (:meth:`Aside.detach`), kept referenced.
_DETACHED: list[subprocess.Popen] = []


def lock_path() -> Path:
    """The lock file of a compile in the background (:data:`LOCK_NAME`): in ``NUMBA_CACHE_DIR``
    when that is set, else in the ``__pycache__`` beside the engine's modules, where numba
    caches them (:mod:`~tokenpcap.schedule.engine.compiled`)."""
    where = os.environ.get("NUMBA_CACHE_DIR")
    return (Path(where) if where else Path(kernel.__file__).parent / "__pycache__") / LOCK_NAME


def _locked(path: Path):
    """An open file of ``path`` locked for this process (``flock``, not waiting), or None when
    another process holds the lock or the file cannot be made."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "a")
    except OSError:
        return None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.close()
        return None
    return f


def compiling_in_background() -> bool:
    """True when a compile in the background (:func:`compile_in_background`) runs now: another
    process holds :func:`lock_path` locked."""
    if not lock_path().exists():
        return False
    f = _locked(lock_path())
    if f is None:
        return True
    f.close()
    return False


def compile_in_background(run_args: tuple, commit_args: tuple | None, aside: Aside) -> None:
    """Hand the helper ``aside`` the whole engine for ``run_args`` and ``commit_args`` (as
    :func:`compile_engine`): :data:`HERE`, :data:`ASIDE`, ``kernel.run`` and ``commit``, compiled
    in that order into numba's cache at a lower priority (``nice`` 10) and under the lock
    :func:`lock_path`, for the next runs, while this process times the job uncompiled
    (:mod:`~tokenpcap.schedule.engine.interpreted`). The helper outlives this process; it
    compiles nothing when another compile in the background holds the lock."""
    run_types = tuple(numba.typeof(x) for x in run_args)
    named = dict(zip(inspect.signature(kernel.run.py_func).parameters, run_types))
    jobs = [(f.py_func.__module__, f.__name__, signature(f, named)) for f in HERE + ASIDE]
    jobs.append((kernel.__name__, kernel.run.__name__, run_types))
    if commit_args is not None:
        jobs.append((kernel.__name__, kernel.commit.__name__,
                     tuple(numba.typeof(x) for x in commit_args)))
    aside.send((None, jobs, [], True))
    aside.detach()


def main() -> None:
    """The helper: compile the jobs named on standard input, ``(claims, own, other)`` as
    :func:`_compile_jobs` takes them (module docstring), or ``(None, jobs, [], True)``: every
    job of ``jobs``, in the background (:func:`compile_in_background`)."""
    try:
        claims, own, other, *background = pickle.load(sys.stdin.buffer)
    except EOFError:
        return
    lock = None
    if background and background[0]:
        os.nice(10)
        lock = _locked(lock_path())
        if lock is None:        # another compile in the background: it fills the same cache
            return
    try:
        _compile_jobs(claims, own, other)
    finally:
        if lock is not None:
            lock.close()


if __name__ == "__main__":
    main()
