"""Pictures of a simulator's run beside ours: both PNGs from the real Dante run, flows the
simulator did not complete drawn as such, and a refused output leaves nothing."""
from __future__ import annotations

from pathlib import Path

import pytest

from tokenpcap.analysis.plot_compare import plot_comparison, plot_nic_completion
from tokenpcap.errors import OutputError
from tokenpcap.export.hpcc_fct import compare_hpcc

ROOT = Path(__file__).resolve().parents[2]
DANTE = ROOT / "tests" / "cases" / "simai" / "dante.yaml"   # Dante as SimAI ran it
DANTE_FLOWS = ROOT / "tests" / "cases" / "hpcc" / "dante-flows.yaml"   # p2p as the ns-3 run's flows
FCT = ROOT / "tests" / "cases" / "hpcc" / "dante-scale64-fct.txt"


def test_pictures_with_a_flow_not_completed(tmp_path):
    lines = FCT.read_text().splitlines(keepends=True)
    (tmp_path / "fct.txt").write_text("".join(lines[1:]))
    c = compare_hpcc(DANTE_FLOWS, tmp_path / "fct.txt", scale=64)
    assert int((~c.completed).sum()) == 1
    paths = plot_comparison(c, tmp_path / "pics", stem="dante")
    assert [p.name for p in paths] == ["dante-slowdown-cdf.png", "dante-nic-completion.png"]
    assert all(p.stat().st_size > 10_000 for p in paths)
    (tmp_path / "x.png").mkdir()
    with pytest.raises(OutputError, match="x.png: got a directory, expected a regular file"):
        plot_nic_completion(c, tmp_path / "x.png")
    assert not list(tmp_path.glob(".x.png*"))


def test_simai_pictures_with_a_record_not_reported(tmp_path):
    from tokenpcap.analysis.plot_compare import plot_simai_calls, plot_simai_comparison
    from tokenpcap.export.simai_compare import compare_simai

    csv = ROOT / "tests" / "cases" / "simai" / "dante-EndToEnd.csv"
    keep = [ln for ln in csv.read_text().splitlines(keepends=True)
            if not ln.startswith("dense_grad_bucket0,")]
    (tmp_path / "e.csv").write_text("".join(keep))
    c = compare_simai(DANTE, tmp_path / "e.csv")
    assert c.not_reported == ["dense_grad_bucket0"]
    paths = plot_simai_comparison(c, tmp_path / "pics", stem="dante")
    assert [p.name for p in paths] == ["dante-simai-phases.png", "dante-simai-calls.png"]
    assert all(p.stat().st_size > 10_000 for p in paths)
    (tmp_path / "y.png").mkdir()
    with pytest.raises(OutputError, match="y.png: got a directory, expected a regular file"):
        plot_simai_calls(c, tmp_path / "y.png")
    assert not list(tmp_path.glob(".y.png*"))


@pytest.mark.parametrize("stop", [KeyboardInterrupt, OutputError])
def test_the_pair_of_pictures_lands_together_or_not_at_all(tmp_path, monkeypatch, stop):
    """A stop while the second picture is drawn once left the new first one beside the earlier
    second (and sometimes a .NAME.part.png); now the earlier pair stays whole."""
    from tokenpcap.analysis import plot_compare

    lines = FCT.read_text().splitlines(keepends=True)
    (tmp_path / "fct.txt").write_text("".join(lines[1:]))          # an earlier, other run
    first = plot_comparison(compare_hpcc(DANTE_FLOWS, tmp_path / "fct.txt", scale=64),
                            tmp_path / "pics", stem="dante")
    before = {p.name: p.read_bytes() for p in first}
    c = compare_hpcc(DANTE_FLOWS, FCT, scale=64)

    def stopped(comparison, out, *, title=None):  # type: ignore[no-untyped-def]
        raise stop("stopped while drawing")

    monkeypatch.setattr(plot_compare, "plot_nic_completion", stopped)
    with pytest.raises(stop):
        plot_comparison(c, tmp_path / "pics", stem="dante")
    assert {p.name: p.read_bytes() for p in (tmp_path / "pics").iterdir()} == before
