"""The compiled engine (tokenpcap.schedule.engine.kernel, driven by tokenpcap.schedule.runner).

Right values:

* the discrete-event Python engine (tokenpcap.schedule.reference on tokenpcap.schedule.engine.nic,
  itself checked packet by packet against an independent oracle in test_nic.py): the same message
  table, frames, timeline and NVLink copies, byte for byte, on every kind of call and setting;
* the α–β model of a ring AllReduce (Thakur, Rabenseifner & Gropp 2005, Sec. 4.1.1): 2(N−1) steps
  that each move S/N bytes per rank, here in the wire bytes of their frames (RoCEv2 headers,
  RETH, ImmDt, ICRC, and the FCS, preamble, SFD and inter-frame gap of the layer below), at link
  rate, plus one latency term per step; within 1% for S ≥ 256 MiB.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.config.profiles import load_scenario
from tokenpcap.plan.build import build_plan
from tokenpcap.records import PHASES, DIMS, KIND_DATA
from tokenpcap.schedule.engine.port import TX_DTYPE
from tokenpcap.schedule.reference import ReferenceSchedule
from tokenpcap.schedule.runner import Schedule
from tests.schedule.test_schedule import VARIANTS, tiny_scenario

ROOT = Path(__file__).resolve().parents[3]


def both(plan, iterations: int = 1):
    new = Schedule(plan, iterations=iterations, chunk_rows=1 << 12)
    # a run whose replicas are translates of each other orders an instant's launches
    # canonically in both engines (tokenpcap.schedule.replicas)
    old = ReferenceSchedule(plan, iterations=iterations, canonical=new.canonical_order)
    tx_new = np.concatenate(list(new.run()))
    tx_old = np.concatenate(list(old.run()))
    return (new, tx_new), (old, tx_old)


def assert_same(plan, iterations: int = 1) -> None:
    (new, tx_new), (old, tx_old) = both(plan, iterations)
    assert new.messages.tobytes() == old.messages.tobytes()
    assert tx_new.tobytes() == tx_old.tobytes()
    assert new.timeline.tobytes() == old.timeline.tobytes()
    assert new.nvlink.tobytes() == old.nvlink.tobytes()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_kind_of_call_times_as_the_reference_engine(tmp_path, variant):
    kw = dict(VARIANTS[variant])
    path = tiny_scenario(tmp_path, variant, kw.pop("dp"), kw.pop("tp"), kw.pop("pp"), kw.pop("gbs"), **kw)
    assert_same(build_plan(load_scenario(path), scale=8), iterations=2)


def test_compute_blocks_beyond_int32_nanoseconds_time_as_the_reference_engine(tmp_path):
    # a GPU at 1e-9 of its peak: every layer's compute takes seconds, more than the 2**31 ns
    # one int32 column of the engine's instructions holds
    path = tiny_scenario(tmp_path, "slow", dp=2, tp=2, pp=2, gbs=4, extra=", mfu: 0.000000001")
    plan = build_plan(load_scenario(path), scale=8)
    (new, _), _ = both(plan)
    assert (new.timeline["end_ns"] - new.timeline["start_ns"]).max() > 2 ** 32
    assert_same(plan, iterations=2)


@pytest.mark.parametrize("gen", ["{clear_to_send: false}", "{ack_every_packets: 3}",
                                 "{ack_every_packets: 1, clear_to_send: false}"])
def test_acks_and_clear_to_send_settings_time_as_the_reference_engine(tmp_path, gen):
    path = tiny_scenario(tmp_path, "acks", dp=2, tp=2, pp=2, gbs=4, extra=", overlap_grad_reduce: true, bucket_size: 150000")
    path.write_text(path.read_text() + f"generation: {gen}\n")
    assert_same(build_plan(load_scenario(path), scale=4))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ep=st.sampled_from([(4, 1, 2, 2), (8, 1, 1, 4), (2, 2, 2, 2)]), channels=st.integers(1, 3),
       every=st.sampled_from([0, 1, 2, 5]), cts=st.booleans(), scale=st.sampled_from([1, 16, 4096]),
       sel=st.sampled_from([None, (0,), (1, 3)]))
def test_many_qps_joining_and_leaving_a_nic_time_as_the_reference_engine(tmp_path, ep, channels, every, cts,
                                                                         scale, sel):
    """Expert-parallel AllToAlls put many QPs on each NIC that join and leave the rotation at
    every message (the cached rotation, round and stop slot of the compiled engine), with
    one-packet to many-packet messages, ACK requests inside messages and a partial selection of
    NICs (whose wakes are capped): message table and frames equal to the reference's."""
    dp, tp, pp, e = ep
    # Megatron's MoE layer needs sequence parallelism with tp > 1
    sp = ", sequence_parallel: true" if tp > 1 else ""
    path = tiny_scenario(tmp_path, "ep", dp, tp, pp, gbs=dp * 2, channels=channels,
                         par=f", ep: {e}{sp}", model="  moe: {experts: 8, top_k: 2}\n")
    path.write_text(path.read_text() + f"generation: {{ack_every_packets: {every}, clear_to_send: {str(cts).lower()}}}\n")
    plan = build_plan(load_scenario(path), scale=scale)
    new = Schedule(plan, iterations=1, chunk_rows=1 << 10, nics=sel)
    old = ReferenceSchedule(plan, iterations=1, canonical=new.canonical_order)
    tx_new = np.concatenate(list(new.run()) or [np.zeros(0, TX_DTYPE)])
    tx_old = np.concatenate(list(old.run()))
    if sel is not None:
        tx_old = tx_old[np.isin(tx_old["nic"], list(sel))]
    assert new.messages.tobytes() == old.messages.tobytes()
    assert tx_new.tobytes() == tx_old.tobytes()


