"""figure: the time-axis unit, and that a PNG lands whole or not at all."""
from __future__ import annotations

import os

import pytest

from tokenpcap.analysis.figure import pyplot, save_figure, time_axis
from tokenpcap.errors import OutputError

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("span_ns, want", [(0, ("ns", 1)), (9_999, ("ns", 1)),
                                           (10_000, ("µs", 1_000)), (9_999_999, ("µs", 1_000)),
                                           (10_000_000, ("ms", 1_000_000))])
def test_time_axis_unit_keeps_ticks_short(span_ns, want):
    assert time_axis(span_ns) == want


def _figure():
    fig, ax = pyplot().subplots()
    ax.plot([0, 1], [1, 0])
    return fig


def test_save_figure_writes_a_png_and_closes_the_figure(tmp_path):
    plt = pyplot()
    fig = _figure()
    out = save_figure(fig, tmp_path / "a.png")
    assert out.read_bytes()[:8] == PNG
    assert not plt.fignum_exists(fig.number)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png"]


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root writes into a read-only directory")
def test_save_figure_refused_leaves_nothing(tmp_path):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        with pytest.raises(OutputError, match=r"a\.png: cannot write"):
            save_figure(_figure(), d / "a.png")
        assert list(d.iterdir()) == []
    finally:
        d.chmod(0o700)


def test_save_figure_into_a_missing_directory_is_one_error(tmp_path):
    with pytest.raises(OutputError, match=r"a\.png: cannot write: No such file or directory"):
        save_figure(_figure(), tmp_path / "missing" / "a.png")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_save_figure_never_renames_over_a_fifo(tmp_path):
    """The rename into place would replace a device (``/dev/null``) or FIFO named as the output:
    refused in one line, the figure closed, the FIFO left as it was."""
    import stat

    plt = pyplot()
    fifo = tmp_path / "a.png"
    os.mkfifo(fifo)
    fig = _figure()
    with pytest.raises(OutputError, match=r"a.png: got a FIFO \(named pipe\), expected a regular "
                                          r"file or a new path"):
        save_figure(fig, fifo)
    assert not plt.fignum_exists(fig.number)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png"]


def test_every_phase_family_has_its_own_colour():
    import re

    from tokenpcap.analysis.figure import FAMILY_COLORS, family_color, family_of
    from tokenpcap.records import DIMS

    assert set(DIMS) <= set(FAMILY_COLORS)
    assert len(set(FAMILY_COLORS.values())) == len(FAMILY_COLORS)        # distinct
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in FAMILY_COLORS.values())
    assert family_of("dp/backward/AllReduce") == "dp" and family_of("ep/forward/AllToAll") == "ep"
    assert family_of("control (CTS, ACK)") == "control" and family_of("(no phase)") == "(no phase)"
    assert family_of("nosuch/x/y") == "(no phase)"
    assert family_color("dp/optimizer/AllReduce") == family_color("dp/backward/ReduceScatter")
    assert family_color("dp/backward/AllReduce") != family_color("pp/forward/SendRecv")


def test_stacked_phases_keep_their_family_colour_and_stay_apart():
    """The throughput stacks colour each phase from its family's entry: the first phase of a
    family in the family's own colour, the next ones lighter (the same hue), never two alike."""
    from matplotlib.colors import rgb_to_hsv, to_rgb

    from tokenpcap.analysis.figure import FAMILY_COLORS, phase_colors

    labels = ["dp/backward/AllReduce", "dp/optimizer/AllReduce", "pp/forward/SendRecv",
              "dp/backward/ReduceScatter", "pp/backward/SendRecv", "(no phase)"]
    got = phase_colors(labels)
    assert got[0] == FAMILY_COLORS["dp"] and got[2] == FAMILY_COLORS["pp"]
    assert got[5] == FAMILY_COLORS["(no phase)"]
    assert len(set(got)) == len(got)
    hue = lambda c: round(float(rgb_to_hsv(to_rgb(c))[0]), 2)   # noqa: E731
    assert hue(got[1]) == hue(got[3]) == hue(FAMILY_COLORS["dp"])
    assert sum(to_rgb(got[1])) > sum(to_rgb(got[0]))              # lighter
