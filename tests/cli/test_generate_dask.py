"""``tokenpcap generate --dask``: the command on a local cluster, and its refusals."""
from __future__ import annotations

import filecmp
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tokenpcap.cli import main

pytest.importorskip("distributed", reason="the 'dask' extra is not installed")

ROOT = Path(__file__).resolve().parents[2]
CROSS = ROOT / "profiles" / "scenarios" / "gpt2-all-cross.yaml"


@pytest.mark.slow
def test_generate_on_a_local_cluster_writes_the_files_of_one_job(tmp_path):
    args = ["generate", str(CROSS), "--scale", "64"]
    one = CliRunner().invoke(main, args + ["-o", str(tmp_path / "one"), "--jobs", "1"])
    assert one.exit_code == 0, one.output
    r = CliRunner().invoke(main, args + ["-o", str(tmp_path / "dask"), "--dask", "local:2"])
    assert r.exit_code == 0, r.output
    assert re.search(r"writing 8 pcapng files to .* in 2 shards on the cluster", " ".join(r.output.split()))
    names = sorted(p.name for p in (tmp_path / "one").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "dask").iterdir()) and len(names) == 8
    assert all(filecmp.cmp(tmp_path / "one" / n, tmp_path / "dask" / n, shallow=False)
               for n in names)
    summary = re.compile(r"packets [\d,]+, file bytes ([\d,]+) \(expected ([\d,]+)\)")
    assert summary.search(r.output).groups() == summary.search(one.output).groups()


@pytest.mark.parametrize("extra, code, message", [
    (["--split", "phase"], 2, "expected --split nic with --dask"),
    (["--dask", "local:zero"], 1, "error: --dask: got 'local:zero', expected local, local:N"),
])
def test_refusals_are_one_line_and_leave_no_directory(tmp_path, extra, code, message):
    args = ["generate", str(CROSS), "-o", str(tmp_path / "out"), "--scale", "64"]
    if "--dask" not in extra:
        extra = extra + ["--dask", "local:1"]
    r = CliRunner().invoke(main, args + extra)
    assert r.exit_code == code, r.output
    assert message in r.output
    assert not (tmp_path / "out").exists()
