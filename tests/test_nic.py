"""Tests of tokenpcap.nic (the timing engine): C12 layer-1 times, a per-packet reference simulator
as an independent oracle compared under Hypothesis, invariants of the output, errors, and speed.

The oracle (``simulate``) is written plainly, one Python step per packet, from the rules stated in
docs/lower.md; it shares no code with tokenpcap.nic or tokenpcap.nic_port:

* every NIC sends one frame at a time; a frame takes ceil((len + 24) * 8 / rate) ns;
* at each packet boundary: pending ACKs first (FIFO), else the next QP after the last one served,
  in the order QPs were first used on that NIC, whose FIFO holds a posted message; one packet;
* messages are posted at start_ns (with clear-to-send: when their CTS arrives); FIFO per QP;
* AckReq on the last packet (and every N-th); ACK ready at end + latency + ack delay;
* arrival at end of the last packet + latency; events at one instant run before the decisions at
  that instant, in the order READY (by msg id), ACK (by msg, packet), ARRIVE (by msg id).
"""
from __future__ import annotations

import heapq
import time
from collections import deque
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.errors import InputError
from tokenpcap.messages import KIND_CTS, KIND_DATA, MESSAGE_DTYPE, VERB_SEND, VERB_WRITE, VERB_WRITE_IMM
from tokenpcap.nic import (
    PKT_ACK,
    PKT_CTS,
    PKT_DATA,
    TX_DTYPE,
    Engine,
    layer1_time_ns,
    layer1_time_ps,
)
from tokenpcap.profiles import ClusterProfile, GenerationConfig, GpuProfile, NetworkProfile
from tokenpcap.wire import rdma

READY, ACK, ARRIVE = 0, 1, 2



