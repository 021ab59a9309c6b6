"""The work estimate of a run (tokenpcap.schedule.limits) against what the engine really does:
the schedule's message and NVLink-copy counts are the independent source; the limits accept the
bundled production jobs for a run that keeps only the messages in progress (generate), refuse
GPT-3 175B's 56.9 M messages for a run that keeps them all (exports, plots) before any
simulation, with advice that works (what it names is accepted), and accept the scenarios that
run."""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from tests.schedule.test_schedule import tiny_scenario
from tests.conftest import simple_on
from tokenpcap.errors import InfeasiblePlanError
from tokenpcap.generate.run import GenerateOptions, generate
from tokenpcap.schedule.limits import (MAX_MESSAGES, MAX_NVLINK_COPIES, MAX_STATE_BYTES,
                                       check_work, estimate_work)
from tokenpcap.records import KIND_DATA
from tokenpcap.plan.build import build_plan
from tokenpcap.config.profiles import load_scenario
from tokenpcap.schedule.runner import Schedule

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "profiles" / "scenarios"


@pytest.mark.parametrize("scale,iterations", [(1, 1), (16, 2)])
def test_estimate_counts_what_the_schedule_simulates(scale, iterations):
    plan = build_plan(load_scenario(SCEN / "dante.yaml"), scale=scale)
    w = estimate_work(plan, iterations)
    sched = Schedule(plan, iterations=iterations)
    packets = sum(len(tx) for tx in sched.run())
    m = sched.messages
    assert w.messages == len(m)                                   # data + clear-to-send
    assert w.messages == 2 * int((m["kind"] == KIND_DATA).sum())
    assert w.nvlink_copies == len(sched.nvlink)
    assert w.calls == sched.n_calls == len({sched.call(i).call_id for i in range(sched.n_calls)})
    assert w.packets == packets                  # one ACK per message: exact for Dante
    assert w.memory_bytes > 0 and w.seconds > 0


def _follow(s, advice: str, iterations: int):  # type: ignore[no-untyped-def]
    """The plan and iterations a user gets by doing what the refusal ``advice`` says."""
    import re

    if "--set generation.clear_to_send=false fits" in advice:
        # as the command line does it: the scenario loaded again with the override
        followed = load_scenario(s.path, {"generation.clear_to_send": False})
        assert followed.generation.clear_to_send is False
        return build_plan(followed), iterations
    if m := re.search(r"--set training.global_batch_size=(\d+) \(\d+ of \d+ microbatches\) "
                      r"--scale (\d+) fits", advice):
        followed = load_scenario(s.path, {"training.global_batch_size": int(m.group(1))})
        return build_plan(followed, scale=int(m.group(2))), iterations
    if m := re.search(r"--scale (\d+) fits", advice):
        return build_plan(s, scale=int(m.group(1))), iterations
    if m := re.search(r"at most --iterations (\d+) fit", advice):
        return build_plan(s), int(m.group(1))
    raise AssertionError(f"no advice to follow in {advice!r}")


def test_gpt3_175b_kept_whole_is_refused_before_simulating_with_advice_that_is_accepted():
    """Keeping every message row (exports, plots), GPT-3 175B's 172,645,664 messages (its
    pipeline sends in NCCL's 128 KiB chunks) pass the kept-messages limit; the refusal names what fits and doing that is accepted."""
    s = load_scenario(SCEN / "gpt3-175b-megatron.yaml")
    plan = build_plan(s)
    with pytest.raises(InfeasiblePlanError) as info:
        check_work(plan, 1)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("gpt3-175b-megatron: too large for the timing engine: "
                          "172,645,664 RDMA messages need about ")
    followed, its = _follow(s, msg, 1)
    check_work(followed, its)                                       # accepted
    work = estimate_work(followed, its, nvlink=False)
    assert work.messages <= MAX_MESSAGES and work.memory_bytes <= MAX_STATE_BYTES


