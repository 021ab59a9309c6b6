"""``plot`` and ``export`` on scenarios: bad option values are usage errors (exit 2), unwritable
outputs one-line errors (exit 1), a rank outside the world is refused, the scale is the plan's;
a directory of captures."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.schedule.test_schedule import tiny_scenario
from tokenpcap.cli import main

ROOT = Path(__file__).resolve().parents[2]
DANTE = ROOT / "profiles" / "scenarios" / "dante.yaml"


@pytest.fixture
def scen(tmp_path):  # type: ignore[no-untyped-def]
    return tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)


@pytest.mark.parametrize("args,option", [
    (["--scale", "0"], "--scale"), (["--scale", "-1"], "--scale"),
    (["--iterations", "0"], "--iterations"), (["--ranks", "99"], "--ranks"),
    (["--ranks", "a"], "--ranks"), (["--bin", "0"], "--bin"), (["--bin", "100"], "--bin"),
    (["--time-window", "0:1"], "--time-window"), (["--time-window", "x"], "--time-window")])
def test_plot_bad_values_exit_2(tmp_path, scen, args, option):
    r = CliRunner().invoke(main, ["plot", str(scen), "-o", str(tmp_path)] + args)
    assert r.exit_code == 2, r.output
    assert f"Invalid value for '{option}'" in r.output and "Traceback" not in r.output
    assert not list(tmp_path.glob("*.png"))


@pytest.mark.parametrize("args,option", [(["--scale", "0"], "--scale"),
                                         (["--iterations", "0"], "--iterations")])
def test_export_bad_values_exit_2(tmp_path, scen, args, option):
    r = CliRunner().invoke(main, ["export", str(scen), "--to", "csv", "-o",
                                  str(tmp_path / "m.csv")] + args)
    assert r.exit_code == 2 and f"Invalid value for '{option}'" in r.output


def test_plot_ranks_select_the_timeline_rows(tmp_path, scen):
    r = CliRunner().invoke(main, ["plot", str(scen), "-o", str(tmp_path), "--ranks", "0-1,7",
                                  "--scale", "8"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "cross-timeline.png").stat().st_size > 0


def _read_only(monkeypatch):  # type: ignore[no-untyped-def]
    """A read-only file system: creating, renaming and unlinking files fail with EROFS."""
    real_open = open

    def ro(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system")

    def ro_open(file, mode="r", *a, **k):  # type: ignore[no-untyped-def]
        if any(c in mode for c in "wax+"):
            raise OSError(errno.EROFS, "Read-only file system", str(file))
        return real_open(file, mode, *a, **k)

    monkeypatch.setattr(os, "replace", ro)
    monkeypatch.setattr(Path, "unlink", ro)
    monkeypatch.setattr("builtins.open", ro_open)


def test_export_into_a_read_only_directory_is_one_line(tmp_path, scen, monkeypatch):
    _read_only(monkeypatch)
    r = CliRunner().invoke(main, ["export", str(scen), "--to", "csv", "-o",
                                  str(tmp_path / "m.csv"), "--scale", "8"])
    assert r.exit_code == 1, r.output
    assert r.output.startswith("error: ") and r.output.count("\n") == 1
    assert "Read-only file system" in r.output


def test_plot_into_a_read_only_directory_is_one_line(tmp_path, scen, monkeypatch):
    _read_only(monkeypatch)
    r = CliRunner().invoke(main, ["plot", str(scen), "-o", str(tmp_path), "--scale", "8"])
    assert r.exit_code == 1, r.output
    assert r.output.startswith("error: ") and r.output.count("\n") == 1
    assert "cannot write: Read-only file system" in r.output


def test_export_schedules_the_plan_at_its_scale(scen):
    """The exported messages are the plan's calls at --scale, scaled once (the plan's bytes)."""
    from tokenpcap.export.core import schedule_scenario
    from tokenpcap.records import KIND_DATA

    _, plan, sched = schedule_scenario(scen, scale=8, iterations=1)
    assert plan.scale == 8 and sched.plan is plan
    d = sched.messages[sched.messages["kind"] == KIND_DATA]
    assert int(d["size_bytes"].sum()) == plan.totals()["nic_bytes"]


def test_plot_and_export_refuse_gpt3_175b_at_once(tmp_path):
    g3 = str(ROOT / "profiles" / "scenarios" / "gpt3-175b-megatron.yaml")
    for args in (["plot", g3, "-o", str(tmp_path)],
                 ["export", g3, "--to", "csv", "-o", str(tmp_path / "m.csv")]):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 1 and "too large for the timing engine" in r.output


def test_plot_and_export_create_their_output_directories(tmp_path, scen):
    """``plot X -o pics`` (the README's command) and ``export -o a/b/x.csv`` create the missing directories, parents too, as ``generate -o`` does."""
    r = CliRunner().invoke(main, ["plot", str(scen), "-o", str(tmp_path / "p" / "pics"),
                                  "--scale", "8"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "p" / "pics" / "cross-timeline.png").stat().st_size > 0
    r = CliRunner().invoke(main, ["export", str(scen), "--to", "hpcc", "-o",
                                  str(tmp_path / "x" / "y" / "cross.hpcc"), "--scale", "8"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "x" / "y").iterdir()) == \
        ["cross-config.txt", "cross-topology.txt", "cross-trace.txt", "cross.hpcc"]


def test_a_file_in_the_output_path_is_named_a_file(tmp_path, scen):
    """A regular file where a directory must be: one line saying "got a file", not "missing";
    a refused plot/export leaves no directory behind."""
    (tmp_path / "afile").write_text("")
    for args in (["plot", str(scen), "-o", str(tmp_path / "afile" / "pics")],
                 ["export", str(scen), "--to", "csv", "-o", str(tmp_path / "afile" / "x.csv")]):
        r = CliRunner().invoke(main, args + ["--scale", "8"])
        assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
        assert f"got a file ({tmp_path / 'afile'})" in r.output and "missing" not in r.output
    r = CliRunner().invoke(main, ["plot", str(tmp_path / "nosuch.yaml"), "-o",
                                  str(tmp_path / "new" / "pics")])
    assert r.exit_code != 0 and not (tmp_path / "new").exists()


def test_plot_a_directory_draws_each_capture(tmp_path, scapy_vectors):  # type: ignore[no-untyped-def]
    """``plot DIR`` draws the two capture pictures for every capture in DIR, in name order, and
    prints their paths; a directory without captures is one line, exit 1."""
    from tests.analysis.test_inspect import write

    frames = [bytes.fromhex(v["hex"]) for v in scapy_vectors["vectors"]]
    caps, pics = tmp_path / "caps", tmp_path / "pics"
    caps.mkdir()
    write(caps / "nic1.pcap", frames[:4])
    write(caps / "nic0.pcap", frames[4:])
    r = CliRunner().invoke(main, ["plot", str(caps), "-o", str(pics)])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == [str(pics / f"nic{i}-{kind}.png") for i in (0, 1)
                                     for kind in ("throughput", "sizes")]
    assert all(p.stat().st_size > 0 for p in pics.iterdir())
    empty = tmp_path / "empty"
    empty.mkdir()
    r = CliRunner().invoke(main, ["plot", str(empty), "-o", str(pics)])
    assert r.exit_code == 1
    assert r.output == (f"error: {empty}: got a directory without .pcap, .pcapng or .erf files, "
                        "expected captures\n")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_stops_plot_with_one_line_and_keeps_the_earlier_pictures(tmp_path, sig):
    """Every command, not only generate: SIGTERM/SIGINT while plot schedules a scenario stop it
    at once (exit 143/130, one line) and the directory keeps the pictures it held."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "png"
    out.mkdir()
    for n in ("dante-timeline.png", "dante-message-sizes.png"):
        (out / n).write_bytes(b"earlier " + n.encode())
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    proc = subprocess.Popen([sys.executable, "-m", "tokenpcap", "plot", str(DANTE), "-o",
                             str(out), "--iterations", "3"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not any(p.name.startswith(".tokenpcap-stage") for p in out.iterdir()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    time.sleep(0.3)
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + getattr(signal, sig), err
    *stages, last = err.splitlines()          # a step's line ("tokenpcap: timing ...") may precede
    assert last == f"error: stopped ({sig}): nothing half-written was kept", err
    assert all(ln.startswith("tokenpcap: ") for ln in stages), err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_plot_ranks_span_the_context_parallel_world(tmp_path):
    # dp 1 x cp 4 x tp 8 x pp 4 = 128 ranks: --ranks is checked against all of them (exit 2
    # before anything is scheduled), not against dp * tp * pp = 32.
    scen = Path(__file__).resolve().parents[2] / "profiles/scenarios/llama3-70b-64k-cp4.yaml"
    r = CliRunner().invoke(main, ["plot", str(scen), "-o", str(tmp_path / "p"), "--ranks", "128"])
    assert r.exit_code == 2 and "0..127" in r.output, r.output


def test_plot_fabric(tmp_path):
    """``plot --fabric DIR [CAPTURES]`` prints the one PNG it draws; a scenario or --ranks
    beside --fabric, and no source at all, are usage errors; bad side files one line."""
    from tests.analysis.fabric_toy import several_incasts
    from tests.analysis.trace import write_trace
    from tokenpcap.generate.fabricfiles import write_fabric_files

    log, s = several_incasts(3)
    write_fabric_files(tmp_path, "toy", log, s)
    write_trace(tmp_path / "toy_node00_nic0.pcap", 64)
    pics = tmp_path / "pics"
    r = CliRunner().invoke(main, ["plot", "--fabric", str(tmp_path), "-o", str(pics)])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines() == [str(pics / "toy-fabric-queues.png")]
    r = CliRunner().invoke(main, ["plot", str(tmp_path), "--fabric",
                                  str(tmp_path / "toy_fabric.json"), "-o", str(pics)])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in pics.iterdir()) == ["toy-fabric-queues.png"]
    for args, message in ((["plot", str(DANTE), "--fabric", str(tmp_path)], "got a scenario"),
                          (["plot", "--fabric", str(tmp_path), "--ranks", "0"], "got ranks"),
                          (["plot", "-o", str(pics)], "expected SOURCE")):
        r = CliRunner().invoke(main, args)
        assert r.exit_code == 2 and message in r.output, r.output
    (tmp_path / "toy_fabric-links.csv").write_text("switch\n")
    r = CliRunner().invoke(main, ["plot", "--fabric", str(tmp_path), "-o", str(pics)])
    assert r.exit_code == 1 and r.output.startswith(f"error: {tmp_path}/toy_fabric-links.csv: "
                                                    "line 1: column 2: got 'nothing'")
    assert len(r.output.splitlines()) == 1


def test_plot_a_capture_with_a_bin_and_a_time_window(tmp_path):
    """The throughput picture of a small capture with --bin and --time-window (the numbers
    behind it: tests/analysis/test_plot_series.py)."""
    from tests.analysis.trace import write_phase_trace

    path, p = write_phase_trace(tmp_path)
    end_us = int(p["time_ns"].max() - p["time_ns"][0]) // 1000
    r = CliRunner().invoke(main, ["plot", str(path), "-o", str(tmp_path / "o"), "--bin", "50",
                                  "--time-window", f"1us:{end_us}us"])
    assert r.exit_code == 0, r.output
    assert [Path(x).name for x in r.output.split()] == ["t-throughput.png", "t-sizes.png"]


def test_plot_heatmap_and_fan_in_of_a_directory_and_of_several_files(tmp_path):
    """--heatmap/--fan-in draw only those pictures, of every capture given together, named
    after the first SOURCE; with a scenario, --fabric or --ranks they are usage errors."""
    from tests.analysis.trace import packets, write_trace

    p = packets(2000)
    caps = tmp_path / "caps"
    caps.mkdir()
    for g in range(4):
        write_trace(caps / f"nic{g}.pcap", 0, pkts=p[p["nic"] == g])
    r = CliRunner().invoke(main, ["plot", str(caps), "-o", str(tmp_path / "o"), "--heatmap",
                                  "--fan-in", "--bin", "1000"])
    assert r.exit_code == 0, r.output
    assert [Path(x).name for x in r.output.split()] == ["caps-heatmap.png", "caps-fan-in.png"]
    assert sorted(x.name for x in (tmp_path / "o").iterdir()) == ["caps-fan-in.png",
                                                                  "caps-heatmap.png"]
    files = [str(caps / f"nic{g}.pcap") for g in (2, 0)]
    r = CliRunner().invoke(main, ["plot", *files, "-o", str(tmp_path / "o2"), "--heatmap"])
    assert r.exit_code == 0 and Path(r.output.split()[0]).name == "nic2-heatmap.png", r.output
    r = CliRunner().invoke(main, ["plot", *files, "-o", str(tmp_path / "o3")])
    assert [Path(x).name for x in r.output.split()] == ["nic2-throughput.png", "nic2-sizes.png",
                                                        "nic0-throughput.png", "nic0-sizes.png"]
    for args, option, message in (
            ([str(DANTE), "--heatmap"], "--heatmap", "got --heatmap with a scenario"),
            ([str(caps), "--fan-in", "--fabric", str(caps)], "--fan-in", "with --fabric"),
            ([str(caps), "--heatmap", "--ranks", "0"], "--heatmap", "with --ranks"),
            ([str(DANTE), str(caps)], "SOURCE", "expected one scenario or captures")):
        r = CliRunner().invoke(main, ["plot", *args, "-o", str(tmp_path / "bad")])
        assert r.exit_code == 2 and f"'{option}'" in r.output and message in r.output, r.output
        assert not (tmp_path / "bad").exists()
