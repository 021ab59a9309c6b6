"""generate on the bundled workload scenarios (tokenpcap.config.workload): the RDMA payload of
the written packets per phase and per sending NIC equals the plan, decoded from the bytes of the
frames (tests/generate/test_generate.py's IBTA RoCEv2 decoder); the receiver of an incast sends
only ACKs, one per message."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from tests.generate.test_generate import check_payload_against_plan, decode
from tokenpcap.cli import main
from tokenpcap.config.profiles import load_scenario
from tokenpcap.generate.run import GenerateOptions, Selection, generate

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "profiles" / "scenarios"


def test_incast_payload_per_nic_and_phase_equals_the_plan(tmp_path):
    res = generate(load_scenario(SCEN / "incast-63x16m.yaml"),
                   GenerateOptions(out_dir=tmp_path, fmt="pcapng", split="nic", scale=256, jobs=1))
    files = {p: decode(p) for p, _, _ in res.files}
    assert len(files) == 64
    control = check_payload_against_plan(res, files, 1)
    # 63 sends of 64 KiB, each NCCL's p2p chunks: below one 128 KiB step the chunk is a quarter
    # step (enqueue.cc addP2pToPlan), 2 messages of 32 KiB; no clear-to-send: one ACK each
    assert control == {"ack_packets": 63 * 2, "ack_payload": 0}
    assert res.plan.nic_bytes_per_nic()[1:].tolist() == [(16 << 20) // 256] * 63


def test_generate_nics_0_of_the_incast_keeps_the_receivers_acks(tmp_path):
    out = tmp_path / "g"
    r = CliRunner().invoke(main, ["generate", str(SCEN / "incast-63x16m.yaml"), "-o", str(out),
                                  "--nics", "0", "--scale", "64", "-j", "1"])
    assert r.exit_code == 0, r.output
    (f,) = out.glob("*.pcapng")                 # beside it the queued fabric's side files
    assert {p.name for p in out.iterdir()} - {f.name} == {
        f"incast-63x16m_fabric{t}" for t in ("-pfc.csv", "-queues.csv", "-links.csv",
                                             "-nics.csv", "-drops.csv", ".json")}
    info = decode(f)
    # 256 KiB per sender at --scale 64: below 8 steps the chunk is half a step, 4 x 64 KiB
    assert [c.split(" ")[:2] for c in info["comment"]] == [["ack", "wl/run/SendRecv"]] * 63 * 4
    assert int(info["payload"].sum()) == 0


def test_alltoall_nic_0_payload_equals_the_plan(tmp_path):
    s = load_scenario(SCEN / "alltoall-64.yaml")
    res = generate(s, GenerateOptions(out_dir=tmp_path, fmt="pcapng", split="nic", scale=64,
                                      jobs=1, selection=Selection(nics=frozenset({0}))))
    (info,) = (decode(p) for p, _, _ in res.files)
    data = [p for c, p in zip(info["comment"], info["payload"].tolist())
            if c.startswith("wl/run/AllToAll")]
    # 56 peers x 16 KiB at --scale 64: at most NCCL_P2P_LL_THRESHOLD (16 KiB) per peer, so NCCL
    # sends LL (enqueue.cc), 8 data bytes per 16-byte line: twice the data on the wire
    assert sum(data) == int(res.plan.nic_bytes_per_nic()[0]) == 2 * 56 * (1 << 20) // 64