@pytest.mark.parametrize("name,calls,messages", [
    ("gpt3-175b-megatron", 1_073_944, 172_645_664),
    ("llama3.1-405b-2048", 785_977, 110_535_518),
    ("llama3-70b-64n", 883_193, 21_186_398),
])
def test_production_jobs_are_accepted_when_only_messages_in_progress_are_held(name, calls, messages):
    """generate holds the messages in progress only: the whole iteration of each bundled
    production job is accepted, and over many iterations the advice is the most that fit,
    which is accepted (later iterations add less than the first: the templates are shared;
    GPT-3 175B, its pipeline sends in NCCL's 128 KiB chunks: 5.16 GB estimated for one, 3.60 GB
    measured, benchmarks/README.md, "engine_state.py")."""
    plan = build_plan(load_scenario(SCEN / f"{name}.yaml"))
    work = check_work(plan, 1, keep_messages=False)
    assert (work.calls, work.messages) == (calls, messages)
    assert not work.keep_messages and work.memory_bytes <= MAX_STATE_BYTES
    one, two = (estimate_work(plan, n, nvlink=False, keep_messages=False).memory_bytes for n in (1, 2))
    assert one < two < 2 * one
    with pytest.raises(InfeasiblePlanError, match=r"; at most --iterations \d+ fit;") as info:
        check_work(plan, 100, keep_messages=False)
    most = int(re.search(r"at most --iterations (\d+) fit", str(info.value)).group(1))
    assert check_work(plan, most, keep_messages=False).calls == most * calls
    with pytest.raises(InfeasiblePlanError):
        check_work(plan, most + 1, keep_messages=False)


