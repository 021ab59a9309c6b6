"""Stage 7 for the generator: output files, packet comments, and the processes that write them.

One :class:`FileSpec` per output file (per NIC, per phase, or one). A :class:`Sink` owns one
file: it buffers the ``PACKET_DTYPE`` rows routed to it, builds their frames with
:class:`tokenpcap.wire.builder.FrameBuilder` straight into the writer's record buffer (the batch
contract of :mod:`tokenpcap.pcap.writer`) and writes them. :class:`Dispatcher` spreads the
files over worker processes (``jobs > 1``, files dealt round-robin, a bounded queue per worker
so memory stays flat; forked workers take the rows from buffers shared with the parent,
:mod:`tokenpcap.generate.feed`) or keeps them in-process (``jobs == 1``). A file's bytes depend
only on the rows routed to it, so the output is the same whatever ``jobs`` is.

Packet comments (pcapng) follow the grammar of :mod:`tokenpcap.records.comments`.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tokenpcap.errors import OutputError, TokenpcapError
from tokenpcap.generate.feed import RowSlots, feed_chunk
from tokenpcap.generate.inplace import WRITE_BYTES, InPlaceRecords
from tokenpcap.generate.pending import PendingRows, captured_bytes
from tokenpcap.generate.parentdeath import PR_SET_PDEATHSIG as _PR_SET_PDEATHSIG  # noqa: F401
from tokenpcap.generate.parentdeath import ParentDied as _ParentDied
from tokenpcap.generate.parentdeath import drop_parts, drop_sinks
from tokenpcap.generate.warm import load_writer_functions
from tokenpcap.generate.parentdeath import parent_gone as _parent_gone
from tokenpcap.generate.parentdeath import signal_when_parent_dies as _signal_when_parent_dies
from tokenpcap.lower import wire_context
from tokenpcap.pcap import Comments, Interface, gather
from tokenpcap.pcap.registry import capture_format
from tokenpcap.config.profiles import ClusterProfile
from tokenpcap.records.points import NIC_TX, CapturePoint
from tokenpcap.wire.builder import FrameBuilder
from tokenpcap.wire.gather import BatchFill

__all__ = ["FileSpec", "WriterConfig", "interfaces", "open_writer", "Sink", "Dispatcher", "FLUSH_BYTES",
           "BUDGET_BYTES"]

#: Bytes a sink holds before building and writing one batch: its buffered packet rows plus the
#: record buffer the writer will fill for them (captured bytes + a 16-byte record header, less
#: the payload a gather write takes from the pattern instead, tokenpcap.pcap.gather). Bounds the
#: memory of every open file (rows + two record buffers, about 2 × this) while keeping batches
#: large: per-batch costs dominate small batches (full frames: 2 000-row batches ran at 0.25 M
#: frames/s of CPU, 32 000-row ones at 0.36 M). Full frames get ~50 000 rows per batch,
#: headers-only output (``--snaplen 64``) ~50 000 as well.
FLUSH_BYTES = 8 << 20
#: Held bytes of all the files one process writes, together: when a new batch takes the total
#: above this, the file holding most is written out first. Without it every file kept up to
#: FLUSH_BYTES, so memory grew with the number of files and, as their buffers filled over
#: the first iterations, with the length of the run (Dante's 32 files: 429 -> 598 MB peak RSS
#: from 4 to 16 iterations). With it a process holds at most this much, however many files and
#: iterations; the largest buffer is still ~budget / files or more, so batches stay thousands
#: of rows long.
BUDGET_BYTES = 32 << 20
_RECORD_OVERHEAD_BYTES = 16
#: A process writing at most this many files keeps each file's row buffer between batches
#: (no new memory to fault in per batch: at most 1.5 times FLUSH_BYTES / 107 rows of 91
#: bytes, 11 MB, each); with more files each buffer is given back after its batch, as the writers' are.
KEEP_PENDING_FILES = 8
#: A process writing at most this many headers-only pcap files keeps each file's two record
#: buffers (tokenpcap.generate.inplace) between writes: 64 files, each buffer touched up to
#: WRITE_BYTES plus the last part (a chunk's parts together are at most one chunk's records),
#: about 32 MiB plus two chunks' records in all, as BUDGET_BYTES. Given back after each write
#: (as they were past 8 files), they were faulted in again on the next: 28,000 more page
#: faults of the writer processes on Dante's 16 files per writer, about 0.1 of their 0.6
#: CPU-s of system time (benchmarks/README.md, packet_path.py).
KEEP_RECORD_FILES = BUDGET_BYTES // (2 * WRITE_BYTES)


@dataclass(frozen=True)
class FileSpec:
    """One output file: its path, the NICs it holds (pcapng interfaces, in this order) and the
    capture point (at a switch point the file has one interface, the switch port)."""

    path: Path
    nics: tuple[int, ...]
    point: CapturePoint = NIC_TX


@dataclass
class WriterConfig:
    """What every sink needs besides its file (picklable: sent to worker processes)."""

    cluster: ClusterProfile
    fmt: str                  # pcap | pcapng | erf
    snaplen: int
    payload_seed: int
    interface_names: dict[int, tuple[str, str]] = field(default_factory=dict)  # nic -> (name, desc)
    section_comment: str | None = None     # pcapng SHB opt_comment (tokenpcap.records.provenance)


def interfaces(spec: FileSpec, cfg: WriterConfig) -> list[Interface]:
    """pcapng interfaces of a file: one per NIC of ``spec``, named ``node<N>/nic<I>`` (at nic-rx
    ``node<N>/nic<I>/rx``; ``cfg.interface_names``), with its addresses as description and the
    link rate as ``if_speed``; at a switch point one interface ``<switch>/port<P>`` described as
    the port's egress mirror."""
    c = cfg.cluster
    link = "infiniband" if c.transport == "infiniband" else "ethernet"
    speed = int(round(c.link_gbps * 1e9))
    pt = spec.point
    if pt.at_switch:
        return [Interface(name=f"{pt.switch}/port{pt.port}", speed_bps=speed, link=link,
                          description=f"egress of port {pt.port} of switch {pt.switch} (port mirror)")]
    return [Interface(name=cfg.interface_names[n][0], description=cfg.interface_names[n][1],
                      speed_bps=speed, link=link) for n in spec.nics]


