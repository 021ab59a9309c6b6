"""Stages 6–7 streamed to files: ``tokenpcap generate`` and ``tokenpcap run``.

``generate(scenario, options)`` plans the scenario (stage 3), runs the schedule on the NIC engine
(stages 4–5, :class:`tokenpcap.schedule.runner.Schedule`), lowers every transmitted frame to a packet row
(stage 6, :class:`tokenpcap.lower.Lowering`), keeps the selected ones and streams them to capture
files (stage 7, :mod:`tokenpcap.generate.output`), chunk by chunk with flat memory.

* **Files** hold the frames their NICs *send* (an egress capture per NIC port: data, clear-to-send
  writes and the ACKs the NIC returns). ``split="nic"``: one file per NIC
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
  one): the structure of the iteration stays, the bytes shrink.
* **Work**: :func:`tokenpcap.schedule.limits.check_work` refuses a run the packet simulator cannot
  do in reasonable memory and time (counted from the plan, before simulating).
* **Size**: :func:`tokenpcap.generate.size.predict_capture` gives the exact size before anything
  is written (predicted one iteration at a time); :class:`~tokenpcap.errors.OutputError` when it
  exceeds the free space of the output directory, unless ``force``. A run that keeps every
  packet whole is refused earlier still, before simulating, from the plan's estimate
  (:mod:`tokenpcap.plan.sizing`, seconds for hundreds of GB). With a time window the
  prediction is an upper bound: the disk is not checked up front, and a write that runs out of
  space fails cleanly (OutputError, no file left).
* **Time and memory**: every NIC of the job is timed, message by message (cost independent of
  packet counts); frames are materialized only for the NICs the selection can keep (``--nics``,
  the NICs of ``--ranks``), and the other filters apply to those frames. The engine holds its
  arrays for the iterations of the run (:mod:`tokenpcap.schedule.engine.state`); no timeline and
  no NVLink copies are recorded (``keep_history=False``, ``keep_nvlink=False``), and the size is
  predicted one iteration at a time.
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
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from tokenpcap.config.addresses import nic_addresses
from tokenpcap.errors import InputError, OutputError
from tokenpcap.generate.output import Dispatcher, FileSpec, WriterConfig, interfaces
from tokenpcap.generate.select import (Selection, parse_index_set, parse_iterations,
                                       parse_time_ns, parse_window)
from tokenpcap.generate.size import predict_capture
from tokenpcap.lower import Lowering
from tokenpcap.records import LABELS, PKT_ACK, PKT_CTS, PKT_DATA, label_codes
from tokenpcap.records.comments import comment_text
from tokenpcap.pcap import PcapngWriter
from tokenpcap.pcap.outputset import OutputSet
from tokenpcap.pcap.registry import CAPTURE_FORMATS, capture_format
from tokenpcap.config.profiles import Scenario
from tokenpcap.records.provenance import provenance_comment as _provenance_line
from tokenpcap.pipeline import prepare
from tokenpcap.plan.build import Plan
from tokenpcap.schedule.runner import Schedule

__all__ = ["EPOCH_NS", "MAX_SEED", "FORMATS", "SPLITS", "Selection", "GenerateOptions", "GenerateResult",
           "generate", "provenance_comment", "parse_index_set", "parse_time_ns", "parse_window", "parse_iterations"]

#: Largest seed (QPNs, PSNs, R_Keys, addresses and the payload pattern use a signed 64-bit seed).
MAX_SEED = (1 << 63) - 1
#: Time of the first event of a run: 2024-01-01T00:00:00Z in ns since the epoch.
EPOCH_NS = 1_704_067_200 * 1_000_000_000
#: The ``--format`` choices: the registered capture formats.
FORMATS = tuple(CAPTURE_FORMATS)
SPLITS = ("nic", "phase", "none")
@dataclass(frozen=True)
class GenerateOptions:
    """Options of :func:`generate` (module docstring; the CLI options of the same names)."""

    out_dir: Path
    fmt: str = "pcapng"
    split: str = "nic"
    snaplen: int = 262144
    scale: int = 1
    seed: int | None = None
    iterations: int | None = None
    selection: Selection = field(default_factory=Selection)
    jobs: int = 1
    force: bool = False


@dataclass
class GenerateResult:
    """What was written: ``files`` ``[(path, packets, bytes)]``, totals, per-phase payload of data
    packets ``{label: bytes}``, per-NIC data payload (int64 per NIC), control traffic, span;
    ``plan`` is the plan at the run's scale (one iteration), ``iterations`` the kept iterations
    ``(A, B)``, so a full capture's payload is ``plan`` totals × ``B − A``."""

    files: list[tuple[Path, int, int]]
    packets: int = 0
    file_bytes: int = 0
    expected_bytes: int = 0
    phase_payload: dict[str, int] = field(default_factory=dict)
    phase_packets: dict[str, int] = field(default_factory=dict)
    nic_payload: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    cts_packets: int = 0
    cts_payload: int = 0
    ack_packets: int = 0
    first_ns: int = -1
    last_ns: int = -1
    seconds: float = 0.0
    plan: Plan | None = None
    schedule: Schedule | None = None
    iterations: tuple[int, int] = (0, 1)
    scale: int = 1
    selection: Selection | None = None


