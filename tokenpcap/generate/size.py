"""The size of a capture before it is written: every message the schedule will send, predicted.

The schedule's calls are known before it runs, and so are their transfers
(:func:`tokenpcap.collectives.transfers.transfers`): the NIC ones are the data messages. Each data message
of ``S`` bytes is ``ceil(S / PMTU)`` packets whose frame lengths come from
:meth:`tokenpcap.schedule.engine.nic.Engine.frames` (the same segmentation the engine and the lowering use). In
clear-to-send mode each data message is preceded by one ``cts_bytes`` RDMA WRITE from its
receiver; every message is answered by one ACK per packet that requests one (the last packet,
and every ``ack_every_packets``-th). Record overhead per format: classic pcap 24 + 16 per record
(+16 ERF header for InfiniBand), raw ERF 16 per record, pcapng the section header and interface
blocks plus 32 + pad-to-4 + the comment option per Enhanced Packet Block.

The prediction is exact for a full run and for selections by NIC, rank, phase and iteration; a
time window only makes the capture smaller. At capture points other than ``nic-tx``
(:mod:`tokenpcap.records.points`) the frame set depends on the fabric's timing: the PFC frames
switch ports send are not predicted, so at ``nic-rx`` the prediction is exact for the RoCE
frames (a lossless fabric delivers every frame once: a message's packets are received by
``dst_nic``, its ACKs by ``src_nic``) and short by the PFC frames; at a switch port it counts
every selected RoCE frame of the run (which of them cross the port is the fabric's routing), into
one file, short by the PFC frames as well. Neither is a bound of the file size, so
:func:`tokenpcap.generate.run.generate` checks the disk up front only at ``nic-tx`` and lets a
write that runs out of space fail cleanly otherwise, as with a time window. It can be made one iteration at a time
(``iterations=[i]``) and, with the compiled schedule, in pieces of whole calls
(:func:`predict_message_chunks`), so that it never holds a row per message of an iteration.
With a selection of NICs or ranks, only the calls that have a message those NICs or ranks send
or receive are walked
(:meth:`~tokenpcap.schedule.results.ScheduleResults.calls_meeting`, read per call shape): no
other call's packet or ACK is kept, so the prediction is the same, and its cost is that of the
selected NICs' transfers, not the job's.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tokenpcap.errors import InputError
from tokenpcap.records import COLLECTIVES, DIMS, PHASES, VERB_WRITE, VERB_WRITE_IMM
from tokenpcap.records.points import NIC_TX, CapturePoint
from tokenpcap.pcap.registry import capture_format
from tokenpcap.wire import rdma
from tokenpcap.wire.lines import LINE_PROTOCOLS

__all__ = ["PREDICTED_DTYPE", "Predicted", "CaptureSize", "predict_messages",
           "predict_message_chunks", "predict_capture",
           "record_bytes", "comment_bytes"]

#: One row per predicted message (data and clear-to-send), with its packets and its ACKs.
PREDICTED_DTYPE = np.dtype([
    ("src_nic", "<i4"), ("dst_nic", "<i4"), ("rank_src", "<i4"), ("rank_dst", "<i4"),
    ("label", "<i4"), ("kc", "u1"), ("iteration", "<i2"), ("call_id", "<i8"), ("step", "<i4"),
    ("layer", "<i2"), ("microbatch", "<i2"), ("token_start", "<i8"), ("token_end", "<i8"),
    ("size_bytes", "<i8"), ("packets", "<i8"), ("acks", "<i8"),
])


@dataclass(frozen=True)
class Predicted:
    """Predicted messages (:data:`PREDICTED_DTYPE`) and the frame lengths of their packets.

    ``frames``: int64 ``(k, 3)`` FIRST, MIDDLE, LAST frame length per distinct (size, verb) row
    ``shape_index`` points to; ``ack_frame``: frame length of an ACK.
    """

    messages: np.ndarray
    shape_index: np.ndarray
    frames: np.ndarray
    ack_frame: int


def predict_messages(schedule, iterations=None) -> Predicted:
    """Every RDMA message a :class:`tokenpcap.schedule.runner.Schedule` will post (it need not have run):
    data messages in order of call id (then transfer), then their clear-to-send messages.

    Args:
        schedule: the schedule (its plan, algorithm, layout and engine settings are used).
        iterations: iterations to predict (ints, each ``0 .. schedule.iterations - 1``;
            default all the schedule runs).

    Raises:
        InputError: as :func:`tokenpcap.collectives.transfers.transfers`; an iteration outside the run.
    """
    ncoll, nph = len(COLLECTIVES), len(PHASES)
    cts = schedule.engine.clear_to_send
    its = _iterations(schedule, iterations)
    if hasattr(schedule, "nic_transfers"):          # the compiled schedule: vectorized
        return _predicted(schedule, _from_transfers(schedule.nic_transfers(its), nph, ncoll), cts)
    return _predict_each_call(schedule, its)


def _iterations(schedule, iterations) -> list[int] | range:
    """The iterations asked for (all by default). Raises: InputError: one outside the run."""
    its = range(schedule.iterations) if iterations is None else [int(i) for i in iterations]
    bad = [i for i in its if not 0 <= i < schedule.iterations]
    if bad:
        raise InputError(f"iterations: got {bad[0]}, expected 0 .. {schedule.iterations - 1}")
    return its


def predict_message_chunks(schedule, iterations=None, rows: int = 1 << 20, calls=None):
    """:func:`predict_messages` in pieces (an iterator of :class:`Predicted`): with the compiled
    schedule, pieces of whole calls of about ``rows`` transfers (each piece's data messages, then
    their clear-to-send ones), so that what is summed over them needs no row per message of
    the run; otherwise one piece. ``calls``: bool ``(C,)`` per call of the run, only the
    messages of the calls it marks (compiled schedule only;
    :meth:`~tokenpcap.schedule.results.ScheduleResults.calls_meeting`); None: every call.

    Raises:
        InputError: as :func:`predict_messages`.
    """
    if not hasattr(schedule, "nic_transfer_chunks"):
        yield predict_messages(schedule, iterations)
        return
    its = _iterations(schedule, iterations)
    ncoll, nph = len(COLLECTIVES), len(PHASES)
    for cols in schedule.nic_transfer_chunks(its, rows, calls):
        yield _predicted(schedule, _from_transfers(cols, nph, ncoll), schedule.engine.clear_to_send)


def _predict_each_call(schedule, its) -> Predicted:
    """:func:`predict_messages` from every call's transfers (a schedule without ``nic_transfers``)."""
    from tokenpcap.schedule.spans import token_range

    s = schedule.scenario
    eng = schedule.engine
    seq = s.token_layout[1]
    ncoll, nph = len(COLLECTIVES), len(PHASES)
    cts = eng.clear_to_send
    calls = sorted((c for i in its for c in schedule.plan.calls(i)), key=lambda c: c.call_id)
    rows = []
    for c in calls:
        tr = schedule.plan.call_transfers(c)
        line = LINE_PROTOCOLS[schedule.plan.protocol(c)]
        t = tr.table
        if not len(t) or not t["nic"].any():
            continue
        label = (DIMS.index(c.dim) * nph + PHASES.index(c.phase)) * ncoll + COLLECTIVES.index(c.collective)
        for x in np.flatnonzero(t["nic"]).tolist():
            src, dst, nb = int(t["src"][x]), int(t["dst"][x]), int(t["bytes"][x])
            tok = token_range(c, int(t["byte_offset"][x]), nb, c.message_bytes, seq, line)
            rows.append((src, dst, label, 0, c.iteration, c.call_id, int(t["step"][x]), c.layer,
                         c.microbatch, tok[0], tok[1], nb, int(t["src_nic"][x]),
                         int(t["dst_nic"][x])))
    names = ("rank_src", "rank_dst", "label", "kc", "iteration", "call_id", "step", "layer",
             "microbatch", "token_start", "token_end", "size_bytes", "src_nic", "dst_nic")
    a = list(zip(*rows)) if rows else [()] * len(names)
    return _predicted(schedule, {k: np.asarray(v, np.int64) for k, v in zip(names, a)}, cts)


