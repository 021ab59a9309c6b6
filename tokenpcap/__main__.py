"""``python -m tokenpcap`` (and the ``tokenpcap`` script) runs the command line.

SIGINT and SIGTERM are handled from the first line, before numpy, numba and the command modules
are imported (about half a second): a stop there prints the same one line as a stop while a
command runs (``error: stopped (SIGINT)``) and exits 130 / 143, nothing having been written yet,
instead of a ``KeyboardInterrupt`` traceback from inside an import. While a command runs its own
handlers replace these (:func:`tokenpcap.cli.common.terminate_like_interrupt`).

Once the command has returned (its outputs committed or aborted, its exit status set), SIGINT
and SIGTERM are ignored: CPython's teardown puts the default action back for a Python handler
(not for ``SIG_IGN``), and a signal there, taken by any thread still alive, killed the process
with no word (status -15 after a complete ``export``), as if it had died mid-run. Ignored, the
command's own status stands.
"""
import os
import signal
import sys


def _stopped_early(signum, frame):  # type: ignore[no-untyped-def]
    name = "SIGTERM" if signum == signal.SIGTERM else "SIGINT"
    try:
        os.write(2, f"error: stopped ({name}): nothing half-written was kept\n".encode())
    finally:
        os._exit(128 + signum)


def run() -> None:
    """Install the early stop handlers, then import and run the command line."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(sig, _stopped_early)
    from tokenpcap.cli import main

    try:
        main()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run())