def _file_specs(s: Scenario, opt: GenerateOptions, pred_keys: np.ndarray, n_nics: int,
                ext: str, outset: OutputSet) -> tuple[list[FileSpec], np.ndarray]:
    """Output files (staged in ``outset``) and a map from routing key (NIC, label or 0) to
    file index (-1: none)."""
    name = s.name
    per = s.cluster.nics_per_node
    sel_nics = sorted(set(pred_keys.tolist())) if opt.split == "nic" else None
    all_nics = tuple(sorted(opt.selection.nics)) if opt.selection.nics else tuple(range(n_nics))
    if opt.split == "nic":
        keys = sel_nics
        specs = [FileSpec(outset.path(f"{name}_node{k // per:02d}_nic{k % per}.{ext}"), (k,))
                 for k in keys]
        size = n_nics
    elif opt.split == "phase":
        keys = sorted(set(pred_keys.tolist()))
        specs = [FileSpec(outset.path(f"{name}_{LABELS[k].replace('/', '-')}.{ext}"), all_nics)
                 for k in keys]
        size = len(LABELS)
    else:
        keys = [0]
        specs = [FileSpec(outset.path(f"{name}.{ext}"), all_nics)]
        size = 1
    route = np.full(size, -1, np.int64)
    route[list(keys)] = np.arange(len(keys))
    return specs, route


