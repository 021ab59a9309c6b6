"""Tests of tokenpcap.schedule.engine.nic (the timing engine): C12 layer-1 times, a per-packet reference simulator
as an independent oracle compared under Hypothesis, invariants of the output, errors, and speed.

The oracle (``simulate``) is written plainly, one Python step per packet, from the rules stated in
docs/lower.md; it shares no code with tokenpcap.schedule.engine.nic or tokenpcap.schedule.engine.port:

* every NIC sends one frame at a time; a frame takes ceil((len + 24) * 8 / rate) ns;
* a connection (data sender S, data receiver R, index c) owns one RC QP pair: S's QP sends the
  data (and nothing else), R's QP sends the clear-to-send writes of that connection (and nothing
  else); data R -> S is another connection (R, S, c) with its own pair (NCCL net_ib, docs/lower.md);
* at each packet boundary: pending ACKs first (FIFO), else the next QP after the last one served,
  in the order QPs were first used on that NIC, whose FIFO holds a posted message; one packet;
* messages are posted at start_ns (with clear-to-send: when their CTS arrives); FIFO per QP;
  PSN offsets and message counts per QP;
* AckReq on the last packet (and every N-th); ACK ready at end + latency + ack delay;
* arrival at end of the last packet + latency; events at one instant run before the decisions at
  that instant, in the order READY (by msg id), ACK (by msg, packet), ARRIVE (by msg id).
"""
from __future__ import annotations

import heapq
from collections import deque
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.errors import InputError
from tokenpcap.records import KIND_CTS, KIND_DATA, MESSAGE_DTYPE, VERB_SEND, VERB_WRITE, VERB_WRITE_IMM
from tokenpcap.schedule.engine.nic import (
    PKT_ACK,
    PKT_DATA,
    TX_DTYPE,
    Engine,
    layer1_time_ns,
    layer1_time_ps,
)
from tokenpcap.config.profiles import ClusterProfile, GenerationConfig, GpuProfile, NetworkProfile
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

    def qp_of(m):
        # the QP that sends message m: the sender's end of its connection for data, the
        # receiver's end for a clear-to-send write (whose connection runs the other way)
        if m["kind"] == KIND_CTS:
            key, nic = ((m["dst"], m["src"], m["qp"]), "receiver end"), m["src"]
        else:
            key, nic = ((m["src"], m["dst"], m["qp"]), "sender end"), m["src"]
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
            qp_of(m)
            if m["peer"] >= 0:
                qp_of(table[m["peer"]])
                push(m["start"], READY, m["peer"], 0, m["peer"])
            else:
                push(m["start"], READY, mid, 0, mid)
        return ids

    def touch(nic, t):
        if free[nic] is None or free[nic] < t:
            free[nic] = t

    def ready(mid, t):
        m = table[mid]
        key = qp_of(m)
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
    """A small test cluster (one node, ``nics`` NICs)."""
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


# -- invariants stated from the spec (independent of the oracle) ----------------------------------

def exact_ps(fb, link):
    return Fraction((int(fb) + 24) * 8 * 1000) / Fraction(repr(float(link)))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=st.lists(msg_strategy, min_size=1, max_size=14), n=st.integers(2, 4),
       link=st.sampled_from([10.0, 100.0, 400.0, 53.125]), every=st.integers(0, 4), cts=st.booleans(),
       latency=st.integers(0, 2000))
