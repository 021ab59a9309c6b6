"""plot: the numbers behind the pictures (against capinfos and the trace's own construction),
and that every picture is a real PNG of a sensible size."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.analysis.trace import packets, write_trace
from tokenpcap.errors import InputError
from tokenpcap.analysis.plot import capture_series, plot_all, plot_sizes, plot_throughput

ROOT = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("plot")
    n = 4000
    labels = ["dp/backward/AllReduce step 0" if i < n // 2 else "tp/forward/AllReduce mb 1"
              for i in range(n)]
    write_trace(d / "t.pcapng", n, fmt="pcapng", comments=labels)
    return d / "t.pcapng", packets(n)


def test_series_matches_capinfos_and_construction(trace):
    """Binned bytes, NICs, phases and size counts against the packet table the trace was built
    from and against capinfos' totals."""
    from tokenpcap.wire.builder import FrameBuilder

    from tests.analysis.trace import context
    path, p = trace
    s = capture_series(path, bins=50)
    assert sorted(s["nics"]) == [f"198.18.0.{g + 1}" for g in range(4)]
    assert sorted(s["phases"]) == ["dp/backward/AllReduce", "tp/forward/AllReduce"]
    flen = FrameBuilder(context()).frame_bytes(p)
    sizes, counts = np.unique(flen, return_counts=True)
    assert s["frame_sizes"] == dict(zip(sizes.tolist(), counts.tolist()))
    first = p["opcode"] == 6
    assert s["message_sizes"] == {int(p["reth_len"][0]): int(first.sum())}
    slot = (p["time_ns"] - p["time_ns"].min()) // s["bin_ns"]
    total = sum(int(v.sum()) for v in s["throughput"].values())
    assert total == int(flen.sum())
    nic0 = s["nics"].index("198.18.0.1")
    dp = s["phases"].index("dp/backward/AllReduce")
    mine = (p["nic"] == 0) & (np.arange(p.size) < p.size // 2)
    want = np.bincount(slot[mine], flen[mine], minlength=s["bins"]).astype(np.int64)
    assert s["throughput"][(nic0, dp)].tolist() == want.tolist()
    if shutil.which("capinfos"):
        out = subprocess.run(["capinfos", "-M", "-T", "-r", "-c", "-d", str(path)],
                             capture_output=True, text=True, check=True).stdout.split("\t")
        assert int(out[1]) == sum(s["frame_sizes"].values()) and int(out[2]) == total


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
    real = plot._save

    def keep(fig, out):
        fig.tight_layout()
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
        seen.append(([lg.get_window_extent(r) for lg in legends],
                     [ax.get_window_extent(r) for ax in fig.axes], fig.bbox))
        return real(fig, out)
    monkeypatch.setattr(plot, "_save", keep)
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


def test_timeline_draws_the_first_ranks_of_each_stage_and_says_so(tmp_path, monkeypatch):
    """Dante's 32 ranks (Megatron order: TP fastest, then DP, then PP, so stage 0 is ranks
    0-15): the timeline draws the first 8 ranks of each of its 2 stages, and its title says which
    and how many of all; --ranks draws the named ranks and says so."""
    import tokenpcap.analysis.plot as plot

    titles: list[str] = []
    drawn: list[list[int]] = []
    real = plot.plot_timeline

    def spy(timeline, messages, out, *, ranks=None, stage_of=None, title=""):  # type: ignore[no-untyped-def]
        titles.append(title)
        drawn.append(list(ranks))
        return real(timeline, messages, out, ranks=ranks, stage_of=stage_of, title=title)

    monkeypatch.setattr(plot, "plot_timeline", spy)
    dante = ROOT / "profiles/scenarios/dante.yaml"
    plot_all(dante, tmp_path, scale=64)
    assert drawn[0] == list(range(0, 8)) + list(range(16, 24))
    assert titles[0] == ("dante: compute and RDMA messages per rank (1F1B)\n16 of 32 ranks: the "
                         "first 8 of each pipeline stage (stage 0: 0-7, stage 1: 16-23); --ranks "
                         "draws others")
    plot_all(dante, tmp_path, scale=64, ranks=[3, 30])
    assert drawn[1] == [3, 30]
    assert titles[1].endswith("\n2 of 32 ranks, chosen with --ranks")


def test_default_timeline_ranks_small_and_many_stages():
    from tokenpcap.analysis.plot import default_timeline_ranks

    assert default_timeline_ranks({r: r // 4 for r in range(8)}) == (list(range(8)), "all 8 ranks")
    ranks, caption = default_timeline_ranks({r: r // 8 for r in range(256)})   # pp 32
    assert ranks == list(range(0, 256, 8))
    assert caption == ("32 of 256 ranks: the first rank of each of the 32 pipeline stages; "
                       "--ranks draws others")


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
