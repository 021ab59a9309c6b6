"""trace_frames: a --capture directory is one run's complete set of pcapng files."""
from __future__ import annotations

import pytest

from tokenpcap.analysis.trace_frames import capture_files
from tokenpcap.analysis.trace_text import TraceError
from tokenpcap.pcap.outputset import COMMIT_MARK, STAGE_PREFIX, OutputSet


def test_a_directory_with_a_set_stopped_between_its_renames_is_refused(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    (d / "x_node00_nic0.pcapng").write_bytes(b"new")
    stage = d / f"{STAGE_PREFIX}123.abcd"
    stage.mkdir()
    (stage / "x_node00_nic1.pcapng").write_bytes(b"new")
    (stage / COMMIT_MARK).write_text("x_node00_nic0.pcapng\nx_node00_nic1.pcapng\n")
    with pytest.raises(TraceError, match=r"stopped while moving its files into place \(1 of "):
        capture_files(d)
    OutputSet(d).abort()                       # the next run completes the set
    assert [p.name for p in capture_files(d)] == ["x_node00_nic0.pcapng", "x_node00_nic1.pcapng"]


def test_a_device_given_as_capture_is_named_as_what_it_is_not_as_missing(tmp_path):
    with pytest.raises(TraceError, match=r"^/dev/null: --capture: got a character device, "
                                         r"expected a pcapng file"):
        capture_files("/dev/null")
    with pytest.raises(TraceError, match=r"--capture: got a path that does not exist"):
        capture_files(tmp_path / "none.pcapng")