def l1_ns(frame_bytes: int, link_gbps: float, overhead: int = 24) -> int:
    t = Fraction((frame_bytes + overhead) * 8) / Fraction(repr(float(link_gbps)))
    return -(-t.numerator // t.denominator)


def simulate(msgs, *, n_nics, link_gbps, pmtu, latency, ack_delay, ack_every, cts, cts_bytes=64,
             ip_version=4, followers=None):
    """Run the oracle. ``msgs``: list of dicts src, dst, qp, size, start, verb, kind.

    ``followers``: optional dict {index in msgs: (gap_ns, dict)}: when that message arrives, the
    dict is added as a new message starting gap_ns after the arrival (as an on_arrival callback).

    Returns (rows, table): rows are tuples (time, nic, peer, msg, index, kind, frame_bytes) with
    kind 0 data, 1 cts, 2 ack; table maps msg id -> dict of the message and its times.
    """
    wire = dict(transport="rocev2", ip_version=ip_version, vlan=False)
    ack_fb = int(rdma.frame_bytes(rdma.ACKNOWLEDGE, 0, **wire))
    table: dict[int, dict] = {}
    order: dict[int, list] = {n: [] for n in range(n_nics)}
    fifo: dict[tuple, deque] = {}
    counters: dict[tuple, list] = {}
    pointer = {n: -1 for n in range(n_nics)}
    free: dict[int, int | None] = {n: None for n in range(n_nics)}
    acks = {n: deque() for n in range(n_nics)}
    heap: list = []
    seq = [0]
    rows = []

    def push(t, typ, k1, k2, payload):
        seq[0] += 1
        heapq.heappush(heap, (t, typ, k1, k2, seq[0], payload))

    def qp_of(nic, peer, qp):
        key = (nic, peer, qp)
        if key not in fifo:
            fifo[key] = deque()
            counters[key] = [0, 0]
            order[nic].append(key)
        return key

    def add(batch, follower_of=None):
        ids = []
        base = len(table)
        data = []
        for i, m in enumerate(batch):
            m = dict(m)
            if cts and m["kind"] == KIND_DATA:
                m["verb"] = VERB_WRITE_IMM
            mid = base + i
            seg = rdma.segment(m["size"], pmtu, m["verb"])
            m["frames"] = [int(x) for x in rdma.frame_bytes(seg.opcode, seg.payload_bytes, **wire)]
            m.update(id=mid, first=-1, last_end=-1, arrival=-1, psn=-1, seq=-1, peer=-1)
            table[mid] = m
            ids.append(mid)
            if cts and m["kind"] == KIND_DATA:
                data.append(mid)
        for j, mid in enumerate(data):
            d = table[mid]
            cid = base + len(batch) + j
            seg = rdma.segment(cts_bytes, pmtu, VERB_WRITE)
            table[cid] = dict(src=d["dst"], dst=d["src"], qp=d["qp"], size=cts_bytes, start=d["start"],
                              verb=VERB_WRITE, kind=KIND_CTS, id=cid, first=-1, last_end=-1, arrival=-1,
                              psn=-1, seq=-1, peer=mid,
                              frames=[int(x) for x in rdma.frame_bytes(seg.opcode, seg.payload_bytes, **wire)])
            d["peer"] = cid
        for mid in ids:
            m = table[mid]
            qp_of(m["src"], m["dst"], m["qp"])
            if m["peer"] >= 0:
                qp_of(m["dst"], m["src"], m["qp"])
                push(m["start"], READY, m["peer"], 0, m["peer"])
            else:
                push(m["start"], READY, mid, 0, mid)
        return ids

    def touch(nic, t):
        if free[nic] is None or free[nic] < t:
            free[nic] = t

    def ready(mid, t):
        m = table[mid]
        key = qp_of(m["src"], m["dst"], m["qp"])
        m["psn"], m["seq"] = counters[key]
        counters[key][0] += len(m["frames"])
        counters[key][1] += 1
        fifo[key].append([mid, 0])
        touch(m["src"], t)

    add(msgs)
    follow = {}
    if followers:
        follow = {i: f for i, f in followers.items()}
    while True:
        te = heap[0][0] if heap else None
        td, dn = None, None
        for n in range(n_nics):
            if acks[n] or any(fifo[k] for k in order[n]):
                if td is None or free[n] < td:
                    td, dn = free[n], n
        if te is None and td is None:
            break
        if te is not None and (td is None or te <= td):
            t, typ, _, _, _, payload = heapq.heappop(heap)
            if typ == READY:
                ready(payload, t)
            elif typ == ACK:
                nic, mid, idx, sender = payload
                acks[nic].append((mid, idx, sender))
                touch(nic, t)
            else:
                m = table[payload]
                m["arrival"] = t
                if m["kind"] == KIND_CTS and m["peer"] >= 0:
                    ready(m["peer"], t)
                if payload in follow:
                    gap, spec = follow.pop(payload)
                    spec = dict(spec, start=t + gap)
                    new = add([spec])
                    if "then" in spec:
                        follow[new[0]] = spec["then"]
            continue
        t = td
        if acks[dn]:
            mid, idx, sender = acks[dn].popleft()
            rows.append((t, dn, sender, mid, idx, 2, ack_fb))
            free[dn] = t + l1_ns(ack_fb, link_gbps)
            continue
        keys = order[dn]
        k = len(keys)
        local = {key: i for i, key in enumerate(keys)}
        start = pointer[dn]
        for step in range(1, k + 1):
            key = keys[(start + step) % k]
            if fifo[key]:
                break
        pointer[dn] = local[key]
        head = fifo[key][0]
        mid, idx = head
        m = table[mid]
        fb = m["frames"][idx]
        rows.append((t, dn, m["dst"], mid, idx, 1 if m["kind"] == KIND_CTS else 0, fb))
        if idx == 0:
            m["first"] = t
        end = t + l1_ns(fb, link_gbps)
        free[dn] = end
        last = idx == len(m["frames"]) - 1
        if last or (ack_every and (idx + 1) % ack_every == 0):
            push(end + latency + ack_delay, ACK, mid, idx, (m["dst"], mid, idx, dn))
        if last:
            m["last_end"] = end
            push(end + latency, ARRIVE, mid, 0, mid)
            fifo[key].popleft()
        else:
            head[1] += 1
    rows.sort(key=lambda r: (r[0], r[1]))
    return rows, table


# -- helpers ------------------------------------------------------------------------------------

def cluster(nodes=1, nics=2, link_gbps=400.0, pmtu=4096, latency=1000, transport="rocev2", ip_version=4):
    return ClusterProfile(name="test", nodes=nodes, gpus_per_node=nics, nics_per_node=nics,
                          link_gbps=link_gbps, nvlink_gbps=3600, gpu=GpuProfile("H100", 989),
                          transport=transport, pmtu_bytes=pmtu,
                          network=NetworkProfile(latency_ns=latency, ip_version=ip_version))


def rows_of(msgs):
    rows = np.zeros(len(msgs), MESSAGE_DTYPE)
    for i, m in enumerate(msgs):
        for src, dst in (("src", "src_nic"), ("dst", "dst_nic"), ("qp", "qp"), ("size", "size_bytes"),
                         ("start", "start_ns"), ("verb", "verb"), ("kind", "kind")):
            rows[dst][i] = m[src]
    return rows


def run_all(engine, until=None):
    chunks = list(engine.run(until))
    return np.concatenate(chunks) if chunks else np.zeros(0, TX_DTYPE)


def run_engine(msgs, *, n_nics, link_gbps, pmtu, latency, ack_delay, ack_every, cts, followers=None,
               chunk_rows=1 << 18):
    eng = Engine(cluster(nics=n_nics, link_gbps=link_gbps, pmtu=pmtu, latency=latency),
                 GenerationConfig(ack_every_packets=ack_every, clear_to_send=cts),
                 ack_delay_ns=ack_delay, chunk_rows=chunk_rows)
    follow = dict(followers or {})

    def on_arrival(mid, t):
        gap, spec = follow.pop(mid)
        new = eng.add_message(spec["src"], spec["dst"], spec["qp"], spec["size"], t + gap,
                              verb=spec["verb"], kind=spec["kind"],
                              on_arrival=on_arrival if "then" in spec else None)
        if "then" in spec:
            follow[new] = spec["then"]

    ids = eng.add_messages(rows_of(msgs))
    for i in list(follow):
        eng._callbacks[int(ids[i])] = on_arrival   # same as passing on_arrival for these ids
    return eng, run_all(eng)


def as_tuples(rows):
    return [tuple(int(x) for x in r) for r in rows.tolist()]


# -- C12: layer-1 time ----------------------------------------------------------------------------

def test_c12_layer1_times_exact_ps():
    assert layer1_time_ps([60], 10).tolist() == [67200]           # 67.2 ns
    assert layer1_time_ps([4170], 400).tolist() == [83880]        # 83.88 ns
    assert layer1_time_ps([4170], 100).tolist() == [335520]       # 335.52 ns


def test_c12_layer1_ns_is_the_ceiling():
    # 67.2 -> 68; (4170 + 24) * 8 / 10 = 3355.2 -> 3356; 83.88 -> 84; 335.52 -> 336
    assert layer1_time_ns([60, 4170], 10).tolist() == [68, 3356]
    assert layer1_time_ns([4170], 400).tolist() == [84]
    assert layer1_time_ns([4170], 100).tolist() == [336]
    # a whole number stays: (1226 + 24) * 8 / 1 Gb/s = 10000 ns
    assert layer1_time_ns([1226], 1).tolist() == [10000]


def test_infiniband_layer1_is_two_delimiters_no_gap():
    # LRH..VCRC of 4096 B payload WRITE MIDDLE local: 8 + 12 + 4096 + 4 + 2 = 4122 B, + SDP + EGP
    assert layer1_time_ps([4122], 100, "infiniband").tolist() == [(4122 + 2) * 8 * 10]
    with pytest.raises(InputError, match="transport"):
        layer1_time_ns([60], 100, "fddi")
    with pytest.raises(InputError, match="link_gbps"):
        layer1_time_ns([60], 0)


# -- the oracle ------------------------------------------------------------------------------------

msg_strategy = st.fixed_dictionaries({
    "src": st.integers(0, 2), "dst": st.integers(0, 2), "qp": st.integers(0, 2),
    "size": st.one_of(st.integers(0, 9000), st.sampled_from([0, 1, 1024, 1025, 4096, 8192, 10000])),
    "start": st.integers(0, 4000),
    "verb": st.sampled_from([VERB_WRITE, VERB_WRITE_IMM, VERB_SEND]),
    "kind": st.just(KIND_DATA),
})


def _fix(m, n):
    m = dict(m)
    m["src"] %= n
    m["dst"] = (m["src"] + 1 + m["dst"] % (n - 1)) % n
    return m


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=st.lists(msg_strategy, min_size=1, max_size=10), n=st.integers(2, 3),
       pmtu=st.sampled_from([1024, 4096]), link=st.sampled_from([10.0, 25.0, 100.0, 400.0, 53.125]),
       latency=st.integers(0, 3000), ack_delay=st.integers(0, 500), ack_every=st.integers(0, 3),
       cts=st.booleans(), chunk=st.sampled_from([1, 3, 1 << 18]))