def open_writer(spec: FileSpec, cfg: WriterConfig, threaded: bool = True):
    """The capture writer of ``spec`` in ``cfg``'s format (:mod:`tokenpcap.pcap.registry`),
    writing on a background thread unless ``threaded`` is false."""
    fmt = capture_format(cfg.fmt)
    link = "infiniband" if cfg.cluster.transport == "infiniband" else "ethernet"
    return fmt.open(spec.path, link=link, snaplen=cfg.snaplen,
                    interfaces=interfaces(spec, cfg) if fmt.comments else None,
                    section_comment=cfg.section_comment, threaded=threaded)


class _Pool(list):
    """The sinks of one process, which share BUDGET_BYTES, and the bytes they hold together
    (kept up to date by :meth:`Sink.add` and :meth:`Sink.flush`)."""

    held = 0


class Sink:
    """One output file being written (module docstring). ``close`` returns ``(packets, bytes)``.

    Raises:
        OutputError, EncodeError: from the writer or the frame builder.
    """

    def __init__(self, spec: FileSpec, cfg: WriterConfig, builder: FrameBuilder,
                 pool: _Pool | None = None):
        self.spec, self.builder = spec, builder
        self.pool = pool if pool is not None else _Pool([self])     # the files sharing BUDGET_BYTES
        fmt = capture_format(cfg.fmt)
        self.pcapng = fmt.comments
        self.w = open_writer(spec, cfg)
        self.point = spec.point
        if fmt.comments and not spec.point.at_switch:
            self.iface = np.full(max(spec.nics) + 1, -1, np.int64)
            self.iface[list(spec.nics)] = np.arange(len(spec.nics))
        self.snaplen = cfg.snaplen
        self.buf: list[tuple] = []          # (labels, codes, held or None) per part added
        self.rows = 0                       # held bytes of the rows added (see FLUSH_BYTES)
        self._pend = PendingRows()          # the rows added, back to back
        # headers-only pcap: records built from each part as it comes (tokenpcap.generate.inplace);
        # at most one of the two holds anything at a time, so the file keeps the parts' order
        self._direct = (InPlaceRecords(builder, self.w, cfg.snaplen, WRITE_BYTES)
                        if InPlaceRecords.serves(self.w) else None)

    def _held_bytes(self, packets: np.ndarray) -> np.ndarray:
        """Bytes each row holds until written (see FLUSH_BYTES): int64 ``(n,)``."""
        cap = np.minimum(packets["frame_bytes"], self.snaplen).astype(np.int64)
        held = cap + (_RECORD_OVERHEAD_BYTES + packets.dtype.itemsize)
        if gather.AVAILABLE and int(cap.max(initial=0)) >= gather.MIN_HOLE_BYTES:
            _, hole = self.builder.payload_holes(packets, cap)
            held -= np.where(hole >= gather.MIN_HOLE_BYTES, hole, 0)
        return held

    def add(self, packets: np.ndarray, labels: list[str] | None, codes: np.ndarray | None) -> None:
        """Take ``packets`` (``PACKET_DTYPE``, not kept: it may be a shared buffer) and their
        comments: their records built at once (:mod:`tokenpcap.generate.inplace`) or a copy of
        the rows held; build and write when the held bytes call for it."""
        # records built in place take their place in the file when they are built, after what
        # was written: rows of the general way held are written first, for a part built here
        if self._direct is not None and self.buf and self._direct.may_serve(packets):
            self.flush()
        if self._direct is not None and not self.buf:
            got = self._direct.add(packets)
            if got is not None:
                self._hold(got)
                if self._direct.held >= WRITE_BYTES:       # the records alone: a write's worth
                    self.flush()
                return
            if self._direct.held:
                self.flush()            # the records built so far first
        cap_sum, cap_max = captured_bytes(packets["frame_bytes"], self.snaplen)
        held = None         # no payload left to a gather write: the sum of _held_bytes at once
        if gather.AVAILABLE and cap_max >= gather.MIN_HOLE_BYTES:
            held = self._held_bytes(packets)
            nbytes = int(held.sum())
        else:
            nbytes = int(cap_sum) + len(packets) * (_RECORD_OVERHEAD_BYTES + packets.dtype.itemsize)
        self._pend.append(packets)
        self.buf.append((labels, codes, held))
        self._hold(nbytes)

    def _hold(self, nbytes: int) -> None:
        """Count ``nbytes`` more held; write this file or the pool's largest when due."""
        self.rows += nbytes
        self.pool.held += nbytes
        if self.rows >= FLUSH_BYTES:
            self.flush()
        elif self.pool.held > BUDGET_BYTES:
            max(self.pool, key=lambda k: k.rows).flush()

    def flush(self) -> None:
        """Write everything held: the rows held, built in batches of about FLUSH_BYTES held
        bytes, then the records built in place (which came after them)."""
        direct = self._direct is not None and self._direct.held > 0
        if not self.buf and not direct:
            return
        self.pool.held -= self.rows
        self.rows = 0
        if self.buf:
            self._write_rows()
        if direct:
            self._direct.write(release=len(self.pool) > KEEP_RECORD_FILES)

    def _write_rows(self) -> None:
        parts, self.buf = self.buf, []
        pk = self._pend.take()
        held = (np.concatenate([p[2] for p in parts]) if all(p[2] is not None for p in parts)
                else self._held_bytes(pk))
        codes = labels = None
        if self.pcapng:
            labels, cl = [], []
            for lab, cod, _ in parts:
                cl.append(cod + len(labels))
                labels.extend(lab)
            codes = np.concatenate(cl)
        fb = pk["frame_bytes"].astype(np.int64)
        cuts = np.searchsorted(np.cumsum(held), np.arange(FLUSH_BYTES, int(held.sum()), FLUSH_BYTES))
        for a, b in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [len(pk)]]).tolist()):
            if b > a:
                self._write(pk[a:b], fb[a:b], labels, None if codes is None else codes[a:b])
        if len(self.pool) > 1:
            self.w.release_buffers()     # idle buffers of many files would add up (BUDGET_BYTES)
        if len(self.pool) > KEEP_PENDING_FILES:
            self._pend.release()

    def _write(self, pk: np.ndarray, fb: np.ndarray, labels, codes) -> None:
        # a gather fill: the writers take full payloads from the builder's pattern with writev
        comments = Comments(labels, codes) if self.pcapng else None
        if not self.pcapng or self.point.at_switch:
            iface = 0
        else:                           # the interface of the NIC whose port the frame is seen at
            iface = self.iface[pk["peer_nic"] if self.point.receive else pk["nic"]]
        self.w.write_batch(pk["time_ns"], fb, BatchFill(self.builder, pk), iface, comments)

    def close(self) -> tuple[int, int]:
        self.flush()
        self.w.close()
        return self.w.packets, self.w.bytes_written

    def abort(self) -> None:
        self.w.abort()


