"""A writer process's watch on its parent: when the parent dies (a SIGKILL leaves no chance to
tell its workers), Linux sends the worker SIGUSR1 (prctl(2) ``PR_SET_PDEATHSIG``), which raises
:class:`ParentDied` in its main thread, so that it drops its files and exits instead of waiting
on a queue nobody writes to (:func:`tokenpcap.generate.output._worker`)."""
from __future__ import annotations

import os
import signal
import sys

__all__ = ["ParentDied", "parent_gone", "signal_when_parent_dies", "PR_SET_PDEATHSIG",
           "drop_sinks", "drop_parts"]


class ParentDied(BaseException):
    """Raised in a worker's main thread when its parent process has died."""


def parent_gone() -> None:
    """Ignore SIGUSR1 from now on: the parent's death is known. Linux sends the death signal
    again each time the worker is handed to another thread of the dying parent (prctl(2):
    "the parent thread"; a parent with queue feeder threads dies thread by thread), and a
    second :class:`ParentDied` must not interrupt the dropping of the files."""
    try:
        signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    except ValueError:          # not the main thread: no handler was installed either
        pass


def _raise_parent_died(signum, frame):  # type: ignore[no-untyped-def]
    parent_gone()
    raise ParentDied()


#: ``PR_SET_PDEATHSIG`` of Linux's prctl(2) (``<linux/prctl.h>``)
PR_SET_PDEATHSIG = 1


def signal_when_parent_dies() -> None:
    """Have Linux send this worker SIGUSR1 when its parent dies (prctl(2) ``PR_SET_PDEATHSIG``)
    and raise :class:`ParentDied` for it in the main thread. A worker blocked in the middle of
    a batch that a SIGKILLed parent was still sending would otherwise wait forever: its queue's
    pipe never reaches end of file, because every worker holds the pipe's write end too, and it
    would keep the directory locked. Elsewhere than Linux nothing is set; the queue's timeout
    still notices a dead parent between batches."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        signal.signal(signal.SIGUSR1, _raise_parent_died)
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGUSR1), 0, 0, 0)
    except (OSError, AttributeError, ValueError):
        pass


def drop_sinks(sinks) -> None:
    """Abort every sink (``abort()``), even when the parent's death is noticed in the middle
    (the abort of that sink is done again: aborting is idempotent). Raises nothing but what an
    abort raises."""
    for s in sinks:
        while True:
            try:
                s.abort()
                break
            except ParentDied:
                continue        # SIGUSR1 is ignored from now on: at most once per worker


def drop_parts(specs) -> None:
    """Remove the temporary files this process made for ``specs`` (each with a ``path``) that
    no sink holds (a parent's death noticed while a sink was being opened: its file made, the
    sink not yet kept); ``tokenpcap.pcap.output.AtomicOutput`` names them
    ``.<name>.<pid>.*.part``."""
    for sp in specs:
        for part in sp.path.parent.glob(f".{sp.path.name}.{os.getpid()}.*.part"):
            part.unlink(missing_ok=True)
