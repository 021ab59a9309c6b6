"""export: CSV/Parquet table and Chrome trace of one Dante iteration (HPCC: test_hpcc.py).

The independent numbers are the plan's (stage 3, analytic) payload bytes per phase and per NIC:
the exported messages must add up to them exactly.
"""
from __future__ import annotations

import csv
import json
import os
import stat
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tokenpcap.errors import InputError, OutputError
from tokenpcap.export.core import (TABLE_COLUMNS, export_scenario, schedule_scenario,
                                   write_chrome, write_table)

ROOT = Path(__file__).resolve().parents[2]
DANTE = ROOT / "profiles" / "scenarios" / "dante.yaml"


@pytest.fixture(scope="module")
def dante():
    s, plan, sched = schedule_scenario(DANTE)
    return s, plan, sched.messages, sched.timeline


def test_csv_and_parquet_add_up_to_the_plan(tmp_path, dante):
    _, plan, m, _ = dante
    path = write_table(m, tmp_path / "m.csv")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == TABLE_COLUMNS and len(rows) == m.size
    per_phase = Counter()
    for r in rows:
        if r["kind"] == "data":
            per_phase[r["phase"]] += int(r["size_bytes"])
        assert int(r["end_ns"]) >= int(r["start_ns"])
    assert dict(per_phase) == {r.name: r.nic_bytes for r in plan.rows if r.nic_bytes}
    pq = pytest.importorskip("pyarrow.parquet")
    t = pq.read_table(write_table(m, tmp_path / "m.parquet", "parquet")).to_pydict()
    assert t["size_bytes"] == [int(r["size_bytes"]) for r in rows]
    assert t["phase"] == [r["phase"] for r in rows]


def test_chrome_trace(tmp_path, dante):
    _, _, m, tl = dante
    ev = json.loads(write_chrome(tl, m, tmp_path / "t.json").read_text())["traceEvents"]
    x = [e for e in ev if e["ph"] == "X"]
    assert sum(e["tid"] == 0 for e in x) == tl.size
    assert sum(e["tid"] == 1 for e in x) == int((m["first_tx_ns"] >= 0).sum())
    assert all(e["ts"] >= 0 and e["dur"] > 0 for e in x)
    b = next(e for e in x if e["tid"] == 0 and e["name"].startswith("backward"))
    blk = tl[(tl["rank"] == b["pid"]) & (tl["what"] == b"B")][0]
    assert b["ts"] == round(int(blk["start_ns"]) / 1000, 3)


