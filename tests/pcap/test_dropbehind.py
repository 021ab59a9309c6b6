"""Drop-behind of big output files (tokenpcap.pcap.dropbehind): which ranges are written back
and released, the page cache as the kernel reports it (mincore(2)), the files' bytes against
hand-spelled pcap files, and failures of the write-back."""
from __future__ import annotations

import ctypes
import errno
import functools
import mmap
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.errors import OutputError
from tokenpcap.pcap import PcapWriter, dropbehind, gather, output
from tokenpcap.pcap.output import AtomicOutput

from .helpers import frames_fill, hand_pcap
from .test_pcap_gather import GatherFrames, _batches

WAIT = dropbehind._WAIT_BEFORE | dropbehind._WRITE | dropbehind._WAIT_AFTER


def recorded(monkeypatch) -> list[tuple]:
    """Replace the two system calls by a log of ``(what, offset, nbytes, flags)``."""
    log: list[tuple] = []
    monkeypatch.setattr(dropbehind, "sync_range", lambda fd, o, n, f: log.append(("sync", o, n, f)))
    monkeypatch.setattr(dropbehind, "drop_range", lambda fd, o, n: log.append(("drop", o, n, 0)))
    monkeypatch.setattr(dropbehind, "AVAILABLE", True)
    return log


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(writes=st.lists(st.integers(0, 5000), max_size=40), start=st.integers(0, 20000),
       region=st.integers(1, 3000), lag=st.integers(1, 4))
