"""pathlimits: an output path the file system cannot hold is refused in one line before
anything is made, for directories, atomic files and the files of an output set."""
from __future__ import annotations

import os

import pytest

from tokenpcap.errors import OutputError
from tokenpcap.pcap.output import AtomicOutput, make_directory
from tokenpcap.pcap.outputset import OutputSet
from tokenpcap.pcap.pathlimits import PART_EXTRA_BYTES, check_path_length, name_max, shown


def test_the_limits_are_the_file_systems():
    nm, pm = name_max("/tmp/does/not/exist")
    assert (nm, pm) == (os.pathconf("/tmp", "PC_NAME_MAX"), os.pathconf("/tmp", "PC_PATH_MAX"))


def test_a_directory_name_over_name_max_is_refused_and_nothing_is_made(tmp_path):
    nm, _ = name_max(tmp_path)
    with pytest.raises(OutputError, match=rf"output directory: got a name of {nm + 1} bytes "
                                          rf".*expected at most {nm} "):
        with make_directory(tmp_path / "a" / ("d" * (nm + 1))):
            pass
    assert list(tmp_path.iterdir()) == []
    with make_directory(tmp_path / ("d" * nm)) as d:    # the limit itself is fine
        assert d.is_dir()


def test_an_atomic_file_leaves_room_for_its_temporary_name(tmp_path):
    nm, _ = name_max(tmp_path)
    longest = nm - PART_EXTRA_BYTES
    with pytest.raises(OutputError, match=rf"output file: got a name of {longest + 1} bytes .*"
                                          rf"expected at most {longest} \({nm} the file system"):
        AtomicOutput(tmp_path / ("f" * (longest + 1)))
    out = AtomicOutput(tmp_path / ("f" * longest), threaded=False)
    out.write(b"x")
    out.close()
    assert (tmp_path / ("f" * longest)).read_bytes() == b"x"


def test_a_sibling_file_of_a_set_too_long_is_refused_by_its_final_name(tmp_path):
    nm, _ = name_max(tmp_path)
    name = "s" * (nm - PART_EXTRA_BYTES - 5) + "-topology.txt"   # the base fits, the sibling not
    with OutputSet(tmp_path) as s:
        with pytest.raises(OutputError, match=rf"^{tmp_path}/s+-topology.txt: output file: "):
            s.path(name)
    assert list(tmp_path.iterdir()) == []


def test_a_path_over_path_max_is_refused(tmp_path):
    _, pm = name_max(tmp_path)
    deep = os.path.join(tmp_path, *["p" * 200] * (pm // 200 + 1))
    with pytest.raises(OutputError, match=r"output directory: got a path of \d+ bytes, expected "
                                          r"at most \d+ \(the file system's PATH_MAX\)"):
        check_path_length(deep, what="output directory")


def test_bytes_that_are_not_utf8_are_shown_as_escapes():
    assert shown(os.fsdecode(b"/tmp/\xff.csv")) == "/tmp/\\xff.csv"
    assert shown(b"/tmp/\xfe\nx") == "/tmp/\\xfe\\nx"


def test_a_set_with_a_name_that_is_not_utf8_commits_and_recovers(tmp_path):
    name = os.fsdecode(b"\xff.csv")
    with OutputSet(tmp_path) as s:
        s.path(name).write_bytes(b"x")
        s.commit()
    assert os.listdir(os.fsencode(tmp_path)) == [b"\xff.csv"]
