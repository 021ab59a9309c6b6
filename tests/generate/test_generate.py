"""Stages 6-7 streamed to files: the captures of whole iterations, read back and checked.

Independent sources: the plan (stage 3's byte accounting) for payload per phase and NIC; the
IBTA RoCEv2 layout decoded here with numpy from the spec (RDMA payload = UDP length - 8 - BTH 12 -
extended headers - pad - ICRC 4, C7); IEEE 802.3 layer-1 time ceil((len + 24)·8/rate) (C12) for
link-rate spacing; the address rule of docs/profiles.md (`network.ipv4_base`: 198.18.node.nic+1)
for which NIC sent a frame; TShark for decoding every frame; byte comparison of files for
determinism.
"""
from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import needs_tshark, simple_on
from tests.schedule.test_schedule import tiny_scenario
from tokenpcap.errors import InputError, OutputError
from tokenpcap.generate.run import (EPOCH_NS, GenerateOptions, Selection, generate, parse_index_set,
                                parse_iterations, parse_time_ns, parse_window)
from tokenpcap.pcap.reader import open_capture
from tokenpcap.config.profiles import load_scenario

ROOT = Path(__file__).resolve().parents[2]
DANTE = ROOT / "profiles" / "scenarios" / "dante.yaml"

# IBTA vol.1 Table 38: extended header bytes after the BTH of the RC opcodes we send
EXT = np.full(256, -1, np.int64)
EXT[[0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x11]] = [16, 0, 0, 4, 16, 20, 4]


def decode(path: Path) -> dict:
    """Per packet (numpy): time, frame length, source IPv4, RDMA payload, comment, opcode."""
    with open_capture(path) as cap:
        rec = cap.read()
        d = cap.data
        o = rec["offset"].astype(np.int64)
        assert (d[o + 12] == 0x08).all() and (d[o + 13] == 0x00).all()          # IPv4
        assert ((d[o + 36].astype(int) << 8 | d[o + 37]) == 4791).all()         # RoCEv2
        udp_len = d[o + 38].astype(np.int64) << 8 | d[o + 39]
        opcode = d[o + 42].astype(np.int64)
        pad = (d[o + 43] >> 4) & 3
        assert (EXT[opcode] >= 0).all()
        payload = udp_len - 8 - 12 - EXT[opcode] - pad - 4
        comments = [cap.comments[c] if c >= 0 else "" for c in rec["comment"].tolist()]
        return dict(time=rec["time_ns"], length=rec["orig_len"].astype(np.int64),
                    caplen=rec["caplen"].astype(np.int64), node=d[o + 28].astype(np.int64),
                    nic=d[o + 29].astype(np.int64) - 1, payload=payload, opcode=opcode,
                    comment=comments, interface=rec["interface"])


