"""TRex export: each profile compiles, loads against a stand-in ``trex_stl_lib.api`` written here
(it records the streams as TRex's STL classes receive them: ``STLStream(name, packet, mode, isg,
self_start, next)``, ``STLPktBuilder(pkt_buffer)``, ``STLTXSingleBurst(total_pkts, pps)``), and
the chain of streams, expanded from the self-starting one along ``next``, sends exactly the frames
of the capture ``generate`` writes for the same scenario (read with dpkt, not our reader) at their
times: the summed ``isg`` equals each frame's time since the first within TRex's microsecond."""
from __future__ import annotations

import csv
import py_compile
import runpy
import sys
from pathlib import Path

import pytest

from tokenpcap.config.profiles import load_scenario
from tokenpcap.export.core import export_scenario
from tokenpcap.export.trex import frame_fields

dpkt = pytest.importorskip("dpkt")
ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "profiles" / "scenarios"
NAME, SCALE = "incast-8x1m-hpcc-ns3", 64

FAKE_API = '''
RECORDED = []
STLStreamDstMAC_PKT = 1
class STLPktBuilder:
    def __init__(self, pkt=None, pkt_buffer=None, vm=None, path_relative_to_profile=False,
                 build_raw=False, remove_fcs=True):
        assert pkt is None and isinstance(pkt_buffer, bytes)
        self.pkt_buffer = pkt_buffer
class STLTXSingleBurst:
    def __init__(self, pps=None, bps_L1=None, bps_L2=None, percentage=None, total_pkts=1):
        assert total_pkts >= 1 and pps > 0
        self.pps, self.total_pkts = pps, total_pkts
class STLStream:
    def __init__(self, name=None, packet=None, mode=None, enabled=True, self_start=True,
                 isg=0, flow_stats=None, next=None, stream_id=None, action_count=0,
                 random_seed=0, mac_src_override_by_pkt=None, mac_dst_override_mode=None,
                 dummy_stream=False, start_paused=False, core_id=-1):
        assert isinstance(isg, (int, float)) and isg >= 0
        assert mac_src_override_by_pkt is True and mac_dst_override_mode == STLStreamDstMAC_PKT
        self.name, self.packet, self.mode, self.isg = name, packet, mode, isg
        self.self_start, self.next = self_start, next
        RECORDED.append(self)
'''


@pytest.fixture
def fake_trex(tmp_path, monkeypatch):
    pkg = tmp_path / "fake" / "trex_stl_lib"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "api.py").write_text(FAKE_API)
    monkeypatch.syspath_prepend(str(tmp_path / "fake"))
    for m in ("trex_stl_lib", "trex_stl_lib.api"):
        monkeypatch.delitem(sys.modules, m, raising=False)
    yield
    for m in ("trex_stl_lib", "trex_stl_lib.api"):
        sys.modules.pop(m, None)


def _expand(streams):
    """(frame bytes, start us) of each packet as TRex would send the chain."""
    by_name = {s.name: s for s in streams}
    starts = [s for s in streams if s.self_start]
    assert len(starts) == 1
    out, t, s = [], 0.0, starts[0]
    seen = set()
    while s is not None:
        assert s.name not in seen
        seen.add(s.name)
        t += s.isg
        for _ in range(s.mode.total_pkts):
            out.append((s.packet.pkt_buffer, t))
        s = by_name[s.next] if s.next is not None else None
    assert seen == set(by_name)
    return out