def _builder(cfg: WriterConfig) -> FrameBuilder:
    return FrameBuilder(wire_context(cfg.cluster, payload_seed=cfg.payload_seed))


def _open(specs: list[FileSpec], cfg: WriterConfig, builder: FrameBuilder | None = None
          ) -> list[Sink]:
    builder = builder if builder is not None else _builder(cfg)
    sinks = _Pool()
    try:
        for s in specs:
            sinks.append(Sink(s, cfg, builder, sinks))
    except BaseException:
        for s in sinks:
            s.abort()
        raise
    return sinks


def _worker(w: int, specs: list[FileSpec], cfg: WriterConfig, q, results, parent: int,
            slots: RowSlots | None = None, builder: FrameBuilder | None = None) -> None:
    """Worker process ``w``: write the files ``specs`` from ``(index, packets, labels, codes)``
    items, or ``(buffer, [(index, start, end, labels, codes), ...])`` items whose rows are in
    ``slots`` (:mod:`tokenpcap.generate.feed`), with ``builder`` (a forked worker's: the
    parent's, :mod:`tokenpcap.generate.warm`) or a new one; ``None`` closes them, ``"abort"`` drops them. Reports ``("ok", w, [(packets, bytes)])``
    or ``("error", w, message)`` on ``results``. When the parent dies (SIGKILL) the worker drops
    its files and exits, reporting nothing: at once on Linux, even in the middle of reading a
    batch (:func:`_signal_when_parent_dies`), otherwise within a second between batches.
    ``parent`` is the pid of the process that started the worker, taken there: a parent killed
    before the worker first runs is then noticed too (the worker's own first ``getppid`` would
    already name the process that adopted it)."""
    sinks: list[Sink] = []
    _signal_when_parent_dies()
    try:
        try:
            if os.getppid() != parent:              # died before the signal was asked for
                _parent_gone()
                raise _ParentDied()
            sinks = _open(specs, cfg, builder)
            while True:
                try:
                    item = q.get(timeout=1.0)
                except queue_mod.Empty:
                    if os.getppid() != parent:      # the parent died (SIGKILL): drop our files
                        _parent_gone()
                        item = "abort"
                    else:
                        continue
                if item is None:
                    results.put(("ok", w, [s.close() for s in sinks]))
                    return
                if item == "abort":
                    drop_sinks(sinks)
                    return
                if len(item) == 2:          # rows in shared memory: copy each part out, free
                    k, parts = item
                    for i, a, b, labels, codes in parts:
                        sinks[i].add(slots.view(k, a, b), labels, codes)   # copied by add
                    slots.release(w)
                    continue
                i, pk, labels, codes = item
                sinks[i].add(pk, labels, codes)
        except _ParentDied:             # nobody reads results any more: drop the files, exit
            drop_sinks(sinks)
            drop_parts(specs)
        except TokenpcapError as err:
            drop_sinks(sinks)
            results.put(("error", w, str(err)))
        except BaseException as err:   # noqa: BLE001 - report anything to the parent, then exit
            drop_sinks(sinks)
            results.put(("error", w, f"{type(err).__name__}: {err}"))
    except _ParentDied:                 # noticed while reporting an error: nobody reads it
        drop_sinks(sinks)
        drop_parts(specs)