def test_advice_to_drop_clear_to_send_is_given_only_when_that_fits(monkeypatch):
    """With the state limit raised so that the iteration without clear-to-send writes fits
    (but not with them), that is the advice, and following it is accepted."""
    from tokenpcap.schedule import limits

    s = load_scenario(SCEN / "dante.yaml")
    full = estimate_work(build_plan(s), 1, nvlink=False)
    half = dataclasses.replace(full, messages=full.messages // 2)
    monkeypatch.setattr(limits, "MAX_STATE_BYTES", (half.memory_bytes + full.memory_bytes) // 2)
    with pytest.raises(InfeasiblePlanError, match="--set generation.clear_to_send=false fits") as info:
        check_work(build_plan(s), 1)
    followed, its = _follow(s, str(info.value), 1)
    check_work(followed, its)                                       # accepted
    assert estimate_work(followed, its, nvlink=False).memory_bytes <= limits.MAX_STATE_BYTES


def test_advice_of_fewer_iterations_counts_the_calls_state_too(monkeypatch):
    """Over many iterations the advised count must fit both the messages and the state the
    calls hold: it is the most that fit (one more is refused), and later iterations, which
    share the first one's templates, hold less than it."""
    from tokenpcap.schedule import limits

    s = load_scenario(SCEN / "dante.yaml")
    one = estimate_work(build_plan(s), 1, nvlink=False)
    later = estimate_work(build_plan(s), 2, nvlink=False).memory_bytes - one.memory_bytes
    assert 0 < later < one.memory_bytes
    monkeypatch.setattr(limits, "MAX_STATE_BYTES", one.memory_bytes + 4 * later + 1)
    with pytest.raises(InfeasiblePlanError, match="at most --iterations 5 fit") as info:
        check_work(build_plan(s), 10)
    followed, its = _follow(s, str(info.value), 10)
    assert its == 5
    check_work(followed, its)                                       # accepted
    assert estimate_work(followed, its, nvlink=False).memory_bytes <= limits.MAX_STATE_BYTES
    with pytest.raises(InfeasiblePlanError):
        check_work(followed, its + 1)


def test_many_iterations_are_bounded_by_what_their_calls_and_copies_hold():
    """Calls are counted in the engine state (950 B each in every iteration after the first),
    not against a count of their own: Dante's 2,324 calls an iteration over 900 iterations
    (2.09 M calls, 47.9 M NVLink copies) are accepted; 10,000 iterations pass the state limit
    and the NVLink copies timed one by one, and the advice is the most iterations within both
    (one more is refused)."""
    plan = build_plan(load_scenario(SCEN / "dante.yaml", simple_on("dante")))
    assert plan.calls_per_iteration == 2_324
    work = check_work(plan, 900, keep_messages=False)
    assert work.calls == 2_091_600 and work.nvlink_copies == 900 * 53_216
    with pytest.raises(InfeasiblePlanError, match=r"^dante: too large for the timing engine: "
                                                  r".* over 10,000 iterations .*; at most "
                                                  r"--iterations \d+ fit") as info:
        check_work(plan, 10_000, keep_messages=False)
    most = int(re.search(r"at most --iterations (\d+) fit", str(info.value)).group(1))
    assert 900 < most < 10_000 and most * 53_216 <= MAX_NVLINK_COPIES
    check_work(plan, most, keep_messages=False)                     # the advice is accepted
    with pytest.raises(InfeasiblePlanError):
        check_work(plan, most + 1, keep_messages=False)


@pytest.mark.parametrize("name", ["dante", "gpt2-all-cross", "llama2-7b-a100-ib"])
def test_bundled_runnable_scenarios_pass(name):
    work = check_work(build_plan(load_scenario(SCEN / f"{name}.yaml")), 1)
    assert work.messages <= MAX_MESSAGES


def test_generate_refuses_before_writing_anything(tmp_path, monkeypatch):
    from tokenpcap.schedule import limits as generate_limits

    monkeypatch.setattr(generate_limits, "MAX_STATE_BYTES", 10)
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    out = tmp_path / "o"
    out.mkdir()
    with pytest.raises(InfeasiblePlanError,
                       match=r"cross: too large .* \(limit 0\.0 GB of this machine.s [0-9.,]+ GB\)"):
        generate(load_scenario(path), GenerateOptions(out_dir=out, jobs=1))
    assert not list(out.iterdir())


def test_the_floor_of_messages_does_not_depend_on_the_scale_asked_for(monkeypatch):
    """The 'at any scale' count comes from the smallest calls whatever --scale is given: the
    same for GPT-3 175B at --scale 1000 and 100000 (computed from the scaled plan it would be
    34,374,176 and 34,401,536); with a state limit that the iteration without clear-to-send
    writes passes too, the advice is a --scale, and it is accepted."""
    from tokenpcap.schedule import limits
    from tokenpcap.schedule.limits import _messages_at_any_scale

    s = load_scenario(SCEN / "gpt3-175b-megatron.yaml")
    floors = {k: _messages_at_any_scale(build_plan(s, scale=k), 1) for k in (1, 1000, 100_000)}
    assert len(set(floors.values())) == 1
    assert floors[1] <= estimate_work(build_plan(s, scale=10 ** 9), 1, nvlink=False).messages
    monkeypatch.setattr(limits, "MAX_STATE_BYTES", 4_000_000_000)
    with pytest.raises(InfeasiblePlanError, match=r"--scale \d+ fits") as info:
        check_work(build_plan(s, scale=1), 1)
    followed, its = _follow(s, str(info.value), 1)
    assert check_work(followed, its).memory_bytes <= limits.MAX_STATE_BYTES   # accepted


def test_the_floor_is_one_message_per_piece_that_carries_data_unscaled():
    """At any scale every (NIC hop, channel) a collective sends on unscaled still sends, one
    message (with its clear-to-send write), and every NIC hop of a p2p call one message (NCCL's
    ``addP2pToPlan``: a send of at most half a step is ``min(nChannelsMin, divUp(bytes, step /
    2))`` = 1 part of one chunk): the least work at any --scale counts exactly those of the
    unscaled transfers, and a huge --scale reaches it."""
    from tokenpcap.collectives.traffic import CallShape
    from tokenpcap.schedule.limits import _messages_at_any_scale

    # NCCL's 16 channels for every call (auto would trim a tiny call's channels, fewer still)
    s = load_scenario(SCEN / "mixtral-8x7b-ep.yaml", {**simple_on(), "collectives.channels": 16})
    plan = build_plan(s)
    pieces = 0
    for f in plan.families:
        for g in f.groups:
            t = plan.call_transfers(CallShape(f.collective, g, f.message_bytes, f.elem_bytes)).table
            t = t[t["nic"]]
            per = (t["hop"].tolist() if f.collective in ("SendRecv", "AllToAll")
                   else zip(t["hop"].tolist(), t["channel"].tolist()))
            pieces += len(set(per)) * len(f.insts)
    assert _messages_at_any_scale(plan, 1) == 2 * pieces
    assert estimate_work(build_plan(s, scale=10 ** 9), 1, nvlink=False).messages == 2 * pieces
    assert estimate_work(plan, 1, nvlink=False).messages > 2 * pieces       # unscaled: slices


def test_a_job_no_scale_fits_is_told_the_largest_global_batch_that_does(monkeypatch):
    """With a state limit below Dante's floor at any scale (4 microbatches) but above the floor
    of one microbatch, the advice is the largest global batch whose plan fits at some scale, as
    a --set, and following it (the scenario loaded with that --set) is accepted; one
    microbatch more is not."""
    from tokenpcap.schedule import limits
    from tokenpcap.schedule.limits import _work_at_any_scale
    from tokenpcap.schedule.memory import engine_run

    s = load_scenario(SCEN / "dante.yaml", {"generation.clear_to_send": False})
    floors = {m: _work_at_any_scale(build_plan(load_scenario(
        s.path, {"generation.clear_to_send": False, "training.global_batch_size": 4 * m})), 1,
        engine_run()).memory_bytes for m in (1, 2, 3, 4)}
    assert floors[1] < floors[2] < floors[3] < floors[4]
    monkeypatch.setattr(limits, "MAX_STATE_BYTES", (floors[2] + floors[3]) // 2)
    with pytest.raises(InfeasiblePlanError, match="--scale cannot help") as info:
        check_work(build_plan(s), 1)
    msg = str(info.value)
    assert "--set training.global_batch_size=8 (2 of 4 microbatches) --scale " in msg, msg
    m = re.search(r"global_batch_size=(\d+) .* --scale (\d+) fits", msg)
    followed = load_scenario(s.path, {"generation.clear_to_send": False,
                                      "training.global_batch_size": int(m.group(1))})
    check_work(build_plan(followed, scale=int(m.group(2))), 1)             # accepted


def test_a_compute_time_past_int64_ns_is_refused_not_wrapped():
    import pytest as _pytest

    from tokenpcap.errors import InputError
    from tokenpcap.schedule.compute import flops_time_ns

    assert flops_time_ns(9 * 10**12, 1.0, 1e-9) == 9 * 10**18          # 1e-6 FLOP/ns: fits
    with _pytest.raises(InputError, match=r"training.mfu 1e-09 x gpu.peak_tflops 1.0: got a "
                                          r"compute time of 1e\+19 ns .* expected at most 2\^63"):
        flops_time_ns(10**13, 1.0, 1e-9)


def test_queued_fabric_time_counts_each_packet_on_each_link():
    """The 63 -> 1 incast of the HPCC ns-3 comparison crosses one switch: every packet (data,
    clear-to-send and ACK) crosses two links, the NIC's up and the receiver's down, so the
    estimate adds packets x 2 packet-hops to the ideal fabric's work, at the measured rate."""
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.plan.build import build_plan
    from tokenpcap.schedule.limits import FABRIC_PACKET_HOPS_PER_S, estimate_work

    path = Path(__file__).resolve().parents[2] / "profiles/scenarios/incast-63x16m-hpcc-ns3.yaml"
    queued = estimate_work(build_plan(load_scenario(path)), 1)
    ideal = dataclasses.replace(queued, packet_hops=0)
    assert queued.packets > 0 and queued.packet_hops == 2 * queued.packets
    assert queued.seconds - ideal.seconds == pytest.approx(
        2 * queued.packets / FABRIC_PACKET_HOPS_PER_S)


@pytest.mark.parametrize("topology,nodes,nics", [
    ({"kind": "single-switch"}, 8, 1),
    ({"kind": "leaf-spine", "nodes_per_leaf": 2}, 4, 2),
])
def test_queued_fabric_estimate_bounds_the_packet_hops_the_engine_counts(tmp_path, topology,
                                                                         nodes, nics):
    """The estimate's packet-hops (packets x the longest path's links) against the links the
    engine's packets really crossed in a run (``Schedule.fabric_counters``, PFC frames, one
    link each, taken out): through one switch every path has two links, so the two are equal.
    On a leaf-spine fabric of 4 nodes of 2 NICs, 2 nodes per leaf, a packet crosses two links
    (same leaf) or four (through a spine): of the 6 GPUs on other nodes that an AllToAll
    sender reaches over the network, 2 share its leaf and 4 do not, and every pair carries as
    many packets (its ACKs come back the same way), so the engine counts packets x
    (2 x 2 + 4 x 4) / 6, within the estimate's bound of 4 links each."""
    from tests.schedule.engine.test_fabric import _cluster, _scenario

    fab = {"model": "queued", "preset": "hpcc-ns3", "topology": topology}
    path = _scenario(tmp_path, _cluster(nodes, nics, fab),
                     {"kind": "alltoall", "bytes": 256 << 10})
    plan = build_plan(load_scenario(path))
    w = estimate_work(plan, 1)
    sched = Schedule(plan, keep_history=False, nics=())
    packets = sum(len(tx) for tx in Schedule(plan, keep_history=False).run())
    for _ in sched.run():
        pass
    c = sched.fabric_counters
    assert c["cnps"] == 0 and packets == w.packets
    hops = c["packet_hops"] - c["pfc_frames"]
    if topology["kind"] == "single-switch":
        assert hops == w.packet_hops == 2 * w.packets
    else:
        assert w.packet_hops == 4 * w.packets
        assert 6 * hops == w.packets * (2 * 2 + 4 * 4) and hops <= w.packet_hops
