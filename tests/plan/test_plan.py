"""The plan: collectives per layer/microbatch as Megatron-LM makes them, sizes from published
numbers, ZeRO and bubble ratios from the papers, and calls() agreeing with the per-phase table."""
from __future__ import annotations

import dataclasses
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import HAND_SET_CHANNELS, simple_on
from tokenpcap.plan.calls import CollectiveCall
from tokenpcap.errors import InfeasiblePlanError, InputError
from tokenpcap.collectives.layout import RankLayout
from tokenpcap.plan.build import build_plan
from tokenpcap.config.profiles import (
    ModelProfile,
    load_cluster,
    load_model,
    load_scenario,
)
from tokenpcap.tokens import tokenize
from tokenpcap.collectives.traffic import hops, per_rank_bytes, total_traffic_bytes
from tokenpcap.collectives.transfers import smallest_message_elements

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "profiles"
SCENARIOS = sorted((PROFILES / "scenarios").glob("*.yaml"))


def dante():  # type: ignore[no-untyped-def]
    """Dante on Simple and its hand-set channels: the data volumes below are the closed forms'."""
    return load_scenario(PROFILES / "scenarios" / "dante.yaml", simple_on("dante"))


def vary(s, **kw):  # type: ignore[no-untyped-def]
    par = {k: kw.pop(k) for k in list(kw) if k in ("dp", "tp", "pp", "ep", "sequence_parallel",
                                                   "zero_stage")}
    tr = {k: kw.pop(k) for k in list(kw) if k in ("micro_batch_size", "global_batch_size",
                                                  "precision", "grad_reduce_dtype", "recompute",
                                                  "overlap_grad_reduce", "bucket_size",
                                                  "overlap_param_gather")}
    s = dataclasses.replace(s, parallelism=dataclasses.replace(s.parallelism, **par),
                            training=dataclasses.replace(s.training, **tr), **kw)
    return s


def rows(plan) -> dict:  # type: ignore[no-untyped-def]
    return {r.name: r for r in plan.rows}


def test_dante_plan_shape():
    plan = build_plan(dante())
    j = plan.to_json()
    names = {r["name"] for r in j["phases"]}
    assert {"tp/forward/AllGather", "tp/forward/ReduceScatter", "tp/backward/AllGather",
            "pp/forward/SendRecv", "pp/backward/SendRecv", "dp/backward/AllReduce",
            "emb/backward/AllReduce"} <= names
    r = rows(plan)
    # TP stays inside a node, DP and PP cross nodes (the default scenario's purpose).
    assert r["tp/forward/AllGather"].nic_bytes == 0 and r["tp/forward/AllGather"].nvlink_bytes > 0
    assert r["pp/forward/SendRecv"].nic_bytes > 0 and r["dp/backward/AllReduce"].nic_bytes > 0
    assert 0.3e9 <= j["totals"]["nic_bytes"] <= 1.5e9
    assert j["totals"]["nic_bytes"] == sum(p["nic_bytes"] for p in j["phases"])
    for p in j["phases"]:
        for key in ("name", "collective", "group_size", "message_bytes", "count",
                    "nic_bytes_per_rank", "nvlink_bytes_per_rank"):
            assert key in p


def per_layer_counts(plan):  # type: ignore[no-untyped-def]
    c = Counter()
    for call in plan.calls():
        if call.dim == "tp" and call.layer >= 0 and call.group[0] == 0:
            c[(call.phase, call.collective, call.recompute)] += 1
    return c


