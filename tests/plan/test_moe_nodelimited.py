"""DeepEP's node-limited dispatch (plan/moe_nodelimited.py): DeepSeek-V3's expert traffic by
hand, the forwarding probability against an enumeration, the rails and NICs of the calls,
and the keys' checks."""
from __future__ import annotations

import dataclasses
import itertools
from fractions import Fraction
from math import comb

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.config.profiles import load_scenario
from tokenpcap.config.types import TOKEN_DISPATCHERS
from tokenpcap.plan.build import build_plan
from tokenpcap.plan.moe import TOKEN_DISPATCHER_FAMILIES
from tokenpcap.plan.moe_nodelimited import forward_probability, forwarded_rows
from tests.conftest import simple_on
from tests.plan.test_plan import PROFILES, vary

DEEPSEEK = PROFILES / "scenarios" / "deepseek-v3-2048.yaml"


@pytest.fixture(scope="module")
def deepseek_plan():
    """deepseek-v3-2048 with 128 sequences instead of 15,360 (one microbatch per DP replica,
    the same calls per layer) under NCCL's Simple protocol (the payload on the wire)."""
    return build_plan(vary(load_scenario(DEEPSEEK, simple_on()), global_batch_size=128))


def test_deepseek_v3_ep_bytes_per_rank_are_the_hand_count(deepseek_plan):
    """By hand from profiles/models/deepseek-v3.yaml and the scenario (arXiv 2412.19437):
    T = 1 x 4,096 tokens per rank, N = 8 nodes in the EP group (ep 64 / 8 GPUs), M' = 4 nodes
    per token (topk_group 4), FP8 row 7,168 + 7,168/128 x 4 = 7,392 B, bf16 row 14,336 B.

    IB (once per node): T x M' x (N-1)/N x row = 4,096 x 4 x 7/8 x 7,392 = 105,971,712 B.
    NVLink (to the experts' GPUs): 32 experts per node, 4 per GPU, 8/4 = 2 of a token's experts
    on each chosen node; another GPU of the node hosts one of them with probability
    1 - C(28, 2)/C(32, 2) = 1 - 378/496 = 59/248; a GPU holds T x M' = 16,384 tokens for its
    node, so it forwards round(16,384 x 59/248) = round(3,897.8) = 3,898 rows to each of the 7
    others: 7 x 3,898 x 7,392 = 201,698,112 B. The combine: the same rows in bf16, 205,520,896
    B over IB and 391,172,096 B over NVLink; the routing weights 8 x 4 B a row."""
    assert 4096 * 4 * 7 * 7392 // 8 == 105_971_712
    assert Fraction(comb(28, 2), comb(32, 2)) == Fraction(378, 496)
    assert 16384 * Fraction(59, 248) == Fraction(966656, 248)       # 3,897.8
    hand = {"dispatch": (105_971_712, 7 * 3898 * 7392),
            "combine": (4096 * 4 * 7 * 14336 // 8, 7 * 3898 * 14336),
            "dispatch_probs": (4096 * 4 * 7 * 32 // 8, 7 * 3898 * 32)}
    hand["combine_grad"], hand["dispatch_grad"] = hand["dispatch"], hand["combine"]
    hand["dispatch_probs_grad"] = hand["dispatch_probs"]
    assert hand["dispatch"] == (105_971_712, 201_698_112)
    assert hand["combine"] == (205_520_896, 391_172_096)
    got = deepseek_plan.to_json()["moe_dispatch"]
    assert {op: (b["nic_bytes_per_rank"], b["nvlink_bytes_per_rank"]) for op, b in got.items()} \
        == hand


def test_deepseek_v3_ep_phase_bytes_are_the_per_layer_hand_count_times_the_calls(deepseek_plan):
    """The plan's EP AllToAll rows over one iteration: every rank of the 15 MoE stages sends
    the per-layer hand count once per MoE layer and microbatch (4 layers on stages 1-14, 2 on
    the last; one microbatch here); the NIC bytes are the IB calls' only."""
    plan = deepseek_plan
    ib_fwd = 105_971_712 + 205_520_896 + 4096 * 4 * 7 * 32 // 8
    nvl_fwd = 7 * 3898 * (7392 + 14336 + 32)
    rows = {r.name: r for r in plan.rows}
    layer_rank_calls = 128 * (14 * 4 + 2)
    for label in ("ep/forward/AllToAll", "ep/backward/AllToAll"):
        assert rows[label].nic_bytes == layer_rank_calls * ib_fwd
        assert rows[label].nvlink_bytes == layer_rank_calls * nvl_fwd
        assert rows[label].nic_bytes_per_rank == 4 * ib_fwd


def test_deepseek_v3_ib_calls_stay_on_their_rail_and_nvlink_calls_off_the_nics(deepseek_plan):
    """Sec. 3.2.2: IB to "the GPU with the same in-node index"; NCCL's PXN sends a same-index
    peer from the sender's own NIC, with no NVLink copy: every network message of an IB call
    goes from NIC i to NIC i of another node, and the forwarding calls never reach a NIC."""
    plan = deepseek_plan
    seen = set()
    for c in plan.calls():
        if c.dim != "ep" or c.collective != "AllToAll" or c.op in seen:
            continue
        seen.add(c.op)
        t = plan.call_transfers(c).table
        lay = plan.layout
        if c.op.endswith("_ib"):
            assert len({r % 8 for r in c.group}) == 1 and len({r // 8 for r in c.group}) == 8
            nic = t[t["nic"]]
            assert len(nic) and (t["via"] == -1).all() and t["nic"].all()
            assert (nic["src_nic"] % lay.nics_per_node == nic["dst_nic"] % lay.nics_per_node).all()
            assert (nic["src_nic"] == nic["src"]).all()          # one NIC per GPU, its own
        else:
            assert c.op.endswith("_nvl") and len({r // 8 for r in c.group}) == 1
            assert not t["nic"].any()
    assert len(seen) == 12


def _forward_probability_by_enumeration(x_node: int, x_gpu: int, top_k: int, m: int) -> Fraction:
    """Every way to place each node's ``c`` experts among its ``X`` (GPU ``g`` holds experts
    ``g*x .. g*x+x-1``): the share of (placement, GPU) pairs where the GPU holds one of them,
    averaged over the ``m`` nodes of the even split."""
    gpus = x_node // x_gpu
    total = Fraction(0)
    for i in range(m):
        c = top_k // m + (1 if i < top_k % m else 0)
        hit = n = 0
        for chosen in itertools.combinations(range(x_node), c):
            held = {e // x_gpu for e in chosen}
            hit += len(held)
            n += gpus
        total += Fraction(hit, n)
    return total / m


@settings(max_examples=40, deadline=None)
@given(x_gpu=st.integers(1, 4), gpus=st.integers(1, 5), m=st.integers(1, 4), data=st.data())
def test_forward_probability_is_the_enumerated_share(x_gpu, gpus, m, data):
    x_node = x_gpu * gpus
    top_k = data.draw(st.integers(m, min(m * x_node, 9)))
    assert forward_probability(x_node, x_gpu, top_k, m) == \
        _forward_probability_by_enumeration(x_node, x_gpu, top_k, m)


def test_forwarded_rows_round_half_up():
    assert forwarded_rows(4096, 4, Fraction(59, 248)) == 3898
    assert forwarded_rows(1, 1, Fraction(1, 2)) == 1
    assert forwarded_rows(3, 1, Fraction(1, 2)) == 2


def test_every_token_dispatcher_name_has_a_builder():
    assert tuple(TOKEN_DISPATCHER_FAMILIES) == TOKEN_DISPATCHERS


@pytest.mark.parametrize("moe, key, expected", [
    ({"router_group_topk": None}, "moe.router_group_topk", "given together"),
    ({"router_num_groups": None}, "moe.router_num_groups", "given together"),
    ({"router_num_groups": 3, "router_group_topk": 1}, "moe.router_num_groups", "a divisor of"),
    ({"router_group_topk": 9}, "moe.router_group_topk", "<= moe.router_num_groups 8"),
    ({"router_num_groups": 128, "router_group_topk": 1}, "moe.router_group_topk", "top_k 8"),
    ({"router_num_groups": None, "router_group_topk": None}, "moe.token_dispatcher", "'alltoall'"),
    ({"token_dispatcher": "nccl"}, "moe.token_dispatcher", "one of 'alltoall', 'deepep'"),
])
def test_router_group_keys_are_checked_in_one_line(tmp_path, moe, key, expected):
    """DeepSeek-V3's model profile with one key changed (None: removed): one ProfileError line
    naming the file and the key."""
    import yaml
    from tokenpcap.config.model_profile import load_model
    from tokenpcap.errors import ProfileError
    data = yaml.safe_load((PROFILES / "models" / "deepseek-v3.yaml").read_text())
    for k, v in moe.items():
        if v is None:
            del data["moe"][k]
        else:
            data["moe"][k] = v
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ProfileError) as err:
        load_model(path)
    msg = str(err.value)
    assert "\n" not in msg and f"{path}: {key}: got " in msg and expected in msg


@pytest.mark.parametrize("change, key", [
    ({"router_num_groups": 4, "router_group_topk": 4}, "model.moe.router_num_groups: got 4"),
    ({"tp": 2}, "parallelism.tp: got 2"),
])
def test_deepep_needs_one_group_per_node_and_tp_1(change, key):
    from tokenpcap.errors import InfeasiblePlanError
    s = load_scenario(DEEPSEEK)
    moe_keys = {k: v for k, v in change.items() if k.startswith("router")}
    if moe_keys:
        s = dataclasses.replace(s, model=dataclasses.replace(
            s.model, moe=dataclasses.replace(s.model.moe, **moe_keys)))
    else:
        s = dataclasses.replace(s, parallelism=dataclasses.replace(
            s.parallelism, tp=2, dp=64, sequence_parallel=True))
    with pytest.raises(InfeasiblePlanError) as err:
        build_plan(s)
    assert key in str(err.value) and "\n" not in str(err.value)


def test_plan_command_prints_deepseek_v3_ib_and_nvlink_bytes():
    """``tokenpcap plan profiles/scenarios/deepseek-v3-2048.yaml`` (128 sequences: the same
    calls per layer) prints the hand count of the dispatch and the combine per rank, MoE layer
    and microbatch."""
    from click.testing import CliRunner
    from tokenpcap.cli import main
    res = CliRunner().invoke(main, ["plan", str(DEEPSEEK), "--no-tokens", "--set",
                                    "training.global_batch_size=128"], catch_exceptions=False)
    assert res.exit_code == 0
    text = " ".join(res.output.split())
    assert ("ep dispatch (DeepEP, node-limited), per rank, MoE layer and microbatch: "
            "IB 105,971,712 B, NVLink 201,698,112 B") in text
    assert ("ep combine (DeepEP, node-limited), per rank, MoE layer and microbatch: "
            "IB 205,520,896 B, NVLink 391,172,096 B") in text
