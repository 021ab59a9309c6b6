"""filekind: what a path names, from stat (POSIX S_IS* macros), symbolic links followed."""
from __future__ import annotations

import os
import socket
import stat

import pytest

from tokenpcap.pcap.filekind import file_kind, special_kind


def test_file_kind_names_every_stat_type():
    assert file_kind(stat.S_IFREG | 0o644) == "a regular file"
    assert file_kind(stat.S_IFDIR | 0o755) == "a directory"
    assert file_kind(stat.S_IFCHR) == "a character device"
    assert file_kind(stat.S_IFBLK) == "a block device"
    assert file_kind(stat.S_IFIFO) == "a FIFO (named pipe)"
    assert file_kind(stat.S_IFSOCK) == "a socket"
    assert file_kind(0) == "a special file"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_special_kind_of_real_paths(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/dev/null", tmp_path / "null-link")
    os.symlink(tmp_path / "f", tmp_path / "file-link")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "s"))
        assert special_kind(tmp_path / "s") == "a socket"
    finally:
        sock.close()
    assert special_kind(tmp_path / "f") is None and special_kind(tmp_path / "file-link") is None
    assert special_kind(tmp_path / "missing") is None and special_kind("a\0b") is None
    assert special_kind(tmp_path / "fifo") == "a FIFO (named pipe)"
    assert special_kind(tmp_path / "null-link") == "a character device"
    assert special_kind(tmp_path) == "a directory"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs POSIX FIFOs")
def test_refuse_special_output_refuses_all_but_a_regular_file_or_a_new_path(tmp_path):
    from tokenpcap.errors import OutputError
    from tokenpcap.pcap.filekind import refuse_special_output

    (tmp_path / "f").write_bytes(b"x")
    os.mkfifo(tmp_path / "fifo")
    refuse_special_output(tmp_path / "f")
    refuse_special_output(tmp_path / "new")
    for name, kind in (("fifo", r"a FIFO \(named pipe\)"), (".", "a directory")):
        with pytest.raises(OutputError, match=rf"^{tmp_path / name}: got {kind}, expected a "
                                              r"regular file or a new path \(the output "
                                              r"replaces it\)$"):
            refuse_special_output(tmp_path / name)
    assert stat.S_ISFIFO(os.stat(tmp_path / "fifo").st_mode)