def test_tp_collectives_per_layer_and_microbatch():
    # Shoeybi et al. 2019 Sec. 3 / Narayanan et al. 2021 Sec. 2.3: 2 AllReduce forward, 2 backward
    # per layer; Korthikanti et al. 2022 Sec. 4.2.2: AG+RS twice each way with SP, plus the
    # backward re-AllGather of Megatron-LM; full recomputation replays the forward ones.
    s = vary(dante(), sequence_parallel=False)
    plan = build_plan(s)
    layers_on_rank0, m = 6, plan.microbatches
    n = layers_on_rank0 * m
    assert per_layer_counts(plan) == {("forward", "AllReduce", False): 2 * n,
                                          ("backward", "AllReduce", False): 2 * n}
    plan = build_plan(vary(s, sequence_parallel=True))
    assert per_layer_counts(plan) == {
        ("forward", "AllGather", False): 2 * n, ("forward", "ReduceScatter", False): 2 * n,
        ("backward", "ReduceScatter", False): 2 * n, ("backward", "AllGather", False): 4 * n}
    plan = build_plan(vary(s, recompute="full"))
    assert per_layer_counts(plan) == {("forward", "AllReduce", False): 2 * n,
                                          ("forward", "AllReduce", True): 2 * n,
                                          ("backward", "AllReduce", False): 2 * n}
    plan = build_plan(vary(s, recompute="selective"))
    assert per_layer_counts(plan)[("forward", "AllReduce", True)] == 0


def narayanan_13b() -> ModelProfile:
    # Narayanan et al. 2021 Table 1: 13B = h 5120, 40 heads, 40 layers.
    return ModelProfile(name="gpt-13b", source="Narayanan et al. 2021 Table 1", layers=40,
                        hidden_size=5120, attention_heads=40, kv_heads=40,
                        ffn_hidden_size=20480, vocab_size=51200, seq_length=2048)


def test_published_message_sizes():
    # TP AllReduce of a 13B GPT (h 5120, s 2048, b 1, fp16): b*s*h*2 = 20,971,520 bytes
    # (Megatron's [s, b, h] activation, Shoeybi et al. 2019).
    s = vary(dante(), model=narayanan_13b(), precision="fp16", dp=4, tp=4, pp=2,
             sequence_parallel=False, tokenizer=dataclasses.replace(dante().tokenizer,
                                                                    kind="utf8"))
    assert rows(build_plan(s))["tp/forward/AllReduce"].message_bytes == 20_971_520
    # PP message of GPT-3 (h 12288, s 2048, b 1, bf16) 50,331,648; 6,291,456 with SP at t 8.
    g = load_scenario(PROFILES / "scenarios" / "gpt3-175b-megatron.yaml")
    g = vary(g, precision="bf16", global_batch_size=16, recompute="none")
    r = rows(build_plan(g))
    assert r["pp/forward/SendRecv"].message_bytes == 50_331_648
    assert r["pp/backward/SendRecv"].message_bytes == 50_331_648
    r = rows(build_plan(vary(g, sequence_parallel=True)))
    assert r["pp/forward/SendRecv"].message_bytes == 6_291_456


def test_gpt3_tied_embedding_allreduce_uses_the_padded_vocabulary():
    """Megatron-LM pads V = 50,257 to 51,200 at tp 8 (vocab_size_with_padding, multiple
    128 x 8): the tied-embedding AllReduce between first and last stage carries the stage's
    6,400-row shard of fp32 gradients, 6,400 x 12,288 x 4 bytes; the plan reports both counts."""
    g = load_scenario(PROFILES / "scenarios" / "gpt3-175b-megatron.yaml")
    plan = build_plan(vary(g, global_batch_size=16, recompute="none"))
    emb = rows(plan)["emb/backward/AllReduce"]
    assert emb.sizes == {6_400 * 12_288 * 4: 8 * 16}
    j = plan.to_json()["parameters"]
    assert (j["vocab_size"], j["padded_vocab_size"]) == (50_257, 51_200)
    assert j["total_padded"] - j["total"] == (51_200 - 50_257) * 12_288


def dp_traffic(plan) -> int:  # type: ignore[no-untyped-def]
    """Gradient and parameter bytes over DP (the loss AllReduce, 8 bytes, left out)."""
    return sum(r.nic_bytes + r.nvlink_bytes for r in plan.rows
               if r.dim == "dp" and r.name != "dp/optimizer/AllReduce")


