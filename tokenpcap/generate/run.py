"""Stages 6–7 streamed to files: ``tokenpcap generate`` and ``tokenpcap run``.

``generate(scenario, options)`` plans the scenario (stage 3), runs the schedule on the NIC engine
(stages 4–5, :class:`tokenpcap.schedule.runner.Schedule`), lowers every transmitted frame to a packet row
(stage 6, :class:`tokenpcap.lower.Lowering`), keeps the selected ones and streams them to capture
files (stage 7, :mod:`tokenpcap.generate.output`), chunk by chunk with flat memory.
Its options, result and constants are :mod:`tokenpcap.generate.options`; the files of a split and
the routing of each chunk to them are :mod:`tokenpcap.generate.route`. The names of the options
module and the selection parsers are importable from here too.

* **Files** hold the frames seen at the capture point (``opt.point``,
  :mod:`tokenpcap.records.points`; file names in :mod:`tokenpcap.generate.route`). By default
  (``nic-tx``) the frames their NICs *send* (an egress capture per NIC port: data, clear-to-send
  writes and the ACKs the NIC returns); ``nic-rx``: what each NIC receives, PFC frames of its ToR
  included (``..._nic<I>_rx.<ext>``); ``switch:NAME:PORT``: the egress of one switch port
  (``<scenario>_<NAME>_port<P>.<ext>``). The point is passed to the schedule
  (``Schedule(point=...)``), whose engine decides which rows exist there. ``split="nic"``: one file per NIC
  (``<scenario>_node<NN>_nic<I>.<ext>``); ``"phase"``: one per phase label
  (``<scenario>_<dim>-<phase>-<Collective>.<ext>``, control packets with their message's phase);
  ``"none"``: one file. pcapng files have one interface per NIC and a comment per packet
  (:func:`tokenpcap.records.comments.comment_text`).
* **Selections** (:class:`Selection`) filter the output of the full simulation, so a slice has
  exactly the timing of the whole trace: NICs (frames they send), ranks (frames their NICs send
  for them: data and CTS they send, ACKs for data they receive), phases (patterns: a whole label,
  a prefix ending at ``/``, or one component such as ``backward``), iterations, and a time window
  ``[start, end)`` in ns from the start of the run.
* **Time**: packet ``time_ns`` is the simulation time plus :data:`EPOCH_NS`
  (2024-01-01T00:00:00Z), so that the same inputs give byte-identical files.
* **Seed**: QPNs, initial PSNs, R_Keys, buffer addresses and the payload pattern.
* **Scale**: every message size and compute time divided by ``scale`` (whole elements, at least
  one per piece of the call: :func:`tokenpcap.plan.calls.scaled_bytes`): the structure of the
  iteration stays, every peer, chunk and channel of every call included; the bytes shrink.
* **Work**: :func:`tokenpcap.schedule.limits.check_work` refuses a run the packet simulator cannot
  do in reasonable memory and time (counted from the plan, before simulating).
* **Size**: :func:`tokenpcap.generate.size.predict_capture` gives the exact size before anything
  is written (predicted one iteration at a time); :class:`~tokenpcap.errors.OutputError` when it
  exceeds the free space of the output directory, unless ``force``. A run that keeps every
  packet whole is refused earlier still, before simulating, from the plan's estimate
  (:mod:`tokenpcap.plan.sizing`, seconds for hundreds of GB). With a time window the
  prediction is an upper bound: the disk is not checked up front, and a write that runs out of
  space fails cleanly (OutputError, no file left). At points other than ``nic-tx`` the PFC
  frames are not predicted (:mod:`tokenpcap.generate.size`): the disk is not checked up front
  either, in the same way.
* **Time and memory**: every NIC of the job is timed, message by message (cost independent of
  packet counts); frames are materialized only for the NICs the selection can keep (``--nics``,
  the NICs of ``--ranks``), and the other filters apply to those frames. The engine holds its
  arrays for the iterations of the run (:mod:`tokenpcap.schedule.engine.state`) except the
  messages: only those in progress and those of the chunk being written
  (``keep_messages=False``, :mod:`tokenpcap.schedule.engine.ring`; the result's ``schedule`` has
  no whole message table); no timeline and no NVLink copies are recorded
  (``keep_history=False``, ``keep_nvlink=False``), and the size is predicted one iteration at a
  time.
* **A run is one unit** (:class:`tokenpcap.pcap.outputset.OutputSet`): the directory is locked
  (a second run into it is refused), the files are written into a hidden stage inside it and
  renamed into place only when every one is complete. On any exception, including
  KeyboardInterrupt and the CLI's SIGTERM, the writer processes are killed at once, the stage is
  removed, and the directory holds exactly what it held before; what a SIGKILL leaves is a
  hidden stage that the next run into the directory removes (or completes, if it was killed
  while renaming). Worker processes also drop their files and exit when the parent dies.
"""
from __future__ import annotations