def _from_transfers(t: dict, nph: int, ncoll: int) -> dict:
    out = {k: t[k] for k in ("rank_src", "rank_dst", "iteration", "call_id", "step", "layer",
                             "microbatch", "token_start", "token_end", "size_bytes", "src_nic",
                             "dst_nic")}
    out["label"] = (t["dim"] * nph + t["phase"]) * ncoll + t["collective"]
    out["kc"] = np.zeros_like(t["size_bytes"])
    return out


def _predicted(schedule, cols: dict, cts: bool) -> Predicted:
    """:class:`Predicted` of the data messages in ``cols`` (int64 columns of PREDICTED_DTYPE
    names) and, with clear-to-send, their CTS writes."""
    s = schedule.scenario
    eng = schedule.engine
    every = eng.ack_every
    n = len(cols["size_bytes"])
    m = np.zeros(n * (2 if cts else 1), PREDICTED_DTYPE)
    if n:
        for name, v in cols.items():        # src_nic/dst_nic: the transfer's (rails)
            m[name][:n] = v
        if cts:
            m[n:] = m[:n]
            m["src_nic"][n:], m["dst_nic"][n:] = m["dst_nic"][:n], m["src_nic"][:n]
            m["rank_src"][n:], m["rank_dst"][n:] = m["rank_dst"][:n], m["rank_src"][:n]
            m["kc"][n:], m["size_bytes"][n:] = 1, eng.cts_bytes
    verb = np.where(m["kc"] == 1, VERB_WRITE, VERB_WRITE_IMM if cts else VERB_WRITE)
    keys, shape_index = np.unique(np.stack([m["size_bytes"], verb], axis=1), axis=0,
                                  return_inverse=True)
    frames = np.zeros((len(keys), 3), np.int64)
    npk = np.zeros(len(keys), np.int64)
    for i, (size, v) in enumerate(keys.tolist()):
        npk[i], _, fb = eng.frames(int(size), int(v))
        frames[i] = fb
    shape_index = shape_index.reshape(-1)
    m["packets"] = npk[shape_index]
    p = m["packets"]
    m["acks"] = 1 if every == 0 else p // every + (p % every != 0)
    net = s.cluster.network
    ack = int(rdma.frame_bytes(np.array([rdma.ACKNOWLEDGE], np.uint8), np.array([0]),
                               transport=s.cluster.transport, ip_version=int(net.ip_version),
                               vlan=net.vlan_id is not None)[0])
    return Predicted(m, shape_index, frames, ack)


