"""Smoke runs of every script in benchmarks/ with tiny sizes, so that none of them rots as the
package changes. Each script runs in a subprocess, exactly as documented in benchmarks/README.md,
with warnings as errors; the tests check that it finishes and prints the lines it promises (and,
for write_frames.py, that every variant's output passed its byte-for-byte verification). They never
assert a speed: timings on a shared two-core machine say nothing in a test.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow           # subprocesses: ~25 s in all

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"


def dante_counts(scale: int, iterations: int) -> tuple[int, int]:
    """Calls and RDMA messages (data and clear-to-send) of ``iterations`` of dante at ``scale``
    as the plan counts them (:func:`tokenpcap.schedule.limits.estimate_work`), which the engine's
    run must reach (tests/schedule/test_limits.py)."""
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.plan.build import build_plan
    from tokenpcap.schedule.limits import estimate_work

    plan = build_plan(load_scenario(ROOT / "profiles" / "scenarios" / "dante.yaml"), scale=scale)
    work = estimate_work(plan, iterations)
    return work.calls, work.messages


def run(script: str, *args: str, timeout: float = 300) -> str:
    proc = subprocess.run([sys.executable, "-W", "error", str(BENCH / script), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


TESTED = {"write_frames.py", "wire_build.py", "pcap_write.py", "pcap_read.py", "inspect_read.py",
          "engine_timing.py", "fuzz_campaign.py", "dask_generate.py", "flat_build.py",
          "generate_nic.py", "packet_path.py", "message_ring.py", "call_state.py", "engine_state.py",
          "fabric_ns3.py", "fabric_engine.py", "openloop_hpcc.py", "fabric_dcqcn.py",
          "run_memory.py", "first_run.py", "replica_quotient.py", "plan_memory.py",
          "template_rows.py"}
HELPERS = {"common.py", "frame_writers.py", "frame_verify.py"}     # imported by the scripts


def test_every_benchmark_script_has_a_smoke_test():
    """A new script in benchmarks/ needs a tiny-size run below (add it to TESTED and a test)."""
    scripts = {p.name for p in BENCH.glob("*.py")} - HELPERS
    assert scripts <= TESTED, f"benchmark scripts without a smoke test: {sorted(scripts - TESTED)}"


def test_write_frames_runs_and_verifies_every_variant(tmp_path):
    out = run("write_frames.py", "--frames", "600", "--header-frames", "600", "--slow-frames", "30",
              "--scapy-frames", "4", "--repeat", "1", "--slow-repeat", "1", "--dir", str(tmp_path),
              "--memory", "3e6")
    variants = ("plain write (same bytes)", "tokenpcap writer", "tokenpcap generate path",
                "struct+zlib loop", "dpkt", "scapy")
    for mode in ("full frames: 600 frames", "snaplen 64: 600 frames"):
        assert mode in out
    for v in variants:
        assert len(re.findall(rf"^  {re.escape(v)} +\d", out, re.M)) == 2, v   # one row per mode
    assert out.count("tokenpcap writer: 600 records; ") == 2
    assert "reference ICRC ok, scapy ICRC+IPv4 checksum ok" in out
    for v, n in (("tokenpcap generate path", 600), ("struct+zlib loop", 30), ("dpkt", 30), ("scapy", 4)):
        assert out.count(f"{v}: {n} records byte-equal to tokenpcap's") == 2, v
    assert len(re.findall(r"^  (PcapWriter\+FrameBuilder|generate Dispatcher).*MB", out, re.M)) == 3
    assert not list(tmp_path.iterdir()), "benchmark files left behind"


def test_write_frames_verification_catches_a_wrong_icrc(tmp_path):
    """The verifier the benchmark relies on must fail on a frame with one flipped ICRC bit."""
    sys.path.insert(0, str(BENCH))
    try:
        import frame_verify as fv
        import frame_writers as fw
    finally:
        sys.path.remove(str(BENCH))
    _, ctx, builder = fw.setup()
    packets = fw.make_packets(builder, 0, 40)
    path = tmp_path / "ok.pcap"
    fw.run_tokenpcap(path, packets, builder, 262144, batch=16)
    assert "40 records" in fv.verify_reference(path, packets, ctx, 262144, n_scapy=2)
    same = tmp_path / "same.pcap"
    fw.run_struct_zlib(same, fw.py_rows(packets), ctx, 262144)
    assert "40 records byte-equal" in fv.verify_same(same, path, 40, 262144)
    bad = tmp_path / "bad.pcap"
    data = bytearray(same.read_bytes())
    data[24 + 16 + 4170 - 1] ^= 0x01        # last ICRC byte of the first frame (WRITE FIRST)
    bad.write_bytes(bytes(data))
    with pytest.raises(AssertionError, match="record 0: frame differs"):
        fv.verify_same(bad, path, 40, 262144)
    with pytest.raises(AssertionError, match="record 0"):
        fv.verify_reference(bad, packets, ctx, 262144)


# The other scripts belong to the engineers of the parts they measure and change with them:
# these tests check that each still runs end to end at a tiny size and prints its result lines,
# not the exact list of cases.
def test_wire_build_runs():
    out = run("wire_build.py", "--frames", "2000", "--repeat", "1")
    assert re.search(r"full frames .* M frames/s", out) and re.search(r"snaplen 64 .* M frames/s", out)


def test_pcap_write_runs(tmp_path):
    out = run("pcap_write.py", "--dir", str(tmp_path), "--gbytes", "0.0005", "--reps", "1")
    assert re.search(r"^pcap 4170 B frames .*ratio", out, re.M)
    assert re.search(r"^pcap snaplen 64 .*ratio", out, re.M)
    assert not list(tmp_path.iterdir()), "benchmark files left behind"


def test_pcap_read_runs(tmp_path):
    out = run("pcap_read.py", "--dir", str(tmp_path), "--full", "300", "--small", "3000", "--dpkt")
    assert "cat" in out and "tokenpcap" in out


def test_inspect_read_runs(tmp_path):
    out = run("inspect_read.py", "--frames", "200", "--headers", "1000", "--dir", str(tmp_path),
              "--repeat", "1", "--scapy-frames", "50")
    assert "tokenpcap inspect" in out and "cat > /dev/null" in out


def test_engine_timing_compares_both_engines_and_finds_them_identical():
    out = run("engine_timing.py", "--scenario", "gpt2-all-cross", "--scale", "64", "--big", "dante",
              "--big-scale", "64")
    for label in ("reference (all frames)", "compiled, timing only", "compiled, all frames"):
        assert re.search(rf"^  {re.escape(label)} +build", out, re.M), label
    assert "agreement with the reference: identical messages and frames" in out
    assert out.count("msg/s") == 4


def test_replica_quotient_times_one_replica_and_every_rank_alike():
    out = run("replica_quotient.py", "--scale", "64", "--iterations", "2", "--nics", "0",
              "--repeat", "1")
    assert re.search(r"^  one replica \(quotient\) +build", out, re.M)
    assert re.search(r"^  every rank +build", out, re.M)
    assert "both handed out the same frames" in out


def test_engine_timing_against_another_tree_runs_both_and_counts_the_events():
    """--against with a checkout's directory (this one: its engine is compiled already) times
    the case in a child per tree and prints the heap operations and events per message."""
    out = run("engine_timing.py", "--big", "dante", "--big-scale", "64", "--against", str(ROOT))
    assert len(re.findall(r"^  \S.* msg/s  heap push\+pop [0-9.]+/msg", out, re.M)) == 2
    assert "popped per msg: ack " in out and "both trees timed the same messages" in out


def test_fuzz_campaign_runs_and_reports(tmp_path):
    out = run("fuzz_campaign.py", "--cases", "80", "--workers", "2", "--out", str(tmp_path))
    assert re.search(r"^cases 80: accepted \d+, clean errors \d+, long \(announced\) \d+, "
                     r"crashes 0, hangs 0", out, re.M)
    for target in ("read", "readdress", "plot", "profile"):
        assert re.search(rf"^  {target} +ok \d+", out, re.M), target
    assert re.search(r"^per-case peak RSS: max [\d,]+ MB \(case \d+, \w+\)", out, re.M)


def test_dask_generate_finds_the_cluster_files_identical_and_projects(tmp_path):
    pytest.importorskip("distributed", reason="the 'dask' extra is not installed")
    out = run("dask_generate.py", "--scale", "64", "--iterations", "1", "--noops", "5",
              "--rate-scenario", "dante", "--out", str(tmp_path / "scratch"))
    assert re.search(r"^  jobs 1 +[\d.]+ s wall", out, re.M)
    assert re.search(r"^  dask local:2 +[\d.]+ s wall .*files identical: True", out, re.M)
    assert "per shard: scheduler round trip" in out and "ship the timing instead" in out
    assert re.search(r"^projection: gpt3-175b-megatron .* on 64 workers: .* h wall", out, re.M)
    assert not [p for p in (tmp_path / "scratch").rglob("*") if p.is_file()], "files left behind"


def test_flat_build_compares_this_tree_with_a_revision():
    if subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True).returncode:
        pytest.skip("not a git checkout: flat_build.py compares with a git revision")
    out = run("flat_build.py", "--scenario", "gpt2-all-cross", "--against", "HEAD")
    assert len(re.findall(r"^  \S.* [\d.]+ s cpu +[\d.]+ s wall  peak", out, re.M)) == 2
    assert re.search(r"^  ratio [\d.]+x cpu; load", out, re.M)      # same array sizes


def test_call_state_measures_one_and_two_iterations():
    out = run("call_state.py", "--scenario", "dante", "--scale", "1", "--against", "none")
    calls, messages = dante_counts(1, 1)
    line = re.findall(r"^  this tree .* build +[\d.]+ / +[\d.]+ s cpu .* per call: +-?\d+ B peak, "
                      rf"+-?\d+ B held \({calls:,} calls, {messages:,} messages per iteration",
                      out, re.M)
    assert len(line) == 1, out


def test_generate_nic_writes_frames_and_the_plain_write(tmp_path):
    out = run("generate_nic.py", "--scenario", "dante", "--scale", "64", "--dir", str(tmp_path),
              "--without-drop-behind")
    assert re.search(r"^  timing .* [\d,]+ frames of NIC 0", out, re.M)
    assert re.search(r"^  frames \(build \+ write\) .* bytes \(as the rows say\)", out, re.M)
    assert re.search(r"^  ratio frames / plain write: [\d.]+x to close, [\d.]+x to fsync", out, re.M)
    assert re.search(r"^  frames, no drop-behind .* bytes", out, re.M)
    assert re.search(r"^  ratio frames / plain write, drop-behind: [\d.]+x to close, [\d.]+x to fsync",
                     out, re.M)
    assert not list(tmp_path.iterdir()), "benchmark files left behind"


def test_packet_path_measures_both_trees_apart_from_the_timing(tmp_path):
    # the same tree as its own base: both rows, the same packets (the script refuses a run whose
    # generate wrote other than the frames the timing handed out)
    out = run("packet_path.py", "--scenario", "dante", "--scale", "64", "--nics", "0-3",
              "--jobs", "1", "--base", str(ROOT), "--dir", str(tmp_path))
    rows = re.findall(r"^(this tree|base) +[\d.]+ +[\d.]+ +[\d.]+ +-?[\d.]+ +\S+ +\S+ +[\d.]+ "
                      r"+([\d,]+) +[\d.]+ +([\d.]+) +[\d.]+ +[\d,]+ +(-?[\d.]+) +\S+$", out, re.M)
    assert [r[0] for r in rows] == ["this tree", "base"], out
    assert rows[0][1] == rows[1][1] and int(rows[0][1].replace(",", "")) > 0, out
    assert all(float(r[2]) > 0 for r in rows), out      # the path measured directly
    assert all(float(r[3]) > 0 for r in rows), out      # and its wall clock
    assert not list(tmp_path.iterdir()), "benchmark files left behind"


def test_message_ring_compares_the_kept_table_with_the_ring():
    out = run("message_ring.py", "--scenario", "dante", "--scale", "64", "--iterations", "2")
    _, messages = dante_counts(64, 2)              # both modes time the plan's messages
    for label in ("kept table", "ring (in progress)"):
        assert re.search(rf"^  {re.escape(label)} +{messages:,} msgs .* peak +[\d.]+ GiB", out,
                         re.M), label
    assert re.search(r"^  ring / kept: peak RSS [\d.]+x, table [\d.]+x, run CPU [\d.]+x", out, re.M)


def test_engine_state_measures_the_state_and_the_run():
    out = run("engine_state.py", "--scenario", "dante", "--scale", "64", "--run")
    _, messages = dante_counts(64, 1)              # the run times the plan's messages
    assert re.search(r"^  this tree \(\w+\) +build .* peak +[\d.]+ GiB .* arrays +[\d.]+ GiB .*"
                     rf"run +[\d.]+ s cpu {messages:,} messages", out, re.M), out


def test_run_memory_records_each_kinds_peak_beside_its_estimate(tmp_path):
    """Each run kind asked for runs in its own process on the plan's messages; its row holds a
    peak and the estimate of that kind (no bound asserted: a first run's compile is in it)."""
    out = run("run_memory.py", "--run", "dante:64", "--kinds", "generate,export --to csv",
              "--dir", str(tmp_path))
    _, messages = dante_counts(64, 1)
    for kind in ("generate", "export --to csv"):
        assert re.search(rf"^dante +64 {re.escape(kind)} +{messages:,} +[\d.]+ +[\d.]+ +"
                         r"[\d.]+ +[\d.]+ +-?\d+ +[\d.]+", out, re.M), out
    assert re.search(r"^runs whose peak passed the estimate: \d+$", out, re.M)
    assert not list((tmp_path / "out").rglob("*.*")), "outputs left behind"


def test_plan_memory_plans_in_each_tree_and_compares_their_json():
    """Against this same checkout the two trees' JSON must be the same bytes; the calls are the
    plan's own count of the scenario with the --set values applied."""
    from tokenpcap.config import overrides
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.plan.build import build_plan

    out = run("plan_memory.py", "--scenario", "dante", "--set", "parallelism.dp=2",
              "--set", "cluster.nodes=2", "--against", str(ROOT))
    with overrides.using({"parallelism.dp": 2, "cluster.nodes": 2}):
        s = load_scenario(ROOT / "profiles" / "scenarios" / "dante.yaml")
    calls = build_plan(s).calls_per_iteration
    rows = re.findall(r"^dante +(this|against) +16 +([\d,]+) +[\d.]+ +[\d.]+ +[\d.]+$", out, re.M)
    assert rows == [("this", f"{calls:,}"), ("against", f"{calls:,}")], out
    assert "dante: the trees' JSON is byte-identical" in out


def test_template_rows_counts_what_the_engine_estimate_charges():
    """dante's template rows under this tree's rule are those ``shape_counts`` (the estimate)
    counts; under whole nodes alone there are at least as many."""
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.plan.build import build_plan
    from tokenpcap.schedule.shapecount import shape_counts

    out = run("template_rows.py", "--scenario", "dante")
    plan = build_plan(load_scenario(ROOT / "profiles" / "scenarios" / "dante.yaml"))
    m = re.search(r"^total \(distinct\) +([\d,]+) +([\d,]+) +([\d,]+) +([\d,]+) +([\d,]+)$",
                  out, re.M)
    calls, _, node_rows, _, rows = (int(g.replace(",", "")) for g in m.groups())
    assert calls == plan.calls_per_iteration
    assert rows == shape_counts(plan).template_rows and node_rows >= rows


def test_fabric_ns3_without_the_simulator_says_so(tmp_path):
    out = run("fabric_ns3.py")
    assert "HPCC ns-3 simulator not available (no --sim given)" in out and "Nothing run." in out
    out = run("fabric_ns3.py", "--sim", str(tmp_path / "third"))
    assert "third: no such file" in out


@pytest.mark.skipif(not os.path.isfile(os.environ.get("HPCC_NS3_SIM", "")),
                    reason="HPCC_NS3_SIM (HPCC ns-3's build/scratch/third) not set: "
                           "docs/compare.md says how to build it")
def test_fabric_ns3_runs_a_small_incast():
    out = run("fabric_ns3.py", "--sim", os.environ["HPCC_NS3_SIM"], "--senders", "8",
              "--size-mib", "1", "--cc", "none")
    # tests/cases/hpcc/incast8x1m-pfc-fct.txt: the same run, 170,020 ns
    assert "flows 8/8  span 170,020 ns" in out and re.search(r"hops per CPU-s", out)


def test_fabric_engine_measures_the_queued_fabric_beside_the_ideal_one():
    out = run("fabric_engine.py", "--quick", "--sim", "")
    # 8 -> 1 x 1 MiB with the hpcc-ns3 preset: tests/cases/hpcc/incast8x1m-pfc-fct.txt's span
    # (170,020 ns to the last ACK) less the ACK's way back, 2 x 500 + 2 x 1 ns
    for path in ("per-packet", "fast"):           # the fabric's two paths give the same span
        assert re.search(rf"^  ours, hpcc-ns3 preset +{path} +span +169,018 ns .* hops per CPU-s",
                         out, re.M)
        assert re.search(rf"^  ours, th5-400g default +{path} +span .* hops per CPU-s", out, re.M)
    assert "HPCC ns-3: not run" in out
    assert re.search(r"^  queued / ideal: run CPU [\d.]+x, peak RSS [\d.]+x, iteration", out, re.M)
    assert re.search(r"^    dp/backward/AllReduce +2,048 ", out, re.M)   # 16 channels: NCCL's
    assert len(re.findall(r"^  \S.* ideal run .* queued .* ratio [\d.]+x$", out, re.M)) == 4
    assert len(re.findall(r"^ +iteration ideal [\d,]+ ns, queued [\d,]+ ns \([+-][\d.]+%\)", out,
                          re.M)) == 2


def test_openloop_hpcc_runs_the_incast_open_loop():
    out = run("openloop_hpcc.py", "--quick")
    # the incast's flows depend on nothing: the open loop is the scenario's own schedule
    assert "1. incast-8x1m-hpcc-ns3.yaml --scale 1: 8 flows exported" in out
    assert re.search(r"^  all +8 +- +1\.000 +- +- +1\.000 +- +- +1\.000 +-$", out, re.M)


def test_fabric_dcqcn_runs_ours_without_the_simulator():
    out = run("fabric_dcqcn.py", "--quick", "--sim", "")
    # 8 -> 1 x 1 MiB with DCQCN: CE marks and CNPs (tests/schedule/engine/test_cc.py holds its
    # flow times to ns-3's)
    assert re.search(r"^  ours, hpcc-ns3 \+ cc dcqcn +span +[\d,]+ ns .* CE marks [1-9][\d,]* +"
                     r"CNPs [1-9][\d,]* .* hops per CPU-s$", out, re.M), out
    assert re.search(r"^  ours, hpcc-ns3 \+ cc dcqcn +iteration +[\d,]+ ns .* hops per CPU-s$",
                     out, re.M), out
    assert out.count("HPCC ns-3: not run") == 2


@pytest.mark.skipif(not os.path.isfile(os.environ.get("HPCC_NS3_SIM", "")),
                    reason="HPCC_NS3_SIM (HPCC ns-3's build/scratch/third) not set: "
                           "docs/compare.md says how to build it")
def test_fabric_dcqcn_runs_the_simulator_beside_ours():
    out = run("fabric_dcqcn.py", "--quick", "--case", "incast", "--sim",
              os.environ["HPCC_NS3_SIM"])
    # tests/cases/hpcc/incast8x1m-dcqcn-fct.txt: the same run, 451,693 ns, 4 x 2,048 hops
    assert re.search(r"^  HPCC ns-3, CC_MODE 1 \(DCQCN\) +span +451,693 ns .* flows 8 +"
                     r"packet-hops +8,192 +PFC lines 0 .* hops per CPU-s$", out, re.M), out
    assert re.search(r"^  ours / ns-3: CPU [\d.]+x, hops per CPU-s [\d.]+x$", out, re.M), out


def test_first_run_times_a_first_and_a_second_run_with_the_same_outputs():
    """One tree, dante at --scale 64: the first run times the job uncompiled while the engine
    compiles into a fresh numba cache in the background, and says so; the second loads it and
    says nothing of a compile; both write the same files."""
    out = run("first_run.py", "--scale", "64", timeout=900)
    first, second = (re.search(rf"^  this tree .* {w} +[\d.]+ s wall +[\d.]+ s cpu .*$", out, re.M)
                     for w in ("first", "second"))
    assert first and re.search(r"said: timing [\d,]+ messages in Python this once \(the timing "
                               r"engine compiles in the background for the next runs, once per "
                               r"machine\)", first[0]), out
    assert re.search(r"^  this tree .* first +the engine compiled in the background: cached "
                     r"[\d.]+ s after the run started", out, re.M), out
    assert second and second[0].endswith("said: -"), out
    assert "every run wrote the same files (sha256)" in out