def _check(s: Scenario, opt: GenerateOptions) -> None:
    capture_format(opt.fmt, s.cluster.transport)
    if opt.split not in SPLITS:
        raise InputError(f"--split: got {opt.split!r}, expected one of {', '.join(SPLITS)}")
    if not 1 <= opt.snaplen <= 262144:
        raise InputError(f"--snaplen: got {opt.snaplen}, expected 1..262144")
    if opt.scale < 1 or opt.jobs < 1:
        raise InputError(f"--scale/--jobs: got {opt.scale}/{opt.jobs}, expected integers >= 1")
    if opt.iterations is not None and opt.iterations < 1:
        raise InputError(f"--iterations: got {opt.iterations}, expected an integer >= 1")
    if opt.seed is not None and not 0 <= opt.seed <= MAX_SEED:
        raise InputError(f"--seed: got {opt.seed}, expected 0..{MAX_SEED}")
    if opt.seed is None and not 0 <= s.generation.seed <= MAX_SEED:
        raise InputError(f"{s.path or '<scenario>'}: generation.seed: got {s.generation.seed}, "
                         f"expected 0..{MAX_SEED}")
    if not Path(opt.out_dir).is_dir():
        raise OutputError(f"{opt.out_dir}: got no such directory, expected an existing directory")


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
    _check(s, opt)
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

    def refuse_early(plan: Plan) -> None:
        """The plan's capture size (plan/sizing.py, from the closed forms: seconds even for a
        run of hundreds of GB) against the free space, before anything is simulated. Only
        for a run that keeps every packet whole (no selection, no snaplen), where the pcap
        estimate is a lower bound of every format's size."""
        if opt.force or opt.snaplen < 262144 or any(
                getattr(sel, k) for k in ("nics", "ranks", "phases", "iterations", "window_ns")):
            return
        need = int(plan.pcap["file_bytes"]) * n_iter
        if need > free:
            raise OutputError(f"{opt.out_dir}: free space got {free:,} bytes, expected at least "
                              f"the {need:,} bytes of the capture (estimated from the plan "
                              "before simulating; use --force to write anyway)")

    _, plan, sched = prepare(s, tokens=tokens, scale=opt.scale, iterations=n_iter,
                             keep_nvlink=False, keep_history=False, chunk_rows=1 << 16,
                             nics=sel.nics, ranks=sel.ranks, check=refuse_early)
    ib = s.cluster.transport == "infiniband"
    ext = capture_format(opt.fmt).extension.lstrip(".")

    # --- what will be written: exact prediction (iteration by iteration), selection applied ---
    size = predict_capture(sched, sel, opt.fmt, opt.snaplen, opt.split)
    lab_ok = sel.labels()
    keys = size.keys
    if opt.split == "nic" and sel.nics is not None:
        keys = np.concatenate([keys, np.asarray(sorted(sel.nics))])
    if keys.size == 0:
        on_nics = ", ".join(sorted(r.name for r in plan.rows if r.nic_bytes)) or "none"
        got = f"--phases {','.join(sel.phases)}" if sel.phases else "the selection"
        raise InputError(f"{got}: keeps no packet, expected a selection that meets the NIC "
                         f"traffic (phases on the NICs: {on_nics}; check --nics/--ranks/"
                         "--iterations too)")
    specs, route = _file_specs(s, opt, keys, n_nics, ext, outset)
    expected_packets = size.packets
    addr = nic_addresses(s.cluster)
    names = {n: (f"node{n // s.cluster.nics_per_node}/nic{n % s.cluster.nics_per_node}",
                 _describe(addr, n, ib)) for n in range(n_nics)}
    comments = capture_format(opt.fmt).comments
    cfg = WriterConfig(s.cluster, opt.fmt, opt.snaplen, seed, names,
                       provenance_comment(s, opt, sched.iterations) if comments else None)
    expected = size.record_bytes + sum(
        _file_header_bytes(opt, cfg, sp) for sp in specs)
    bound = sel.window_ns is not None       # a time window: the size is an upper bound
    if announce is not None:
        announce({"files": len(specs), "packets": expected_packets, "bytes": expected,
                  "free_bytes": free, "upper_bound": bound})
    if expected > free and not opt.force and not bound:
        raise OutputError(f"{opt.out_dir}: free space got {free:,} bytes, expected at least the "
                          f"{expected:,} bytes of the capture (use --force to write anyway)")

    # --- run, lower, select, route ------------------------------------------------------------
    kept = sel.iterations if sel.iterations is not None else range(sched.iterations)
    res = GenerateResult(files=[], expected_bytes=expected, nic_payload=np.zeros(n_nics, np.int64),
                         plan=plan, schedule=sched, iterations=(kept.start, kept.stop),
                         scale=plan.scale, selection=opt.selection)
    lower = Lowering(s.cluster, seed, gen.ack_every_packets)
    disp = None
    try:
        disp = Dispatcher(specs, cfg, opt.jobs)
        done = 0
        span = [1 << 62, -1]              # simulation times of every packet, selected or not
        for tx in sched.run():
            if tx.size:
                span = [min(span[0], int(tx["time_ns"].min())), max(span[1], int(tx["time_ns"].max()))]
            done += _chunk(tx, sched, lower, sel, lab_ok, opt, route, disp, res)
            if progress is not None:
                progress(done, expected_packets)
        # a window known to be empty only now: refused as other empty selections, before the
        # (empty) files replace any; not in a shard (other NICs may keep packets)
        if done == 0 and bound and not shard:
            w = sel.window_ns
            raise InputError(f"--time-window: got {w[0]:,}..{w[1]:,} ns, which keeps no packet; "
                             f"expected a window inside the run, whose packets (all NICs and "
                             f"phases) span {span[0]:,}..{span[1]:,} ns")
        sizes = disp.close()
        outset.commit()
    except BaseException as err:
        if disp is not None:
            disp.abort()
        if bound and isinstance(err, OutputError) and "No space left" in str(err):
            raise OutputError(f"{err} (the time window's capture, at most {expected:,} bytes, "
                              f"outgrew the {free:,} bytes free; nothing was left)") from None
        raise
    res.files = [(outset.final(sp.path), p, b) for sp, (p, b) in zip(specs, sizes)]
    res.packets = sum(p for _, p, _ in res.files)
    res.file_bytes = sum(b for _, _, b in res.files)
    res.seconds = time.perf_counter() - t0
    return res