def test_engine_equals_per_packet_oracle(msgs, n, pmtu, link, latency, ack_delay, ack_every, cts, chunk):
    msgs = [_fix(m, n) for m in msgs]
    kw = dict(n_nics=n, link_gbps=link, pmtu=pmtu, latency=latency, ack_delay=ack_delay,
              ack_every=ack_every, cts=cts)
    want, table = simulate(msgs, **kw)
    eng, got = run_engine(msgs, chunk_rows=chunk, **kw)
    assert as_tuples(got) == want
    tab = eng.messages
    assert tab.size == len(table)
    for mid, m in table.items():
        r = tab[mid]
        assert (r["first_tx_ns"], r["last_tx_end_ns"], r["arrival_ns"], r["psn_offset"], r["qp_seq"]) == (
            m["first"], m["last_end"], m["arrival"], m["psn"], m["seq"]), mid


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=st.lists(msg_strategy, min_size=1, max_size=6), n=st.integers(2, 3),
       gaps=st.lists(st.integers(0, 3000), min_size=6, max_size=6),
       follow=st.lists(msg_strategy, min_size=6, max_size=6), ack_every=st.integers(0, 2),
       cts=st.booleans())
def test_engine_equals_oracle_with_arrival_callbacks(msgs, n, gaps, follow, ack_every, cts):
    msgs = [_fix(m, n) for m in msgs]
    follow = [_fix(m, n) for m in follow]
    # message i, when it arrives, adds follow[i] (which adds follow[i+1] ... for the first one)
    followers = {i: (gaps[i], dict(follow[i])) for i in range(len(msgs))}
    followers[0][1]["then"] = (gaps[-1], dict(follow[-1]))
    kw = dict(n_nics=n, link_gbps=100.0, pmtu=1024, latency=700, ack_delay=150, ack_every=ack_every, cts=cts)
    want, table = simulate(msgs, followers=followers, **kw)
    eng, got = run_engine(msgs, followers=followers, **kw)
    assert as_tuples(got) == want
    assert eng.messages.size == len(table)