def record_bytes(pred: Predicted, fmt: str, snaplen: int, erf: bool,
                 comment_bytes: np.ndarray | None) -> tuple[np.ndarray, ...]:
    """Records of each predicted message: ``(packets, bytes, ack_packets, ack_bytes)``, int64
    ``(n,)`` each, aligned with ``pred.messages``; the message's own packets leave ``src_nic``,
    its ACKs ``dst_nic``. Bytes count records only (no file or section headers).

    ``comment_bytes``: int64 ``(n, 2)`` pcapng comment option bytes of one of the message's own
    packets and of one of its ACKs (pcapng only). ``erf``: frames carry an ERF header.
    """
    m = pred.messages
    f = pred.frames[pred.shape_index]
    cap = np.minimum(f, snaplen)
    n = m["packets"]
    form = capture_format(fmt)

    def rec(c):  # bytes of one record holding c frame bytes
        return form.record_bytes(c, erf_wrapped=erf)

    own = np.where(n == 1, rec(cap[:, 0]),
                   rec(cap[:, 0]) + np.maximum(n - 2, 0) * rec(cap[:, 1]) + rec(cap[:, 2]))
    ack = m["acks"] * rec(min(pred.ack_frame, snaplen))
    if comment_bytes is not None:
        own = own + n * comment_bytes[:, 0]
        ack = ack + m["acks"] * comment_bytes[:, 1]
    return n.astype(np.int64), own.astype(np.int64), m["acks"].astype(np.int64), ack.astype(np.int64)


@dataclass(frozen=True)
class CaptureSize:
    """What :func:`predict_capture` states before writing: ``packets`` and ``record_bytes``
    (records only: no file or section headers) of the selected packets; ``keys``: int64 sorted
    distinct routing keys of the packets (NIC with ``split="nic"``, phase label code with
    ``"phase"``, 0 with ``"none"``): the files that get one; ``nic_record_bytes``: int64
    ``(n_nics,)`` the record bytes each NIC sends (its data and clear-to-send packets and the
    ACKs it returns), summing to ``record_bytes``."""

    packets: int
    record_bytes: int
    keys: np.ndarray
    nic_record_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