import shutil
import time
from dataclasses import replace
from typing import Callable

import numpy as np

from tokenpcap.config.addresses import nic_addresses
from tokenpcap.config.profiles import Scenario
from tokenpcap.errors import InputError, OutputError
from tokenpcap.generate.options import (EPOCH_NS, FORMATS, MAX_SEED, SPLITS, GenerateOptions,
                                        GenerateResult, check_options, provenance_comment)
from tokenpcap.generate.ccfiles import write_cc_files
from tokenpcap.generate.fabricfiles import write_fabric_files
from tokenpcap.generate.output import Dispatcher, WriterConfig
from tokenpcap.generate.route import describe_nic, file_header_bytes, file_specs, route_chunk
from tokenpcap.generate.select import (Selection, parse_index_set, parse_iterations, window_text,
                                       parse_time_ns, parse_window)
from tokenpcap.generate.size import predict_capture
from tokenpcap.lower import Lowering
from tokenpcap.pcap.outputset import OutputSet
from tokenpcap.pcap.registry import capture_format
from tokenpcap.pipeline import Timing, prepare
from tokenpcap.plan.build import Plan
from tokenpcap.records import PKT_PFC
from tokenpcap.records.points import NIC_TX
from tokenpcap.stages import stage, wall_seconds

__all__ = ["EPOCH_NS", "MAX_SEED", "FORMATS", "SPLITS", "Selection", "GenerateOptions",
           "GenerateResult", "generate", "provenance_comment", "parse_index_set", "parse_time_ns",
           "parse_window", "parse_iterations", "PACKETS_PER_CPU_S", "FRAME_BYTES_PER_CPU_S",
           "PREDICT_CPU_S_PER_TRANSFER"]

#: Packets per CPU second of generate's packet path (selecting, lowering, routing, building and
#: writing the selected NICs' frames, writer processes included), beside the timing: headers
#: only (``--snaplen 74 --format pcap -j 2``), 2,569,000 measured by
#: ``benchmarks/packet_path.py`` on dante at load 6-8 (2026-12-07, benchmarks/README.md), taken
#: lower for loaded machines; what the timing step's estimate adds for the packets a run writes.
PACKETS_PER_CPU_S = 2_000_000
#: Bytes of frames per CPU second of building and writing them beyond the headers (the payload
#: bytes, the kernel's copy into the page cache): dante's 4 iterations in full frames (5.56 GB)
#: took 3.50 user + 7.53 system CPU s where ``--snaplen 74`` (0.22 GB) took 2.66 + 0.67, so
#: 7.7 CPU s more for 5.33 GB more, 0.69 GB per CPU s (measured 2026-12-07 at load 4, to /tmp);
#: what the timing step's estimate adds for the bytes a run writes (a full-frame capture of
#: 43 GB was estimated at 18 s and took 66 s before it was counted).
FRAME_BYTES_PER_CPU_S = 700_000_000
#: CPU seconds of predicting the capture's size (:func:`predict_capture`) per data message of
#: the run when every NIC is kept (with ``--nics`` or ``--ranks`` it walks only the calls that
#: meet them: no estimate): GPT-3 175B with ``--snaplen 74 --format pcap``, every call walked,
#: 2.21 us at ``--scale 100`` (1,625,024 messages), 2.05 us at ``--scale 30`` (3,496,896),
#: measured 2026-12-07 at load 9.
PREDICT_CPU_S_PER_TRANSFER = 2.2e-6


