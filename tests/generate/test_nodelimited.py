"""DeepEP's node-limited dispatch written as packets: the payload equals the plan per phase and
NIC, and the IB messages stay on their rail."""
from __future__ import annotations

from tests.generate.test_generate import ROOT, TINY_DEEPSEEK, check_payload_against_plan, decode
from tokenpcap.config.profiles import load_scenario
from tokenpcap.generate.run import GenerateOptions, generate

#: TINY_DEEPSEEK with 32 experts (one per GPU of 4 nodes x 8), top 3 from 2 of 4 groups.
MOE = ("  moe: {experts: 4, top_k: 2, ffn_hidden_size: 128, shared_expert_intermediate_size: 128,\n"
       "        layer_freq: [0, 0, 1, 1, 1]}\n")
NODE_LIMITED = ("  moe: {experts: 32, top_k: 3, ffn_hidden_size: 128, "
                "shared_expert_intermediate_size: 128,\n"
                "        layer_freq: [0, 0, 1, 1, 1], router_num_groups: 4, router_group_topk: 2,\n"
                "        token_dispatcher: deepep}\n")


def test_deepep_payload_equals_the_plan_and_its_hand_count(tmp_path):
    """32 ranks on 4 nodes of 8 (dp 32 = ep 32, tp 1, pp 1), 128 tokens per rank, 3 MoE layers:
    a token goes to M' = 2 of the 4 nodes, 3/4 of them remote on average; by hand, per rank,
    MoE layer and microbatch: IB 128 x 2 x 3/4 rows of 256 bf16 values = 98,304 B; on a chosen
    node the token's 3 experts split 2 | 1 over its 2 nodes, so another GPU (one expert each,
    8 a node) hosts one with probability (1 - C(7,2)/C(8,2) + 1 - C(7,1)/C(8,1)) / 2 = 3/16,
    and a GPU forwards 128 x 2 x 3/16 = 48 rows to each of its 7 node mates: 172,032 B of
    NVLink. The capture's payload per phase and per NIC is the plan's."""
    assert TINY_DEEPSEEK.endswith(MOE)
    path = tmp_path / "ds.yaml"
    path.write_text(
        f"name: ds\ncorpus: {ROOT / 'samples' / 'divina_commedia.txt'}\ntokenizer: utf8\n"
        f"model:\n{TINY_DEEPSEEK[:-len(MOE)]}{NODE_LIMITED}"
        f"cluster: {ROOT / 'profiles' / 'clusters' / 'h100-rocev2-400g.yaml'}\n"
        "parallelism: {dp: 32, tp: 1, pp: 1, ep: 32, zero_stage: 1}\n"
        "training: {micro_batch_size: 1, global_batch_size: 32, precision: bf16, "
        "grad_reduce_dtype: fp32}\ncollectives: {algorithm: ring, channels: 2}\n")
    s = load_scenario(path)
    (tmp_path / "out").mkdir()
    res = generate(s, GenerateOptions(out_dir=tmp_path / "out", fmt="pcapng", jobs=1))
    files = {p: decode(p) for p, _, _ in res.files}
    plan = res.plan
    by_op = plan.to_json()["moe_dispatch"]
    assert (by_op["dispatch"]["nic_bytes_per_rank"], by_op["dispatch"]["nvlink_bytes_per_rank"]) \
        == (128 * 2 * 3 // 4 * 512, 7 * 48 * 512) == (98_304, 172_032)
    check_payload_against_plan(res, files, 8)
    assert {"ep/forward/AllToAll", "ep/backward/AllToAll"} <= {r.name for r in plan.rows}
    ib = [c for c in plan.calls() if c.op.endswith("_ib")]
    assert ib and all(len({r % 8 for r in c.group}) == 1 for c in ib)
    assert not any(plan.call_transfers(c).table["nic"].any() for c in plan.calls()
                   if c.op.endswith("_nvl"))
