"""Appends in whole blocks past the page cache (tokenpcap.pcap.blocks through AtomicOutput):
whatever the mix of block appends, buffered writes and released buffers, the file holds the
bytes in the order they were given, as a plain concatenation of them, and ``bytes_written``
is its length; with O_DIRECT refused (as tmpfs does) the bytes are the same. O_DIRECT itself is
checked against the kernel: the writes really bypass the page cache (mincore(2))."""
from __future__ import annotations

import fcntl
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.pcap import blocks
from tokenpcap.pcap.output import AtomicOutput

from .test_dropbehind import _on_tmpfs, _resident_pages

# an operation: ("buffered", n) a plain write of n bytes, ("block", n) n bytes appended in
# place, ("release", 0) the block buffers given back
_OPS = st.lists(st.one_of(st.tuples(st.just("buffered"), st.integers(0, 9000)),
                          st.tuples(st.just("block"), st.integers(0, 20000)),
                          st.tuples(st.just("release"), st.just(0))), max_size=25)


def _run(path, ops, threaded: bool, rng) -> bytes:
    out = AtomicOutput(path, threaded=threaded)
    want = bytearray()
    for kind, n in ops:
        data = rng.integers(0, 256, n, dtype=np.uint8)
        if kind == "buffered":
            out.write(data.tobytes())
        elif kind == "block":
            buf, at = out.blocks()
            assert buf.ctypes.data % blocks.ALIGN == 0
            assert bytes(buf[:at]) == bytes(want[len(want) - at:])   # the file's tail
            buf = out.block_buffer(at + n)
            buf[at:at + n] = data
            out.write_blocks(at + n)
        else:
            out.release_blocks()
        want += data.tobytes()
        assert out.bytes_written == len(want)
    out.close()
    return bytes(want)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS, seed=st.integers(0, 2**32 - 1), threaded=st.booleans(), direct=st.booleans())
def test_the_file_is_the_concatenation(tmp_path, monkeypatch, ops, seed, threaded, direct):
    if not direct:
        monkeypatch.setattr(blocks, "_O_DIRECT", 0)
    path = tmp_path / f"f{seed}.bin"
    want = _run(path, ops, threaded, np.random.default_rng(seed))
    assert path.read_bytes() == want


def test_refused_at_the_first_write_falls_back_to_the_page_cache(tmp_path, monkeypatch):
    real = os.pwrite
    refused = []

    def pwrite(fd, data, at):
        if fcntl_direct(fd):
            refused.append(fd)
            raise OSError(22, "Invalid argument")
        return real(fd, data, at)

    monkeypatch.setattr(blocks.os, "pwrite", pwrite)
    path = tmp_path / "f.bin"
    want = _run(path, [("buffered", 24), ("block", 50000), ("block", 7000), ("buffered", 5)],
                False, np.random.default_rng(1))
    assert refused and path.read_bytes() == want


def fcntl_direct(fd: int) -> bool:
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & getattr(os, "O_DIRECT", 0))


@pytest.mark.skipif(not getattr(os, "O_DIRECT", 0), reason="O_DIRECT is Linux's")
def test_block_appends_leave_the_page_cache_alone(tmp_path):
    if _on_tmpfs(tmp_path):
        pytest.skip("tmpfs refuses O_DIRECT: the page cache is the file")
    path = tmp_path / "f.bin"
    _run(path, [("buffered", 24), ("block", 1 << 20), ("block", 1 << 20)], True,
         np.random.default_rng(2))
    cached = _resident_pages(path)
    # the first page (written through the cache, then over it unbuffered: dropped by the
    # kernel) and the last partial one (written through the cache at close) at most
    assert cached[1:-1].sum() == 0, f"{int(cached.sum())} of {cached.size} pages cached"
