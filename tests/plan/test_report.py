"""The plan's JSON report (tokenpcap.plan.report): every key it writes is one docs/plan.md
documents, for a training scenario, a MoE scenario with DeepEP's dispatch and a workload."""

import re
from pathlib import Path

import pytest

from tokenpcap.config.profiles import load_scenario
from tokenpcap.plan.build import build_plan
from tokenpcap.plan.report import plan_json
from tests.plan.test_plan import vary

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "plan.md").read_text()
#: The names in the first cell of docs/plan.md's table rows (``| `a.b`, `.c` | meaning |``).
DOC_NAMES = {n for line in DOC.splitlines() if line.startswith("| `")
             for n in re.findall(r"`([^`]+)`", line.split("|")[1])}
#: And the workload paragraph after the table (the keys a workload scenario's JSON adds).
DOC_NAMES |= set(re.findall(r"`([^`]+)`", DOC.split("A workload scenario ([workloads.md]")[1]
                            .split("\n\n")[0]))


def _documented(path: str) -> bool:
    """``path`` (``a.b`` or ``phases[].c``) is a documented name (a list as ``a[]``), a parent
    whose keys are documented, or one of a row that lists a parent's keys as ``.c`` after its
    first (``phases[].dim``, ``.phase``)."""
    if path in DOC_NAMES or path + "[]" in DOC_NAMES:
        return True
    if any(n.startswith((path + ".", path + "[]")) for n in DOC_NAMES):
        return True                     # a parent documented by its keys
    parent, _, leaf = path.rpartition(".")
    return bool(parent) and f".{leaf}" in DOC_NAMES and any(
        n.startswith(parent + ".") for n in DOC_NAMES)


def _paths(obj: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in obj.items():
        p = f"{prefix}{k}"
        out.append(p)
        if k in ("parameters", "totals") and isinstance(v, dict):
            out += _paths(v, p + ".")
        if k == "phases":
            for row in v:
                out += [f"phases[].{c}" for c in row]
    return sorted(set(out))


@pytest.mark.parametrize("name,batch", [("dante", None), ("deepseek-v3-2048", 128),
                                        ("incast-8x1m-hpcc-ns3", None)])
def test_every_key_is_documented(name, batch):
    s = load_scenario(ROOT / "profiles" / "scenarios" / f"{name}.yaml")
    if batch is not None:               # DeepSeek-V3's keys at a global batch that plans fast
        s = vary(s, global_batch_size=batch)
    j = plan_json(build_plan(s))
    assert ("moe_dispatch" in j) == (name == "deepseek-v3-2048")
    missing = [p for p in _paths(j) if not _documented(p)]
    assert not missing, f"{name}: keys docs/plan.md does not document: {missing}"


def test_to_json_is_the_report():
    s = load_scenario(ROOT / "profiles" / "scenarios" / "dante.yaml")
    plan = build_plan(s)
    j = plan.to_json()
    assert j == plan_json(plan)
    # Megatron-LM's 1F1B bubble for dante (pp 2, 16 / (1 x 4) = 4 microbatches): 1/4.
    assert j["microbatches"] == 4 and j["bubble_fraction"] == 0.25


#: The group kinds docs/plan.md lists in its ``layout.groups.<a|b|...>`` row.
DOC_GROUPS = set(re.search(r"`layout\.groups\.<([^>]+)>`", DOC).group(1).split("|"))


@pytest.mark.parametrize("name", ["dante", "mixtral-8x7b-ep", "llama3-70b-64k-cp4"])
def test_every_group_kind_is_documented(name):
    """Dense, expert-parallel and context-parallel layouts: every ``layout.groups`` kind the
    report writes is one the docs list (``tpcp`` and ``tpdpcp``, written for every layout,
    were not)."""
    j = plan_json(build_plan(load_scenario(ROOT / "profiles" / "scenarios" / f"{name}.yaml")))
    assert set(j["layout"]["groups"]) <= DOC_GROUPS, set(j["layout"]["groups"]) - DOC_GROUPS