def test_export_cli_and_errors(tmp_path):
    from click.testing import CliRunner

    from tokenpcap.cli import main
    r = CliRunner().invoke(main, ["export", str(DANTE), "--to", "csv", "-o",
                                  str(tmp_path / "d.csv"), "--scale", "64"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "d.csv").read_text().startswith("msg_id,start_ns")
    (tmp_path / "afile").write_text("")
    with pytest.raises(OutputError, match="output directory: got a file"):
        export_scenario(DANTE, "csv", tmp_path / "afile" / "x.csv")
    with pytest.raises(InputError, match="expected one of"):
        export_scenario(DANTE, "xml", tmp_path / "x.xml")
    r = CliRunner().invoke(main, ["export", str(DANTE), "--to", "csv", "-o", str(tmp_path / "y"),
                                  "--scale", "0"])
    assert r.exit_code == 2 and "Invalid value for '--scale'" in r.output   # a usage error
    assert np.__version__


def test_hpcc_flows_and_topology_land_together_or_not_at_all(tmp_path, monkeypatch):
    """A failure after the flow file was written leaves the earlier set whole (the files are
    staged in the locked directory and moved together), and a concurrent export is refused."""
    from tokenpcap.export import hpcc
    from tokenpcap.pcap.outputset import OutputSet

    out = tmp_path / "x" / "flows.txt"
    first = export_scenario(DANTE, "hpcc", out, scale=64)
    assert len(first) >= 2
    before = {p.name: p.read_bytes() for p in out.parent.iterdir()}

    def first_then_full(files):  # type: ignore[no-untyped-def]
        path, lines = next(iter(files.items()))
        path.write_text("".join(lines))
        raise OutputError(f"{path}: cannot write: No space left on device")

    monkeypatch.setattr(hpcc, "_write_all", first_then_full)
    with pytest.raises(OutputError, match="No space left"):
        export_scenario(DANTE, "hpcc", out, scale=32)
    assert {p.name: p.read_bytes() for p in out.parent.iterdir()} == before
    monkeypatch.undo()
    with OutputSet(out.parent):
        with pytest.raises(OutputError, match="another tokenpcap run writing into it"):
            export_scenario(DANTE, "csv", out.parent / "t.csv", scale=64)
    assert {p.name: p.read_bytes() for p in out.parent.iterdir()} == before


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_a_fifo_given_as_output_is_refused_and_left_in_place(tmp_path, dante):
    """Renaming an export over a device or FIFO given as ``-o`` (``/dev/null``) would replace
    it for every program: each writer, the export and the command refuse it in one line (exit
    1), before writing anything, and the FIFO stays a FIFO. No real device is touched here."""
    from click.testing import CliRunner

    from tokenpcap.cli import main
    from tokenpcap.export.hpcc import write_hpcc
    from tokenpcap.export.registry import atomic_text

    s, _, m, tl = dante
    fifo = tmp_path / "out.txt"
    os.mkfifo(fifo)
    refused = rf"{fifo}: got a FIFO \(named pipe\), expected a regular file or a new path"
    for write in (lambda p: write_table(m, p, "csv"), lambda p: write_table(m, p, "parquet"),
                  lambda p: write_chrome(tl, m, p), lambda p: atomic_text(p, ["x\n"]),
                  lambda p: write_hpcc(m, s.cluster, p)):
        with pytest.raises(OutputError, match=refused):
            write(fifo)
    os.rename(fifo, tmp_path / "flows-topology.txt")          # a FIFO beside the flow file
    with pytest.raises(OutputError, match=r"flows-topology.txt: got a FIFO"):
        write_hpcc(m, s.cluster, tmp_path / "flows.txt")
    os.rename(tmp_path / "flows-topology.txt", fifo)
    with pytest.raises(OutputError, match=refused):
        export_scenario(DANTE, "simai", fifo)
    r = CliRunner().invoke(main, ["export", str(DANTE), "--to", "csv", "-o", str(fifo),
                                  "--scale", "64"])
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert "got a FIFO (named pipe), expected a regular file or a new path" in r.output
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]     # no file, no stage


def test_a_workload_exports_its_messages_and_refuses_simai_in_one_line(tmp_path):
    path = ROOT / "profiles" / "scenarios" / "incast-63x16m.yaml"
    (out,) = export_scenario(path, "csv", tmp_path / "incast.csv", scale=64)
    with open(out, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["kind"] == "data"]
    # 256 KiB per sender: NCCL's p2p chunks of half a 128 KiB step below 8 steps (addP2pToPlan)
    assert len(rows) == 63 * 4 and {r["phase"] for r in rows} == {"wl/run/SendRecv"}
    assert sorted(int(r["rank_src"]) for r in rows) == sorted(list(range(1, 64)) * 4)
    assert {(r["rank_dst"], r["size_bytes"], r["token_start"]) for r in rows} == \
        {("0", str((16 << 20) // 64 // 4), "-1")}
    flows = export_scenario(path, "hpcc", tmp_path / "incast.txt", scale=64)[0]
    assert flows.read_text().splitlines()[0] == str(63 * 4)
    with pytest.raises(InputError, match=r"incast-63x16m.yaml: a workload scenario has no model: "
                       r"the SimAI export \(a workload file of a model's layers\) needs a "
                       r"training scenario"):
        export_scenario(path, "simai", tmp_path / "w" / "incast.txt")
    assert not (tmp_path / "w").exists()