@pytest.mark.parametrize("name,scale", [("dante", 64), ("gpt2-all-cross", 1)])
def test_bundled_scenarios_time_as_the_reference_engine(name, scale):
    """The same iteration time and per-phase spans as the Python engine (here: every message
    time and frame, which implies both); gpt2-all-cross in the canonical order of an instant
    (its replicas are translates of each other), dante in the order of events."""
    plan = build_plan(load_scenario(ROOT / "profiles" / "scenarios" / f"{name}.yaml"), scale=scale)
    assert Schedule(plan, nics=[]).canonical_order == (name == "gpt2-all-cross")
    assert_same(plan)


@pytest.mark.parametrize("proto", ["auto", "Simple"])
def test_empty_ring_steps_time_as_the_reference_engine(proto):
    """A ring AllReduce's empty steps (``collectives.empty_ring_steps``: 0-byte messages,
    :mod:`tokenpcap.collectives.empty_steps`) time alike in both engines, under LL (the tiny
    AllReduces' protocol by NCCL's tuner) and Simple (the chain of the peer's step counter)."""
    plan = build_plan(load_scenario(ROOT / "profiles" / "scenarios" / "gpt2-all-cross.yaml",
                                    {"collectives.empty_ring_steps": True,
                                     "collectives.NCCL_PROTO": proto}), scale=4)
    (new, _), _ = both(plan)
    assert (new.messages["size_bytes"] == 0).any()
    assert_same(plan)


def test_the_canonical_order_of_an_instant_times_as_the_reference_engine(monkeypatch):
    """The canonical order of an instant's launches (``CANON``) on Dante, whose replicas are not
    translates of each other (two share a node), forced in both engines: NVLink copies and RDMA
    messages of one instant sorted together, the message table kept or a ring of rows (the
    copies take no message row)."""
    from tokenpcap.schedule import runner

    def canonical(self, flats, allowed):
        self.replica_view, self.replicas_reason = None, "canonical order forced (test)"
        return flats, True

    monkeypatch.setattr(runner.Schedule, "_quotient", canonical)
    plan = build_plan(load_scenario(ROOT / "profiles" / "scenarios" / "dante.yaml"), scale=64)
    new = Schedule(plan, chunk_rows=1 << 12)
    assert new.canonical_order and new.nvlink_mode == "copies"
    tx_new = np.concatenate(list(new.run()))
    old = ReferenceSchedule(plan, canonical=True)
    tx_old = np.concatenate(list(old.run()))
    assert new.messages.tobytes() == old.messages.tobytes()
    assert tx_new.tobytes() == tx_old.tobytes()
    assert new.timeline.tobytes() == old.timeline.tobytes()
    assert new.nvlink.tobytes() == old.nvlink.tobytes()
    ring = Schedule(plan, chunk_rows=1 << 12, keep_messages=False, ring_rows=64)
    assert np.concatenate(list(ring.run())).tobytes() == tx_new.tobytes()
    assert ring.timeline.tobytes() == new.timeline.tobytes()


