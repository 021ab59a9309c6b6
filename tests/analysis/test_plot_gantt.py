"""plot_gantt: which ranks the scenario timeline draws, and that it says so."""
from __future__ import annotations

from pathlib import Path

from tokenpcap.analysis.plot import plot_all

ROOT = Path(__file__).resolve().parents[2]


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
    from tokenpcap.analysis.plot_gantt import default_timeline_ranks

    assert default_timeline_ranks({r: r // 4 for r in range(8)}) == (list(range(8)), "all 8 ranks")
    ranks, caption = default_timeline_ranks({r: r // 8 for r in range(256)})   # pp 32
    assert ranks == list(range(0, 256, 8))
    assert caption == ("32 of 256 ranks: the first rank of each of the 32 pipeline stages; "
                       "--ranks draws others")
