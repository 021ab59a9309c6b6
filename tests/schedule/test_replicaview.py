"""A run timed through its quotient by the data-parallel translation
(:mod:`tokenpcap.schedule.replicas`, :mod:`tokenpcap.schedule.replicaview`) against the same
run with every rank timed: the canonical order of an instant makes the whole run a fixed point
of the translation (checked on the whole run itself, rank by rank and NIC by NIC), and the
quotient's captures, message rows and timeline are the whole run's, byte for byte."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.cli import main
from tokenpcap.config.profiles import load_scenario
from tokenpcap.plan.build import build_plan
from tokenpcap.schedule import runner
from tokenpcap.schedule.replicas import _replica, _translate
from tokenpcap.schedule.runner import Schedule

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "profiles" / "scenarios" / "gpt2-all-cross.yaml"
# gpt2-all-cross: 8 one-GPU nodes, tp 2, dp 2, pp 2: ranks (and NICs) 0, 1, 4, 5 are
# data-parallel index 0 (rank = ((pp·dp + d)·cp + c)·tp + t)
REPS = [0, 1, 4, 5]


# with a ring AllReduce's empty steps (collectives.empty_ring_steps) too: the model-parallel
# AllReduces of one fp32 over 4 ranks on 4 nodes then send 0-byte messages at 18 of their 24
# steps (each group inside one replica, so translated with it)
EMPTY = {False: {}, True: {"collectives.empty_ring_steps": True}}


@pytest.fixture(scope="module", params=[False, True], ids=["", "empty-steps"])
def plan(request):
    return build_plan(load_scenario(SCENARIO, EMPTY[request.param]))


def _sigma(n, stride, D):
    return _translate(np.asarray(n, np.int64), np.ones(np.shape(n), np.int64), stride, D)


def test_the_whole_run_is_a_fixed_point_of_the_translation(plan):
    lay = plan.layout
    stride, D = lay.tp * lay.cp, lay.dp
    sch = Schedule(plan, nics=[])
    assert "canonical order" in sch.replicas_reason and sch.replica_view is None
    for _ in sch.run():
        pass
    tl = sch.timeline
    for r in range(lay.world_size):
        a = np.sort(tl[tl["rank"] == r], order=["start_ns", "end_ns"])
        b = np.sort(tl[tl["rank"] == int(_sigma(r, stride, D))], order=["start_ns", "end_ns"])
        assert a.size and np.array_equal(a[["what", "microbatch", "start_ns", "end_ns"]],
                                         b[["what", "microbatch", "start_ns", "end_ns"]])
    m = sch.messages
    nic_stride = stride // lay.gpus_per_node * lay.nics_per_node
    cols = ["ready_ns", "first_tx_ns", "last_tx_end_ns", "arrival_ns", "size_bytes", "kind",
            "qp", "psn_offset", "qp_seq", "byte_offset"]
    for n in range(sch.engine.n_nics):
        a = m[m["src_nic"] == n]
        b = m[m["src_nic"] == int(_sigma(n, nic_stride, D))]
        a = a[np.lexsort((a["qp"], a["first_tx_ns"], a["ready_ns"]))]
        b = b[np.lexsort((b["qp"], b["first_tx_ns"], b["ready_ns"]))]
        assert a.size and all(np.array_equal(a[c], b[c]) for c in cols), n
        assert np.array_equal(_sigma(a["dst_nic"], nic_stride, D), b["dst_nic"])


def _stream(plan, replicas):
    # two iterations: a rank the quotient does not run has an empty program in each
    sch = Schedule(plan, iterations=2, nics=REPS, keep_messages=False, replicas=replicas)
    frames, rows = [], []
    for chunk in sch.run():
        frames.append(chunk.copy())
        rows.append(sch.message_rows(chunk["msg"]))
    tl = np.sort(sch.timeline, order=["rank", "start_ns", "end_ns"])
    return sch, np.concatenate(frames), np.concatenate(rows), tl


def test_the_quotient_gives_the_whole_runs_frames_rows_and_timeline(plan):
    q, fq, mq, tq = _stream(plan, True)
    w, fw, mw, tw = _stream(plan, False)
    assert q.replica_view is not None and w.replica_view is None
    assert 2 * q.n_messages == w.n_messages                   # one replica of two timed
    for name in fq.dtype.names:
        if name != "msg":                                    # ids are labels of each run
            assert np.array_equal(fq[name], fw[name]), name
    # what the lowering reads of a frame's message (its times are those reached when the chunk
    # was handed out, which depends on how far each run had got)
    for name in ("src_nic", "dst_nic", "qp", "size_bytes", "verb", "kind", "phase", "dim",
                 "collective", "iteration", "layer", "microbatch", "step", "call_id",
                 "rank_src", "rank_dst", "token_start", "token_end", "n_packets", "psn_offset",
                 "qp_seq", "byte_offset", "start_ns", "ready_ns"):
        assert np.array_equal(mq[name], mw[name]), name
    assert np.array_equal(tq, tw)


def _capture(tmp: Path, monkeypatch, replicas: bool, empty: bool = False) -> dict[str, str]:
    used = []
    quotient = runner.Schedule._quotient

    def spy(self, flats, allowed):
        got = quotient(self, flats, allowed)
        used.append(self.replica_view is not None)
        return got

    monkeypatch.setattr(runner.Schedule, "_quotient", spy)
    monkeypatch.setitem(runner.Schedule.__init__.__kwdefaults__, "replicas", replicas)
    out = tmp / ("quotient" if replicas else "whole")
    extra = ["--set", "collectives.empty_ring_steps=true"] if empty else []
    r = CliRunner().invoke(main, ["generate", str(SCENARIO), "-o", str(out), "--nics",
                                  ",".join(map(str, REPS)), "--format", "pcap", "-j", "1",
                                  *extra])
    assert r.exit_code == 0, r.output
    assert used == [replicas]
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.glob("*.pcap"))}


@pytest.mark.parametrize("empty", [False, True], ids=["", "empty-steps"])
def test_generate_writes_the_same_bytes_through_the_quotient(tmp_path, monkeypatch, empty):
    q = _capture(tmp_path, monkeypatch, True, empty)
    w = _capture(tmp_path, monkeypatch, False, empty)
    assert len(q) == len(REPS) and q == w


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8), st.integers(1, 4), st.integers(1, 3), st.data())
def test_the_translation_is_a_cyclic_group_on_the_other_coordinates(D, stride, pp, data):
    W = pp * D * stride
    r = np.asarray(data.draw(st.lists(st.integers(0, W - 1), min_size=1, max_size=20)), np.int64)
    a = data.draw(st.integers(-2 * D, 2 * D))
    b = data.draw(st.integers(-2 * D, 2 * D))
    k = lambda v: np.full(r.shape, v, np.int64)              # noqa: E731
    ab = _translate(_translate(r, k(a), stride, D), k(b), stride, D)
    assert np.array_equal(ab, _translate(r, k(a + b), stride, D))
    assert np.array_equal(_translate(r, k(D), stride, D), r)
    moved = _translate(r, k(a), stride, D)
    # only the data-parallel index moves (by a, mod D): rank % stride and the stage stay
    assert np.array_equal(moved % stride, r % stride)
    assert np.array_equal(moved // (stride * D), r // (stride * D))
    assert np.array_equal(_replica(moved, stride, D), (_replica(r, stride, D) + a) % D)


@pytest.mark.parametrize("empty", [False, True], ids=["", "empty-steps"])
def test_plan_time_is_the_same_through_the_quotient(monkeypatch, empty):
    from tokenpcap.cli.plan_time import breakdown_json, time_iteration

    s = load_scenario(SCENARIO, EMPTY[empty])
    got = {}
    for replicas in (True, False):
        monkeypatch.setitem(runner.Schedule.__init__.__kwdefaults__, "replicas", replicas)
        got[replicas] = breakdown_json(time_iteration(s, None, 1))
    assert got[True] == got[False] and got[True]["iteration_ns"] > 0


def test_a_tiny_allreduce_across_replicas_stays_refused_with_empty_steps():
    """One fp32 AllReduced over all 8 ranks (the gradient norm with the distributed optimizer):
    with every empty step sent, every ring position sends 2(N-1) messages, but NCCL's
    ``runRing`` puts the element in the first chunk, so the position that carries its line at
    step ``k`` is fixed and its image's message is empty: the replicas do not time alike and
    the quotient is refused for the bytes (without empty steps: for the transfer counts)."""
    for empty, why in ((False, "different numbers of transfers"), (True, "differ in bytes")):
        s = load_scenario(SCENARIO, {"parallelism.zero_stage": 1, **EMPTY[empty]})
        sch = Schedule(build_plan(s), nics=[0], keep_messages=False)
        assert sch.replica_view is None and why in sch.replicas_reason, sch.replicas_reason