def _wire_bytes(size: int, pmtu: int, cts: bool) -> int:
    """Layer-1 bytes of one RDMA WRITE (with immediate when ``cts``) of ``size`` bytes, IPv4
    RoCEv2, written from the spec, not from the engine: Ethernet 14 + IPv4 20 + UDP 8 + BTH 12 +
    ICRC 4 per packet, RETH 16 on the first, ImmDt 4 on the last with immediate, payload padded to
    4, and FCS 4 + preamble/SFD 8 + IFG 12 on the link."""
    n = max(1, -(-size // pmtu))
    total = 0
    for i in range(n):
        pay = pmtu if i < n - 1 else size - (n - 1) * pmtu
        total += 14 + 20 + 8 + 12 + 4 + pay + (-pay) % 4 + 24
        total += 16 if i == 0 else 0
        total += 4 if (i == n - 1 and cts) else 0
    return total


def test_ring_allreduce_takes_the_alpha_beta_time_of_its_wire_bytes(tmp_path):
    """A 768 MiB fp32 gradient AllReduce (one DP bucket) over 8 single-GPU nodes on 400 Gb/s
    links: its span is 2(N−1) steps of the wire time of one rank's S/N bytes plus a latency term
    per step, within 1%; every NIC stays busy at ≥ 99% of the link meanwhile."""
    path = tiny_scenario(tmp_path, "ar", dp=8, tp=1, pp=1, gbs=8, channels=2,
                         extra=", overlap_grad_reduce: false, grad_reduce_dtype: fp32")
    text = path.read_text().replace("hidden_size: 256", "hidden_size: 2048").replace(
        "grad_reduce_dtype: bf16, ", "")
    path.write_text(text)
    s = load_scenario(path)
    plan = build_plan(s)
    sched = Schedule(plan, nics=(), keep_history=False, keep_nvlink=False)
    for _ in sched.run():
        pass
    m = sched.messages
    dp = m[(m["kind"] == KIND_DATA) & (m["dim"] == DIMS.index("dp"))
           & (m["phase"] == PHASES.index("backward"))]         # the gradients, not the loss
    calls = np.unique(dp["call_id"])
    assert calls.size == 1                                  # one bucket: one AllReduce
    S = sched.call(int(calls[0])).message_bytes
    assert S >= 256 << 20
    N = 8
    span = int(dp["arrival_ns"].max() - dp["start_ns"].min())
    # wire time of one rank's messages in one step (channels and 1 MiB slices as the transfers cut
    # them: every rank sends the same sizes each step)
    one = dp[(dp["rank_src"] == 0) & (dp["step"] == 0)]
    wire = sum(_wire_bytes(int(x), s.cluster.pmtu_bytes, True) for x in one["size_bytes"])
    beta_ns = wire * 8 / s.cluster.link_gbps
    alpha_ns = s.cluster.network.latency_ns
    model_ns = 2 * (N - 1) * (beta_ns + alpha_ns)
    assert abs(span - model_ns) <= 0.01 * model_ns, (span, model_ns)
    # and the links are full: wire bytes each NIC sent over the span
    busy = 2 * (N - 1) * beta_ns / span
    assert busy >= 0.99


def test_the_end_of_an_nvlink_call_that_launches_more_than_the_launch_list_holds_grows_it():
    """Llama-2-7B's tp 8 calls are NVLink-only, timed as a whole: at the end of one the 8 ranks
    run on and together launch 384 transfers (48 at most for one rank). With the launch list
    and its headroom cut to 100 the run stops to grow it in the middle of that event, then
    resumes where it stopped: the same messages, in the same order, as with the full list."""
    from tokenpcap.schedule.engine import kernel as K

    def run(head):
        plan = build_plan(load_scenario(ROOT / "profiles" / "scenarios" / "llama2-7b-a100-ib.yaml"))
        s = Schedule(plan, nics=())
        eng = s._eng
        if head is not None:
            eng.cf[K.HEAD] = head
            eng.launch = np.zeros(head, np.int64)
        for _ in s.run():
            pass
        n = int(eng.sc[K.NMSG])
        return eng.S.ms[:n].copy(), eng.launch.shape[0]

    full, _ = run(None)
    small, grown = run(100)
    assert grown > 100                         # it grew ...
    assert np.array_equal(small, full)         # ... and the run is the same