def test_timing_invariants(msgs, n, link, every, cts, latency):
    msgs = [_fix(m, n) for m in msgs]
    eng, rows = run_engine(msgs, n_nics=n, link_gbps=link, pmtu=1024, latency=latency, ack_delay=200,
                           ack_every=every, cts=cts, chunk_rows=7)
    tab = eng.messages
    assert np.all(np.diff(rows["time_ns"]) >= 0)
    for nic in range(n):
        r = rows[rows["nic"] == nic]
        t = r["time_ns"].astype(np.int64)
        l1 = [exact_ps(fb, link) for fb in r["frame_bytes"]]
        # spaced at least by the layer-1 time of the previous frame (rounded up to whole ns)
        assert all(t[i + 1] - t[i] >= -(-l1[i] // 1000) for i in range(len(t) - 1))
        # no window exceeds the link rate: frames i..j-1 fit into t[j] - t[i] (S_k - 1000 t_k falls)
        s = [Fraction(0)]
        for x in l1[:-1]:
            s.append(s[-1] + x)
        v = [s[k] - 1000 * int(t[k]) for k in range(len(t))]
        assert all(v[k + 1] <= v[k] for k in range(len(v) - 1))
    data = rows[rows["kind"] != PKT_ACK]
    for m in tab:
        sel = data[data["msg"] == m["msg_id"]]
        assert sel.size == m["n_packets"] and np.array_equal(sel["index"], np.arange(sel.size))
        assert sel["time_ns"][0] >= m["start_ns"] and sel["time_ns"][0] == m["first_tx_ns"]
        end = int(sel["time_ns"][-1]) + l1_ns(int(sel["frame_bytes"][-1]), link)
        assert m["last_tx_end_ns"] == end and m["arrival_ns"] == end + latency
        assert (sel["peer_nic"] == m["dst_nic"]).all() and (sel["nic"] == m["src_nic"]).all()
        if m["kind"] == KIND_DATA and cts:                       # data waits for its CTS to arrive
            assert sel["time_ns"][0] >= tab[m["peer_msg"]]["arrival_ns"]
    # FIFO per QP: in transmit order the messages of a QP come one after the other, by PSN offset.
    # A QP sends either a connection's data or (its receiver's end) that connection's CTS writes.
    for key in set(zip(tab["src_nic"].tolist(), tab["dst_nic"].tolist(), tab["qp"].tolist(), tab["kind"].tolist())):
        ids = tab["msg_id"][(tab["src_nic"] == key[0]) & (tab["dst_nic"] == key[1]) & (tab["qp"] == key[2])
                            & (tab["kind"] == key[3])]
        seq = data["msg"][np.isin(data["msg"], ids)]
        offs = tab["psn_offset"][seq] + data["index"][np.isin(data["msg"], ids)]
        assert np.array_equal(offs, np.arange(offs.size))
    # ACKs: one per AckReq'd packet, sent by the receiver no earlier than arrival + delay
    acks = rows[rows["kind"] == PKT_ACK]
    n_req = sum(len([i for i in range(int(m["n_packets"])) if i == m["n_packets"] - 1 or (every and (i + 1) % every == 0)])
                for m in tab)
    assert acks.size == n_req
    for a in acks:
        m = tab[a["msg"]]
        p = data[(data["msg"] == a["msg"]) & (data["index"] == a["index"])][0]
        assert a["nic"] == m["dst_nic"] and a["peer_nic"] == m["src_nic"]
        assert a["time_ns"] >= p["time_ns"] + l1_ns(int(p["frame_bytes"]), link) + latency + 200


def test_round_robin_one_packet_per_turn_and_few_epochs(monkeypatch):
    import tokenpcap.schedule.engine.port as port_mod
    calls = []
    real = port_mod.Port._epoch
    monkeypatch.setattr(port_mod.Port, "_epoch", lambda self, *a: calls.append(1) or real(self, *a))
    eng = Engine(cluster(nics=9), GenerationConfig(clear_to_send=False))
    for q in range(8):
        eng.add_message(0, 1 + q, 0, 1 << 20, 0)              # 8 concurrent 1 MiB = 256 packets each
    rows = run_all(eng)
    data = rows[rows["kind"] == PKT_DATA]
    assert data.size == 8 * 256
    assert np.array_equal(data["msg"], np.tile(np.arange(8), 256))        # interleaved one by one
    assert np.array_equal(data["index"], np.repeat(np.arange(256), 8))
    assert len(calls) == 9              # one long epoch, then the 8 completions one slot apart; not 2048
    # saturated: back to back at exactly the rounded-up layer-1 time of each frame, 84 ns at 400G
    # (4170 or 4154 B + 24) * 8 / 400 = 83.88 or 83.56 ns -> 84 ns
    assert set(np.diff(data["time_ns"]).tolist()) == {84}
    span_ps = (int(data["time_ns"][-1]) + l1_ns(int(data["frame_bytes"][-1]), 400.0) - int(data["time_ns"][0])) * 1000
    exact = sum(exact_ps(fb, 400.0) for fb in data["frame_bytes"])
    assert exact <= span_ps <= exact + 1000 * data.size                    # line rate within 1 ns/frame


def test_new_qp_joins_rotation_at_its_place():
    eng = Engine(cluster(nics=4, latency=0), GenerationConfig(clear_to_send=False))
    a = eng.add_message(0, 1, 0, 10 * 4096, 0)
    b = eng.add_message(0, 2, 0, 10 * 4096, 0)
    c = eng.add_message(0, 3, 0, 4096, 200)                   # eligible later, QP created third
    rows = run_all(eng)
    data = rows[rows["kind"] == PKT_DATA]
    order = data["msg"].tolist()
    # boundaries at 0, 84, 168, 252 ... (4170 B FIRST, 4154 B MIDDLE at 400G: 84 ns each); at 252
    # the QP after a's (the last served) in creation order is b's, then c's, then a's again
    assert order[:7] == [a, b, a, b, c, a, b]


def test_acks_take_priority_on_a_busy_link():
    eng = Engine(cluster(nics=2, latency=500), GenerationConfig(clear_to_send=False), ack_delay_ns=100)
    eng.add_message(0, 1, 0, 4096, 0)                          # its ACK comes back to NIC 0 ...
    eng.add_message(1, 0, 0, 64 * 4096, 0)                     # ... while NIC 1 streams to NIC 0
    rows = run_all(eng)
    ack = rows[rows["kind"] == PKT_ACK][0]
    assert ack["nic"] == 1
    ready = 84 + 500 + 100
    before = rows[(rows["nic"] == 1) & (rows["time_ns"] < ack["time_ns"])]
    last = before[-1]
    # sent at the first packet boundary at or after it is ready
    assert last["time_ns"] < ready <= last["time_ns"] + 84 and ack["time_ns"] == last["time_ns"] + 84


def test_callbacks_timers_and_errors():
    eng = Engine(cluster(nics=2, latency=1000), GenerationConfig(clear_to_send=False))
    seen = []

    def arrived(mid, t):
        seen.append(("arrive", mid, t))
        with pytest.raises(InputError, match="start_ns"):
            eng.add_message(1, 0, 0, 10, t - 1)
        eng.at(t + 5000, lambda t2: seen.append(("timer", t2)) or eng.add_message(1, 0, 0, 100, t2))
        with pytest.raises(InputError, match="t_ns"):
            eng.at(t - 1, print)

    m = eng.add_message(0, 1, 0, 4096, 10, on_arrival=arrived)
    rows = run_all(eng)
    t_arr = 10 + 84 + 1000
    assert seen[0] == ("arrive", m, t_arr) and seen[1] == ("timer", t_arr + 5000)
    second = rows[(rows["kind"] == PKT_DATA) & (rows["nic"] == 1)]
    assert second["time_ns"].tolist() == [t_arr + 5000]
    with pytest.raises(InputError, match="add_message"):
        eng.add_message(0, 1, 0, 1, 10 ** 9, colour=3)
    for key, args, verb in (("src_nic", (2, 1, 0, 1), 0), ("dst_nic", (0, 0, 0, 1), 0),
                            ("size_bytes", (0, 1, 0, -1), 0), ("qp", (0, 1, -1, 1), 0), ("verb", (0, 1, 0, 1), 9)):
        with pytest.raises(InputError, match=key):
            eng.add_message(*args, 10 ** 9, verb=verb)
    with pytest.raises(InputError, match="latency_ns"):
        Engine(cluster(latency=-1))


def test_chunks_bounded_sorted_and_until_resumes():
    msgs = [dict(src=s, dst=(s + 1) % 3, qp=q, size=30000, start=100 * q, verb=VERB_WRITE, kind=KIND_DATA)
            for s in range(3) for q in range(3)]
    kw = dict(n_nics=3, link_gbps=100.0, pmtu=1024, latency=800, ack_delay=100, ack_every=4, cts=True)
    _, whole = run_engine(msgs, chunk_rows=1 << 18, **kw)
    eng = Engine(cluster(nics=3, link_gbps=100.0, pmtu=1024, latency=800),
                 GenerationConfig(ack_every_packets=4, clear_to_send=True), ack_delay_ns=100, chunk_rows=16)
    eng.add_messages(rows_of(msgs))
    parts, sizes, buffered = [], [], []
    for until in (3000, 3001, 9000, None):
        for chunk in eng.run(until):
            sizes.append(chunk.size)
            buffered.append(sum(p.out_rows for p in eng._ports))
            parts.append(chunk)
            if until is not None:
                assert chunk["time_ns"].max() < until
    got = np.concatenate(parts)
    assert max(sizes) <= 16 and np.array_equal(got, whole)
    assert max(buffered) <= 16 * 4                                       # bounded, not the whole run
    key = got["time_ns"] * 8 + got["nic"]
    assert np.all(np.diff(key) > 0)                                        # time order, ties by NIC


def test_infiniband_frames_and_layer1():
    eng = Engine(cluster(nics=2, link_gbps=100.0, transport="infiniband"), GenerationConfig(clear_to_send=False))
    eng.add_message(0, 1, 0, 3 * 4096, 0)
    rows = run_all(eng)
    data = rows[rows["kind"] == PKT_DATA]
    # LRH 8 + BTH 12 (+ RETH 16 on FIRST) + 4096 + ICRC 4 + VCRC 2; layer 1 adds SDP + EGP only
    assert data["frame_bytes"].tolist() == [4138, 4122, 4122]
    assert np.diff(data["time_ns"]).tolist() == [-(-(4138 + 2) * 8 // 100), -(-(4122 + 2) * 8 // 100)]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=st.lists(msg_strategy, min_size=1, max_size=8), cts=st.booleans(),
       prov=st.lists(st.integers(0, 30), min_size=12, max_size=12))
def test_add_message_equals_add_messages(msgs, cts, prov):
    msgs = [_fix(m, 3) for m in msgs]
    names = ["phase", "dim", "collective", "iteration", "layer", "microbatch", "step", "call_id", "rank_src",
             "rank_dst", "token_start", "token_end"]
    one = Engine(cluster(nics=3), GenerationConfig(clear_to_send=cts))
    many = Engine(cluster(nics=3), GenerationConfig(clear_to_send=cts))
    rows = rows_of(msgs)
    for name, v in zip(names, prov):
        rows[name] = v
    for m in msgs:
        one.add_message(m["src"], m["dst"], m["qp"], m["size"], m["start"], verb=m["verb"], kind=m["kind"],
                        **dict(zip(names, prov)))
    for r in rows:                       # one row per call: ids interleave data and CTS as add_message does
        many.add_messages(r[None])
    assert np.array_equal(run_all(one), run_all(many))
    assert one.messages.tobytes() == many.messages.tobytes()


# -- keep_messages=False: the table holds the messages in flight, not the run -------------------

def _lower_all(eng, cl, seed=0, every=0):
    from tokenpcap.lower import Lowering
    low = Lowering(cl, seed, every)
    return np.concatenate([low(tx, eng.messages) for tx in eng.run()])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=st.lists(msg_strategy, min_size=1, max_size=8), n=st.integers(2, 3),
       gaps=st.lists(st.integers(0, 3000), min_size=8, max_size=8),
       follow=st.lists(msg_strategy, min_size=8, max_size=8), ack_every=st.integers(0, 2),
       cts=st.booleans(), chunk=st.sampled_from([1, 2, 5, 1 << 18]), block=st.sampled_from([1, 2, 3]))
def test_dropping_finished_messages_changes_no_packet(msgs, n, gaps, follow, ack_every, cts, chunk, block):
    # The same workload (with arrival callbacks adding more) lowered chunk by chunk from a table
    # that keeps everything and from one that drops messages that are over (in blocks of 1-3 rows,
    # so that it drops all the time): the same packets, byte for byte.
    import tokenpcap.schedule.engine.table as table_mod
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(table_mod, "_BLOCK", block)
        _dropping_run(msgs, n, gaps, follow, ack_every, cts, chunk)


def _dropping_run(msgs, n, gaps, follow, ack_every, cts, chunk):
    msgs, follow = [_fix(m, n) for m in msgs], [_fix(m, n) for m in follow]
    cl = cluster(nics=n, link_gbps=100.0, pmtu=1024, latency=700)
    out = []
    for keep in (True, False):
        eng = Engine(cl, GenerationConfig(ack_every_packets=ack_every, clear_to_send=cts), ack_delay_ns=150,
                     chunk_rows=chunk, keep_messages=keep)
        todo = list(zip(gaps, follow))

        def arrived(mid, t, eng=eng, todo=todo):
            if todo:
                gap, m = todo.pop(0)
                eng.add_message(m["src"], m["dst"], m["qp"], m["size"], t + gap, verb=m["verb"],
                                on_arrival=arrived, step=len(todo))

        eng.add_messages(rows_of(msgs), on_arrival=arrived)
        out.append(_lower_all(eng, cl, 3, ack_every))
    assert out[0].tobytes() == out[1].tobytes()


def test_table_holds_messages_in_flight_not_the_whole_run():
    # 4 NICs in a ring, 1500 steps one after the other (each step's message starts when the
    # previous arrives, as a ring collective's steps do): 6000 data + 6000 CTS messages. Kept,
    # the table has 12000 rows; dropping finished ones it holds at most a few blocks of 1024.
    from tokenpcap.lower import Lowering
    from tokenpcap.schedule.engine.table import MessageWindow
    cl = cluster(nics=4, link_gbps=400.0, latency=1000)
    held, packets = [], []
    for keep in (True, False):
        low = Lowering(cl, 5)
        parts = []
        eng = Engine(cl, GenerationConfig(), chunk_rows=4096, keep_messages=keep)

        def send(rank, step, t, eng=eng):
            if step < 1500:
                eng.add_message(rank, (rank + 1) % 4, 0, 8192, t, step=step,
                                on_arrival=lambda mid, t2: send((rank + 1) % 4, step + 1, t2))

        for r in range(4):
            send(r, 0, 0)
        peak = 0
        for tx in eng.run():
            w = eng.messages
            peak = max(peak, len(w) - (w.first_id if isinstance(w, MessageWindow) else 0))
            assert (w[tx["msg"]]["msg_id"] == tx["msg"]).all()        # every row named is there
            parts.append(low(tx, w))
        held.append((len(eng.messages), peak, eng._table.buf.size))
        packets.append(np.concatenate(parts))
    assert packets[0].size == 1500 * 4 * 5 and packets[0].tobytes() == packets[1].tobytes()
    assert held[0][:2] == (12000, 12000)
    assert held[1][0] == 12000 and held[1][1] <= 3 * 1024 and held[1][2] <= 4 * 1024
    w = eng.messages
    with pytest.raises(IndexError, match="message id 0: .*dropped"):
        w[0]
    with pytest.raises(IndexError, match="message id 12000"):
        w[np.array([12000])]
    with pytest.raises(TypeError, match="integer array of ids"):
        w[np.ones(3, bool)]
