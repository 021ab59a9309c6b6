"""plot: every picture is a real PNG of a sensible size, laid out readably, and the pictures of
a run land together or not at all."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.analysis.trace import write_phase_trace
from tokenpcap.errors import InputError
from tokenpcap.analysis.plot import capture_series, plot_all, plot_sizes, plot_throughput

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    return write_phase_trace(tmp_path_factory.mktemp("plot"))


def test_pngs(tmp_path, trace):
    path, _ = trace
    s = capture_series(path)
    for f in (plot_throughput(s, tmp_path / "a.png"), plot_sizes(s, tmp_path / "b.png")):
        data = f.read_bytes()
        assert data[:8] == PNG and len(data) > 20_000
    files = plot_all(path, tmp_path)
    assert [f.name for f in files] == ["t-throughput.png", "t-sizes.png"]


def test_throughput_legend_covers_no_panel(tmp_path, trace, monkeypatch):
    """The phase legend sits outside every panel (its drawn box meets
    no axes' box) and inside the figure (not cut off)."""
    import tokenpcap.analysis.plot as plot
    seen = []
    real = plot.save_figure

    def keep(fig, out):
        fig.tight_layout()
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        seen.append(([lg.get_window_extent(r) for lg in legends],
                     [ax.get_window_extent(r) for ax in fig.axes], fig.bbox))
        return real(fig, out)
    monkeypatch.setattr(plot, "save_figure", keep)
    plot_throughput(capture_series(trace[0]), tmp_path / "a.png")
    (legends, panels, page), = seen
    assert legends
    for box in legends:
        assert not any(box.overlaps(p) for p in panels)
        assert page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0 <= box.y1 <= page.y1


def test_no_rdma_is_an_error(tmp_path):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap
    wrpcap(str(tmp_path / "tcp.pcap"), [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
                                         / IP(src="198.18.0.1", dst="198.18.0.2") / TCP()])
    with pytest.raises(InputError, match="no RoCE"):
        plot_throughput(capture_series(tmp_path / "tcp.pcap"), tmp_path / "x.png")


def test_scenario_timeline_and_cli(tmp_path):
    from click.testing import CliRunner

    from tokenpcap.cli import main
    r = CliRunner().invoke(main, ["plot", str(ROOT / "profiles/scenarios/dante.yaml"), "-o",
                                  str(tmp_path), "--scale", "64"])
    assert r.exit_code == 0, r.output
    for name in ("dante-timeline.png", "dante-message-sizes.png"):
        assert (tmp_path / name).read_bytes()[:8] == PNG
    (tmp_path / "afile").write_text("")
    r = CliRunner().invoke(main, ["plot", str(ROOT / "profiles/scenarios/dante.yaml"), "-o",
                                  str(tmp_path / "afile" / "pics")])
    assert r.exit_code == 1 and "output directory: got a file" in r.output
    assert np.__version__


def test_the_pictures_land_together_or_not_at_all(tmp_path, trace, monkeypatch):
    """A failure drawing the second picture left the first new one beside an old second; now
    the earlier pictures stay as they were, and a concurrent plot is refused."""
    from tokenpcap.analysis import plot
    from tokenpcap.errors import OutputError
    from tokenpcap.pcap.outputset import OutputSet

    path, _ = trace
    first = plot_all(path, tmp_path / "png")
    before = {p.name: p.read_bytes() for p in first}

    def fails(series, out, *, title=""):  # type: ignore[no-untyped-def]
        raise OutputError(f"{out}: cannot write: No space left on device")

    monkeypatch.setattr(plot, "plot_sizes", fails)
    with pytest.raises(OutputError, match="No space left"):
        plot_all(path, tmp_path / "png")
    assert {p.name: p.read_bytes() for p in (tmp_path / "png").iterdir()} == before
    monkeypatch.undo()
    with OutputSet(tmp_path / "png"):
        with pytest.raises(OutputError, match="another tokenpcap run writing into it"):
            plot_all(path, tmp_path / "png")


def test_an_interleaved_timeline_says_so_in_its_title(tmp_path, monkeypatch):
    """Dante with virtual_pipeline_model_parallel_size 3 runs Megatron's interleaved 1F1B (three
    model chunks per stage); the title names that schedule, not plain 1F1B."""
    import yaml

    import tokenpcap.analysis.plot as plot

    src = ROOT / "profiles/scenarios/dante.yaml"
    d = yaml.safe_load(src.read_text())
    for key in ("corpus", "model", "cluster"):
        d[key] = str((src.parent / d[key]).resolve())
    d["parallelism"]["virtual_pipeline_model_parallel_size"] = 3
    scen = tmp_path / "dante-vpp3.yaml"
    scen.write_text(yaml.safe_dump(d))
    titles: list[str] = []
    monkeypatch.setattr(plot, "plot_timeline",
                        lambda t, m, out, *, title="", **k: titles.append(title) or out)
    monkeypatch.setattr(plot, "plot_sizes", lambda series, out, **k: out)
    plot_all(scen, tmp_path / "pics", scale=64)
    assert titles[0].startswith("dante-vpp3: compute and RDMA messages per rank (interleaved 1F1B, "
                                "3 model chunks per stage)\n"), titles[0]


def test_a_capture_whose_name_is_not_utf8_is_drawn_with_the_bytes_escaped_in_titles(
        tmp_path, trace):
    """Linux names are bytes: b'\\xff' decodes to a lone surrogate, which a font cannot draw."""
    import os

    path, _ = trace
    odd = Path(os.fsdecode(os.fsencode(tmp_path) + b"/\xff.pcapng"))
    odd.write_bytes(Path(path).read_bytes())
    files = plot_all(odd, tmp_path / "out")
    assert [os.fsencode(f.name) for f in files] == [b"\xff-throughput.png", b"\xff-sizes.png"]
    assert all(f.read_bytes()[:8] == PNG for f in files)
