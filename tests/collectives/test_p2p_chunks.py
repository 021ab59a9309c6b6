"""NCCL's network p2p chunks and channels, against the NCCL source written out apart.

The oracle ``_nccl_send`` below is NVIDIA/nccl 5067397c transcribed statement by statement:
``computeBuffSizes`` (src/init.cc l. 830-843), ``ncclTopoGetNchannels`` (src/graph/paths.cc
l. 920-957), ``ncclTopoComputeP2pChannels`` (l. 977-1004), ``scheduleP2pTasksToPlan``
(src/enqueue.cc l. 1141-1145), ``addP2pToPlan`` (l. 920-943, 1070-1085) and
``ncclP2pPartBounds`` (src/include/device.h). It does not import the module under test.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import example, given, settings, strategies as st

from tokenpcap.collectives.p2p_chunks import P2pNet, channels_per_net_peer, send_messages
from tokenpcap.collectives.traffic import CallShape
from tokenpcap.collectives.transfers import transfers
from tokenpcap.config.profiles import load_scenario
from tokenpcap.plan.build import rank_layout, scenario_p2p_net

PROFILES = Path(__file__).resolve().parents[2] / "profiles" / "scenarios"


def divUp(a, b):  # noqa: N802 - NCCL's name
    return (a + b - 1) // b


def pow2Up(x):  # noqa: N802
    y = 1
    while y < x:
        y *= 2
    return y


def _nccl_send(nbytes, nRanks, nChannels, netBwGBs, P2P_NET_CHUNKSIZE=1 << 17):  # noqa: N803
    """Message sizes per part of one Simple network send of ``nbytes`` (NCCL, as cited above)."""
    NCCL_STEPS, BUFFSIZE, MAXCHANNELS, PER_BATCH = 8, 1 << 22, 64, 8
    # computeBuffSizes, nNodes > 1
    p2pChunkSize = P2P_NET_CHUNKSIZE
    if p2pChunkSize * NCCL_STEPS > BUFFSIZE:
        p2pChunkSize = BUFFSIZE // NCCL_STEPS
    # ncclTopoGetNchannels, remote rank (netCount 1: one NIC per GPU)
    netCount = 1
    nNetChannels = max(netCount, divUp(int(netBwGBs), 14))
    p2pnChannelsPerPeer = nNetChannels
    # ncclTopoComputeP2pChannels
    p2pnChannels = min(nChannels, MAXCHANNELS)
    p2pnChannelsPerPeer = pow2Up(p2pnChannelsPerPeer)
    p2pnChannels = pow2Up(p2pnChannels)
    while (p2pnChannelsPerPeer * divUp(nRanks, PER_BATCH) > p2pnChannels
           and p2pnChannelsPerPeer > 1):
        p2pnChannelsPerPeer //= 2
    # scheduleP2pTasksToPlan
    nChannelsMax = p2pnChannelsPerPeer
    nChannelsMin = nChannelsMax
    while nChannelsMin * nRanks > p2pnChannels and nChannelsMin > 1:
        nChannelsMin //= 2
    # addP2pToPlan
    stepSize = p2pChunkSize
    minPartSize = stepSize // 2
    maxPartSize = stepSize
    nCh = min(nChannelsMin, divUp(nbytes, minPartSize))
    partSize = max(minPartSize, divUp(nbytes, nCh))
    while partSize > maxPartSize and nCh <= nChannelsMax // 2:
        nCh *= 2
        partSize = divUp(nbytes, nCh)
    chunkSize = stepSize
    if nbytes < stepSize:
        chunkSize //= 4
    elif nbytes < 8 * stepSize:
        chunkSize //= 2
    parts = []
    for part in range(nCh):
        partBytes = divUp(divUp(nbytes, nCh), 4 << 10) * (4 << 10)     # ncclP2pPartBounds
        beg, end = min(part * partBytes, nbytes), min((part + 1) * partBytes, nbytes)
        msgs = []
        off = beg
        for _ in range(divUp(end - beg, chunkSize)):                   # nsteps
            msgs.append(min(chunkSize, end - off))
            off += chunkSize
        parts.append(msgs)
    return parts


@settings(max_examples=200, deadline=None)
@example(nbytes=131_073, n_ranks=2, channels=5, nic_gbps=800, chunk=1 << 15)   # an empty 8th part
@given(nbytes=st.integers(1, 1 << 26), n_ranks=st.integers(2, 128),
       channels=st.integers(1, 64), nic_gbps=st.sampled_from([100, 200, 400, 800]),
       chunk=st.sampled_from([1 << 15, 1 << 17, 1 << 19, 1 << 21]))
def test_send_messages_are_nccls(nbytes, n_ranks, channels, nic_gbps, chunk):
    p2p = P2pNet(chunk_bytes=min(chunk, 1 << 19), net_peer_channels=channels_per_net_peer(nic_gbps))
    part, off, size = send_messages(nbytes, n_ranks, channels, p2p, False)
    want = _nccl_send(nbytes, n_ranks, channels, nic_gbps / 8, chunk)
    got = [size[part == k].tolist() for k in range(len(want))]
    # a part past the end of the buffer (ncclP2pPartBounds' aligned parts) sends nothing
    assert got == want and part.max() == max(k for k, w in enumerate(want) if w)
    assert int(size.sum()) == nbytes
    # the parts tile the buffer in order
    assert off[0] == 0 and (np.diff(np.append(off, nbytes)) == size).all()


def test_channels_per_net_peer():
    """divUp(netBw GB/s, P2P_PER_CHANNEL_NET_BW 14): 400 Gb/s -> 50 GB/s -> 4; 200 -> 2."""
    assert [channels_per_net_peer(g) for g in (100, 200, 400, 800)] == [1, 2, 4, 8]


def _pair_messages(name, dim, nbytes):
    """The network messages of a SendRecv of ``nbytes`` between the first pair of ``dim`` of
    the scenario (stage 0 -> 1, or CP rank 0 -> 1), as the plan's transfers send it."""
    sc = load_scenario(PROFILES / f"{name}.yaml")
    lay = rank_layout(sc)
    src = lay.rank(0, 0, 0, 0)
    dst = lay.rank(1, 0, 0, 0) if dim == "pp" else lay.rank(0, 0, 0, 1)
    assert lay.node(src) != lay.node(dst)
    c = sc.collectives
    t = transfers(CallShape("SendRecv", (src, dst), nbytes, 2), c.algorithm, lay, c.channels,
                  c.slice_bytes, "Simple", scenario_p2p_net(sc), 8).table
    return t[t["nic"]], sc


