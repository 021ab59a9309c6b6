"""Follow a text of the corpus to the messages that carry it (``tokenpcap trace``).

1. **Find it** and 2. **place it**: :mod:`tokenpcap.analysis.trace_text` (the corpus tokenized as
   the scenario does, :func:`tokenpcap.tokens.tokenize_scenario`).
3. **Carry it.** Every call of that iteration whose buffer holds the tokens (PP activations and
   their gradients, TP/SP pieces, cross-entropy values: :attr:`CollectiveCall.token_start`; EP
   AllToAll as below) is cut into its transfers (:func:`tokenpcap.collectives.transfers.
   transfers`), each transfer's bytes mapped to tokens by the ``[s, b, h]`` layout
   (:mod:`tokenpcap.records.tokenspans`), and the transfers holding traced tokens are matched to
   the schedule's RDMA messages (NIC) and NVLink copies, for their times.
4. **EP routing.** The plan sizes the AllToAll for balanced routing: each of the ``ep`` ranks
   receives ``1/ep`` of every rank's ``tokens·top_k`` rows. Which tokens is the model's choice,
   stated here: a rank's dispatch buffer lists its tokens in ``[s, b]`` row order (each row
   ``top_k`` times) and chunk ``e`` goes to EP rank ``e``, so EP rank ``e`` receives block ``e``
   of the rows; the combine sends them back the same way (and the backward AllToAlls mirror
   the forward ones). DeepEP's node-limited dispatch (``moe.token_dispatcher: deepep``,
   :mod:`tokenpcap.plan.moe_nodelimited`) is sized as expected rows per rail and node peer,
   with no rule of which tokens they are: its calls (ops ``*_ib``, ``*_nvl``) are not
   followed.

A message's *token bytes* are the bytes of the traced tokens' rows inside it; the packets
holding them are ``[lo // PMTU, ceil(hi / PMTU))`` for those bytes ``[lo, hi)``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from tokenpcap.analysis.trace_text import Held, Located, TraceError, locate, place
from tokenpcap.config.types import Scenario
from tokenpcap.plan.calls import CollectiveCall
from tokenpcap.records import DIMS, LABELS, label_codes
from tokenpcap.records.comments import comment_text
from tokenpcap.records.tokenspans import held_spans, piece_bounds
from tokenpcap.schedule.spans import data_bytes
from tokenpcap.wire.lines import LINE_PROTOCOLS, wire_offset

__all__ = ["TraceError", "Carrier", "Journey", "carriers", "trace"]


@dataclass
class Carrier:
    """One transfer whose bytes hold traced tokens: an RDMA message (``on_nic``) or an NVLink copy.

    ``start_ns``/``end_ns``: the message's first frame and the end of its last (NVLink: copy
    start and arrival), simulated time. ``size_bytes`` the transfer on the wire; ``token_bytes``
    the data bytes of the traced tokens in it, at ``byte_range`` (offsets in the message's wire
    bytes, the first and one past the last of them: under NCCL's LL/LL128 inside its lines,
    :func:`tokenpcap.wire.lines.wire_offset`) in ``packets`` (indices in the message). ``tokens``: the traced tokens it
    holds, ``held``: every token it holds (half-open ranges); ``comment``: its data packets'
    pcapng comment (NIC only); ``msg_id``: the schedule's message id (-1 for NVLink).
    """

    label: str
    op: str
    call_id: int
    step: int
    layer: int
    microbatch: int
    iteration: int
    stage: int
    rank_src: int
    rank_dst: int
    src_nic: int
    dst_nic: int
    on_nic: bool
    size_bytes: int
    token_bytes: int
    byte_range: tuple[int, int]
    packets: tuple[int, int]
    tokens: list[tuple[int, int]]
    held: list[tuple[int, int]]
    comment: str = ""
    msg_id: int = -1
    start_ns: int = -1
    end_ns: int = -1
    channel: int = 0
    bounds: tuple[int, int] = (-1, -1)
    qp: int = -1
    n_packets: int = 0
    psn_offset: int = 0
    dest_qp: int = -1
    psn_first: int = -1
    frames: list[int] = field(default_factory=list)


@dataclass
class Journey:
    """The whole answer of :func:`trace` (``to_json`` gives plain values)."""

    scenario: str
    tokenizer: str
    corpus_tokens: int
    seq_length: int
    scale: int
    located: Located
    held: list[Held]
    carriers: list[Carrier]
    seed: int = 0
    filters: dict[int, str] = field(default_factory=dict)
    token_filters: dict[int, str] = field(default_factory=dict)
    nic_names: dict[int, str] = field(default_factory=dict)
    frames: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        out = asdict(self)
        for key in ("filters", "token_filters"):
            out[key] = {self.nic_names.get(k, str(k)): v for k, v in getattr(self, key).items()}
        del out["nic_names"]
        return out


#: EP calls that carry the routed tokens' hidden states (plan.calls' dispatcher ops).
_EP_TOKEN_OPS = frozenset({"dispatch", "combine", "dispatch_grad", "combine_grad"})


def _ep_pieces(c: CollectiveCall, s: Scenario, layout, tr_table, seq: int, b: int):
    """EP AllToAll transfers as ``(row index, owner token_start, seq_start, seq_end, offset in
    the owner's buffer)`` (module docstring, 4)."""
    p = s.parallelism
    sp = p.sequence_parallel and p.tp > 1
    G = s.training.global_batch_size
    forward_way = c.op in ("dispatch", "combine_grad")      # token owner sends
    n = len(c.group)
    chunk = c.message_bytes // n
    for x in range(len(tr_table)):
        src, dst = int(tr_table["src"][x]), int(tr_table["dst"][x])
        owner, other = (src, dst) if forward_way else (dst, src)
        co = layout.coords(owner)
        sample = c.iteration * G + c.microbatch * b * p.dp + co.dp * b
        s0, s1 = (co.tp * seq // p.tp, (co.tp + 1) * seq // p.tp) if sp else (0, seq)
        off = int(tr_table["byte_offset"][x])
        if not forward_way:        # chunk of the expert rank's buffer for the owner: its block
            off = c.group.index(other) * chunk + (off - c.group.index(owner) * chunk)
        yield x, sample * seq, s0, s1, off


def carriers(sched, s: Scenario, iteration: int, tokens: set[int],
             held: list[Held]) -> list[Carrier]:
    """The transfers of ``iteration`` of the (run) schedule ``sched`` that hold any of
    ``tokens`` (which the sequences ``held`` hold, :func:`~tokenpcap.analysis.trace_text.place`),
    with the schedule's times (module docstring, 3-4). Order: time, then NIC."""
    seq, b = s.model.seq_length, s.training.micro_batch_size
    lo, hi = min(tokens), max(tokens) + 1
    channels = s.collectives.channels
    pmtu = s.cluster.pmtu_bytes
    lay = sched.layout
    owners = {(h.microbatch, r) for h in held if h.iteration == iteration
               for stage in h.ranks for r in stage}
    out: list[Carrier] = []
    for c in sched.plan.calls(iteration):
        if c.dim == "ep":
            # the routed tokens' AllToAll; the probs AllToAll and the token counts carry none
            if c.op not in _EP_TOKEN_OPS or not any((c.microbatch, r) in owners
                                                    for r in c.group):
                continue
        elif c.token_start < 0 or not any(a < hi and lo < e for a, e in c.token_spans(seq)):
            continue
        tr = sched.plan.call_transfers(c).table
        if c.dim == "ep":
            pieces = list(_ep_pieces(c, s, lay, tr, seq, b))
        else:
            pieces = [(x, c.token_start, c.seq_start, c.seq_end, int(tr["byte_offset"][x]))
                      for x in range(len(tr))]
        line = LINE_PROTOCOLS[sched.plan.protocol(c)]
        for x, t0, s0, s1, off in pieces:
            nb = int(tr["bytes"][x])                      # on the wire: LL/LL128 lines
            db = int(data_bytes(line, nb, c.message_bytes - off))
            first, end = piece_bounds(t0, s0, s1, b, seq, off, db, c.message_bytes)
            held = held_spans(first, end, b, seq)
            mine = [(max(a, lo), min(e, hi)) for a, e in held if a < hi and lo < e]
            mine = [(a, e) for a, e in mine if any(t in tokens for t in range(a, e))]
            if not mine:
                continue
            blo, bhi, tb = _token_bytes(mine, t0, s0, s1, b, seq, off, db, c.message_bytes)
            if tb:                                        # data offsets -> offsets on the wire
                blo, bhi = wire_offset(line, blo), wire_offset(line, bhi - 1) + 1
            nic = bool(tr["nic"][x])
            src, dst = int(tr["src"][x]), int(tr["dst"][x])
            comment = ""
            if nic and c.dim != "ep":
                comment = comment_text(0, LABELS.index(c.label), c.iteration, c.call_id,
                                       int(tr["step"][x]), c.layer, c.microbatch, first, end,
                                       samples=b, seq_length=seq)
            out.append(Carrier(
                c.label, c.op, c.call_id, int(tr["step"][x]), c.layer, c.microbatch,
                c.iteration, c.stage, src, dst, int(tr["src_nic"][x]), int(tr["dst_nic"][x]),
                nic, nb, tb, (blo, bhi),
                (blo // pmtu, -(-bhi // pmtu)) if nic and tb else (0, 0), mine, held, comment,
                channel=int(tr["channel"][x]),
                bounds=(first, end) if c.dim != "ep" else (-1, -1)))
    _times(sched, out, channels)
    out.sort(key=lambda k: (k.start_ns, not k.on_nic, k.src_nic, k.rank_src, k.call_id))
    return out


def _token_bytes(mine, t0, s0, s1, b, seq, off, nb, size) -> tuple[int, int, int]:
    """Bytes of the rows of tokens ``mine`` inside bytes ``[off, off + nb)`` of a buffer of
    ``size`` bytes over positions ``[s0, s1)`` of ``b`` samples from token ``t0``: (first, one
    past the last, count) as offsets in the piece (row ``r`` has bytes ``[ceil(r·size/R),
    ceil((r+1)·size/R))``, the inverse of :func:`~tokenpcap.records.tokenspans.piece_bounds`)."""
    rows = (s1 - s0) * b
    lo_b, hi_b, total = None, 0, 0
    for a, e in mine:
        k = (a - t0) // seq
        for t in range(a, e):
            r = (t - t0 - k * seq - s0) * b + k
            x0 = max(off, -(-r * size // rows))
            x1 = min(off + nb, -(-(r + 1) * size // rows))
            if x1 > x0:
                total += x1 - x0
                lo_b = x0 - off if lo_b is None else min(lo_b, x0 - off)
                hi_b = max(hi_b, x1 - off)
    return (lo_b or 0), hi_b, total


def _times(sched, out: list[Carrier], channels: int) -> None:
    """Give each carrier the times of its RDMA message or NVLink copy (matched by call, step,
    ranks, QP and size, in order) and the message id."""
    m = sched.messages
    cids = {k.call_id for k in out}
    if cids and len(m):
        sel = m[np.isin(m["call_id"], np.fromiter(cids, np.int64)) & (m["kind"] == 0)]
        queues: dict[tuple, list] = {}
        for row in sel[np.argsort(sel["msg_id"], kind="stable")]:
            key = (int(row["call_id"]), int(row["step"]), int(row["rank_src"]),
                   int(row["rank_dst"]), int(row["qp"]), int(row["size_bytes"]),
                   int(row["token_start"]), int(row["token_end"]))
            queues.setdefault(key, []).append(row)
        used: dict[tuple, int] = {}
        for k in out:
            if not k.on_nic:
                continue
            qp = DIMS.index(k.label.split("/")[0]) * channels + k.channel
            key = (k.call_id, k.step, k.rank_src, k.rank_dst, qp, k.size_bytes, *k.bounds)
            rows = queues.get(key, [])
            i = used.get(key, 0)
            if i < len(rows):
                used[key] = i + 1
                r = rows[i]
                k.msg_id, k.start_ns, k.end_ns = (int(r["msg_id"]), int(r["first_tx_ns"]),
                                                  int(r["last_tx_end_ns"]))
                k.qp, k.n_packets, k.psn_offset = (int(r["qp"]), int(r["n_packets"]),
                                                   int(r["psn_offset"]))
                if not k.comment:
                    k.comment = comment_text(0, int(label_codes(r[None])[0]), int(r["iteration"]),
                                             int(r["call_id"]), int(r["step"]), int(r["layer"]),
                                             int(r["microbatch"]), -1, -1)
    nv = sched.nvlink
    if len(nv):
        sel = nv[np.isin(nv["call_id"], np.fromiter(cids or {-1}, np.int64))]
        queues = {}
        for row in sel:
            key = (int(row["call_id"]), int(row["step"]), int(row["rank_src"]),
                   int(row["rank_dst"]), int(row["size_bytes"]))
            queues.setdefault(key, []).append(row)
        used = {}
        for k in out:
            if k.on_nic:
                continue
            key = (k.call_id, k.step, k.rank_src, k.rank_dst, k.size_bytes)
            rows = queues.get(key, [])
            i = used.get(key, 0)
            if i < len(rows):
                used[key] = i + 1
                k.start_ns, k.end_ns = int(rows[i]["start_ns"]), int(rows[i]["arrival_ns"])


def trace(s: Scenario, text: str, *, occurrence: int = 1, scale: int | None = None,
          seed: int | None = None, capture: str | None = None) -> Journey:
    """Follow ``text`` of ``s``'s corpus to its messages (module docstring) and, with
    ``capture`` (a pcapng file or a directory of them written by ``tokenpcap generate``), to its
    frames there (:mod:`tokenpcap.analysis.trace_frames`).

    Args:
        s: the loaded scenario; text: the text to follow; occurrence: which match (1-based).
        scale: the run's ``--scale`` (default: the capture's provenance, else 1).
        seed: the run's ``--seed`` that numbers QPs and PSNs (default: the capture's
            provenance, else the scenario's ``generation.seed``).
        capture: path of the capture, or None.

    Raises:
        TraceError: the text is absent or in the dropped tail of an epoch; the capture is not of
            this scenario, another scale, or lacks the iteration.
        CorpusError, TokenizerError, InfeasiblePlanError, CaptureError: from the stages.
        InputError: a workload scenario (no corpus, no model: no token to follow).
    """
    s.require_model("trace (following a corpus's tokens)")
    from tokenpcap.analysis import trace_frames as tf
    from tokenpcap.plan.build import rank_layout
    from tokenpcap.generate.run import EPOCH_NS
    from tokenpcap.pipeline import prepare
    from tokenpcap.tokens import read_corpus, token_bytes, tokenize_scenario

    tc = tokenize_scenario(s)
    _, corpus_text = read_corpus(s.corpus)
    loc = locate(corpus_text, token_bytes(s.tokenizer, tc), tc.ids, text, occurrence)
    held = place(s, rank_layout(s), loc.token_start, loc.token_end, tc.tokens)
    its = sorted({h.iteration for h in held})
    files = None
    if capture is not None:
        files = tf.capture_files(capture)
        prov = tf.capture_provenance(files)
        where = f"{files[0]}" + (" ..." if len(files) > 1 else "")
        if prov["scenario"] != s.name:
            raise TraceError(f"{where}: provenance scenario: got {prov['scenario']!r}, expected "
                             f"{s.name!r}")
        if scale is not None and scale != prov["scale"]:
            raise TraceError(f"{where}: provenance scale: got {prov['scale']}, expected "
                             f"--scale {scale}")
        scale = prov["scale"]
        if seed is not None and seed != prov["seed"]:
            raise TraceError(f"{where}: provenance seed: got {prov['seed']}, expected --seed "
                             f"{seed}")
        seed = prov["seed"]
        a, b = prov["iterations"]
        if not (a <= its[0] and its[-1] < b):
            raise TraceError(f"{where}: provenance iterations: got {a}:{b}, expected iteration "
                             f"{its[0]} that holds the text (generate --iterations {its[-1] + 1})")
    scale = 1 if scale is None else scale
    seed = s.generation.seed if seed is None else seed
    # with a capture, its whole run: later iterations share the NICs with the traced one
    run = its[-1] + 1 if files is None else max(its[-1] + 1, prov["iterations"][1])
    sched = prepare(s, tokens=tc, scale=scale, iterations=run, run="trace").schedule
    for _ in sched.run():
        pass
    want = set(range(loc.token_start, loc.token_end))
    cars = [k for it in its for k in carriers(sched, s, it, want, held)]
    nics = {k.src_nic for k in cars if k.on_nic} | {k.dst_nic for k in cars if k.on_nic}
    tf.set_packet_ids(cars, seed)
    j = Journey(s.name, tc.tokenizer, tc.tokens, s.model.seq_length, scale, loc, held, cars,
                seed, tf.nic_filters(s, cars), tf.nic_filters(s, cars, tokens_only=True),
                tf.nic_names(s, nics))
    if files is not None:
        j.frames = tf.find_frames(s, files, cars, EPOCH_NS)
    return j
