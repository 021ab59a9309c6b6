"""``generate`` on a Dask cluster (``distributed``): shards of NICs written by tasks on workers.

:func:`generate_on_cluster` writes the same files as :func:`tokenpcap.generate.run.generate` with
``split="nic"``, byte for byte, but spreads them over the workers of a ``distributed`` cluster:

* **Shards**: the run's files (one per NIC) are split into sets of NICs balanced by the bytes
  each file will hold, predicted exactly before anything runs
  (:func:`tokenpcap.generate.size.predict_capture`, :func:`tokenpcap.generate.shards.plan_shards`);
  one shard per worker thread unless told otherwise.
* **Tasks**: each task runs ``generate(..., shard_nics=...)`` on its worker: it plans the
  scenario, times the whole job (every NIC: a NIC's frames depend on the traffic of all the
  others) and makes and writes frames only for its shard's NICs, with the run's own provenance
  comment, so each file is the file the whole run writes. Re-timing on every worker was chosen
  over timing once and shipping the timed messages: the engine makes a NIC's frames while it
  times, so a shipped timing would still have to be replayed per frame, and the timing is a
  small part of a shard's cost (``benchmarks/dask_generate.py`` measures both).
* **One unit** (:class:`tokenpcap.pcap.outputset.OutputSet`, as on one machine): the output
  directory is locked, the tasks write into its hidden stage (``.shard-<k>/`` each, through
  ``generate``'s own staging), and only when every shard has finished are the files moved into the
  stage and the set renamed into place. A failed, killed or cancelled task, or Ctrl-C here,
  removes the stage: nothing that looks like a finished capture is left, and the directory holds
  what it held before; what a killed parent leaves, the next run into the directory removes.
* **Summary**: the per-phase and per-NIC payload, packets, control traffic and span are summed
  from the tasks' results; the plan is this process's.
* **Progress and cancel**: tasks report packets written on a ``distributed.Queue`` (at most twice
  a second each); on any exception here (KeyboardInterrupt included) the tasks are cancelled and
  a ``distributed.Event`` tells running ones to stop at their next chunk.
* **Errors**: a task's :class:`~tokenpcap.errors.TokenpcapError` comes back as the same one-line
  error prefixed with its shard (``shard 3 (NICs 24-31): ...``); anything else on a worker, or a
  worker that died, as an :class:`~tokenpcap.errors.OutputError` naming the shard.

The output directory must be a path every worker sees under the same name (a shared or
network file system). ``distributed`` is imported only when a cluster is used.
"""
from __future__ import annotations

import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import numpy as np

from tokenpcap.config.profiles import Scenario
from tokenpcap.errors import InputError, OutputError, TokenpcapError
from tokenpcap.generate.options import GenerateOptions, GenerateResult, check_options
from tokenpcap.generate.run import generate
from tokenpcap.generate.select import window_text
from tokenpcap.generate.shards import Shard, plan_shards
from tokenpcap.generate.size import predict_capture
from tokenpcap.pcap.outputset import OutputSet
from tokenpcap.pipeline import prepare

__all__ = ["dask_client", "generate_on_cluster", "write_shard"]

_REPORT_S = 0.5          # a task reports progress and looks for a cancel at most this often


def _distributed():  # type: ignore[no-untyped-def]
    try:
        import distributed
    except ImportError:
        raise InputError("--dask: got no 'distributed' package, expected it installed "
                         "(pip install 'tokenpcap[dask]')") from None
    return distributed