def generate(s: Scenario, opt: GenerateOptions, *, tokens=None,
             progress: Callable[[int, int], None] | None = None,
             announce: Callable[[dict], None] | None = None,
             shard_nics: frozenset[int] | None = None) -> GenerateResult:
    """Write the captures of ``s`` (module docstring).

    Args:
        s: the scenario; opt: :class:`GenerateOptions`; tokens: stage-1 result (per-epoch totals).
        progress: called as ``progress(packets_done, packets_expected)`` after each chunk.
        announce: called once with ``{"files", "packets", "bytes", "free_bytes"}`` before writing.
        shard_nics: write only the files of these NICs (``split="nic"``), byte for byte as the
            whole run writes them (same provenance comment; :mod:`tokenpcap.generate.distributed`).
            A time window that keeps none of their packets is not refused here: the whole run
            may keep packets of other NICs.

    Raises:
        InputError: bad options (checked before anything is simulated or written: formats,
        snaplen, scale, iterations, a seed outside 0..2^63-1 from ``opt`` or the scenario);
        InfeasiblePlanError: from the plan, or the run is beyond the packet simulator
        (:func:`tokenpcap.schedule.limits.check_work`); OutputError: no such output
        directory, another run writing into it, not enough free space (without ``force``;
        from the plan's estimate before simulating, then from the exact prediction), a write
        failed. On any exception (KeyboardInterrupt and the CLI's SIGTERM too) the directory
        holds what it held before; the exception carries ``output_committed`` (True only when
        it arrived after the whole set was in place).
    """
    t0 = time.perf_counter()
    check_options(s, opt)
    seed = s.generation.seed if opt.seed is None else int(opt.seed)
    gen = replace(s.generation, seed=seed)
    s = replace(s, generation=gen)
    n_nics = s.cluster.nodes * s.cluster.nics_per_node
    sel = opt.selection
    if shard_nics is not None:
        if opt.split != "nic":
            raise InputError(f"--split: got {opt.split!r} for a run sharded by NIC, expected 'nic'")
        only = frozenset(int(n) for n in shard_nics)
        sel = replace(sel, nics=only if sel.nics is None else sel.nics & only)
    n_iter = opt.iterations or s.generation.iterations
    if sel.iterations is not None and sel.iterations.stop > n_iter:
        raise InputError(f"--iterations: got kept iterations {sel.iterations.start}:"
                         f"{sel.iterations.stop}, expected at most {n_iter} run")
    outset = OutputSet(opt.out_dir, what="generate")   # locked before any work: a second
    try:                                              # run into the directory is refused now
        return _generate(s, opt, outset, t0, tokens, progress, announce, gen, seed, n_nics,
                         sel, n_iter, shard_nics is not None)
    except BaseException as err:
        outset.abort()                      # nothing of this run is left (unless committed)
        err.output_committed = outset.committed    # for the CLI's message after a signal
        raise