def provenance_comment(s: Scenario, opt: GenerateOptions, iterations_run: int | None = None
                       ) -> str:
    """The SHB comment of every pcapng file :func:`generate` writes for ``s`` with ``opt``
    (format and parser: :mod:`tokenpcap.records.provenance`). ``iterations_run``: iterations simulated
    (default ``opt.iterations`` or the scenario's ``generation.iterations``); the kept ones are
    ``opt.selection.iterations`` or all of them. The seed is ``opt.seed`` or the scenario's.

    Raises:
        InputError: values out of range (see :func:`tokenpcap.records.provenance.provenance_comment`).
    """
    n = iterations_run or opt.iterations or s.generation.iterations
    kept = opt.selection.iterations
    its = (kept.start, kept.stop) if kept is not None else (0, n)
    w = opt.selection.window_ns
    return _provenance_line(
        scenario=s.name, scale=opt.scale, iterations=its, split=opt.split,
        nics=opt.selection.nics, ranks=opt.selection.ranks, phases=opt.selection.phases or None,
        time_window=None if w is None else (w[0], None if w[1] >= _OPEN_END_NS else w[1]),
        snaplen=opt.snaplen, seed=s.generation.seed if opt.seed is None else opt.seed,
        clear_to_send=s.generation.clear_to_send)


_OPEN_END_NS = 1 << 62      # parse_window's end of an open window ("1ms:")


