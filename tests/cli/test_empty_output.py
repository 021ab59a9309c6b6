"""An empty output path (``-o "$OUT"`` with ``OUT`` unset) is a usage error on every command
that writes: ``Path("")`` is the current directory, so ``generate``, ``run`` and ``plot`` wrote
their files wherever the shell was, while ``export`` and ``readdress`` refused it as a library
error naming ``''``."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tokenpcap.cli import main

ROOT = Path(__file__).resolve().parents[2]
DANTE = str(ROOT / "profiles" / "scenarios" / "dante.yaml")
HPCC = ROOT / "tests" / "cases" / "hpcc"
COMMANDS = {
    "generate": ["generate", DANTE, "--nics", "0", "-o", ""],
    "run": ["run", DANTE, "-o", ""],
    "plot": ["plot", DANTE, "-o", ""],
    "export": ["export", DANTE, "--to", "csv", "-o", ""],
    "readdress": ["readdress", "CAPTURE", "-o", ""],
    "compare": ["compare", str(HPCC / "dante-flows.yaml"), "--scale", "64", "--hpcc-fct",
                str(HPCC / "dante-scale64-fct.txt"), "--plot", ""],
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_an_empty_output_path_is_a_usage_error(tmp_path, monkeypatch, command):
    from tests.analysis.trace import write_trace

    capture = tmp_path / "in.pcap"
    write_trace(capture, 16)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    args = [str(capture) if a == "CAPTURE" else a for a in COMMANDS[command]]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2, r.output
    assert "got an empty path, expected a path ('.' for the current directory)" in r.output
    assert not list(cwd.iterdir())