def _mp_context():
    """``fork`` when this process runs a single thread (cheap, no re-import of ``__main__``),
    else ``spawn`` (forking a threaded process is unsafe)."""
    if "fork" in mp.get_all_start_methods() and threading.active_count() == 1:
        return mp.get_context("fork")
    return mp.get_context("spawn")


class Dispatcher:
    """Routes packet batches to the sinks of ``specs``, in this process or in ``jobs`` workers.

    Raises:
        OutputError: a worker failed (its message is passed on) or died.
    """

    def __init__(self, specs: list[FileSpec], cfg: WriterConfig, jobs: int):
        self.specs = specs
        self.jobs = max(1, min(int(jobs), len(specs))) if specs else 1
        self.local: list[Sink] | None = None
        self.procs: list = []
        self.slots: RowSlots | None = None
        if self.jobs == 1:
            self.local = _open(specs, cfg)
            return
        ctx = _mp_context()
        self.results = ctx.Queue()
        self.queues = [ctx.Queue(maxsize=8) for _ in range(self.jobs)]
        self.where = [(i % self.jobs, i // self.jobs) for i in range(len(specs))]
        # forked workers map the parent's shared buffers; spawned ones get rows by the queue
        self.slots = RowSlots(ctx, self.jobs) if ctx.get_start_method() == "fork" else None
        builder = None
        if self.slots is not None:      # forked writers inherit the functions loaded here
            builder = _builder(cfg)
            load_writer_functions(specs[0], cfg, builder,
                                  lambda sp: open_writer(sp, cfg, threaded=False))
        for w in range(self.jobs):
            mine = [s for i, s in enumerate(specs) if i % self.jobs == w]
            p = ctx.Process(target=_worker,
                            args=(w, mine, cfg, self.queues[w], self.results, os.getpid(),
                                  self.slots, builder),
                            daemon=True, name=f"tokenpcap-writer-{w}")
            p.start()
            self.procs.append(p)

    def send(self, index: int, packets: np.ndarray, labels: list[str] | None,
             codes: np.ndarray | None) -> None:
        if self.local is not None:
            self.local[index].add(packets, labels, codes)
            return
        w, i = self.where[index]
        self._put(w, (i, packets, labels, codes))

    def chunk_rows(self, n: int) -> tuple[int, np.ndarray] | None:
        """Where a chunk's ``n`` rows may be written to reach the workers without a copy:
        ``(buffer, rows)``, ``rows`` a ``PACKET_DTYPE (n,)`` view of the next shared buffer
        (:meth:`tokenpcap.generate.feed.RowSlots.take`), to be passed on as
        :meth:`send_chunk`'s ``slot`` with parts that are views into it; None when the files
        are written in this process, by spawned workers, or ``n`` exceeds a buffer."""
        if self.slots is None or n > self.slots.slot_rows:
            return None
        k, rows = self.slots.take(self._check)
        return k, rows[:n]

    def send_chunk(self, parts: list[tuple[int, np.ndarray, list[str] | None, np.ndarray | None]],
                   slot: int | None = None) -> None:
        """Send one chunk's ``(index, packets, labels, codes)`` parts (as :meth:`send` each,
        in order): through the workers' shared buffers when the chunk fits one
        (:mod:`tokenpcap.generate.feed`; ``slot``: the buffer of :meth:`chunk_rows` the parts
        already lie in), else part by part through the queues."""
        if self.local is not None or self.slots is None:
            for part in parts:
                self.send(*part)
            return
        feed_chunk(self.slots, self.where, parts, self._put, self._check, slot)

    def _put(self, w: int, item) -> None:
        while True:
            try:
                self.queues[w].put(item, timeout=1.0)
                return
            except queue_mod.Full:
                self._check()

    def _check(self) -> None:
        try:
            status, _, msg = self.results.get_nowait()
        except queue_mod.Empty:
            status = None
        if status == "error":
            self.abort()
            raise OutputError(f"writer process failed: {msg}")
        if any(not p.is_alive() for p in self.procs):
            self.abort()
            raise OutputError("a writer process died (out of memory?)")

    def close(self) -> list[tuple[int, int]]:
        """Finish every file; ``(packets, bytes)`` per spec, in the order of ``specs``."""
        if self.local is not None:
            return [s.close() for s in self.local]
        for q in self.queues:
            q.put(None)
        per_worker: dict[int, list] = {}
        while len(per_worker) < self.jobs:
            try:
                status, w, payload = self.results.get(timeout=1.0)
            except queue_mod.Empty:
                if all(not p.is_alive() for p in self.procs):
                    raise OutputError("writer processes ended without reporting") from None
                continue
            if status == "error":
                self.abort()
                raise OutputError(f"writer process failed: {payload}")
            per_worker[w] = payload
        for p in self.procs:
            p.join()
        return [per_worker[w][i] for w, i in self.where]

    def abort(self) -> None:
        """Stop at once: local files are dropped; worker processes are killed (SIGKILL) without
        waiting for the batches queued to them, which would take seconds of writing. Their
        temporary files lie in the run's stage (:class:`tokenpcap.pcap.outputset.OutputSet`),
        which the caller removes."""
        if self.local is not None:
            for s in self.local:
                s.abort()
            return
        for p in self.procs:
            if p.is_alive():
                p.kill()
        for q in self.queues + [self.results]:
            q.cancel_join_thread()      # batches a dead worker will never read: do not wait
        for p in self.procs:
            p.join()
