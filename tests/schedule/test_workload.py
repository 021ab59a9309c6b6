"""The programs of a workload's ranks (tokenpcap.schedule.workload): a start offset, then the
calls; a receiver posts its receives and never waits, a sender waits for its last send of a
repetition, a collective blocks. Timed on the compiled engine exactly as on the Python
reference engine."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.plan.test_workload import SMALL, scenario
from tests.schedule.engine.test_kernel import assert_same
from tokenpcap.plan.build import build_plan
from tokenpcap.pipeline import prepare
from tokenpcap.records import KIND_DATA
from tokenpcap.schedule.program import Call, CallMode, Compute, Wait
from tokenpcap.schedule.workload import workload_programs

ROOT = Path(__file__).resolve().parents[2]


def test_incast_programs_post_the_receives_and_block_on_the_send(tmp_path):
    s = scenario(tmp_path, {"kind": "incast", "senders": [1, 2, 3], "receiver": 0, "bytes": 4096,
                            "repeat": 2, "start_offsets_ns": [0, 700, 90]})
    plan = build_plan(s)
    calls = list(plan.calls())
    progs = workload_programs(calls, range(8), s.workload.start_offsets_ns)
    ids = {(c.src, c.microbatch): c.call_id for c in calls}
    assert progs[0] == [Call(ids[r, k], CallMode.SEND) for k in (0, 1) for r in (1, 2, 3)]
    assert progs[1] == [Call(ids[1, 0], CallMode.BLOCK), Call(ids[1, 1], CallMode.BLOCK)]
    assert progs[2][0] == Compute(700) and progs[3][0] == Compute(90)
    assert progs[4] == [Wait()] and workload_programs(calls, [2], s.workload.start_offsets_ns,
                                                scale=7)[2][0] == Compute(100)


def test_a_staggered_incast_starts_each_sender_at_its_offset_and_repeats_back_to_back(tmp_path):
    s = scenario(tmp_path, {"kind": "incast", "senders": 3, "bytes": 64 * 4096, "repeat": 2,
                            "start_offsets_ns": [0, 5000, 12000]})
    sched = prepare(s, nics=()).schedule
    for _ in sched.run():
        pass
    m = sched.messages
    m = m[m["kind"] == KIND_DATA]
    for rank, offset in ((1, 0), (2, 5000), (3, 12000)):
        mine = m[m["rank_src"] == rank]
        first, second = mine[mine["microbatch"] == 0], mine[mine["microbatch"] == 1]
        assert (first["start_ns"] == offset).all()
        assert second["start_ns"].min() == first["arrival_ns"].max()   # after its last arrived


def test_a_repeated_allreduce_blocks_every_rank_until_its_part_is_done(tmp_path):
    # 8 nodes of one GPU: every hop on a NIC; rank r sends nothing of repetition k before every
    # message it sent or received in repetition k - 1 has arrived
    s = scenario(tmp_path, {"kind": "allreduce", "bytes": 1 << 16, "repeat": 3}, channels=2)
    sched = prepare(s, nics=()).schedule
    for _ in sched.run():
        pass
    m = sched.messages
    for k in (1, 2):
        for r in range(8):
            prev = m[(m["microbatch"] == k - 1) & ((m["rank_src"] == r) | (m["rank_dst"] == r))]
            mine = m[(m["microbatch"] == k) & (m["rank_src"] == r)]
            assert len(mine) and mine["start_ns"].min() >= prev["arrival_ns"].max()


def test_workloads_time_as_the_reference_engine(tmp_path):
    for i, (w, cluster, ch) in enumerate((
            ({"kind": "incast", "senders": 7, "bytes": 3 << 16, "repeat": 2,
              "start_offsets_ns": [0, 100, 0, 2500, 0, 0, 40]}, SMALL, 2),
            ({"kind": "alltoall", "bytes": 1 << 14, "repeat": 2}, SMALL, 3),
            ({"kind": "incast", "senders": [6], "bytes": 1 << 16}, SMALL, 1),   # 6 ranks idle
            ({"kind": "sendrecv", "pairs": [[0, 5], [5, 0], [1, 4]], "bytes": 1 << 15}, SMALL, 1),
            ({"kind": "reducescatter", "ranks": [7, 0, 3, 4], "bytes": 1 << 16}, SMALL, 2))):
        s = scenario(tmp_path, w, cluster=cluster, channels=ch, name=f"wl{i}")
        assert_same(build_plan(s, scale=2), iterations=2)