def test_zero_bytes_ratios():
    # Rajbhandari et al. 2020 (ZeRO) Sec. 7: ZeRO-1/2 move the same volume as DP (2 Psi),
    # ZeRO-3 1.5x (3 Psi). One microbatch, gradients reduced in the parameter dtype.
    base = vary(dante(), dp=32, tp=1, pp=1, sequence_parallel=False, global_batch_size=32,
                grad_reduce_dtype="bf16")
    dp0 = dp_traffic(build_plan(base))
    assert dp0 > 0
    for zero in (1, 2):
        assert dp_traffic(build_plan(vary(base, zero_stage=zero))) == dp0
    assert Fraction(dp_traffic(build_plan(vary(base, zero_stage=3))), dp0) == Fraction(3, 2)


def test_embedding_group_only_with_pipeline_and_tied():
    assert "emb/backward/AllReduce" in rows(build_plan(dante()))
    assert "emb/backward/AllReduce" not in rows(build_plan(vary(dante(), dp=8, pp=1)))
    call = next(c for c in build_plan(dante()).calls() if c.dim == "emb")
    lay = RankLayout(dp=4, tp=4, pp=2, gpus_per_node=8, nics_per_node=8)
    assert call.group in lay.groups("emb")
    # The word-embedding gradient shard: padded V / tp rows of h in grad_reduce_dtype; Megatron
    # pads 50,257 to a multiple of 128 x 4: 50,688 (vocab_size_with_padding).
    assert call.message_bytes == 50_688 // 4 * 768 * 2