def _chunk(tx, sched, lower, sel: Selection, lab_ok, opt: GenerateOptions, route, disp,
           res: GenerateResult) -> int:
    msgs = sched.message_index
    m = msgs[tx["msg"]]
    kind = tx["kind"]
    kc = kind.astype(np.int64)                      # PKT_DATA, PKT_CTS or PKT_ACK
    label = label_codes(m)
    keep = lab_ok[label]
    if sel.iterations is not None:
        keep &= np.isin(m["iteration"], np.asarray(sel.iterations))
    if sel.nics is not None:
        keep &= np.isin(tx["nic"], np.asarray(sorted(sel.nics)))
    if sel.ranks is not None:
        who = np.where(kc == PKT_ACK, m["rank_dst"], m["rank_src"])
        keep &= np.isin(who, np.asarray(sorted(sel.ranks)))
    if sel.window_ns is not None:
        keep &= (tx["time_ns"] >= sel.window_ns[0]) & (tx["time_ns"] < sel.window_ns[1])
    idx = np.flatnonzero(keep)
    if idx.size == 0:
        return 0
    tx, m, kc, label = tx[idx], m[idx], kc[idx], label[idx]
    pk = lower(tx, msgs)
    pk["time_ns"] += EPOCH_NS
    _account(res, tx, pk, kc, label)
    key = tx["nic"] if opt.split == "nic" else label if opt.split == "phase" else np.zeros(len(tx), np.int64)
    fid = route[key]
    labels_all, codes_all = None, None
    if capture_format(opt.fmt).comments:
        pair = tx["msg"].astype(np.int64) * 3 + kc
        _, first, inv = np.unique(pair, return_index=True, return_inverse=True)
        mu, ku = m[first], kc[first]
        cols = [ku.tolist(), label_codes(mu).tolist()] + [
            mu[f].tolist() for f in ("iteration", "call_id", "step", "layer", "microbatch",
                                     "token_start", "token_end")]
        sc = sched.scenario
        lay = dict(samples=sc.training.micro_batch_size, seq_length=sc.model.seq_length)
        labels_all = [comment_text(*args, **lay) for args in zip(*cols)]
        codes_all = inv.reshape(-1)
    order = np.argsort(fid, kind="stable")
    bounds = np.flatnonzero(np.diff(fid[order])) + 1
    for part in np.split(order, bounds):
        f = int(fid[part[0]])
        if f < 0:
            continue
        if labels_all is not None:
            used, local = np.unique(codes_all[part], return_inverse=True)
            disp.send(f, pk[part], [labels_all[u] for u in used.tolist()], local.reshape(-1))
        else:
            disp.send(f, pk[part], None, None)
    return int(idx.size)


def _account(res: GenerateResult, tx, pk, kc, label) -> None:
    data = kc == PKT_DATA
    pay = pk["payload_bytes"].astype(np.int64)
    if data.any():
        per = np.bincount(label[data], weights=pay[data], minlength=len(LABELS))
        cnt = np.bincount(label[data], minlength=len(LABELS))
        for i in np.flatnonzero(cnt).tolist():
            res.phase_payload[LABELS[i]] = res.phase_payload.get(LABELS[i], 0) + int(per[i])
            res.phase_packets[LABELS[i]] = res.phase_packets.get(LABELS[i], 0) + int(cnt[i])
        np.add.at(res.nic_payload, tx["nic"][data], pay[data])
    cts = kc == PKT_CTS
    res.cts_packets += int(cts.sum())
    res.cts_payload += int(pay[cts].sum())
    res.ack_packets += int((kc == PKT_ACK).sum())
    t = tx["time_ns"]
    res.first_ns = int(t[0]) if res.first_ns < 0 else min(res.first_ns, int(t[0]))
    res.last_ns = max(res.last_ns, int(t[-1]))


def _file_header_bytes(opt: GenerateOptions, cfg: WriterConfig, spec: FileSpec) -> int:
    """Bytes of one file's header: the format's fixed header (pcap 24, raw ERF 0) or, for a format
    with interfaces (pcapng), its section header and interface blocks, measured by opening a
    throwaway writer with the same interfaces."""
    fmt = capture_format(opt.fmt)
    if not fmt.comments:
        return fmt.file_header
    with tempfile.TemporaryDirectory() as tmp:
        w = PcapngWriter(Path(tmp) / "header.pcapng", interfaces(spec, cfg), snaplen=opt.snaplen,
                         threaded=False, section_comment=cfg.section_comment)
        n = w.bytes_written
        w.abort()
    return n


def _describe(addr, n: int, ib: bool) -> str:
    import ipaddress

    mac = ":".join(f"{b:02x}" for b in addr.mac[n].tolist())
    if ib:
        return f"LID 0x{int(addr.lid[n]):04x} GID {ipaddress.IPv6Address(bytes(addr.gid[n]))}"
    return f"{ipaddress.IPv4Address(bytes(addr.ipv4[n]))} {mac}"
