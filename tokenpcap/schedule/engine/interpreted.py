"""The timing engine run as plain Python, for a job smaller than the engine's compile: the first
run on a machine (numba's cache empty) of a job that Python times in less time than numba takes
to compile the engine (:func:`worth_it`) runs the engine's own functions uncompiled (each numba
dispatcher's ``py_func``) while a helper process compiles the engine into numba's cache in the
background for the next runs (:mod:`~tokenpcap.schedule.engine.compile_aside`).

The same code, the same results. :func:`twin` gives each engine function an uncompiled copy
whose module globals name the copies of the functions and modules it calls (a compiled part has
no entry point Python may call: :func:`~tokenpcap.schedule.engine.compiled.part`), and
:data:`KERNEL` runs :func:`~tokenpcap.schedule.engine.kernel.run` and ``commit`` so, each array
passed as a ``memoryview`` of it: an element reads as a Python ``int`` (``float``, ``bool``) and
a store writes the array's own memory. numba computes integer arithmetic in ``int64`` whatever
the arrays' widths (its typing of integer operators widens narrower operands), Python in exact
integers: the two agree wherever no ``int64`` value overflows (the engine's values are times in
ns, counts and byte sizes, far below 2**63); a store of a value that does not fit its array's
element raises (``ValueError``) instead of wrapping. numpy's elements would not do: an ``int32``
element times a Python ``int`` stays ``int32`` in numpy (NEP 50) and overflows where numba's
widens. Floats are IEEE doubles in both, computed in the same order. Only an ideal fabric's
engine runs so (the queued fabric's ECMP hashes compute in wrapping ``uint64``, which Python's
integers do not). ``tests/schedule/engine/test_interpreted.py`` checks the message table, frames,
timeline and NVLink copies byte for byte against the reference Python engine
(:mod:`tokenpcap.schedule.reference`) on every kind of call, and against the compiled engine on
the bundled scenarios with an ideal fabric.
"""
from __future__ import annotations

import importlib
import types
from collections.abc import Callable
from typing import Any

import numpy as np
from numba.core.dispatcher import Dispatcher

from tokenpcap.schedule.engine import kernel as K

__all__ = ["twin", "KERNEL", "UNCOMPILED", "PY_MESSAGES_PER_S", "PY_COPIES_PER_S",
           "PY_PACKETS_PER_S", "python_seconds", "worth_it"]

#: RDMA messages, NVLink copies and selected NICs' frames the uncompiled engine handles per CPU
#: second: fitted on the development machine, 2026-12-07, load 6-7, ``benchmarks/README.md``
#: (dante: 6,240 messages, 412,576 NVLink copies and 337,088 frames in 6.5 CPU s; llama2-7b-
#: a100-ib: 94,756 messages in 5.9 CPU s, 321,516 frames of one NIC 0.7 CPU s more; within 15 %
#: on five jobs of six, 0.5 s high on the sixth; rounded).
PY_MESSAGES_PER_S = 14_000
PY_COPIES_PER_S = 75_000
PY_PACKETS_PER_S = 450_000

#: What the stage line of the timing says of a run timed uncompiled.
UNCOMPILED = ("in Python this once (the timing engine compiles in the background for the next "
              "runs, once per machine)")

_PKG = K.__name__.rpartition(".")[0]
_modules: dict[str, types.ModuleType] = {}
_twins: dict[int, Callable] = {}


def _module(name: str) -> types.ModuleType:
    """The uncompiled copy of the engine module ``name``: its globals, each engine function
    (a numba dispatcher) replaced by its :func:`twin` and each engine module by its copy."""
    if name in _modules:
        return _modules[name]
    copy = types.ModuleType(name)
    _modules[name] = copy                   # before the loop: modules import each other
    copy.__dict__.update(importlib.import_module(name).__dict__)
    for key, value in list(copy.__dict__.items()):
        if isinstance(value, Dispatcher):
            copy.__dict__[key] = twin(value)
        elif isinstance(value, types.ModuleType) and value.__name__.startswith(_PKG + "."):
            copy.__dict__[key] = _module(value.__name__)
    return copy


def twin(f: Dispatcher) -> Callable:
    """The uncompiled copy of the engine function ``f`` (a numba dispatcher): its Python code
    (``f.py_func``) with the globals of its module's copy (:func:`_module`), so that what it
    calls is uncompiled too."""
    if id(f) not in _twins:
        py = f.py_func
        _twins[id(f)] = types.FunctionType(py.__code__, _module(py.__module__).__dict__,
                                           py.__name__, py.__defaults__, py.__closure__)
    return _twins[id(f)]


def _view(x: Any) -> Any:
    """``x`` as the uncompiled engine takes it: an array as its ``memoryview`` (module
    docstring), a named tuple of arrays (the engine's ``State``) with each array so, anything
    else as it is."""
    if isinstance(x, np.ndarray):
        return memoryview(x)
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(_view(a) for a in x))
    return x


class _Kernel:
    """:func:`~tokenpcap.schedule.engine.kernel.run` and ``commit`` uncompiled, with the same
    arguments as the compiled ones (module docstring)."""

    def run(self, *args):
        return twin(K.run)(*map(_view, args))

    def commit(self, *args):
        return twin(K.commit)(*map(_view, args))


#: The kernel's ``run`` and ``commit`` run as plain Python (module docstring).
KERNEL = _Kernel()


def python_seconds(messages: int, copies: int, packets: int) -> float:
    """CPU seconds of timing ``messages`` RDMA messages and ``copies`` NVLink copies and
    committing ``packets`` selected frames with the uncompiled engine
    (:data:`PY_MESSAGES_PER_S`, :data:`PY_COPIES_PER_S`, :data:`PY_PACKETS_PER_S`)."""
    return messages / PY_MESSAGES_PER_S + copies / PY_COPIES_PER_S + packets / PY_PACKETS_PER_S


def worth_it(queued: bool, python_s: float, compiled_s: float) -> bool:
    """True when a job is better timed uncompiled (``python_s`` CPU seconds,
    :func:`python_seconds`) than compiled (``compiled_s``: the compile's CPU seconds on its
    critical path and the compiled engine's run): an ideal fabric's (``queued`` False) whose
    uncompiled time is the smaller."""
    return not queued and python_s < compiled_s