def l1_ns(length: np.ndarray, gbps: int) -> np.ndarray:
    return -(-((length + 4 + 8 + 12) * 8) // gbps)


def check_payload_against_plan(res, files: dict[Path, dict], nics_per_node: int) -> dict:
    """Data payload per phase label and per sending NIC equals the plan's NIC bytes."""
    phase, nic = defaultdict(int), defaultdict(int)
    control = defaultdict(int)
    for info in files.values():
        for c, p, node, n in zip(info["comment"], info["payload"].tolist(),
                                 info["node"].tolist(), info["nic"].tolist()):
            head = c.split(" ", 1)[0]
            if head in ("cts", "ack"):
                control[head + "_packets"] += 1
                control[head + "_payload"] += p
                continue
            phase[head] += p
            nic[node * nics_per_node + n] += p
    plan = res.plan
    assert dict(phase) == {r.name: r.nic_bytes for r in plan.rows if r.nic_bytes}
    want = plan.nic_bytes_per_nic()
    assert [nic.get(i, 0) for i in range(len(want))] == want.tolist()
    return dict(control)


# ------------------------------------------------------------------ the default run


@pytest.fixture(scope="module")
def dante(tmp_path_factory):
    out = tmp_path_factory.mktemp("dante")
    res = generate(load_scenario(DANTE), GenerateOptions(out_dir=out, fmt="pcapng", split="nic",
                                                         jobs=2))
    files = {p: decode(p) for p, _, _ in res.files}
    yield res, files
    shutil.rmtree(out, ignore_errors=True)


def test_dante_payload_per_phase_and_nic_equals_the_plan(dante):
    res, files = dante
    assert len(files) == 32
    control = check_payload_against_plan(res, files, 8)
    # control traffic, stated separately: one 64-byte clear-to-send per data message, one ACK
    # per message (data and CTS)
    data_msgs = sum(1 for info in files.values() for c, op in zip(info["comment"], info["opcode"])
                    if op in (0x09, 0x0B))                       # ... with immediate: message ends
    assert control["cts_packets"] == data_msgs
    assert control["cts_payload"] == 64 * data_msgs
    assert control["ack_packets"] == 2 * data_msgs and control["ack_payload"] == 0
    assert (res.cts_packets, res.cts_payload, res.ack_packets) == (data_msgs, 64 * data_msgs,
                                                                   2 * data_msgs)


def test_dante_files_match_their_predicted_size(dante):
    res, _ = dante
    assert res.file_bytes == res.expected_bytes
    assert sum(p.stat().st_size for p, _, _ in res.files) == res.expected_bytes
    assert not [p for p in res.files[0][0].parent.iterdir() if p.name.endswith(".part")]


def test_dante_nics_never_exceed_link_rate_and_time_never_goes_back(dante):
    _, files = dante
    for path, info in files.items():
        t, length = info["time"], info["length"]
        gaps = np.diff(t)
        assert (gaps >= 0).all(), path
        # consecutive frames spaced by at least the layer-1 time of the earlier one (C12) =>
        # over any window the NIC sends at most its link rate
        assert (gaps >= l1_ns(length[:-1], 400)).all(), path
        assert (info["node"] * 8 + info["nic"] == int(path.stem.split("_node")[1][:2]) * 8
                + int(path.stem[-1])).all()


def test_dante_comments_name_phases_and_pcapng_interfaces(dante):
    res, files = dante
    info = files[res.files[0][0]]
    heads = {c.split(" ")[0] for c in info["comment"]}
    assert heads <= {"pp/forward/SendRecv", "pp/backward/SendRecv", "dp/backward/AllReduce",
                     "emb/backward/AllReduce", "dp/optimizer/AllReduce",
                     "mp/optimizer/AllReduce", "cts", "ack"}
    pp = [c for c in info["comment"] if c.startswith("pp/forward/SendRecv")]
    assert pp and all(" tokens " in c for c in pp)
    assert (info["time"] >= EPOCH_NS).all() and (info["interface"] == 0).all()


# ------------------------------------------------------------------ DP, TP and PP across nodes


@pytest.fixture(scope="module")
def cross(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cross")
    path = tiny_scenario(tmp, "cross", dp=2, tp=2, pp=2, gbs=8, extra=", overlap_grad_reduce: true, bucket_size: 200000")
    return path, tmp


def test_cross_node_scenario_payload_equals_the_plan_split_by_phase(cross):
    path, tmp = cross
    out = tmp / "phase"
    out.mkdir()
    res = generate(load_scenario(path), GenerateOptions(out_dir=out, fmt="pcapng", split="phase"))
    files = {p: decode(p) for p, _, _ in res.files}
    assert {r.name for r in res.plan.rows} >= {"tp/forward/AllReduce", "pp/forward/SendRecv",
                                               "dp/backward/AllReduce"}
    check_payload_against_plan(res, files, 1)
    for p, info in files.items():
        label = p.stem.split("_", 1)[1].replace("-", "/")
        assert all(c.split(" ")[0] == label or c.split(" ")[1] == label for c in info["comment"])


#: A small DeepSeek-V3-like model: multi-latent attention, 2 dense layers then 3 MoE layers
#: (4 routed experts, top 2, one shared expert), untied embeddings.
TINY_DEEPSEEK = """  name: tiny-deepseek
  source: "a small DeepSeek-V3-like decoder for tests"
  layers: 5
  hidden_size: 256
  attention_heads: 4
  ffn_hidden_size: 512
  vocab_size: 512
  seq_length: 128
  mlp: swiglu
  norm: rmsnorm
  tied_embeddings: false
  position_embedding: rope
  bias: false
  multi_latent_attention: {q_lora_rank: 64, kv_lora_rank: 32, qk_head_dim: 32,
                           qk_pos_emb_head_dim: 16, v_head_dim: 32}
  moe: {experts: 4, top_k: 2, ffn_hidden_size: 128, shared_expert_intermediate_size: 128,
        layer_freq: [0, 0, 1, 1, 1]}
"""


def test_dense_and_moe_layers_on_uneven_stages_payload_equals_the_plan(tmp_path):
    """DeepSeek-like layers (2 dense, 3 MoE) split 2 | 3 over pp 2 (Megatron's
    --decoder-first-pipeline-num-layers 2), dp 4, ep 2, ZeRO-1, on 8 single-GPU nodes: every
    packet's payload adds up to the plan per phase and per NIC; EP calls only on the MoE
    layers (stage 1), and each stage's DP buffers hold its own shard's gradients."""
    path = tmp_path / "ds.yaml"
    path.write_text(
        f"name: ds\ncorpus: {ROOT / 'samples' / 'divina_commedia.txt'}\ntokenizer: utf8\n"
        f"model:\n{TINY_DEEPSEEK}cluster: {ROOT / 'profiles' / 'clusters' / 'h100-rocev2-8x1.yaml'}\n"
        "parallelism: {dp: 4, tp: 1, pp: 2, ep: 2, zero_stage: 1, "
        "decoder_first_pipeline_num_layers: 2}\n"
        "training: {micro_batch_size: 1, global_batch_size: 8, precision: bf16, "
        "grad_reduce_dtype: fp32}\ncollectives: {algorithm: ring, channels: 2}\n")
    s = load_scenario(path)
    res = generate(s, GenerateOptions(out_dir=tmp_path, fmt="pcapng", jobs=1))
    files = {p: decode(p) for p, _, _ in res.files}
    plan = res.plan
    assert {r.name for r in plan.rows} >= {"ep/forward/AllToAll", "ep/backward/AllToAll",
                                           "pp/forward/SendRecv", "dp/backward/ReduceScatter",
                                           "dp/optimizer/AllGather"}
    check_payload_against_plan(res, files, 1)
    calls = list(plan.calls())
    ep = [c for c in calls if c.dim == "ep"]
    assert {c.layer for c in ep} == {2, 3, 4} and {c.stage for c in ep} == {1}
    # dispatch: b*s*top_k*h*B = 128 * 2 * 256 * 2 bytes per MoE layer and microbatch
    assert {c.message_bytes for c in ep if c.op == "dispatch"} == {128 * 2 * 256 * 2}
    assert len([c for c in ep if c.op == "dispatch"]) == 3 * 2 * 2     # layers x mb x groups
    from tokenpcap.model import scenario_shards
    first, second = scenario_shards(s)
    assert (first.first_layer, first.last_layer, second.first_layer) == (0, 1, 2)
    grads = {}
    for c in calls:
        if c.op.endswith("grad_bucket") and plan.layout.rank(c.stage, 0, 0) in c.group:
            grads[(c.stage, c.op)] = grads.get((c.stage, c.op), 0) + c.message_bytes // 4
    assert set(grads) == {(0, "dense_grad_bucket"), (1, "dense_grad_bucket"),
                          (1, "expert_grad_bucket")}
    for (st, op), n in grads.items():       # padded to a multiple of lcm(dp, 128) (ZeRO-1)
        want = (first, second)[st].dense if op.startswith("dense") else second.expert
        assert want <= n < want + 64 * 100 + 128


def test_ring_allreduce_one_rank_per_node_puts_2_n_minus_1_over_n_s_on_each_nic(tmp_path):
    # dp 8 on 8 single-GPU nodes, one bucket holding every gradient: S = 2 bytes x parameters
    path = tiny_scenario(tmp_path, "ring8", dp=8, tp=1, pp=1, gbs=8)
    # Simple: the textbook counts data (LL's lines would add their flags to the loss AllReduce)
    res = generate(load_scenario(path, simple_on()), GenerateOptions(out_dir=tmp_path, fmt="pcap",
                                                                     jobs=1))
    rows = {r.name: r for r in res.plan.rows if r.nic_bytes}
    # the gradients, and the loss AllReduce (two fp32) after the step
    assert sorted(rows) == ["dp/backward/AllReduce", "dp/optimizer/AllReduce"]
    s = rows["dp/backward/AllReduce"].message_bytes
    assert rows["dp/backward/AllReduce"].sizes == {s: 1} and s % 16 == 0   # one call; 8 chunks
    loss = rows["dp/optimizer/AllReduce"].nic_bytes_by_rank
    for p, _, _ in res.files:
        info = decode(p)
        rank = int(p.stem.split("_node")[1][:2])               # one GPU and NIC per node
        # data messages are WRITEs ending with immediate (FIRST, MIDDLE, LAST/ONLY with
        # immediate); clear-to-send writes are WRITE ONLY (0x0A) and ACKs 0x11
        data = np.isin(info["opcode"], [0x06, 0x07, 0x09, 0x0B])
        assert int(info["payload"][data].sum()) == 2 * (8 - 1) * s // 8 + int(loss[rank])


def test_same_seed_same_bytes_other_seed_other_bytes_any_jobs(cross):
    path, tmp = cross
    s = load_scenario(path)
    runs = []
    for name, seed, jobs in (("a", 7, 1), ("b", 7, 2), ("c", 8, 1)):
        out = tmp / f"seed-{name}"
        out.mkdir()
        runs.append(generate(s, GenerateOptions(out_dir=out, fmt="pcapng", seed=seed, jobs=jobs)))
    a, b, c = ([p.read_bytes() for p, _, _ in r.files] for r in runs)
    assert a == b
    assert len(a) == len(c) and all(len(x) == len(y) for x, y in zip(a, c))
    assert all(x != y for x, y in zip(a, c))           # PSNs, QPNs, keys, payload differ


def test_selections_are_slices_of_the_full_trace(cross):
    path, tmp = cross
    s = load_scenario(path)
    full_dir, sel_dir, win_dir = tmp / "full", tmp / "sel", tmp / "win"
    for d in (full_dir, sel_dir, win_dir):
        d.mkdir()
    full = generate(s, GenerateOptions(out_dir=full_dir, fmt="pcapng"))
    one = generate(s, GenerateOptions(out_dir=sel_dir, fmt="pcapng", selection=Selection(nics=frozenset({3}))))
    assert len(one.files) == 1
    twin = [p for p, _, _ in full.files if p.name == one.files[0][0].name][0]
    # the same blocks after the section header; the SHB's provenance line says nics=3 / all
    a, b = one.files[0][0].read_bytes(), twin.read_bytes()
    la, lb = int.from_bytes(a[4:8], "little"), int.from_bytes(b[4:8], "little")
    assert a[la:] == b[lb:]
    assert b" nics=3 " in a[:la] and b" nics=all " in b[:lb]
    info = decode(twin)
    t0, t1 = int(info["time"][10]) - EPOCH_NS, int(info["time"][-10]) - EPOCH_NS
    win = generate(s, GenerateOptions(out_dir=win_dir, fmt="pcap", split="none",
                                      selection=Selection(phases=("pp", "tp/backward"),
                                                          window_ns=(t0, t1))))
    w = decode(win.files[0][0])
    assert len(w["time"]) and ((w["time"] >= t0 + EPOCH_NS) & (w["time"] < t1 + EPOCH_NS)).all()
    assert set(win.phase_payload) <= {"pp/forward/SendRecv", "pp/backward/SendRecv",
                                      "tp/backward/AllReduce"}
    assert win.file_bytes <= win.expected_bytes        # a time window only shrinks the file


def test_rank_selection_and_snaplen(cross):
    path, tmp = cross
    out = tmp / "rank"
    out.mkdir()
    res = generate(load_scenario(path), GenerateOptions(
        out_dir=out, fmt="pcap", snaplen=64, selection=Selection(ranks=frozenset({5}))))
    assert [p.name for p, _, _ in res.files] == ["cross_node05_nic0.pcap"]
    assert res.file_bytes == res.expected_bytes
    with open_capture(res.files[0][0]) as cap:
        rec = cap.read()
    assert (rec["caplen"] == np.minimum(rec["orig_len"], 64)).all() and rec["orig_len"].max() > 64


@needs_tshark
def test_tshark_decodes_every_frame_of_the_scaled_default_run(tmp_path):
    """TShark on the default scenario at --scale 16 in one file (the structure of the full run,
    every kind of frame, 1/16 of the bytes: the full 1.4 GB run takes TShark minutes on two
    cores)."""
    res = generate(load_scenario(DANTE), GenerateOptions(out_dir=tmp_path, fmt="pcapng", scale=16,
                                                         split="none", jobs=2))
    for path, packets, _ in res.files:
        out = subprocess.run(
            ["tshark", "-n", "-r", str(path), "--disable-heuristic", "rpcrdma_infiniband",
             "-T", "fields", "-E", "separator=|", "-e", "frame.protocols", "-e", "_ws.malformed",
             "-e", "_ws.expert.severity", "-e", "infiniband.bth.opcode"],
            capture_output=True, text=True, check=True).stdout.splitlines()
        assert len(out) == packets
        for line in out:
            protos, malformed, severity, opcode = line.split("|")
            assert protos == "eth:ethertype:ip:udp:infiniband" + (":data" if opcode not in ("17",) else ""), line
            assert not malformed, line
            # the only expert item is the packet comment (severity "Comment", 0x00100000)
            assert all(int(x, 0) < 0x00400000 for x in severity.split(",") if x), line


@needs_tshark
def test_infiniband_erf_decodes(tmp_path):
    path = tiny_scenario(tmp_path, "ib", dp=4, tp=4, pp=2, gbs=8, cluster="a100-hdr-ib")
    res = generate(load_scenario(path), GenerateOptions(out_dir=tmp_path, fmt="erf", split="none",
                                                        scale=8))
    f = res.files[0][0]
    assert res.file_bytes == res.expected_bytes == f.stat().st_size
    out = subprocess.run(["tshark", "-n", "-r", str(f), "-T", "fields", "-E", "separator=|", "-e",
                          "frame.protocols", "-e", "_ws.malformed"], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert len(out) == res.packets
    assert all(line.startswith("erf:infiniband") and line.endswith("|") for line in out), out[:3]


# ------------------------------------------------------------------ options and errors


def test_refuses_to_outgrow_the_free_disk_without_force(cross, monkeypatch):
    path, tmp = cross
    out = tmp / "small"
    out.mkdir()

    class Usage:
        free = 1000

    monkeypatch.setattr(shutil, "disk_usage", lambda _: Usage())
    with pytest.raises(OutputError, match="free space got 1,000 bytes"):
        generate(load_scenario(path), GenerateOptions(out_dir=out))
    assert not list(out.iterdir())
    res = generate(load_scenario(path), GenerateOptions(out_dir=out, force=True,
                                                        selection=Selection(nics=frozenset({0}))))
    assert res.packets > 0


def test_nics_and_ranks_that_keep_nothing_are_refused(cross):
    """--nics 0 --ranks 7: NIC 0 sends nothing for rank 7 (another node's GPU), so the
    selection keeps no packet: refused like an unmatched --phases (InputError, exit 1), no
    empty capture written with exit 0."""
    path, tmp = cross
    s = load_scenario(path)
    out = tmp / "nothing"
    out.mkdir()
    with pytest.raises(InputError, match=r"^the selection: keeps no packet"):
        generate(s, GenerateOptions(out_dir=out, selection=Selection(nics=frozenset({0}),
                                                                     ranks=frozenset({7}))))
    assert not list(out.iterdir())


def test_bad_options(cross):
    path, tmp = cross
    s = load_scenario(path)
    with pytest.raises(InputError, match="erf"):
        generate(s, GenerateOptions(out_dir=tmp, fmt="erf"))
    with pytest.raises(InputError, match=r"^--phases ep: keeps no packet, expected a selection "
                                         r"that meets the NIC traffic \(phases on the NICs: "
                                         r"dp/backward/AllReduce, "):    # names what is there
        generate(s, GenerateOptions(out_dir=tmp, selection=Selection(phases=("ep",))))
    with pytest.raises(OutputError, match="no such directory"):
        generate(s, GenerateOptions(out_dir=tmp / "missing"))
    with pytest.raises(InputError, match="--nics"):
        parse_index_set("0-9", "--nics", 8)
    with pytest.raises(InputError):
        parse_window("5ms:1ms")
    assert parse_index_set("0-2,5", "--ranks", 8) == {0, 1, 2, 5}
    assert parse_time_ns("2.5us", "t") == 2500 and parse_time_ns("3ms", "t") == 3_000_000
    assert parse_window(":1ms") == (0, 1_000_000)
    assert parse_iterations("3") == (3, None) and parse_iterations("1:3") == (3, range(1, 3))


def test_a_failing_writer_process_leaves_nothing_and_does_not_hang(cross):
    """A worker that fails mid-run: OutputError in the parent, no file left, the process exits."""
    import sys

    path, tmp = cross
    out = tmp / "failing"
    out.mkdir()
    script = f"""
import sys
from pathlib import Path
from tokenpcap.generate import output as generate_output
from tokenpcap.errors import OutputError
from tokenpcap.generate.run import GenerateOptions, generate
from tokenpcap.config.profiles import load_scenario

def boom(self):
    raise OutputError("disk on fire")
generate_output.Sink.flush = boom
try:
    generate(load_scenario({str(path)!r}), GenerateOptions(out_dir=Path({str(out)!r}), jobs=2))
except OutputError as err:
    print("raised:", err)
    sys.exit(0)
sys.exit(3)
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "writer process failed: disk on fire" in r.stdout
    assert not list(out.iterdir())


# ------------------------------------------------------------------ time windows


def test_a_time_window_is_an_upper_bound_and_is_not_refused_for_the_full_size(cross, monkeypatch):
    """The size before simulating is the full selection's (a bound, announced as such); a small
    window is not refused because the full trace would not fit (before: refused)."""
    path, tmp = cross
    out = tmp / "window"
    out.mkdir()
    seen = {}

    class Usage:
        free = 2_000_000

    monkeypatch.setattr(shutil, "disk_usage", lambda _: Usage())
    res = generate(load_scenario(path), GenerateOptions(
        out_dir=out, fmt="pcap", split="none", selection=Selection(window_ns=(0, 20_000))),
        announce=seen.update)
    assert seen["upper_bound"] is True and seen["bytes"] > Usage.free
    assert 24 < res.file_bytes <= Usage.free < res.expected_bytes
    assert res.files[0][0].stat().st_size == res.file_bytes


def test_running_out_of_space_inside_a_window_fails_cleanly(cross, monkeypatch):
    """No up-front refusal with a window, so a full disk shows up while writing: OutputError
    naming the bound and the free space, and no .part or capture file is left."""
    import errno

    from tokenpcap.pcap import output

    path, tmp = cross
    out = tmp / "nospace"
    out.mkdir()

    def enospc(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(output.os, "write", enospc)
    monkeypatch.setattr(output, "writev_all", enospc, raising=False)
    with pytest.raises(OutputError, match=r"No space left on device \(the time window's capture, "
                                          r"at most [\d,]+ bytes, outgrew the [\d,]+ bytes free"):
        generate(load_scenario(path), GenerateOptions(out_dir=out, fmt="pcap", jobs=1,
                                                      selection=Selection(window_ns=(0, 10**9))))
    assert not list(out.iterdir())


def test_several_iterations_same_bytes_as_keeping_every_message_and_call(cross, monkeypatch):
    """generate records no history, holds only the messages in progress and predicts its size one
    iteration at a time: the files of a 3-iteration run are byte for byte those of the same run
    keeping the timeline, NVLink copies and every message, and their size is the one stated
    before writing, with and without a selection."""
    import tokenpcap.pipeline as pipeline_mod
    from tokenpcap.schedule.runner import Schedule

    path, tmp = cross
    s = load_scenario(path)
    sel = Selection(iterations=range(1, 3), ranks=frozenset({1, 5}), phases=("dp", "pp/forward"))
    lean = {}
    for name, selection in (("all", Selection()), ("sel", sel)):
        out = tmp / f"lean-{name}"
        out.mkdir()
        lean[name] = generate(s, GenerateOptions(out_dir=out, iterations=3, jobs=1,
                                                 selection=selection))
        assert lean[name].file_bytes == lean[name].expected_bytes
        assert sum(p.stat().st_size for p, _, _ in lean[name].files) == lean[name].expected_bytes
    assert 0 < lean["sel"].file_bytes < lean["all"].file_bytes
    monkeypatch.setattr(pipeline_mod, "Schedule",
                        lambda *a, **k: Schedule(*a, **{**k, "keep_history": True, "keep_messages": True}))
    out = tmp / "keep-all"
    out.mkdir()
    full = generate(s, GenerateOptions(out_dir=out, iterations=3, jobs=1))
    assert isinstance(full.schedule.messages, np.ndarray) and full.schedule.n_calls
    assert [p.name for p, _, _ in full.files] == [p.name for p, _, _ in lean["all"].files]
    assert not lean["all"].schedule.keep_messages
    assert all(a.read_bytes() == b.read_bytes()
               for (a, _, _), (b, _, _) in zip(full.files, lean["all"].files))
    assert full.expected_bytes == lean["all"].expected_bytes


def test_the_shared_writer_budget_changes_no_byte_and_bounds_what_is_held(cross, monkeypatch):
    """All files of a writer process share generate_output.BUDGET_BYTES (the file holding most
    is written out first) and free their batch buffers between batches: with a 1 MiB budget
    (the cross scenario's files hold 2.4 MB together without it) the files are byte for byte
    those of the default, and what the sinks hold together never exceeds the budget by more
    than one batch."""
    from tokenpcap.generate import output as generate_output

    path, tmp = cross
    s = load_scenario(path, simple_on())   # Simple: batches of ~1 MB, the sizes above
    ref_dir = tmp / "budget-ref"
    ref_dir.mkdir()
    ref = generate(s, GenerateOptions(out_dir=ref_dir, jobs=1))
    held_max, batch_max = [0], [0]
    add = generate_output.Sink.add

    def watch(self, packets, labels, codes):  # type: ignore[no-untyped-def]
        batch_max[0] = max(batch_max[0], int(self._held_bytes(packets).sum()))
        add(self, packets, labels, codes)
        held_max[0] = max(held_max[0], sum(k.rows for k in self.pool))

    monkeypatch.setattr(generate_output, "BUDGET_BYTES", 1 << 20)
    monkeypatch.setattr(generate_output.Sink, "add", watch)
    out = tmp / "budget-small"
    out.mkdir()
    small = generate(s, GenerateOptions(out_dir=out, jobs=1))
    assert len(small.files) == len(ref.files) > 1
    assert all(a.read_bytes() == b.read_bytes() for (a, _, _), (b, _, _) in zip(ref.files, small.files))
    assert 0 < held_max[0] <= (1 << 20) + batch_max[0], (held_max, batch_max)


def test_a_time_window_that_keeps_nothing_is_refused_like_other_empty_selections(cross):
    """--time-window 10s:20s keeps no packet: refused like an unmatched --phases (exit 1, the
    selection keeps no packet), and no empty file is left."""
    path, tmp = cross
    out = tmp / "empty-window"
    out.mkdir()
    earlier = out / "cross.pcapng"       # a file of an earlier run under the name this run uses
    earlier.write_bytes(b"earlier run")
    with pytest.raises(InputError, match=r"^--time-window: got 10,000,000,000\.\.20,000,000,000 ns, "
                                          r"which keeps no packet; expected a window inside the "
                                          r"run, whose packets \(all NICs and phases\) span "
                                          r"[\d,]+\.\.[\d,]+ ns$"):
        generate(load_scenario(path), GenerateOptions(
            out_dir=out, split="none", selection=Selection(window_ns=(10 ** 10, 2 * 10 ** 10))))
    assert list(out.iterdir()) == [earlier] and earlier.read_bytes() == b"earlier run"


def test_context_parallel_payload_equals_the_plan_per_phase_and_nic(tmp_path):
    """Ring attention across single-GPU nodes (cp 2, tp 2 with sequence parallelism, pp 2, full
    recomputation): the RDMA payload of the written packets per phase and per NIC equals the
    plan's bytes, the CP K,V sends included."""
    path = tiny_scenario(tmp_path, "cp", dp=1, tp=2, pp=2, gbs=2,
                         par=", context_parallel_size: 2, sequence_parallel: true",
                         extra=", recompute: full")
    out = tmp_path / "out"
    out.mkdir()
    res = generate(load_scenario(path), GenerateOptions(out_dir=out, fmt="pcapng", split="nic"))
    files = {p: decode(p) for p, _, _ in res.files}
    check_payload_against_plan(res, files, 1)
    rows = {r.name: r for r in res.plan.rows}
    assert rows["cp/forward/SendRecv"].nic_bytes == rows["cp/backward/SendRecv"].nic_bytes > 0


def test_an_empty_window_names_the_span_of_the_kept_iterations_so_its_advice_is_followed(cross):
    """--iterations 1:2 with a window over iteration 0's time keeps no packet; the refusal names
    the span of iteration 1's packets (not the whole run's, which holds the window), and a window
    inside that span, as advised, is accepted."""
    import re
    path, tmp = cross
    out = tmp / "window-iterations"
    out.mkdir()
    with pytest.raises(InputError) as e:
        generate(load_scenario(path), GenerateOptions(
            out_dir=out, split="none", iterations=2,
            selection=Selection(iterations=range(1, 2), window_ns=(0, 1000))))
    m = re.search(r"iteration 1\) span ([\d,]+)\.\.([\d,]+) ns$", str(e.value))
    assert m, str(e.value)
    a, b = (int(x.replace(",", "")) for x in m.groups())
    assert a > 1000
    res = generate(load_scenario(path), GenerateOptions(
        out_dir=out, split="none", iterations=2,
        selection=Selection(iterations=range(1, 2), window_ns=(a, b + 1))))
    assert sum(f[1] for f in res.files) > 0
