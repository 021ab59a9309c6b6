"""TRex's own STL library compiled our profiles (tests/cases/trex/), and our profile made again
for the same input is what TRex compiled: the frame bytes exactly, and each message starting at
our schedule's time within TRex's microsecond.

How the fixtures were made (2026-12-07). TRex's STL library is not on the package index: the
trex-core repository (cisco-system-traffic-generator/trex-core,
27e0153b5ff833c51d48f1625ace979a2868d8a0, 2025-11-05), its directories
``scripts/automation/trex_control_plane`` and ``scripts/external_libs`` (scapy 2.4.3 and the
rest it bundles), outside this repository. Our profiles (this repository at the commit adding
this file)::

    tokenpcap export profiles/scenarios/dante.yaml --scale 64 --to trex -o dante

(the NIC named ``dante_node00_nic0`` by ``generate`` gives ``dante_dante_node00_nic0.py``), then
in ``scripts/automation/trex_control_plane/interactive``, per NIC, TRex's simulator in its
compile-only mode (``STLSim.run(mode='json')``: loads the profile with ``STLProfile.load``,
resolves the stream names to ids, checks ``from_json(to_json())`` round-trips, prints
``STLProfile(streams).to_json()``; ``-p`` is the directory of the bp-sim binary, which JSON
mode does not run)::

    python3 -m trex.stl.trex_stl_sim -p /tmp -f dante_dante_node00_nic0.py --json

stdout kept gzip-compressed as ``dante-scale64_<nic>.stl.json.gz``: NIC 0 of node 0 (rank 0:
its DP traffic to node 1 and its PP activations to node 2) and NIC 4 of node 2 (rank 20: DP to
node 3 and PP gradients back to node 0), 424 and 428 streams."""
from __future__ import annotations

import csv
import gzip
import json
import runpy
from pathlib import Path

import pytest

from tests.export.test_trex import _expand, fake_trex  # noqa: F401  (a fixture)
from tokenpcap.config.profiles import load_scenario
from tokenpcap.export.trex import write_trex
from tokenpcap.plan.build import build_plan

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "cases" / "trex"
#: fixture NIC name -> global NIC index (node * nics_per_node + NIC)
NICS = {"node00_nic0": 0, "node02_nic4": 2 * 8 + 4}
#: TRex's STL streams carry both MACs from the packet: flags bit 0 (source) and bits 1-2 = 1
#: (destination, STLStreamDstMAC_PKT) (trex_stl_streams.py ``STLStream.to_json``/``from_json``)
MAC_FROM_PACKET = 0x1 | (1 << 1)


def _trex_chain(nic: str) -> list[tuple[bytes, float, dict]]:
    """(frame, start us, stream) of each packet of TRex's compiled streams, following ``next``
    from the one self-starting stream, the start the sum of the ``isg`` before it."""
    import base64

    with gzip.open(CASES / f"dante-scale64_{nic}.stl.json.gz") as f:
        streams = json.load(f)
    by_name = {s["name"]: s for s in streams}
    (s,) = [s for s in streams if s["self_start"]]
    out, t = [], 0.0
    while s is not None:
        t += s["isg"]
        for _ in range(s["mode"]["total_pkts"]):
            out.append((base64.b64decode(s["packet"]["binary"]), t, s))
        s = by_name[s["next"]] if "next" in s else None
    assert len(out) == len(streams)
    return out


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    """{nic: (profile path, manifest rows)} of our export made again for the fixtures' NICs."""
    out = tmp_path_factory.mktemp("trex") / "dante"
    plan = build_plan(load_scenario(ROOT / "profiles" / "scenarios" / "dante.yaml"), scale=64)
    paths = write_trex(plan, out, nics=frozenset(NICS.values()))
    got = {}
    for nic in NICS:
        prof = out.with_name(f"dante_dante_{nic}.py")
        assert prof in paths
        with open(prof.with_name(f"dante_dante_{nic}.timing.csv")) as f:
            got[nic] = (prof, list(csv.DictReader(f)))
    return got


@pytest.mark.parametrize("nic", sorted(NICS))
def test_trex_compiled_our_frames_byte_for_byte(ours, fake_trex, nic):
    """Our profile made again gives, stream by stream, the frames, gaps and rates TRex compiled
    from the kept one; TRex sends both MACs from the frame."""
    prof, _ = ours[nic]
    streams = runpy.run_path(str(prof))["register"]().get_streams(direction=0)
    mine = _expand(streams)
    trex = _trex_chain(nic)
    assert len(trex) == len(mine) > 400
    assert [b for b, _, _ in trex] == [b for b, _ in mine]
    for (_, t_us, s), mine_s in zip(trex, streams):
        assert s["isg"] == mine_s.isg and s["mode"]["rate"]["value"] == mine_s.mode.pps
        assert s["mode"]["type"] == "single_burst" and s["flags"] == MAC_FROM_PACKET
        assert s["vm"]["instructions"] == []        # no Field Engine rewrite of any byte


@pytest.mark.parametrize("nic", sorted(NICS))
def test_each_message_starts_at_our_time_within_trexs_microsecond(ours, nic):
    """Per message of the manifest (our schedule's ns), TRex's start of its first frame (the
    summed ``isg`` of its chain, in us) is within 1 us; every frame too."""
    _, rows = ours[nic]
    trex = _trex_chain(nic)
    assert len(rows) == len(trex)
    first: dict[int, float] = {}
    for r, (b, t_us, _) in zip(rows, trex):
        assert int(r["frame_bytes"]) == len(b)
        assert abs(t_us * 1000 - int(r["t_ns"])) < 1000
        first.setdefault(int(r["message"]), t_us * 1000 - int(r["t_ns"]))
    assert len(first) > 100
    assert max(abs(e) for e in first.values()) < 1000
    assert int(rows[-1]["t_ns"]) > 500_000    # the gaps carry a schedule of 0.58 ms