@contextmanager
def dask_client(address: str) -> Iterator[object]:
    """A ``distributed.Client`` for ``--dask ADDRESS``: ``local`` or ``local:N`` starts a
    ``LocalCluster`` of N worker processes (default: the cores available) with one thread each;
    an existing file is a scheduler file; anything else a scheduler address
    (``tcp://host:8786``). Closed (and a local cluster stopped) on exit.

    Raises:
        InputError: no ``distributed``, a bad ``local:N``, or no scheduler at the address.
    """
    dd = _distributed()
    cluster = None
    if address == "local" or address.startswith("local:"):
        text = address.partition(":")[2] or str(len(os.sched_getaffinity(0)))
        if not text.isdigit() or int(text) < 1:
            raise InputError(f"--dask: got {address!r}, expected local, local:N (N >= 1), a "
                             "scheduler address such as tcp://host:8786 or a scheduler file")
        cluster = dd.LocalCluster(n_workers=int(text), threads_per_worker=1, processes=True,
                                  dashboard_address=":0")
        client = dd.Client(cluster)
    else:
        try:
            if Path(address).is_file():
                client = dd.Client(scheduler_file=address, timeout="20s")
            else:
                client = dd.Client(address, timeout="20s")
        except (OSError, ValueError, TimeoutError) as err:
            raise InputError(f"--dask: got {address!r}, expected a reachable scheduler "
                             f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
                             ) from None
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


class _Reporter:
    """A task's ``progress`` callback: puts ``(shard, packets_done)`` on the run's queue and
    raises OutputError when the run's cancel event is set (checked every ``_REPORT_S``)."""

    def __init__(self, run_id: str | None, shard: Shard):
        self.run_id, self.shard, self.last = run_id, shard, 0.0
        if run_id is not None:
            dd = _distributed()
            self.queue = dd.Queue(f"{run_id}-progress")
            self.cancel = dd.Event(f"{run_id}-cancel")

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self.run_id is None or now - self.last < _REPORT_S:
            return
        self.last = now
        self.raise_if_cancelled()
        self.queue.put((self.shard.index, int(done)))

    def raise_if_cancelled(self) -> None:
        """Raises OutputError naming the shard if the run's cancel event is set."""
        if self.run_id is not None and self.cancel.is_set():
            raise OutputError(f"{self.shard.name()}: cancelled")


def write_shard(s: Scenario, opt: GenerateOptions, shard: Shard, stage: str,
                run_id: str | None = None, tokens=None) -> GenerateResult:
    """The task: write ``shard``'s files into ``stage/.shard-<index>/`` (runs on a worker).

    Returns the shard's :class:`GenerateResult` without its plan and schedule (they stay on the
    worker). Raises: the error of :func:`generate` as the same class prefixed with the shard's
    name, or OutputError naming the shard for anything else.
    """
    out = Path(stage) / f".shard-{shard.index:05d}"   # hidden: not a file of the set
    try:
        reporter = _Reporter(run_id, shard)
        reporter.raise_if_cancelled()       # a task started after the run was cancelled
        try:
            out.mkdir(exist_ok=True)        # not parents: a removed stage stays removed
        except OSError as err:
            raise OutputError(f"{shard.name()}: {stage}: cannot write into the run's stage: "
                              f"{err.strerror}") from None
        res = generate(s, replace(opt, out_dir=out, jobs=1), tokens=tokens,
                       progress=reporter, shard_nics=frozenset(shard.nics))
    except TokenpcapError as err:
        if str(err).startswith(shard.name()):
            raise
        try:
            named = type(err)(f"{shard.name()}: {err}")
        except TypeError:
            named = OutputError(f"{shard.name()}: {err}")
        raise named from None
    except Exception as err:  # noqa: BLE001 - any worker failure becomes one line naming the shard
        raise OutputError(f"{shard.name()}: {type(err).__name__}: {err}") from None
    res.plan = res.schedule = None
    return res


