"""A ring AllReduce's empty steps in a capture, read by TShark: one RDMA WRITE Only with
Immediate (opcode 11) with a DMA length of 0 and no payload per empty step of the rank, as NCCL
posts it (``net_ib/p2p.cc`` ``ncclIbMultiSend``: ``num_sge = 0`` for a 0-byte send; IBTA vol.1
9.2: BTH, RETH, ImmDt, ICRC: a 78-byte frame on IPv4 without the FCS), and the payload per
phase and NIC still the plan's."""
from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import needs_tshark
from tokenpcap.config.profiles import load_scenario
from tokenpcap.generate.run import GenerateOptions, Selection, generate
from tokenpcap.plan.build import build_plan

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = ROOT / "profiles" / "scenarios" / "gpt2-all-cross.yaml"
ON = {"collectives.empty_ring_steps": True}


def _empty_steps_of(rank: int, plan) -> int:
    """Steps of ``rank`` whose chunk holds no element, over its ring AllReduces across nodes
    (``runRing``: 2(N-1) sending steps; the model deals the ``E`` elements to chunks ``0..E-1``;
    position ``p`` sends chunk ``p - k`` at reduce-scatter step ``k``, ``p + 1 - k`` at
    all-gather step ``k``)."""
    lay = plan.layout
    out = 0
    for c in plan.calls(0, ranks=[rank]):
        g = list(c.group)
        n, e = len(g), c.message_bytes // c.elem_bytes
        nodes = {r // lay.gpus_per_node for r in g}
        if c.collective != "AllReduce" or n < 2 or e >= n or len(nodes) < 2:
            continue
        p = g.index(rank)
        chunks = [(p - k) % n for k in range(n - 1)] + [(p + 1 - k) % n for k in range(n - 1)]
        out += sum(ch >= e for ch in chunks)
    return out


@needs_tshark
def test_each_empty_step_is_one_zero_length_write_with_immediate(tmp_path):
    sc = load_scenario(SCENARIO, ON)
    res = generate(sc, GenerateOptions(out_dir=tmp_path, fmt="pcap", scale=8, jobs=1,
                                       selection=Selection(nics=frozenset({0}))))
    want = _empty_steps_of(0, build_plan(sc, scale=8))
    assert want > 0
    (path, packets, _), = res.files
    out = subprocess.run(
        ["tshark", "-n", "-r", str(path), "-Y", "infiniband.bth.opcode == 11 && "
         "infiniband.reth.dmalen == 0", "-T", "fields", "-E", "separator=|", "-e", "frame.len",
         "-e", "frame.protocols", "-e", "_ws.malformed"],
        capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(out) == want
    assert set(out) == {"78|eth:ethertype:ip:udp:infiniband|"}


def test_empty_steps_add_messages_not_payload():
    """The plan's payload and wire bytes per phase are the same with and without them; the
    estimate's messages grow by the empty steps of every rank."""
    off = build_plan(load_scenario(SCENARIO))
    on = build_plan(load_scenario(SCENARIO, ON))
    assert [(r.name, r.nic_bytes, r.nic_payload_bytes, r.nvlink_bytes) for r in off.rows] == \
        [(r.name, r.nic_bytes, r.nic_payload_bytes, r.nvlink_bytes) for r in on.rows]
    extra = sum(_empty_steps_of(r, on) for r in range(on.layout.world_size))
    assert on.pcap["messages"] - off.pcap["messages"] == extra > 0
    assert on.pcap["payload_bytes"] == off.pcap["payload_bytes"]
