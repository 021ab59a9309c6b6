"""Pictures of a simulator's run beside ours: both PNGs from the real Dante run, flows the
simulator did not complete drawn as such, and a refused output leaves nothing."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenpcap.analysis.plot_compare import plot_comparison, plot_nic_completion
from tokenpcap.errors import OutputError
from tokenpcap.export.hpcc_fct import compare_hpcc

ROOT = Path(__file__).resolve().parents[2]
DANTE = ROOT / "profiles" / "scenarios" / "dante.yaml"
FCT = ROOT / "tests" / "cases" / "hpcc" / "dante-scale64-fct.txt"


def test_pictures_with_a_flow_not_completed(tmp_path):
    lines = FCT.read_text().splitlines(keepends=True)
    (tmp_path / "fct.txt").write_text("".join(lines[1:]))
    c = compare_hpcc(DANTE, tmp_path / "fct.txt", scale=64)
    assert int((~c.completed).sum()) == 1
    paths = plot_comparison(c, tmp_path / "pics", stem="dante")
    assert [p.name for p in paths] == ["dante-slowdown-cdf.png", "dante-nic-completion.png"]
    assert all(p.stat().st_size > 10_000 for p in paths)
    (tmp_path / "x.png").mkdir()
    with pytest.raises(OutputError, match="x.png: cannot write"):
        plot_nic_completion(c, tmp_path / "x.png")
    assert not list(tmp_path.glob(".x.png*"))
