"""``tokenpcap run`` and ``tokenpcap generate`` through click's CliRunner: exit codes and output."""
from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from tests.test_schedule import tiny_scenario
from tokenpcap.cli import main
from tokenpcap.plan import build_plan
from tokenpcap.profiles import load_scenario

ROOT = Path(__file__).resolve().parent.parent
DANTE = ROOT / "profiles" / "scenarios" / "dante.yaml"


def test_run_default_scenario_scaled(tmp_path):
    r = CliRunner().invoke(main, ["run", "-o", str(tmp_path), "--scale", "32", "--jobs", "2"])
    assert r.exit_code == 0, r.output
    files = sorted(tmp_path.glob("dante_node*_nic*.pcapng"))
    assert len(files) == 32
    assert "writing 32 pcapng file(s)" in r.output
    assert re.search(r"corpus: [\d,]+ tokens; one iteration takes 16,384", r.output)
    for label in ("dp/backward/AllReduce", "emb/backward/AllReduce", "pp/forward/SendRecv",
                  "pp/backward/SendRecv"):
        assert label in r.output
    m = re.search(r"packets ([\d,]+), file bytes ([\d,]+) \(expected ([\d,]+)\)", r.output)
    assert m and m.group(2) == m.group(3)
    assert sum(f.stat().st_size for f in files) == int(m.group(2).replace(",", ""))
    assert "clear-to-send packets" in r.output and "ACKs" in r.output
    assert "ms of simulated time" in r.output


def test_generate_prints_per_phase_payload_equal_to_the_plan(tmp_path):
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(out), "--format", "pcap",
                                  "--split", "phase", "--jobs", "1", "--seed", "3"])
    assert r.exit_code == 0, r.output
    plan = build_plan(load_scenario(path))
    for row in plan.rows:
        if row.nic_bytes:
            # table row: phase | packets | payload | plan NIC bytes (both the same)
            assert re.search(rf"{re.escape(row.name)}\s*│\s*[\d,]+\s*│\s*{row.nic_bytes:,}\s*│\s*"
                             rf"{row.nic_bytes:,}", r.output), row.name
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"cross_{row.name.replace('/', '-')}.pcap" for row in plan.rows if row.nic_bytes)


def test_generate_selection_options(tmp_path):
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(tmp_path / "o"), "--nics", "0-1",
                                  "--phases", "dp", "--iterations", "0:2", "--time-window", ":10ms",
                                  "--snaplen", "128", "--jobs", "1"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "cross_node00_nic0.pcapng", "cross_node01_nic0.pcapng"]
    assert "dp/backward/AllReduce" in r.output and "pp/forward" not in r.output


def test_library_errors_exit_1_usage_errors_exit_2(tmp_path):
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(tmp_path), "--format", "erf"])
    assert r.exit_code == 1
    assert "error: --format: got 'erf' for transport 'rocev2'" in r.output
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(tmp_path), "--nics", "9"])
    assert r.exit_code == 1 and "--nics: got '9', expected indices in 0..7" in r.output
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(tmp_path), "--format", "cap"])
    assert r.exit_code == 2
    r = CliRunner().invoke(main, ["generate", str(path)])
    assert r.exit_code == 2 and "--output" in r.output
    r = CliRunner().invoke(main, ["run", str(tmp_path / "nope.yaml"), "-o", str(tmp_path)])
    assert r.exit_code == 1 and r.output.startswith("error: ")


def test_summary_plan_column_is_the_plan_at_the_runs_scale_times_iterations(tmp_path):
    """Item 3: with --scale K and --iterations N the plan column beside the payload is the plan at
    scale K times N (before: the unscaled one-iteration plan); every phase row matches."""
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(tmp_path / "o"), "--scale", "8",
                                  "--iterations", "2", "--jobs", "1", "--format", "pcap"])
    assert r.exit_code == 0, r.output
    plan = build_plan(load_scenario(path), scale=8)
    assert "plan at scale 8 × 2 iterations" in r.output
    for row in plan.rows:
        if row.nic_bytes:
            assert re.search(rf"{re.escape(row.name)}\s*│\s*[\d,]+\s*│\s*{2 * row.nic_bytes:,}\s*│"
                             rf"\s*{2 * row.nic_bytes:,}", r.output), row.name
