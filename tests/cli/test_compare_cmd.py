"""tokenpcap compare SCENARIO --hpcc-fct FCT: the report, its errors and its pictures, on the
real simulator run of Dante at --scale 64 (tests/cases/hpcc/, made as tests/export/test_hpcc_fct.py
says)."""
from __future__ import annotations

import pytest

from pathlib import Path

from click.testing import CliRunner

from tokenpcap.cli import main

ROOT = Path(__file__).resolve().parents[2]
DANTE = str(ROOT / "tests" / "cases" / "simai" / "dante.yaml")   # Dante as SimAI ran it
DANTE_FLOWS = str(ROOT / "tests" / "cases" / "hpcc" / "dante-flows.yaml")  # the ns-3 run's Dante
FCT = ROOT / "tests" / "cases" / "hpcc" / "dante-scale64-fct.txt"


def run(*args: str, scenario: str = DANTE_FLOWS):
    return CliRunner().invoke(main, ["compare", scenario, *args])


def test_report_per_phase_and_plots(tmp_path):
    r = run("--hpcc-fct", str(FCT), "--scale", "64", "--plot", str(tmp_path / "p" / "q"))
    assert r.exit_code == 0, r.output
    rows = {line.split()[0]: line.split() for line in r.output.splitlines()[2:9]}
    assert set(rows) == {"pp/forward/SendRecv", "pp/backward/SendRecv", "dp/backward/AllReduce",
                         "emb/backward/AllReduce", "mp/optimizer/AllReduce",
                         "dp/optimizer/AllReduce", "all"}
    assert rows["all"][1:3] == ["560", "560"]
    assert sum(int(v[1]) for k, v in rows.items() if k != "all") == 560
    for k, v in rows.items():               # percentiles ordered, slowdowns >= 1 alone or not
        p50, p90, p99, mx = map(float, v[6:10])
        assert 1.0 <= p50 <= p90 <= p99 <= mx, k
    assert "every one of the 560 flows completed in the simulator" in r.output
    pngs = sorted((tmp_path / "p" / "q").iterdir())
    assert [p.name for p in pngs] == ["dante-flows-nic-completion.png",   # the scenario file's stem
                                      "dante-flows-slowdown-cdf.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)


def test_not_completed_flows_are_listed(tmp_path):
    lines = FCT.read_text().splitlines(keepends=True)
    (tmp_path / "fct.txt").write_text("".join(lines[:10] + lines[12:]))
    r = run("--hpcc-fct", str(tmp_path / "fct.txt"), "--scale", "64")
    assert r.exit_code == 0, r.output
    assert "not completed by the simulator: 2 flows, flow-file lines" in r.output
    total = [line.split() for line in r.output.splitlines() if line.startswith("all ")][0]
    assert total[1:3] == ["560", "558"]


def test_errors_are_one_line(tmp_path):
    r = run("--hpcc-fct", str(FCT))                                   # --scale forgotten
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert "dante-scale64-fct.txt: line 1: flow" in r.output and "--scale" in r.output
    (tmp_path / "bad.txt").write_text("0b000301 0b001301 10000 102 3072\n")
    r = run("--hpcc-fct", str(tmp_path / "bad.txt"), "--scale", "64")
    assert r.exit_code == 1 and r.output.count("\n") == 1
    assert "bad.txt: line 1: got 5 fields, expected 8" in r.output
    r = run("--scale", "64")
    assert r.exit_code == 2 and "--hpcc-fct" in r.output


SIMAI = ROOT / "tests" / "cases" / "simai" / "dante-EndToEnd.csv"


def test_simai_report_and_plots(tmp_path):
    r = run("--simai-csv", str(SIMAI), "--plot", str(tmp_path / "pics"), scenario=DANTE)
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split()[:6] == ["group", "calls", "rows", "MB", "ours", "µs"]
    total = [ln.split() for ln in lines if ln.startswith("all ")][0]
    assert total[1:3] == ["63", "63"] and total[5] == "945.000"     # SimAI's 63 calls, µs
    assert any(ln.startswith("SimAI summary µs: DP 635") for ln in lines)
    assert lines[-2:] == [str(tmp_path / "pics" / "dante-simai-phases.png"),
                          str(tmp_path / "pics" / "dante-simai-calls.png")]
    assert all((tmp_path / "pics" / n).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
               for n in ("dante-simai-phases.png", "dante-simai-calls.png"))


def test_simai_errors_are_one_line_and_usage_exits_2(tmp_path):
    r = run("--simai-csv", str(SIMAI), "--scale", "64", scenario=DANTE)   # not the export's scale
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert "dante-EndToEnd.csv: line 5: fwd compute: got 10 µs, expected 0 µs" in r.output
    lines = SIMAI.read_text().splitlines()
    (tmp_path / "bad.csv").write_text("\n".join(lines[:5] + [lines[5] + ",1"]) + "\n")
    r = run("--simai-csv", str(tmp_path / "bad.csv"), scenario=DANTE)
    assert r.exit_code == 1 and r.output.count("\n") == 1
    assert "bad.csv: line 6: row: got" in r.output and "expected 17 comma-separated" in r.output
    r = run("--simai-csv", str(SIMAI), "--hpcc-fct", str(FCT), scenario=DANTE)
    assert r.exit_code == 2 and "give one of --hpcc-fct FCT or --simai-csv CSV" in r.output
    r = run("--simai-csv", str(SIMAI), "--iterations", "2", scenario=DANTE)
    assert r.exit_code == 2 and "expected 1 with --simai-csv" in r.output


HPCC = ROOT / "tests" / "cases" / "hpcc"
INCAST8 = str(ROOT / "profiles" / "scenarios" / "incast-8x1m-hpcc-ns3.yaml")


@pytest.mark.slow
def test_queued_fabric_report_with_pfc_table():
    """8 -> 1 x 1 MiB on the hpcc-ns3 single switch: our queued fabric's span is the
    simulator's 170.020 µs (tests/cases/hpcc/README.md), neither paused anything."""
    r = CliRunner().invoke(main, ["compare", INCAST8, "--hpcc-fct",
                                  str(HPCC / "incast8x1m-pfc-fct.txt"), "--hpcc-pfc",
                                  str(HPCC / "incast8x1m-pfc-pfc.txt")])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    total = [line.split() for line in lines if line.startswith("all ")][0]
    assert total[1:3] == ["8", "8"] and total[4:6] == ["170.020", "170.020"]
    assert "on our queued fabric" in r.output
    assert ("per-flow fct µs (completed flows): ours min 169.446 max 170.020, simulator min "
            "169.446 max 170.020") in r.output
    assert "PFC per paused device (simulator pfc.txt beside our fabric log)" in r.output
    assert [line.split() for line in lines if line.strip().startswith("all ")][-1] == \
        ["all", "0", "0", "0", "0", "0", "0.000", "0.000"]


def test_pfc_needs_the_fct_and_a_queued_fabric(tmp_path):
    (tmp_path / "pfc.txt").write_text("")
    r = run("--hpcc-pfc", str(tmp_path / "pfc.txt"))
    assert r.exit_code == 2 and "give one of --hpcc-fct" in r.output
    r = run("--hpcc-fct", str(FCT), "--scale", "64", "--hpcc-pfc", str(tmp_path / "pfc.txt"))
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert "--hpcc-pfc: got a scenario with an ideal fabric" in r.output


def test_open_loop_beside_the_simulator():
    # the incast depends on nothing: our open loop, our closed loop and HPCC ns-3 agree
    # (tests/cases/hpcc/incast8x1m-pfc-fct.txt)
    r = CliRunner().invoke(main, ["compare", INCAST8, "--open-loop",
                                  str(ROOT / "tests/cases/hpcc/incast8x1m-flows.yaml"),
                                  "--hpcc-fct",
                                  str(ROOT / "tests/cases/hpcc/incast8x1m-pfc-fct.txt")])
    assert r.exit_code == 0, r.output
    assert "sim p50 open p50    diff" in r.output
    assert any(line.split()[:2] == ["all", "8"] and line.split()[2:5] == ["1.000", "1.000", "+0.0%"]
               for line in r.output.splitlines())
    r = CliRunner().invoke(main, ["compare", INCAST8, "--open-loop", INCAST8])
    assert r.exit_code == 1 and r.output.count("\n") == 1
    assert "workload.kind: got 'incast', expected 'flows'" in r.output