def test_schedule_of_ranges(monkeypatch, writes, start, region, lag):
    """After each write: once ``start`` bytes are written, every complete region [k r, (k+1) r)
    of the bytes written is handed to writeback exactly once, in order; region k-lag is waited
    for and then dropped when region k is handed over, never a byte past those written."""
    log = recorded(monkeypatch)
    d = drop_behind_at(start, region, lag)
    total = 0
    for n in writes:
        before = len(log)
        d.wrote(n)
        total += n
        for _, o, length, _ in log[before:]:
            assert o + length <= total, "a range past the bytes written"
    done = (total // region) * region if total >= start else 0
    want = []
    for o in range(0, done, region):
        want.append(("sync", o, region, dropbehind._WRITE))
        if o >= lag * region:
            b = o - lag * region
            want += [("sync", b, region, WAIT), ("drop", b, region, 0)]
    assert log == want
    assert d.started == done


def drop_behind_at(start, region, lag):
    d = dropbehind.DropBehind(-1, start_bytes=start, region_bytes=region, lag_regions=lag)
    d.enabled = True
    return d


def test_region_and_lag_must_be_positive():
    with pytest.raises(ValueError, match="region_bytes: got 0"):
        dropbehind.DropBehind(-1, region_bytes=0)
    with pytest.raises(ValueError, match="lag_regions: got 0"):
        dropbehind.DropBehind(-1, lag_regions=0)


def _resident_pages(path) -> np.ndarray:
    """mincore(2) of the file's pages: bool per page, whether it is in the page cache."""
    page = os.sysconf("SC_PAGE_SIZE")
    size = os.path.getsize(path)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as m:
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        vec = (ctypes.c_ubyte * ((size + page - 1) // page))()
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        if libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        out = np.frombuffer(vec, np.uint8) & 1
        del addr
    return out.astype(bool)


def _on_tmpfs(path) -> bool:
    with open("/proc/mounts") as f:
        mounts = [line.split() for line in f]
    best = max((m for m in mounts if str(path).startswith(m[1])), key=lambda m: len(m[1]))
    return best[2] in ("tmpfs", "ramfs")


@pytest.mark.skipif(not dropbehind.AVAILABLE, reason="no sync_file_range (not Linux)")
@pytest.mark.parametrize("gathered", [False, True], ids=["write", "writev"])
def test_released_pages_leave_the_page_cache(tmp_path, monkeypatch, gathered):
    """A pcap written through the writer (plain fill, or payload holes written with writev)
    with a 4 MiB start and 2 MiB regions (whole folios: the page cache keeps pages in folios of
    up to 2 MiB, and DONTNEED frees only whole ones): the file equals the hand-spelled one, and
    the kernel (mincore) holds none of the pages of the regions released."""
    if _on_tmpfs(tmp_path):
        pytest.skip("tmpfs keeps every page in memory: nothing to release")
    region = 2 << 20
    monkeypatch.setattr(output, "DropBehind",
                        functools.partial(dropbehind.DropBehind, start_bytes=4 << 20, region_bytes=region))
    rng = np.random.default_rng(3)
    n = 3000
    lengths = rng.integers(4200, 9000, n)
    at = rng.integers(0, 100, n)
    g = GatherFrames(lengths, at=at, size=np.where(rng.random(n) < 0.8, 4096, 0), seed=4)
    frames = g.frames
    path = tmp_path / "big.pcap"
    calls = []
    real = gather.writev_all
    monkeypatch.setattr(output, "writev_all", lambda fd, iov: calls.append(len(iov)) or real(fd, iov))
    t = np.arange(len(frames), dtype=np.int64) * 1000
    with PcapWriter(path, snaplen=262144) as w:
        if gathered:
            _batches(g, t, 262144, 10, w)
        else:
            for a in range(0, n, 300):
                w.write_batch(t[a:a + 300], np.asarray(lengths[a:a + 300], np.int64),
                              frames_fill(frames[a:a + 300]))
    assert bool(calls) == gathered
    resident = _resident_pages(path)
    page = os.sysconf("SC_PAGE_SIZE")
    size = os.path.getsize(path)
    lag = dropbehind.LAG_REGIONS                   # regions 0 .. k-1-lag waited for and dropped
    released = (size // region - lag) * region
    assert released >= 4 * region
    assert not resident[:released // page].any()
    want = hand_pcap([(int(x) // 10**9, int(x) % 10**9, f, len(f)) for x, f in zip(t, frames)])
    assert path.read_bytes() == want


def test_writeback_failure_is_an_output_error(tmp_path, monkeypatch):
    """An I/O error the wait reports fails the write that saw it, naming the file; the
    temporary file is removed."""
    def fail(fd, o, n, flags):
        if flags == WAIT:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
    monkeypatch.setattr(dropbehind, "sync_range", fail)
    monkeypatch.setattr(dropbehind, "AVAILABLE", True)
    monkeypatch.setattr(output, "DropBehind",
                        functools.partial(dropbehind.DropBehind, start_bytes=0, region_bytes=4096))
    for threaded in (False, True):
        out = AtomicOutput(tmp_path / "x.bin", threaded=threaded)
        with pytest.raises(OutputError, match=r"x\.bin: write failed: Input/output error"):
            for _ in range(4):
                out.write(bytes(4096))
            out.close()
        assert not out.tmp_path.exists() and not (tmp_path / "x.bin").exists()


def test_unsupported_file_system_is_left_to_the_kernel(tmp_path, monkeypatch):
    """A file system refusing the call (EINVAL) turns drop-behind off; the file is whole."""
    calls = []

    def refuse(fd, o, n, flags):
        calls.append(o)
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
    monkeypatch.setattr(dropbehind, "sync_range", refuse)
    monkeypatch.setattr(dropbehind, "AVAILABLE", True)
    monkeypatch.setattr(output, "DropBehind",
                        functools.partial(dropbehind.DropBehind, start_bytes=0, region_bytes=4096))
    data = np.random.default_rng(1).integers(0, 256, 10 * 4096 + 17, np.uint8)
    out = AtomicOutput(tmp_path / "y.bin")
    for a in range(0, data.size, 5000):
        out.write(data[a:a + 5000].copy())
    out.close()
    assert calls == [0]
    assert (tmp_path / "y.bin").read_bytes() == data.tobytes()
