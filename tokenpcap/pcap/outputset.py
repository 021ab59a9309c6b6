"""A set of output files that lands whole or not at all, and one writer per directory.

A run writes several files (``generate``'s one per NIC, ``plot``'s PNGs, an export and its
topology). :class:`OutputSet` makes them one unit:

* **Lock**: an exclusive ``flock`` on the output directory itself (no lock file is left
  behind; the kernel drops the lock when the last process holding it ends, even by SIGKILL). A
  second run into the same directory is refused at once with one line naming the run that
  holds it. Forked writer processes share the lock, so it outlives a killed parent until they
  have stopped too.
* **Stage**: every file is written into a hidden directory ``.tokenpcap-stage.<pid>.<random>``
  inside the target directory (same file system, so the final moves are renames).
* **Commit**: a marker file ``.commit`` naming the files is written into the stage (atomic
  rename), then each file is renamed over its destination, then the stage is removed. SIGINT
  and SIGTERM are held back during these few renames (delivered right after).
* **Abort** (any error, an interrupt): the stage is removed; the directory holds exactly what
  it held before. It is first renamed to a fresh hidden name, so a writer still running (a
  cancelled task on a cluster worker, which stops only at its next progress report) can no
  longer create anything under the paths it was given while the tree is deleted.
* **Recovery**: a later set in the same directory, under the lock, first finishes a stage that
  carries the marker (a run killed during its renames: its set is completed) and removes every
  other stage (a run killed while writing), so what a kill leaves is temporary and the next run
  removes it.

Files of the set that already exist are replaced; other files in the directory are not touched.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import tempfile
import threading
from pathlib import Path

from tokenpcap.errors import OutputError, raise_if_stopped
from tokenpcap.pcap.filekind import refuse_special_output
from tokenpcap.pcap.pathlimits import PART_EXTRA_BYTES, check_path_length

__all__ = ["OutputSet", "recover", "stopped_commits", "stopped_commit_text", "STAGE_PREFIX",
           "COMMIT_MARK"]

STAGE_PREFIX = ".tokenpcap-stage."
COMMIT_MARK = ".commit"
_STAGE_RE = re.compile(re.escape(STAGE_PREFIX) + r"(\d+)\.")


class OutputSet:
    """The files of one run in ``directory`` (module docstring). Use as a context manager or
    call :meth:`commit` / :meth:`abort`; leaving the ``with`` block without a commit aborts.

    Args:
        directory: an existing directory.
        what: the command, for messages ("generate", "plot", "export").

    Raises:
        OutputError: ``directory`` cannot be opened or written, or another run holds it.
    """

    def __init__(self, directory: str | os.PathLike, *, what: str = "run"):
        self.directory = Path(directory)
        self.what = what
        self.committed = False
        self._fd: int | None = None
        try:
            self._fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as err:
            raise OutputError(f"{self.directory}: output directory: cannot open it: "
                              f"{err.strerror}") from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._fd)
            self._fd = None
            holder = _holder(self.directory)
            raise OutputError(f"{self.directory}: got another tokenpcap run writing into it"
                              f"{f' (pid {holder})' if holder else ''}, expected one run per "
                              "directory at a time (wait for it or choose another directory)"
                              ) from None
        try:
            recover(self.directory)
            self.stage = Path(tempfile.mkdtemp(dir=self.directory,
                                               prefix=f"{STAGE_PREFIX}{os.getpid()}."))
        except OSError as err:
            self._unlock()
            raise OutputError(f"{self.directory}: output directory: cannot write into it: "
                              f"{err.strerror}") from None

    def path(self, name: str) -> Path:
        """Where to write the file that will be ``directory/name``.

        Raises:
            OutputError: ``name`` is not a plain file name, is longer than the file system
                allows (with room for a temporary suffix, as an atomic writer in the stage adds),
                or ``directory/name`` exists and is not a regular file (a device, a FIFO: the
                commit would rename over it).
        """
        if "/" in name or name in ("", ".", "..") or name.startswith("."):
            raise OutputError(f"{name!r}: got a path, expected a plain file name")
        check_path_length(self.directory / name, what="output file", extra_bytes=PART_EXTRA_BYTES)
        check_path_length(self.stage / name, what="output file", extra_bytes=PART_EXTRA_BYTES)
        refuse_special_output(self.directory / name)
        return self.stage / name

    def final(self, path: str | os.PathLike) -> Path:
        """The destination of a staged ``path`` (or ``path`` itself if it is not staged)."""
        p = Path(path)
        return self.directory / p.name if p.parent == self.stage else p

    def commit(self) -> list[Path]:
        """Move every staged file into place (module docstring); returns their final paths.

        Raises:
            OutputError: a destination is no longer a regular file or a new path (a device or
                FIFO made there since :meth:`path`, or a file staged without it): nothing is
                moved and the stage is removed. The file system refuses the marker or a rename;
                the stage is then left for the next run to finish (if marked) or remove.
            KeyboardInterrupt, Terminated: a stop noted while the command ran and lost on the
                way (:func:`tokenpcap.errors.raise_if_stopped`): nothing is moved.
        """
        if self.committed:
            return []
        raise_if_stopped()          # a stop lost in a callback from C: the set does not land
        names = sorted(p.name for p in self.stage.iterdir() if not p.name.startswith("."))
        try:
            for n in names:
                refuse_special_output(self.directory / n)
        except OutputError:
            self.abort()
            raise
        with _signals_held():
            try:
                _write_marker(self.stage, names)
                for n in names:
                    os.replace(self.stage / n, self.directory / n)
                (self.stage / COMMIT_MARK).unlink()
                self.stage.rmdir()
            except OSError as err:
                self._unlock()
                raise OutputError(f"{self.directory}: cannot put the {self.what}'s files in "
                                  f"place: {err.strerror}") from None
            self.committed = True
            self._unlock()
        return [self.directory / n for n in names]

    def abort(self) -> None:
        """Remove the stage (nothing of this run is left) and release the directory."""
        if self._fd is None:
            return
        if not self.committed:
            _remove_stage(self.stage)
        self._unlock()

    def _unlock(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)            # drops our flock (forked writers may still share it)

    def __enter__(self) -> "OutputSet":
        return self

    def __exit__(self, *exc) -> None:
        self.abort()

    def __del__(self):
        if getattr(self, "_fd", None) is not None:
            self.abort()


def recover(directory: str | os.PathLike) -> list[Path]:
    """Finish or remove what killed runs left in ``directory`` (module docstring); call it only
    while holding the directory's lock. Returns the files a marked stage put in place.

    Raises:
        OSError: the file system refuses.
    """
    d = Path(directory)
    placed: list[Path] = []
    for stage in sorted(d.glob(STAGE_PREFIX + "*")):
        if not stage.is_dir():
            continue
        mark = stage / COMMIT_MARK
        if mark.is_file():
            for n in mark.read_text(encoding="utf-8", errors="surrogateescape").splitlines():
                if n and (stage / n).exists():
                    os.replace(stage / n, d / n)
                    placed.append(d / n)
        _remove_stage(stage)
    return placed


def stopped_commits(directory: str | os.PathLike) -> list[tuple[Path, list[str]]]:
    """The sets in ``directory`` that were stopped while their files were being moved into place
    (SIGKILL, a crash, a power loss during :meth:`OutputSet.commit`): stages holding the commit
    marker, each with the names of the files it still holds. While one is there the directory
    holds part of the new set beside what is left of the earlier one, so a reader must not take
    its files as one run's; the next set into the directory completes it (:func:`recover`).
    Stages without the marker (a run stopped while writing, or writing now) are not listed: the
    directory's own files are still the earlier set, whole. Reads only; raises nothing (a
    stage that cannot be read is skipped).

    Returns:
        ``[(stage, [file name, ...]), ...]`` sorted by stage name.
    """
    out: list[tuple[Path, list[str]]] = []
    try:
        stages = sorted(Path(directory).glob(STAGE_PREFIX + "*"))
    except OSError:
        return out
    for stage in stages:
        try:
            names = (stage / COMMIT_MARK).read_text(encoding="utf-8",
                                                    errors="surrogateescape").splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        out.append((stage, [n for n in names if n and (stage / n).exists()]))
    return out


def stopped_commit_text(directory: str | os.PathLike) -> str | None:
    """``None`` when the files of ``directory`` can be read as whole sets, otherwise the one-line
    reason (file, what was found, what was expected) a reader of the directory refuses it with:
    a set was stopped while moving into place (:func:`stopped_commits`). Raises nothing."""
    stopped = stopped_commits(directory)
    if not stopped:
        return None
    stage, left = stopped[0]
    return (f"{directory}: got a run stopped while moving its files into place ({len(left)} of "
            f"them still in {stage.name}), expected one run's complete set of files (the next "
            "tokenpcap run into the directory completes it, e.g. the same command again)")


def _remove_stage(stage: Path) -> None:
    """Delete ``stage`` and everything in it, raising nothing: renamed first (to a new
    ``STAGE_PREFIX`` name, which a later run's :func:`recover` removes if this one cannot), so
    that a writer still creating files under ``stage``'s path gets ENOENT instead of putting a
    new entry behind the deletion and leaving the tree half removed. If the rename fails
    (the stage is gone already, the file system refuses) it is deleted where it is."""
    doomed = stage.with_name(f"{STAGE_PREFIX}{os.getpid()}.removed.{os.urandom(6).hex()}")
    try:
        os.rename(stage, doomed)
    except OSError:
        doomed = stage
    shutil.rmtree(doomed, ignore_errors=True)


def _write_marker(stage: Path, names: list[str]) -> None:
    tmp = stage / (COMMIT_MARK + ".tmp")
    # names are bytes on Linux: one that is not UTF-8 round-trips through surrogate escapes
    with open(tmp, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write("".join(n + "\n" for n in names))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, stage / COMMIT_MARK)


def _holder(directory: Path) -> int | None:
    """The pid in the name of a stage in ``directory`` (the run holding it), if any."""
    for stage in directory.glob(STAGE_PREFIX + "*"):
        m = _STAGE_RE.match(stage.name)
        if m:
            return int(m.group(1))
    return None


@contextlib.contextmanager
def _signals_held():
    """Hold SIGINT and SIGTERM back for the block (main thread only; elsewhere a no-op): they
    are delivered, and their handlers run, as soon as it ends.

    Masking the main thread is not enough: a signal sent to the process is delivered to any
    thread that does not block it (a writer queue's feeder thread), whose C-level handler then
    has the main thread run the Python handler between two renames. So for the block the
    Python handlers are replaced by one that only records the signal, and what it recorded is
    raised again, in order, once the old handlers are back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # a handler installed from C (getsignal None) cannot be put back from Python: keep it
    held = tuple(s for s in (signal.SIGINT, signal.SIGTERM) if signal.getsignal(s) is not None)
    got: list[int] = []
    old_handlers = {s: signal.signal(s, lambda sig, frame: got.append(sig)) for s in held}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)     # pending ones run the recorder
        for s, h in old_handlers.items():
            signal.signal(s, h)
        for s in dict.fromkeys(got):
            signal.raise_signal(s)