def _pxn_copy_bytes(call, plan) -> int:
    """NVLink bytes of NCCL's PXN copies (NCCL_P2P_PXN_LEVEL 2, one NIC per GPU): a SendRecv or
    AllToAll hop between nodes goes first to the sender node's GPU with the receiver's local
    index, unless that is the sender itself (search.cc ncclTopoGetNetDev)."""
    if call.collective not in ("SendRecv", "AllToAll"):
        return 0
    g = plan.layout.gpus_per_node
    assert plan.layout.nics_per_node == g
    h = hops(call, plan.algorithm, plan.layout)
    copy = (h["src"] // g != h["dst"] // g) & (h["src"] % g != h["dst"] % g)
    return int(h["bytes"][copy].sum())


def test_calls_agree_with_the_table_to_the_byte():
    """Summing per_rank_bytes over every call of calls() gives each row's NIC/NVLink totals
    (NVLink: plus the PXN copies of the p2p hops between nodes)."""
    for path in (PROFILES / "scenarios" / "dante.yaml",
                 PROFILES / "scenarios" / "gpt2-all-cross.yaml",
                 PROFILES / "scenarios" / "mixtral-8x7b-ep.yaml"):
        name = path.stem if path.stem in HAND_SET_CHANNELS else None
        plan = build_plan(load_scenario(path, simple_on(name)))     # per_rank_bytes: the data
        nic, nvl, n = Counter(), Counter(), Counter()
        ids = []
        for c in plan.calls():
            rb = per_rank_bytes(c, plan.algorithm, plan.layout)
            nic[c.label] += int(rb.nic_bytes.sum())
            nvl[c.label] += int(rb.nvlink_bytes.sum()) + _pxn_copy_bytes(c, plan)
            n[c.label] += 1
            ids.append(c.call_id)
        assert ids == list(range(plan.calls_per_iteration))
        for r in plan.rows:
            assert (nic[r.name], nvl[r.name], n[r.name]) == (r.nic_bytes, r.nvlink_bytes, r.calls)
        assert sum(nic.values()) == plan.totals()["nic_bytes"]


def test_calls_of_some_ranks_and_later_iterations():
    plan = build_plan(dante())
    full = list(plan.calls(iteration=1))
    mine = list(plan.calls(iteration=1, ranks=[5]))
    assert mine == [c for c in full if 5 in c.group]
    assert full[0].call_id == plan.calls_per_iteration
    with pytest.raises(InputError):
        list(plan.calls(ranks=[32]))


def test_tokens_of_an_iteration_are_covered_exactly_once():
    # Megatron's sampler: iteration it holds samples [it*G, (it+1)*G); each DP replica's
    # microbatches are disjoint. TP calls of the TP group of (stage 0, replica d) carry them.
    s = dante()
    plan = build_plan(s)
    seq, g = s.model.seq_length, s.training.global_batch_size
    spans = set()
    for c in plan.calls(iteration=2):
        if c.dim == "tp" and c.op == "attn_in" and c.layer == 0:
            spans.add((c.token_start, c.token_end))
            assert (c.seq_start, c.seq_end) == (0, seq)
    starts = sorted(spans)
    assert starts[0][0] == 2 * g * seq and starts[-1][1] == 3 * g * seq
    assert all(a[1] == b[0] for a, b in zip(starts, starts[1:])) and len(starts) == g
    # With SP each TP rank sends its s/tp positions of the microbatch to the next stage.
    pp_calls = [c for c in plan.calls() if c.dim == "pp" and c.microbatch == 0
                and plan.layout.coords(c.src).dp == 0 and c.phase == "forward"]
    assert sorted((c.seq_start, c.seq_end) for c in pp_calls) == \
        [(0, 256), (256, 512), (512, 768), (768, 1024)]
    assert pp_calls[0].token_spans(seq) == [(pp_calls[0].token_start + pp_calls[0].seq_start,
                                             pp_calls[0].token_start + pp_calls[0].seq_end)]


def test_expert_alltoall():
    s = load_scenario(PROFILES / "scenarios" / "mixtral-8x7b-ep.yaml")
    plan = build_plan(s)
    a2a = [c for c in plan.calls() if c.dim == "ep" and c.layer == 0 and c.group[0] == 0]
    ops = Counter((c.phase, c.op, c.recompute) for c in a2a)
    m = plan.microbatches
    want = {(ph, op, rc): m for ph, op, rc in [
        ("forward", "dispatch", False), ("forward", "combine", False),
        ("forward", "dispatch_probs", False), ("forward", "moe_counts", False),
        ("forward", "dispatch", True), ("forward", "combine", True),
        ("forward", "dispatch_probs", True), ("forward", "moe_counts", True),
        ("backward", "combine_grad", False), ("backward", "dispatch_grad", False),
        ("backward", "dispatch_probs_grad", False)]}
    assert ops == want
    # tokens routed per rank (s / tp with SP) * top_k * h * 2 bytes.
    dispatch = next(c for c in a2a if c.op == "dispatch")
    assert dispatch.message_bytes == (32768 // 2) * 2 * 4096 * 2


def test_sp_embedding_allreduces_with_learned_positions():
    """Megatron-core LanguageModelEmbedding: reduce_scatter_embeddings only without position
    embeddings (and with SP); else the vocabulary-parallel output is AllReduced, then scattered
    (scatter_to_sequence_parallel_region: a local split, its backward an AllGather)."""
    d = build_plan(dante())                     # GPT-2: learned positions, SP at tp 4
    emb = [c for c in d.calls() if c.op == "embedding" and 0 in c.group]
    assert {c.collective for c in emb} == {"AllReduce"}
    assert emb[0].message_bytes == 1024 * 768 * 2
    assert {c.collective for c in d.calls() if c.op == "embedding_grad"} == {"AllGather"}
    rope = vary(dante(), model=dataclasses.replace(dante().model, position_embedding="rope"))
    assert {c.collective for c in build_plan(rope).calls() if c.op == "embedding"} == \
        {"ReduceScatter"}


def test_pcap_estimate_of_one_write_matches_the_segmentation_case():
    # tests/cases C5: 10000 B at PMTU 4096 -> WRITE FIRST 4170, MIDDLE 4154, LAST 1866 (IPv4
    # frames, no FCS); one coalesced ACK of 62 bytes; classic pcap headers 24 + 16 per record.
    s = load_scenario(PROFILES / "scenarios" / "gpt2-all-cross.yaml", simple_on("gpt2-all-cross"))
    s = dataclasses.replace(s, generation=dataclasses.replace(s.generation, clear_to_send=False))
    from tokenpcap.plan.sizing import pcap_estimate

    est = pcap_estimate(np.array([10000]), np.array([1]), s)
    assert (est["data_packets"], est["ack_packets"], est["messages"]) == (3, 1, 1)
    assert est["payload_bytes"] + est["header_bytes"] == 4170 + 4154 + 1866 + 62
    assert est["file_bytes"] == 24 + 4 * 16 + 4170 + 4154 + 1866 + 62


def test_epoch_totals(corpus_path: Path):
    s = vary(dante(), tokenizer=dataclasses.replace(dante().tokenizer, kind="utf8"))
    toks = tokenize(corpus_path, s.tokenizer, s.model.seq_length)
    plan = build_plan(s, toks)
    ep, tot = plan.epoch(), plan.totals()
    # 543,857 tokens = 531 whole sequences of 1024 = 33 global batches of 16, 3 sequences
    # (and 113 tokens) dropped: Megatron drops the incomplete last batch
    assert (ep["sequences"], ep["iterations"], ep["dropped_sequences"]) == (531, 33, 3)
    assert ep["dropped_tokens"] == 543_857 - 33 * 16 * 1024 and ep["fills_batch"]
    assert ep["iterations_exact"] == 543_857 / (16 * 1024)
    assert ep["nic_bytes"] == tot["nic_bytes"] * 33
    assert ep["pcap_bytes"] == plan.pcap["file_bytes"] * 33
    assert plan.to_json()["tokens"]["tokens"] == 543_857
    with pytest.raises(InfeasiblePlanError, match="seq_length"):
        build_plan(s, tokenize(corpus_path, s.tokenizer, 100))


def test_infeasible_in_memory_scenario():
    with pytest.raises(InfeasiblePlanError, match="dp\\*tp\\*pp"):
        build_plan(vary(dante(), dp=3))


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_scenario_plans(path: Path):
    plan = build_plan(load_scenario(path))
    j = plan.to_json()
    assert j["totals"]["nic_bytes"] > 0 and j["pcap"]["file_bytes"] > j["totals"]["nic_bytes"]
    for r in plan.rows:
        assert r.nic_bytes + r.nvlink_bytes > 0 or r.name.startswith("tp/")


def auto_parallel(model: ModelProfile, gpus: int, gpn: int) -> tuple[int, int, int]:
    tp = max(t for t in ((1,) if model.mla else (1, 2, 4, 8))   # MLA plans at tp 1
             if t <= gpn and model.attention_heads % t == 0
             and (model.kv_heads % t == 0 or t % model.kv_heads == 0))
    pp = max(p for p in (1, 2, 4, 8) if model.layers % p == 0 and gpus % (tp * p) == 0)
    return gpus // (tp * pp), tp, pp


@pytest.mark.parametrize("mpath", sorted((PROFILES / "models").glob("*.yaml")), ids=lambda p: p.stem)
@pytest.mark.parametrize("cpath", sorted((PROFILES / "clusters").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_model_on_every_cluster_plans(mpath: Path, cpath: Path):
    m, c = load_model(mpath), load_cluster(cpath)
    dp, tp, pp = auto_parallel(m, c.nodes * c.gpus_per_node, c.gpus_per_node)
    s = vary(dante(), model=m, cluster=c, dp=dp, tp=tp, pp=pp, sequence_parallel=tp > 1,
             global_batch_size=dp * 2, precision="bf16", path=None,
             tokenizer=dataclasses.replace(dante().tokenizer, kind="utf8"))
    plan = build_plan(s)
    assert plan.totals()["nic_bytes"] > 0
    call = next(plan.calls())
    assert isinstance(call, CollectiveCall) and call.call_id == 0
    assert total_traffic_bytes(call.collective, plan.algorithm, call.message_bytes, call.group,
                               plan.layout) > 0


# ------------------------------------------------------------------ the scaled plan


@pytest.mark.parametrize("scale", [1, 16, 1000, 10 ** 9])
def test_scaled_plan_sizes_are_whole_elements_of_s_over_k(scale):
    """build_plan(scale=K): every call carries floor(S/K) rounded down to whole elements, at
    least one element per piece (its algorithm's pieces times the channels), at most S; the rows
    sum per_rank_bytes over exactly those calls (fails before: no scale)."""
    s = dante()
    base, plan = build_plan(s), build_plan(s, scale=scale)
    assert plan.scale == scale and plan.to_json()["scale"] == scale
    nic = Counter()
    for c0, c in zip(base.calls(), plan.calls(), strict=True):
        e, elems = c0.elem_bytes, c0.message_bytes // c0.elem_bytes
        floor = smallest_message_elements(c0.collective, c0.group, plan.algorithm, plan.layout,
                                          s.collectives.channels)
        want = c0.message_bytes if scale == 1 else max(min(elems, floor), elems // scale) * e
        assert (c.call_id, c.message_bytes) == (c0.call_id, want)
        nic[c.label] += int(per_rank_bytes(c, plan.algorithm, plan.layout).nic_bytes.sum())
    assert {r.name: r.nic_bytes for r in plan.rows} == dict(nic)
    assert plan.totals()["nic_bytes"] == sum(nic.values())
    # the DP AllReduce buckets of Dante (bf16 gradients): 40,000,000-byte buckets -> S/K
    dp = rows(plan)["dp/backward/AllReduce"]
    if scale < 10 ** 9:
        assert rows(base)["dp/backward/AllReduce"].message_bytes // scale // 2 * 2 == dp.message_bytes
    else:   # the floor: hierarchical over the 4 DP ranks (4 sub-chunks) x 2 channels, bf16
        assert dp.message_bytes == 4 * 2 * 2
    if scale > 1:
        assert plan.pcap["payload_bytes"] < base.pcap["payload_bytes"]


def test_deepseek_v3_at_scale_1e8_keeps_every_peer_of_its_expert_alltoall():
    """DeepSeek-V3 (arXiv 2412.19437: 4K sequences, hidden 7,168, top-8 routing, EP 64 over 8
    nodes of 8 H800 with 8 NICs: NCCL's 16 channels) at --scale 100000000: each dispatch of
    4,096 x 8 x 7,168 bf16 values (469,762,048 bytes; its probs 65,536) would be 4 bytes (2
    elements for 64 peers); the floor keeps 64 peers x 16 channels = 1,024 elements, so every
    rank still sends 32 bytes to each of its 63 peers, as unscaled, and the plan's NIC bytes are
    what those transfers carry: 3 AllToAlls (dispatch, probs, combine) x 58 MoE layers x 120
    microbatches x 2 EP groups a stage, each 64 ranks x 56 peers on other nodes x 32 bytes.
    The dispatch is set to bf16 here (``moe.dispatch_dtype``; the profile's is FP8) so that
    the three AllToAlls share one element size and one floor, and Megatron-core's AllToAll
    dispatcher is used (``moe.token_dispatcher: alltoall``; the profile's is DeepEP's)."""
    from tokenpcap.collectives.traffic import CallShape, hops
    from tokenpcap.collectives.transfers import transfers

    s = load_scenario(PROFILES / "scenarios" / "deepseek-v3-2048.yaml", simple_on())
    s = dataclasses.replace(s, model=dataclasses.replace(
        s.model, moe=dataclasses.replace(s.model.moe, dispatch_dtype="bf16",
                                         token_dispatcher="alltoall")))
    assert s.collectives.channels == 16
    plan = build_plan(s, scale=10 ** 8)
    lay, ch = plan.layout, s.collectives.channels
    for label in ("ep/forward/AllToAll", "ep/backward/AllToAll"):
        row = rows(plan)[label]
        assert row.sizes == {1024 * 2: 3 * 58 * 120 * 2}
        assert row.nic_bytes == 3 * 58 * 120 * 2 * 64 * 56 * 32 == 4_789_370_880
        for f in (f for f in plan.families if f.label == label):
            for g in f.groups:
                for size in (469_762_048, 65_536, f.message_bytes):     # unscaled, scaled
                    h = hops(CallShape("AllToAll", g, size, 2), plan.algorithm, lay)
                    sent = h[h["bytes"] > 0]
                    assert len(set(zip(sent["src"].tolist(), sent["dst"].tolist()))) == 64 * 63
                assert (h["bytes"] == 32).all()                # 16 channels of one element each
        # one group's transfers: every peer on every channel, its NICs' bytes as the plan counts
        f = next(f for f in plan.families if f.label == label)
        t = transfers(CallShape("AllToAll", f.groups[0], f.message_bytes, 2), plan.algorithm,
                      lay, ch, s.collectives.slice_bytes).table
        assert len(set(zip(t["src"].tolist(), t["dst"].tolist(), t["channel"].tolist()))) \
            == 64 * 63 * ch == len(t)
        nic = t[t["nic"]]
        assert int(nic["bytes"].sum()) == 64 * 56 * 32
        # a node's NICs carry one EP group's AllToAlls (2 groups of 8 nodes a stage), so the
        # plan's bytes on that group's NICs are its transfers times its calls: 3 x 4 MoE layers
        # x 120 microbatches on stage 1
        calls = sum(len(x.insts) for x in plan.families
                    if x.label == label and f.groups[0] in x.groups)
        assert f.stage == 1 and calls == 3 * 4 * 120
        per_nic = np.bincount(nic["src_nic"], weights=nic["bytes"],
                              minlength=lay.nodes * lay.nics_per_node).astype(np.int64)
        mine = np.unique(nic["src_nic"])
        assert mine.size == 8 * 8
        assert (row.nic_bytes_by_nic(lay)[mine] == per_nic[mine] * calls).all()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_scaled_plan_rejects_a_bad_scale(bad):
    from tokenpcap.errors import InputError

    with pytest.raises(InputError, match="scale: got"):
        build_plan(dante(), scale=bad)


def test_rows_keep_their_nic_bytes_per_rank():
    plan = build_plan(dante(), scale=8)
    per = np.zeros(plan.layout.world_size, np.int64)
    for r in plan.rows:
        assert r.nic_bytes_by_rank.shape == (plan.layout.world_size,)
        assert int(r.nic_bytes_by_rank.sum()) == r.nic_bytes
        assert int(r.nic_bytes_by_rank.max()) == r.nic_bytes_per_rank
        per += r.nic_bytes_by_rank
    assert (per == plan.nic_bytes_per_rank).all()


@pytest.mark.parametrize("name, gen", [
    ("dante", {}),                                                   # clear-to-send, one ACK each
    ("dante", {"clear_to_send": False, "ack_every_packets": 3}),
    ("gpt2-all-cross", {}),
    ("gpt2-all-cross", {"clear_to_send": True, "ack_every_packets": 2}),
])
def test_pcap_estimate_equals_the_messages_generate_posts(name: str, gen: dict):
    """The plan's estimate counts every packet generate posts, the clear-to-send writes, their ACKs
    and the ImmDt of WRITE with immediate included (without them Dante would be 326,528 packets
    / 1,354,409,240 B instead of the written classic pcap's 329,856 / 1,354,801,944). Independent
    source: generate's per-message prediction from the schedule's transfers (the counts it
    writes, tested against the files)."""
    from tokenpcap.generate.size import predict_messages, record_bytes
    from tokenpcap.schedule.runner import Schedule

    s = load_scenario(PROFILES / "scenarios" / f"{name}.yaml")
    s = dataclasses.replace(s, generation=dataclasses.replace(s.generation, **gen))
    for scale in (64, 100_000):     # odd sizes: channel parts of whole elements, pad; empty parts
        plan = build_plan(s, scale=scale)
        pred = predict_messages(Schedule(plan, iterations=1, keep_nvlink=False))
        npk, nb, nak, ab = record_bytes(pred, "pcap", 262144, s.cluster.transport == "infiniband",
                                        None)
        pc = plan.pcap
        assert pc["data_packets"] + pc["cts_packets"] + pc["ack_packets"] == int(npk.sum() + nak.sum())
        assert pc["file_bytes"] == 24 + int(nb.sum() + ab.sum())
        assert pc["cts_packets"] == (pc["messages"] if s.generation.clear_to_send else 0)


def test_pcap_estimate_of_dante_is_the_written_capture():
    # The classic pcap `generate dante.yaml --format pcap --split none` writes (measured).
    pc = build_plan(load_scenario(PROFILES / "scenarios" / "dante.yaml")).pcap
    assert pc["data_packets"] + pc["cts_packets"] + pc["ack_packets"] == 337_088
    assert pc["file_bytes"] == 1_363_383_448


def test_deepseek_v3_2048_bytes_per_phase_are_the_closed_forms():
    """DeepSeek-V3 on 2,048 H800 (report arXiv 2412.19437 Sec. 3.2: PP 16, EP 64 over 8 nodes,
    ZeRO-1 DP 128, no TP; 61 layers split 3 | 4 x 14 | 2; 120 microbatches of one 4K sequence).
    NIC bytes of one iteration against closed forms: PP b*s*h*2 per microbatch, boundary and DP
    replica each way; DeepEP's node-limited dispatch (Sec. 2.1.2, 3.2.2) sends each of a
    rank's 4,096 tokens once to each of its 4 nodes, 7/8 of them remote, on the 58 MoE layers
    only (tests/plan/test_moe_nodelimited.py: per layer and microbatch); the ring
    ReduceScatter of 128 ranks on 16 nodes crosses 16 node boundaries per step, (n-1) steps of
    S/n; the expert-data-parallel pairs (ranks 8 nodes apart) send half their buffer each.
    The tokens go to the experts (dispatch, combine gradient) in FP8 with one fp32 scale per
    128 values (Sec. 3.3.3): 7,168 + 56 x 4 bytes per token and node; they come back
    (combine, dispatch gradient) in bf16, with their 8 fp32 routing weights."""
    s = load_scenario(PROFILES / "scenarios" / "deepseek-v3-2048.yaml", simple_on())
    plan = build_plan(s)
    r = rows(plan)
    mb, act = 120, 4096 * 7168 * 2
    assert plan.microbatches == mb
    assert r["pp/forward/SendRecv"].nic_bytes == r["pp/backward/SendRecv"].nic_bytes == \
        15 * 128 * mb * act
    remote = 4096 * 4 * 7 // 8                       # token rows to other nodes
    tokens = remote * 7168 * 2                       # b*s*h*B: combine, dispatch_grad
    fp8 = remote * (7168 + 7168 // 128 * 4)          # dispatch, combine_grad
    probs = remote * 8 * 4
    a2a = 58 * mb * 128 * (fp8 + tokens + probs)     # MoE layers x mb x ranks of a stage
    assert r["ep/forward/AllToAll"].nic_bytes == r["ep/backward/AllToAll"].nic_bytes == a2a
    assert a2a == 277_911_227_596_800
    layers = {c.layer for c in plan.calls() if c.dim == "ep"}
    assert layers == set(range(3, 61))
    dense = [926_679_040 + 3 * 583_483_392] + [4 * 232_996_864] * 14 + [1_392_679_936]
    expert = [0] + [4 * 4 * 44_040_192] * 14 + [2 * 4 * 44_040_192]
    rs = 16 * 127 * sum(4 * n for n in dense) // 128 + 64 * sum(4 * n for n in expert)
    assert r["dp/backward/ReduceScatter"].nic_bytes == rs == 3_702_604_812_800
    assert r["dp/optimizer/AllGather"].nic_bytes == rs // 2          # bf16 parameters
    assert "tp/forward/AllReduce" not in r and "emb/backward/AllReduce" not in r