def _generate(s: Scenario, opt: GenerateOptions, outset: OutputSet, t0: float, tokens,
              progress, announce, gen, seed: int, n_nics: int, sel: Selection,
              n_iter: int, shard: bool = False) -> GenerateResult:
    free = shutil.disk_usage(opt.out_dir).free
    nic_addresses(s.cluster)       # a cluster larger than its address ranges: before any planning

    def refuse_early(plan: Plan) -> None:
        """The plan's capture size (plan/sizing.py, from the closed forms: seconds even for a
        run of hundreds of GB) against the free space, before anything is simulated. Only
        for a run that keeps every packet whole (no selection, no snaplen), where the pcap
        estimate is a lower bound of every format's size."""
        if opt.force or opt.snaplen < 262144 or opt.point.at_switch or any(
                getattr(sel, k) for k in ("nics", "ranks", "phases", "iterations", "window_ns")):
            return
        need = int(plan.pcap["file_bytes"]) * n_iter
        if need > free:
            raise OutputError(f"{opt.out_dir}: free space got {free:,} bytes, expected at least "
                              f"the {need:,} bytes of the capture (estimated from the plan "
                              "before simulating; use --force to write anyway)")

    _, plan, sched = prepare(s, tokens=tokens, scale=opt.scale, iterations=n_iter,
                             keep_nvlink=False, keep_history=False, keep_messages=False,
                             chunk_rows=1 << 16,
                             nics=sel.nics, ranks=sel.ranks, check=refuse_early,
                             point=opt.point, run="generate")
    ib = s.cluster.transport == "infiniband"
    ext = capture_format(opt.fmt).extension.lstrip(".")

    # --- what will be written: exact prediction (iteration by iteration), selection applied ---
    timing = sched.on_run
    whole = sel.nics is None and sel.ranks is None       # else only the calls that meet them
    stage("predicting the capture's size", seconds=wall_seconds(
        timing.work.transfers * PREDICT_CPU_S_PER_TRANSFER)
        if isinstance(timing, Timing) and whole else None)
    size = predict_capture(sched, sel, opt.fmt, opt.snaplen, opt.split, opt.point)
    lab_ok = sel.labels()
    keys = size.keys
    kept_none = keys.size == 0        # (the named NICs below get their file, empty or not)
    if opt.split == "nic" and sel.nics is not None and not opt.point.at_switch:
        keys = np.concatenate([keys, np.asarray(sorted(sel.nics))])
    # nothing kept at all (--nics 0 --ranks 31: NIC 0 sends nothing for rank 31) is refused
    # like an unmatched --phases, not written as empty files; a shard may keep nothing
    if keys.size == 0 or (kept_none and not shard):
        on_nics = ", ".join(sorted(r.name for r in plan.rows if r.nic_bytes)) or "none"
        got = f"--phases {','.join(sel.phases)}" if sel.phases else "the selection"
        raise InputError(f"{got}: keeps no packet, expected a selection that meets the NIC "
                         f"traffic (phases on the NICs: {on_nics}; check --nics/--ranks/"
                         "--iterations too)")
    specs, route = file_specs(s, opt, keys, n_nics, ext, outset)
    expected_packets = size.packets
    addr = nic_addresses(s.cluster)
    rx = opt.point.receive                  # interfaces of the receiving NICs: ".../rx"
    names = {n: (f"node{n // s.cluster.nics_per_node}/nic{n % s.cluster.nics_per_node}"
                 + ("/rx" if rx else ""),
                 describe_nic(addr, n, ib) + (" (frames received)" if rx else ""))
             for n in range(n_nics)}
    comments = capture_format(opt.fmt).comments
    cfg = WriterConfig(s.cluster, opt.fmt, opt.snaplen, seed, names,
                       provenance_comment(s, opt, sched.iterations) if comments else None)
    expected = size.record_bytes + sum(
        file_header_bytes(opt, cfg, sp) for sp in specs)
    bound = sel.window_ns is not None       # a time window: the size is an upper bound
    fabric = opt.point != NIC_TX            # PFC frames not predicted: neither exact nor a bound
    cc = s.cluster.fabric                   # CNP frames: DCQCN's reaction, not predicted either
    cnps = sched.fabric_queued and cc.cc == "dcqcn" and not cc.np.cnp_in_ack
    if announce is not None:
        announce({"files": len(specs), "packets": expected_packets, "bytes": expected,
                  "free_bytes": free, "upper_bound": bound and not fabric,
                  "fabric_dependent": fabric, "cnp_frames": cnps})
    if expected > free and not opt.force and not bound and not fabric:
        raise OutputError(f"{opt.out_dir}: free space got {free:,} bytes, expected at least the "
                          f"{expected:,} bytes of the capture (use --force to write anyway)")

    # --- run, lower, select, route ------------------------------------------------------------
    kept = sel.iterations if sel.iterations is not None else range(sched.iterations)
    res = GenerateResult(files=[], expected_bytes=expected, nic_payload=np.zeros(n_nics, np.int64),
                         plan=plan, schedule=sched, iterations=(kept.start, kept.stop),
                         scale=plan.scale, selection=opt.selection, point=opt.point)
    lower = Lowering(s.cluster, seed, gen.ack_every_packets, sched.line_protocols)
    routed = [0]                    # packets handed to the writers so far (the meter's note)
    if isinstance(timing, Timing):
        files = f"{len(specs):,} file{'s' if len(specs) != 1 else ''}"
        timing.also = f", writing {'at most ' if bound else ''}{expected_packets:,} packets " \
                      f"to {files}"
        timing.also_cpu_s = (expected_packets / PACKETS_PER_CPU_S
                             + size.record_bytes / FRAME_BYTES_PER_CPU_S)
        extra = " and ".join(k for k, on in (("PFC", fabric), ("CNP", cnps)) if on)
        if extra:       # the fabric's frames, not predicted: written beside the rest
            timing.note = lambda: (f"{routed[0]:,} packets written ({expected_packets:,} and the "
                                   f"{extra} frames)")
        else:
            timing.note = lambda: f"{routed[0]:,} of {expected_packets:,} packets written"
    disp = None
    try:
        disp = Dispatcher(specs, cfg, opt.jobs)
        done = 0
        span = [1 << 62, -1]        # simulation times of the kept iterations' packets, any NIC
        for tx in sched.run():
            t = tx["time_ns"]
            if bound and sel.iterations is not None and tx.size:
                rd = tx["kind"] != PKT_PFC          # PFC rows name no message
                its = sched.message_index[tx["msg"][rd]]["iteration"]
                t = t[rd][np.isin(its, np.asarray(sel.iterations))]
            if t.size:
                span = [min(span[0], int(t.min())), max(span[1], int(t.max()))]
            done += route_chunk(tx, sched, lower, sel, lab_ok, opt, route, disp, res)
            routed[0] = done
            if progress is not None:
                progress(done, expected_packets)
        # a window known to be empty only now: refused as other empty selections, before the
        # (empty) files replace any; not in a shard (other NICs may keep packets)
        if done == 0 and bound and not shard:
            w = sel.window_ns
            which = ("all NICs and phases" if sel.iterations is None else
                     f"all NICs and phases of iteration{'s' if len(kept) > 1 else ''} "
                     f"{kept.start}{f'..{kept.stop - 1}' if len(kept) > 1 else ''}")
            raise InputError(f"--time-window: got {window_text(w)}, which keeps no packet; "
                             f"expected a window inside the run, whose packets ({which}) span "
                             f"{span[0]:,}..{span[1]:,} ns")
        stage(f"writing the last packets of {len(specs):,} file{'s' if len(specs) != 1 else ''}")
        sizes = disp.close()
        if sched.fabric_queued and not shard:
            # what the fabric did, beside the captures (the same stem, so inspect finds it)
            log, summary = sched.fabric_log()
            cc = s.cluster.fabric
            written = (write_cc_files(outset.stage, s.name, sched.cc_log(), summary.switch_names)
                       if cc.ecn.enabled or cc.cc != "none" else [])
            written += write_fabric_files(outset.stage, s.name, log, summary)
            res.fabric_files = [outset.final(p) for p in written]
            res.fabric = summary
        outset.commit()
    except BaseException as err:
        if disp is not None:
            disp.abort()
        if bound and not fabric and isinstance(err, OutputError) and "No space left" in str(err):
            raise OutputError(f"{err} (the time window's capture, at most {expected:,} bytes, "
                              f"outgrew the {free:,} bytes free; nothing was left)") from None
        if fabric and isinstance(err, OutputError) and "No space left" in str(err):
            raise OutputError(f"{err} (the capture at --point {opt.point}, {expected:,} bytes "
                              f"predicted without its PFC frames, outgrew the {free:,} bytes "
                              f"free; nothing was left)") from None
        raise
    res.files = [(outset.final(sp.path), p, b) for sp, (p, b) in zip(specs, sizes)]
    res.packets = sum(p for _, p, _ in res.files)
    res.file_bytes = sum(b for _, _, b in res.files)
    res.seconds = time.perf_counter() - t0
    return res