def generate_on_cluster(s: Scenario, opt: GenerateOptions, client, *, tokens=None,
                        shards: int | None = None,
                        progress: Callable[[int, int], None] | None = None,
                        announce: Callable[[dict], None] | None = None) -> GenerateResult:
    """Write the captures of ``s`` with ``opt`` (``split="nic"``) on the workers of ``client``
    (module docstring): the files of :func:`tokenpcap.generate.run.generate`, byte for byte.

    Args:
        client: a ``distributed.Client`` whose workers see ``opt.out_dir`` under the same path.
        shards: number of tasks (default: the cluster's worker threads); fewer when fewer NICs.
        progress: ``progress(packets_done, packets_expected)`` as tasks report.
        announce: once, before the tasks start, with ``{"files", "packets", "record_bytes",
            "free_bytes", "upper_bound", "shards"}``.

    Raises:
        InputError, InfeasiblePlanError, OutputError: as :func:`generate` (bad options, an
        empty selection, not enough disk), ``--split`` other than ``nic``, ``--point`` other
        than ``nic-tx``; a task's error
        prefixed with its shard; OutputError naming the shard whose worker died.
    """
    t0 = time.perf_counter()
    if opt.split != "nic":
        raise InputError(f"--split: got {opt.split!r} with --dask, expected 'nic' (shards are "
                         "sets of NICs, one file each)")
    if opt.point.kind != "nic-tx":
        raise InputError(f"--point: got {str(opt.point)!r} with --dask, expected 'nic-tx' (shards "
                         "are sets of sending NICs)")
    check_options(s, opt)
    outset = OutputSet(opt.out_dir, what="generate")    # locked before any work, as generate
    try:
        return _run(s, opt, client, outset, t0, tokens, shards, progress, announce)
    except BaseException as err:
        outset.abort()                      # nothing of this run is left (unless committed)
        err.output_committed = outset.committed    # for the CLI's message after a signal
        raise


def _run(s: Scenario, opt: GenerateOptions, client, outset: OutputSet, t0: float, tokens,
         shards: int | None, progress, announce) -> GenerateResult:
    sel = opt.selection
    n_iter = opt.iterations or s.generation.iterations
    _, plan, sched = prepare(s, tokens=tokens, scale=opt.scale, iterations=n_iter,
                             keep_nvlink=False, keep_history=False, keep_messages=False,
                             nics=sel.nics, ranks=sel.ranks, run="generate")
    size = predict_capture(sched, sel, opt.fmt, opt.snaplen, "nic")
    keys = size.keys if sel.nics is None else np.union1d(size.keys, sorted(sel.nics))
    if keys.size == 0:          # refused by generate itself, with its message, before writing
        outset.abort()
        return generate(s, opt, tokens=tokens)
    n = shards or sum(client.nthreads().values()) or 1
    plan_ = plan_shards(keys, size.nic_record_bytes, n)
    free = shutil.disk_usage(opt.out_dir).free
    bound = sel.window_ns is not None
    if announce is not None:
        announce({"files": int(keys.size), "packets": size.packets,
                  "record_bytes": size.record_bytes, "free_bytes": free, "upper_bound": bound,
                  "shards": len(plan_)})
    if size.record_bytes > free and not opt.force and not bound:
        raise OutputError(f"{opt.out_dir}: free space got {free:,} bytes, expected at least the "
                          f"{size.record_bytes:,} bytes of the capture (use --force to write anyway)")
    run_id = f"tokenpcap-{os.getpid()}-{secrets.token_hex(6)}"
    dd = _distributed()
    queue, cancel = dd.Queue(f"{run_id}-progress", client=client), dd.Event(f"{run_id}-cancel",
                                                                          client=client)
    futures = []
    try:
        futures = [client.submit(write_shard, s, opt, sh, str(outset.stage), run_id, tokens,
                                 key=f"{run_id}-shard-{sh.index}", pure=False) for sh in plan_]
        results = _collect(futures, plan_, queue, size.packets, progress)
        if bound and sum(r.packets for r in results) == 0:
            w = sel.window_ns
            raise InputError(f"--time-window: got {window_text(w)}, which keeps no packet; "
                             "expected a window inside the run")
        res, sources = _merge(results, plan_, plan, opt, sched.engine.n_nics)
        for src, (dst, _, _) in zip(sources, res.files):   # every shard is complete: into
            os.replace(src, outset.path(dst.name))          # the stage, then the set in place
        for d in outset.stage.glob(".shard-*"):
            shutil.rmtree(d)
        outset.commit()
    except BaseException:
        cancel.set()
        client.cancel(futures)
        _wait_stopped(client, run_id)       # before the stage is removed under their feet
        raise
    finally:
        _release(queue, cancel)
    res.seconds = time.perf_counter() - t0
    return res