def test_llama405b_pipeline_send_is_256_messages_of_128k():
    """Megatron's PP send: (s / tp) * b * h bf16 with sequence parallelism (schedules.py)."""
    m = load_scenario(PROFILES / "llama3.1-405b-2048.yaml")
    nbytes = m.model.seq_length // m.parallelism.tp * m.training.micro_batch_size \
        * m.model.hidden_size * 2
    assert nbytes == 33_554_432
    nic, sc = _pair_messages("llama3.1-405b-2048", "pp", nbytes)
    assert len(nic) == 256 and (nic["bytes"] == 131_072).all()
    want = _nccl_send(nbytes, 2, sc.collectives.channels, sc.cluster.link_gbps / 8)
    assert sorted(np.unique(nic["channel"]).tolist()) == list(range(len(want)))


def test_cp_kv_send_of_8mib_is_64_messages():
    """TE's CP KV block: 2 * b * (s / cp) * max(1, kv_heads / tp) * head_dim * 2 bytes."""
    m = load_scenario(PROFILES / "llama3-70b-64k-cp4.yaml")
    p, mo = m.parallelism, m.model
    nbytes = 2 * m.training.micro_batch_size * (mo.seq_length // p.cp) \
        * max(1, mo.kv_heads // p.tp) * (mo.hidden_size // mo.attention_heads) * 2
    assert nbytes == 8_388_608
    nic, _ = _pair_messages("llama3-70b-64k-cp4", "cp", nbytes)
    assert len(nic) == 64 and (nic["bytes"] == 131_072).all()


def test_an_ll_send_keeps_simple_s_parts_in_16_kib_chunks_of_lines():
    """NCCL's ``addP2pToPlan`` picks the parts first and the protocol after (LL when a part is at
    most ``NCCL_P2P_LL_THRESHOLD``); an LL step is ``buffSizes[LL] / NCCL_STEPS`` = 64 KiB of
    lines, halved for the network below 8 steps, half of it data: 16 KiB of data a chunk, 32 KiB
    on the wire (enqueue.cc). A 48 KiB send to a remote peer is one part (below half a Simple
    step, 64 KiB): three messages of 16 KiB of data; 200 KiB on 4 parts whose bounds are
    ``ncclP2pPartBounds``' 50 KiB aligned up to 4 KiB, 52 KiB (the last 44 KiB): 16, 16, 16 and
    4 KiB in each, 16, 16 and 12 KiB in the last."""
    from tokenpcap.collectives.protocols import wire_bytes

    p2p = P2pNet()
    simple = send_messages(48 << 10, 2, 16, p2p, False)
    part, off, nb = send_messages(48 << 10, 2, 16, p2p, False, "LL")
    assert sorted(set(part.tolist())) == sorted(set(simple[0].tolist()))     # the same parts
    assert nb.sum() == 48 << 10 and nb.max() == 16 << 10
    assert part.tolist() == [0, 0, 0] and nb.tolist() == [16 << 10] * 3
    assert wire_bytes("LL", nb).tolist() == [32 << 10] * 3
    part, off, nb = send_messages(200 << 10, 2, 16, p2p, False, "LL")
    simple = send_messages(200 << 10, 2, 16, p2p, False)
    assert sorted(set(part.tolist())) == sorted(set(simple[0].tolist()))
    per_part = [nb[part == k].tolist() for k in sorted(set(part.tolist()))]
    k = 1 << 10
    assert per_part == [[16 * k, 16 * k, 16 * k, 4 * k]] * 3 + [[16 * k, 16 * k, 12 * k]]


def test_ll_pipeline_sends_take_the_pxn_path_in_ll_chunks(tmp_path):
    """A pipeline send of 16 KiB on Dante (two stages on other nodes) goes as LL: its messages
    leave by the PXN route and carry 16 KiB of data in 32 KiB of lines at most."""
    sc = load_scenario(PROFILES / "dante.yaml")
    lay = rank_layout(sc)
    src, dst = 0, lay.world_size // 2
    t = transfers(CallShape("SendRecv", (src, dst), 16 << 10, 2), "ring", lay, 16, 1 << 20, "LL",
                  scenario_p2p_net(sc)).table
    net = t[t["nic"]]
    assert net.size and (net["bytes"] <= 32 << 10).all() and (net["bytes"] % 16 == 0).all()
    assert (net["src_nic"] % lay.nics_per_node == net["dst_nic"] % lay.nics_per_node).all()