def predict_capture(schedule, selection, fmt: str, snaplen: int, split: str,
                    point: CapturePoint = NIC_TX) -> CaptureSize:
    """The exact size of what ``tokenpcap generate`` writes for ``selection`` (a
    :class:`tokenpcap.generate.select.Selection`; its time window is not applied: an upper bound
    then), predicted one iteration at a time so that memory does not grow with the run, from
    the calls that meet the selected NICs and ranks only (module docstring): a
    message's own packets are kept when its label and iteration are selected and its sender NIC
    and rank are (``src_nic``, ``rank_src``), its ACKs when its receiver's are. At ``nic-rx``
    the NICs and ranks are the receiving ones (``dst_nic``/``rank_dst`` for the message's
    packets, ``src_nic``/``rank_src`` for its ACKs) and so are the keys and
    ``nic_record_bytes``; at a switch point every selected frame counts, key 0. PFC frames are
    not counted (module docstring).

    Raises:
        InputError: as :func:`predict_messages`.
    """
    from tokenpcap.records import LABELS

    erf = schedule.scenario.cluster.transport == "infiniband"
    lab_ok = selection.labels()
    its = range(schedule.iterations) if selection.iterations is None else selection.iterations
    nics = None if selection.nics is None else np.asarray(sorted(selection.nics))
    ranks = None if selection.ranks is None else np.asarray(sorted(selection.ranks))
    packets = nbytes = 0
    seen = np.zeros(max(schedule.engine.n_nics, len(LABELS), 1), bool)
    per_nic = np.zeros(schedule.engine.n_nics, np.int64)
    rx = point.receive
    own_at, ack_at = ("dst_nic", "src_nic") if rx else ("src_nic", "dst_nic")  # where seen
    own_rank, ack_rank = ("rank_dst", "rank_src") if rx else ("rank_src", "rank_dst")
    # only the calls with a message the selected NICs or ranks send or receive: the others
    # add nothing below (their messages' own packets and ACKs are all left out)
    meet = (schedule.calls_meeting(None if nics is None else nics.tolist(),
                                   None if ranks is None else ranks.tolist())
            if hasattr(schedule, "calls_meeting") and (nics is not None or ranks is not None)
            else None)
    for pred in (p for it in its for p in predict_message_chunks(schedule, [it], calls=meet)):
        pm = pred.messages
        own, ack = lab_ok[pm["label"]], lab_ok[pm["label"]]
        if nics is not None:
            own &= np.isin(pm[own_at], nics)
            ack &= np.isin(pm[ack_at], nics)
        if ranks is not None:
            own &= np.isin(pm[own_rank], ranks)
            ack &= np.isin(pm[ack_rank], ranks)
        cb = comment_bytes(pm, *schedule.scenario.token_layout) \
            if capture_format(fmt).comments else None
        npk, nb, nak, ab = record_bytes(pred, fmt, snaplen, erf, cb)
        packets += int(npk[own].sum() + nak[ack].sum())
        nbytes += int(nb[own].sum() + ab[ack].sum())
        per_nic += np.bincount(pm[own_at][own], weights=nb[own], minlength=per_nic.size
                               ).astype(np.int64)
        per_nic += np.bincount(pm[ack_at][ack], weights=ab[ack], minlength=per_nic.size
                               ).astype(np.int64)
        if split == "nic" and point.at_switch:
            seen[0] |= bool((own | ack).any())
        elif split == "nic":
            seen[pm[own_at][own]] = seen[pm[ack_at][ack]] = True
        elif split == "phase":
            seen[pm["label"][own | ack]] = True
        elif (own | ack).any():
            seen[0] = True
    return CaptureSize(packets, nbytes, np.flatnonzero(seen).astype(np.int64), per_nic)


def comment_bytes(pm: np.ndarray, samples: int = 1, seq_length: int = 1) -> np.ndarray:
    """pcapng comment option bytes per predicted message (:data:`PREDICTED_DTYPE` ``(n,)``): of
    one of its own packets and of one of its ACKs, int64 ``(n, 2)`` (option header 4, text padded
    to 4, end-of-options 4; text :func:`tokenpcap.records.comments.comment_text` with the
    scenario's ``micro_batch_size`` as ``samples`` and its ``seq_length``)."""
    from tokenpcap.records import PKT_ACK
    from tokenpcap.records.comments import comment_text

    out = np.zeros((len(pm), 2), np.int64)
    cols = [pm[f].tolist() for f in ("kc", "label", "iteration", "call_id", "step", "layer",
                                     "microbatch", "token_start", "token_end")]
    for i, (k, *rest) in enumerate(zip(*cols)):
        for j, kk in enumerate((k, PKT_ACK)):
            text = comment_text(kk, *rest, samples=samples, seq_length=seq_length).encode()
            out[i, j] = 4 + ((len(text) + 3) & ~3) + 4
    return out