def _collect(futures, plan_: list[Shard], queue, total: int, progress) -> list[GenerateResult]:
    """Wait for every task, feeding ``progress``; the first failure raises (naming its shard)."""
    done = {sh.index: 0 for sh in plan_}
    pending = dict(zip(futures, plan_))
    results: dict[int, GenerateResult] = {}
    while pending:
        time.sleep(0.2)
        for f in [f for f in pending if f.done()]:
            sh = pending.pop(f)
            try:
                results[sh.index] = f.result()
            except TokenpcapError:
                raise
            except Exception as err:  # noqa: BLE001 - KilledWorker, a lost connection
                raise OutputError(f"{sh.name()}: its task failed on the cluster "
                                  f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})"
                                  ) from None
            done[sh.index] = results[sh.index].packets
        try:
            n = queue.qsize()
            items = queue.get(batch=n) if n else []
        except Exception:  # noqa: BLE001 - progress is best effort
            items = []
        for idx, d in items:
            if idx not in results:
                done[idx] = max(done[idx], d)
        if progress is not None:
            progress(sum(done.values()), total)
    return [results[sh.index] for sh in plan_]


def _merge(results: list[GenerateResult], plan_: list[Shard], plan, opt: GenerateOptions,
           n_nics: int) -> tuple[GenerateResult, list[Path]]:
    """One result from the shards' (files in NIC order, as the whole run lists them, with their
    final paths; totals summed; span min/max) and the staged path of each file."""
    res = GenerateResult(files=[], nic_payload=np.zeros(n_nics, np.int64), plan=plan,
                         iterations=results[0].iterations, scale=results[0].scale,
                         selection=opt.selection)
    files = []
    for sh, r in zip(plan_, results):
        if len(r.files) != len(sh.nics):
            raise OutputError(f"{sh.name()}: got {len(r.files)} files, expected one per NIC")
        files.extend(zip(sh.nics, r.files))
        res.packets += r.packets
        res.file_bytes += r.file_bytes
        res.expected_bytes += r.expected_bytes
        for k, v in r.phase_payload.items():
            res.phase_payload[k] = res.phase_payload.get(k, 0) + v
        for k, v in r.phase_packets.items():
            res.phase_packets[k] = res.phase_packets.get(k, 0) + v
        res.nic_payload += r.nic_payload
        res.cts_packets += r.cts_packets
        res.cts_payload += r.cts_payload
        res.ack_packets += r.ack_packets
        res.cnp_packets += r.cnp_packets
        if r.first_ns >= 0:
            res.first_ns = r.first_ns if res.first_ns < 0 else min(res.first_ns, r.first_ns)
        res.last_ns = max(res.last_ns, r.last_ns)
    files.sort(key=lambda item: item[0])
    res.files = [(Path(opt.out_dir) / Path(p).name, pk, b) for _, (p, pk, b) in files]
    return res, [Path(p) for _, (p, _, _) in files]


def _wait_stopped(client, run_id: str, timeout_s: float = 10.0) -> None:
    """Wait (at most ``timeout_s``) until no task of this run is processing on a worker: the
    running ones see the cancel event within ``_REPORT_S`` and drop their files."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            busy = [k for keys in client.processing().values() for k in keys
                    if str(k).startswith(run_id)]
        except Exception:  # noqa: BLE001 - the scheduler is gone: nothing runs any more
            return
        if not busy:
            return
        time.sleep(0.1)


def _release(queue, cancel) -> None:
    """Drop the run's progress queue on the scheduler (the cancel event, a flag, stays set for
    tasks still stopping)."""
    try:
        queue.close()
    except Exception:  # noqa: BLE001 - the scheduler may be gone already
        pass
