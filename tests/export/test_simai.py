"""SimAI workload export: the file follows the format SimAI's parser reads
(astra-sim-alibabacloud ``Workload::initialize_workload``: line 1 the policy and ``key: value``
integers, line 2 the record count, then records of exactly 12 whitespace-separated fields whose
types SimAI knows; an unknown type silently becomes NONE), and parsed back it carries the plan's
bytes: per microbatch record times ``ga`` for TP and EP, the weight-gradient records once, and
what the format cannot hold listed apart, adding up to every call of the exported rank."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from tokenpcap.config.profiles import load_scenario
from tokenpcap.export.core import export_scenario
from tokenpcap.export.simai import simai_workload
from tokenpcap.plan.build import build_plan

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "profiles" / "scenarios"
KNOWN = {"NONE"} | {b + s for b in ("ALLREDUCE", "ALLGATHER", "REDUCESCATTER", "ALLTOALL",
                                    "ALLREDUCEALLTOALL") for s in ("", "_EP", "_DP_EP")}
KEYS = ["model_parallel_NPU_group", "ep", "pp", "vpp", "ga", "all_gpus", "checkpoints",
        "checkpoint_initiates", "pp_comm"]


def parse(text: str) -> tuple[dict[str, int], list[list[str]]]:
    """An independent reader of the format (shared format notes, not our writer)."""
    lines = text.splitlines()
    head = lines[0].split()
    assert head[0] == "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
    pairs = head[1:]
    assert len(pairs) % 2 == 0 and all(k.endswith(":") for k in pairs[::2])
    header = {k[:-1]: int(v) for k, v in zip(pairs[::2], pairs[1::2])}
    n = int(lines[1])
    records = [line.split() for line in lines[2:]]
    assert len(records) == n
    for r in records:
        assert len(r) == 12, r
        assert r[1] == "-1" and all(int(r[i]) >= 0 for i in (2, 4, 5, 7, 8, 10, 11))
        assert {r[3], r[6], r[9]} <= KNOWN, r
    return header, records


@pytest.mark.parametrize("name", ["gpt3-175b-megatron", "mixtral-8x7b-ep", "dante",
                                  "llama2-7b-a100-ib", "llama3-8b-zero3",
                                  "llama3-70b-64k-cp4"])
def test_simai_file_parses_back_to_the_plan(tmp_path, name):
    s = load_scenario(SCEN / f"{name}.yaml")
    plan = build_plan(s)
    outs = export_scenario(SCEN / f"{name}.yaml", "simai", tmp_path / "w" / f"{name}.txt")
    p = s.parallelism
    assert [o.name for o in outs] == [f"{name}.txt"] + [f"{name}-stage{k}.txt"
                                                        for k in range(1, p.pp)]
    for st, out in enumerate(outs):
        _parses_back(plan, st, out.read_text())


def _parses_back(plan, st: int, text: str) -> None:
    """The file of stage ``st`` holds the calls of rank (st, dp 0, tp 0) as the module says."""
    header, records = parse(text)
    p = plan.scenario.parallelism
    assert list(header) == KEYS
    assert (header["model_parallel_NPU_group"], header["ep"], header["pp"], header["ga"],
            header["all_gpus"]) == (p.tp, p.ep, p.pp, plan.microbatches, plan.layout.world_size)
    got = defaultdict(int)
    for r in records:
        # forward / input-gradient columns: plain = TP, _EP = EP, repeated ga times;
        # weight-gradient column: plain = DP, _DP_EP = DP within EP, once
        for t, b in ((r[3], r[4]), (r[6], r[7])):
            if t != "NONE":
                got["ep" if t.endswith("_EP") else "tp"] += int(b) * plan.microbatches
        if r[9] != "NONE":
            got["edp" if r[9].endswith("_DP_EP") else "dp"] += int(r[10])
    rank = plan.layout.rank(st, 0, 0)
    calls = list(plan.calls(0, ranks={rank}))
    want = defaultdict(int)
    for c in calls:
        if c.dim == "tp" and c.microbatch >= 0 and c.collective != "Broadcast":
            want["tp"] += c.message_bytes
        elif c.dim == "ep" and c.collective == "AllToAll":
            want["ep"] += c.message_bytes
        elif c.dim == "dp" and c.bucket >= 0:
            want["edp" if c.op.startswith("expert") and p.ep > 1 else "dp"] += c.message_bytes
    assert dict(got) == dict(want)
    pp = [c.message_bytes for c in calls if c.dim == "pp"]
    assert header["pp_comm"] == (max(pp) if pp else 0)
    w = simai_workload(plan, st)
    assert sum(want.values()) + sum(w.left_out.values()) == sum(c.message_bytes for c in calls)


def test_unknown_types_are_refused_not_written():
    from tokenpcap.export.simai import SimaiRecord

    with pytest.raises(ValueError, match="not one SimAI reads"):
        SimaiRecord("x", fwd_type="BROADCAST").line()
    with pytest.raises(ValueError, match="one word"):
        SimaiRecord("two words").line()


def test_expert_gradients_go_to_the_dp_within_ep_group():
    """Mixtral at ep 4 (dp 8): expert buffers are reduced over dp / ep = 2 ranks, written with
    the _DP_EP suffix (its group in SimAI: DP / EP)."""
    import dataclasses

    s = load_scenario(SCEN / "mixtral-8x7b-ep.yaml")
    s = dataclasses.replace(s, parallelism=dataclasses.replace(s.parallelism, ep=4))
    plan = build_plan(s)
    _, records = parse(simai_workload(plan).text())
    dpep = sum(int(r[10]) for r in records if r[9].endswith("_DP_EP"))
    rank = plan.layout.rank(0, 0, 0)
    want = sum(c.message_bytes for c in plan.calls(0, ranks={rank})
               if c.dim == "dp" and c.op.startswith("expert") and c.bucket >= 0)
    assert dpep == want > 0


def test_vpp_is_the_number_of_model_chunks():
    """With Megatron's interleaved schedule the header's vpp is the chunks per stage (SimAI's
    workload generators write Megatron's virtual_pipeline_model_parallel_size there), and the
    file still parses back to the plan's TP and DP bytes."""
    import dataclasses

    s = load_scenario(SCEN / "gpt3-175b-megatron.yaml")
    s = dataclasses.replace(s, parallelism=dataclasses.replace(
        s.parallelism, virtual_pipeline_model_parallel_size=2))
    plan = build_plan(s)
    header, records = parse(simai_workload(plan).text())
    assert header["vpp"] == 2 and header["pp"] == s.parallelism.pp
    rank = plan.layout.rank(0, 0, 0)
    want = sum(c.message_bytes for c in plan.calls(0, ranks={rank}) if c.dim == "dp"
               and c.bucket >= 0 and c.phase == "backward")
    assert sum(int(r[10]) for r in records if r[9] != "NONE") == want > 0
