"""``plan --nics``: the bytes each NIC sends per phase, against the plan's own per-rank, per-local-
NIC counts summed by hand over the GPUs of each node, and the groups of equal NICs read back
from the command's JSON."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tokenpcap.cli import main
from tokenpcap.config.profiles import load_scenario
from tokenpcap.generate.select import parse_index_set
from tokenpcap.plan.build import build_plan
from tokenpcap.plan.nics import index_ranges

SCEN = Path(__file__).resolve().parents[2] / "profiles" / "scenarios"


def _by_hand(plan) -> dict[str, list[int]]:  # type: ignore[no-untyped-def]
    """Per phase, per global NIC (node * nics_per_node + local): the sum over the node's GPUs."""
    c = plan.scenario.cluster
    out = {}
    for r in plan.rows:
        if r.nic_bytes <= 0:
            continue
        per = [0] * (c.nodes * c.nics_per_node)
        for rank in range(plan.layout.world_size):
            node = rank // c.gpus_per_node
            for k in range(c.nics_per_node):
                per[node * c.nics_per_node + k] += int(r.nic_bytes_by_rank_nic[rank, k])
        assert sum(per) == r.nic_bytes
        out[r.name] = per
    return out


@pytest.mark.parametrize("name", ["dante", "mixtral-8x7b-ep"])
def test_plan_nics_json_is_the_per_rank_counts_summed_by_node(name):
    path = SCEN / f"{name}.yaml"
    plan = build_plan(load_scenario(path))
    want = _by_hand(plan)
    r = CliRunner().invoke(main, ["plan", str(path), "--nics", "--json", "--no-tokens"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["phases"] == list(want)
    n = len(next(iter(want.values())))
    got: dict[str, list[int | None]] = {p: [None] * n for p in want}
    seen = []
    for g in data["groups"]:
        nics = sorted(parse_index_set(g["nics"], "nics", n))
        assert len(nics) == g["count"] and g["bytes_per_nic"] == sum(g["phases"].values())
        for nic in nics:
            for p, v in g["phases"].items():
                got[p][nic] = v
        seen += nics
    assert sorted(seen) == list(range(n))                      # every NIC in one group
    assert got == want
    totals = [g["bytes_per_nic"] for g in data["groups"]]
    assert totals == sorted(totals, reverse=True)             # busiest first
    assert max(totals) == int(plan.nic_bytes_per_nic().max())


def test_the_table_names_every_phase_and_group():
    r = CliRunner().invoke(main, ["plan", str(SCEN / "dante.yaml"), "--nics", "--no-tokens"])
    assert r.exit_code == 0, r.output
    assert "0,4,8,12" in r.stdout and "42,208,144" in r.stdout and "SendRecv" in r.stdout


def test_index_ranges():
    assert index_ranges([0, 1, 2, 3, 8, 16, 17]) == "0-3,8,16-17"
    assert index_ranges([]) == ""
