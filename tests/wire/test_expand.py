"""tokenpcap.wire.expand: every row of a message's packets (and their ACKs) against
:func:`tokenpcap.wire.rdma.segment` (IBTA vol.1 9.5 segmentation, written per message), the PSN
and MSN rules of 9.7.1/9.7.5.1.1 and the extended headers of 9.3; the stable grouping against
numpy's stable argsort."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.records import PACKET_DTYPE, VERB_SEND, VERB_WRITE, VERB_WRITE_IMM
from tokenpcap.schedule.engine.port import TX_DTYPE
from tokenpcap.wire import rdma
from tokenpcap.wire.expand import MessageValues, expand_rows, group_positions

DATA, ACK = 0, 2            # kinds as the caller names them (ack_kind=ACK)
PMTU = 1024

message = st.tuples(st.integers(0, 5 * PMTU + 3),                        # size
                    st.sampled_from([VERB_WRITE, VERB_WRITE_IMM, VERB_SEND]),
                    st.integers(0, (1 << 24) + 100),                      # psn0 (wraps)
                    st.integers(0, (1 << 24) - 1),                        # qp_seq
                    st.integers(0, 2))                                    # line code


@settings(max_examples=60, deadline=None)
@given(msgs=st.lists(message, min_size=1, max_size=5), ack_every=st.integers(0, 3),
       seed=st.integers(0, 2**32 - 1), time_add=st.integers(0, 10**12))
def test_rows_follow_the_segmentation_and_the_header_rules(msgs, ack_every, seed, time_add):
    rng = np.random.default_rng(seed)
    mv = MessageValues(qpn_src=[1000 + i for i in range(len(msgs))],
                       qpn_dst=[2000 + i for i in range(len(msgs))],
                       sport=[0xC000 + i for i in range(len(msgs))],
                       psn0=[m[2] for m in msgs],
                       n_packets=[rdma.packets_per_message(m[0], PMTU) for m in msgs],
                       size_bytes=[m[0] for m in msgs], verb=[m[1] for m in msgs],
                       va=[(0x7F00 << 32) + i * (1 << 20) for i in range(len(msgs))],
                       rkey=[0xABC0 + i for i in range(len(msgs))],
                       imm=[0x11110000 + i for i in range(len(msgs))],
                       qp_seq=[m[3] for m in msgs], line=[m[4] for m in msgs])
    rows = []               # (message, index, kind): every packet and an ACK for some
    for k, (size, *_rest) in enumerate(msgs):
        for i in range(int(mv.n_packets[k])):
            rows.append((k, i, DATA))
            if rng.random() < 0.3:
                rows.append((k, i, ACK))
    order = rng.permutation(len(rows))
    tx = np.zeros(len(rows), TX_DTYPE)
    inv = np.array([rows[j][0] for j in order], np.int64)
    tx["index"] = [rows[j][1] for j in order]
    tx["kind"] = [rows[j][2] for j in order]
    tx["time_ns"] = rng.integers(0, 10**9, len(rows))
    tx["nic"], tx["peer_nic"] = rng.integers(0, 50, len(rows)), rng.integers(0, 50, len(rows))
    tx["msg"] = inv + 7
    tx["frame_bytes"] = rng.integers(60, 5000, len(rows))
    flags = rng.integers(0, 2, len(rows)).astype(np.uint8)
    group = rng.integers(-1, 3, len(rows))
    pos, starts = group_positions(group, 3)
    out = expand_rows(tx, inv, mv, PMTU, ack_every, ACK, flags, 0, time_add, pos)
    assert out.dtype == PACKET_DTYPE
    # into a buffer holding an earlier chunk's bytes (a reused shared buffer): every byte
    # written, the same rows
    used = rng.integers(0, 256, out.nbytes, dtype=np.uint8).view(PACKET_DTYPE)
    pay = np.full(len(rows), -1, np.int64)
    again = expand_rows(tx, inv, mv, PMTU, ack_every, ACK, flags, 0, time_add, pos, out=used,
                        pay_out=pay)
    assert again is used and used.tobytes() == out.tobytes()
    assert (pay == out["payload_bytes"][pos]).all()     # in tx's order, beside the rows
    for r in range(len(rows)):
        o, k, i = out[pos[r]], int(inv[r]), int(tx["index"][r])
        size, verb, psn0, qp_seq, line = msgs[k]
        seg = rdma.segment(size, PMTU, verb)
        n = len(seg.opcode)
        for f in ("nic", "peer_nic", "msg", "frame_bytes"):
            assert o[f] == tx[f][r]
        assert o["time_ns"] == tx["time_ns"][r] + time_add
        assert o["ce"] == flags[r]
        assert o["psn"] == (psn0 + i) % (1 << 24) and o["ip_id"] == o["psn"] & 0xFFFF
        assert o["udp_sport"] == 0xC000 + k and o["solicited"] == 0 and o["becn"] == 0
        if tx["kind"][r] == ACK:
            assert o["opcode"] == rdma.ACKNOWLEDGE
            assert (o["src_qp"], o["dest_qp"]) == (2000 + k, 1000 + k)
            assert o["payload_bytes"] == 0 and o["pad"] == 0 and o["ack_req"] == 0
            assert o["aeth"] == (0x1F << 24) | ((qp_seq + (i == n - 1)) % (1 << 24))
            assert o["line_protocol"] == 0 and o["line_flag"] == 0
        else:
            assert o["opcode"] == seg.opcode[i]
            assert (o["src_qp"], o["dest_qp"]) == (1000 + k, 2000 + k)
            assert o["payload_bytes"] == seg.payload_bytes[i] and o["pad"] == seg.pad[i]
            assert o["payload_offset"] == i * PMTU
            assert o["ack_req"] == (i == n - 1 or (ack_every > 0 and (i + 1) % ack_every == 0))
            assert o["aeth"] == 0
            assert o["line_protocol"] == line
            assert o["line_flag"] == ((qp_seq + 1) % (1 << 32) if line else 0)
        reth = bool(rdma.HAS_RETH[o["opcode"]])
        assert (o["reth_va"], o["reth_rkey"], o["reth_len"]) == (
            ((0x7F00 << 32) + k * (1 << 20), 0xABC0 + k, size) if reth else (0, 0, 0))
        assert o["imm"] == (0x11110000 + k if rdma.HAS_IMMDT[o["opcode"]] else 0)


@settings(max_examples=100, deadline=None)
@given(group=st.lists(st.integers(-1, 4), max_size=200))
def test_group_positions_is_a_stable_sort_by_group_with_none_last(group):
    g = np.array(group, np.int64)
    pos, starts = group_positions(g, 5)
    key = np.where(g < 0, 5, g)
    want = np.empty(g.size, np.int64)
    want[np.argsort(key, kind="stable")] = np.arange(g.size)
    assert pos.tolist() == want.tolist()
    assert starts.tolist() == [0] + np.cumsum(np.bincount(key, minlength=6)).tolist()