def test_profiles_send_our_frames_at_our_times(tmp_path, fake_trex):
    from tokenpcap.generate.options import GenerateOptions
    from tokenpcap.generate.run import generate

    paths = export_scenario(SCEN / f"{NAME}.yaml", "trex", tmp_path / "t" / "lab", scale=SCALE)
    ref = tmp_path / "ref"
    ref.mkdir()
    res = generate(load_scenario(SCEN / f"{NAME}.yaml"),
                   GenerateOptions(out_dir=ref, fmt="pcap", scale=SCALE, iterations=1))
    caps = {Path(p).stem: Path(p) for p, n, _ in res.files if n}
    profiles = {p.name[len("lab_"):-len(".py")]: p for p in paths if p.suffix == ".py"}
    assert set(profiles) == set(caps) and caps
    assert not list((tmp_path / "t").glob(".*"))          # the temporary captures are gone
    gbps = load_scenario(SCEN / f"{NAME}.yaml").cluster.link_gbps
    for nic, prof in profiles.items():
        py_compile.compile(str(prof), doraise=True)
        with open(caps[nic], "rb") as f:
            want = [(ts, bytes(buf)) for ts, buf in dpkt.pcap.Reader(f)]
        sys.modules.pop("trex_stl_lib.api", None)
        api = __import__("trex_stl_lib.api", fromlist=["RECORDED"])
        streams = runpy.run_path(str(prof))["register"]().get_streams(direction=0)
        assert streams == api.RECORDED
        got = _expand(streams)
        assert [b for b, _ in got] == [b for _, b in want]
        t0 = want[0][0]
        for (_, us), (ts, _) in zip(got, want):
            assert abs(us - float(ts - t0) * 1e6) < 1.0      # TRex's microsecond
        for s, (_, buf) in zip(streams, want):      # line rate for the frame on the wire
            assert s.mode.pps == pytest.approx(gbps * 1e9 / ((len(buf) + 24) * 8))
        with open(prof.with_name(f"lab_{nic}.timing.csv")) as f:
            rows = list(csv.DictReader(f))
        assert len(rows) == len(want)
        msgs: dict[int, list[int]] = {}
        for r, (ts, buf) in zip(rows, want):
            assert int(r["frame_bytes"]) == len(buf)
            assert int(r["t_ns"]) == int((ts - t0) * 10**9)   # exact ns (dpkt: Decimal)
            assert int(r["capture_ns"]) == int(ts * 10**9)
            op, qp, psn = frame_fields(buf)
            assert (int(r["opcode"]), int(r["dest_qp"]), int(r["psn"])) == (op, qp, psn)
            msgs.setdefault(int(r["message"]), []).append(psn)
        for psns in msgs.values():          # a message's frames: consecutive PSNs on one QP
            assert all((b - a) % (1 << 24) == 1 for a, b in zip(psns, psns[1:]))


def test_frame_fields_reads_rocev2_bth():
    """A scapy-built RoCEv2 frame (test-only oracle): opcode, DestQP and PSN as scapy set them;
    a plain UDP frame is not RoCEv2."""
    scapy = pytest.importorskip("scapy.all")
    from scapy.contrib.roce import BTH

    f = bytes(scapy.Ether() / scapy.Dot1Q(vlan=3) / scapy.IP() / scapy.UDP(dport=4791) /
              BTH(opcode=0x0A, dqpn=0x1234, psn=0xABCDE) / (b"x" * 16))
    assert frame_fields(f) == (0x0A, 0x1234, 0xABCDE)
    g = bytes(scapy.Ether() / scapy.IP() / scapy.UDP(dport=53) / (b"x" * 20))
    assert frame_fields(g) == (-1, -1, -1)


def test_prefix_with_a_dot_is_refused(tmp_path):
    """TRex's ``STLProfile.load_py`` imports a profile as the module named by its file name up
    to the first dot, so ``lab.v2_<nic>.py`` would import ``lab``: refused before generating."""
    from tokenpcap.errors import InputError
    with pytest.raises(InputError, match="dot"):
        export_scenario(SCEN / f"{NAME}.yaml", "trex", tmp_path / "lab.v2", scale=SCALE)
    assert not list(tmp_path.iterdir())


def test_too_many_frames_per_nic_are_refused_before_any_is_written(tmp_path, monkeypatch):
    """Dante at scale 1 sends 337,088 frames from 32 NICs, over 10,000 per NIC on average: the
    export is refused from generate's prediction, which equals the plan's closed-form packet
    count, before a capture is written (it wrote all 32, 1.4 GB, then refused NIC 0)."""
    from tokenpcap.errors import InputError
    from tokenpcap.pcap import writer
    from tokenpcap.plan.build import build_plan

    dante = load_scenario(SCEN / "dante.yaml")
    est = build_plan(dante).pcap                # the plan's closed forms, not generate's count
    packets = int(est["data_packets"] + est["cts_packets"] + est["ack_packets"])
    nics = dante.cluster.nodes * dante.cluster.nics_per_node
    assert packets > 10_000 * nics

    def no_writing(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise AssertionError("a capture was opened for writing")

    monkeypatch.setattr(writer.PcapWriter, "__init__", no_writing)
    with pytest.raises(InputError) as err:
        export_scenario(SCEN / "dante.yaml", "trex", tmp_path / "lab")
    assert str(err.value) == (f"export --to trex: {packets:,} frames over {nics} NICs, expected "
                              "at most 10,000 per NIC (one TRex stream each; some NIC sends "
                              "more); use --scale")
    assert not list(tmp_path.iterdir())
