"""The readers' columnar path for records of one size (``chain.fixed_run``, ``capture.columns_at``)
gives exactly the rows, comments and errors of the general path (lockstep walk, gathered
headers), on files spelled out by hand with ``struct`` (tests/pcap/helpers.py)."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.errors import CaptureError
from tokenpcap.pcap import capture as capture_module
from tokenpcap.pcap import chain as chain_module
from tokenpcap.pcap import pcapng_reader
from tokenpcap.pcap.reader import open_capture

from .helpers import comment_options, epb, hand_pcap, idb, shb

#: more records than the scalar walker's first look (2048) plus a fixed run's minimum
N_MIN = 2048 + chain_module.MIN_FIXED_RUN + 1


def _general():
    """Patches that turn the columnar path off: no fixed-size runs, every header gathered."""
    return [mock.patch.object(chain_module, "fixed_run", lambda *a: np.zeros(0, np.int64)),
            mock.patch.object(capture_module, "even_step", lambda starts: 0),
            mock.patch.object(pcapng_reader, "even_step", lambda starts: 0)]


def _read(path, *, general: bool):
    """(rows, comment texts of the rows) or the error's message."""
    patches = _general() if general else []
    for p in patches:
        p.start()
    try:
        with open_capture(path) as cap:
            rec = cap.read()
            texts = [cap.comments[c] if c >= 0 else None for c in rec["comment"].tolist()]
            return rec, texts
    except CaptureError as err:
        return str(err)
    finally:
        for p in patches:
            p.stop()


def _capture(rng, kind: str, order: str, n: int, caplen: int, odd: int, corrupt: bool,
             comments: str) -> bytes:
    """A file of n records of ``caplen`` frame bytes, ``odd`` of them (after the first 2100)
    of another length, and with ``corrupt`` one caplen beyond its record."""
    lengths = np.full(n, caplen)
    at = rng.choice(np.arange(2100, n), size=min(odd, n - 2100), replace=False)
    lengths[at] = rng.choice([0, 2, caplen + 4, 62], size=at.size)
    t = np.sort(rng.integers(0, 2**32 * 10**9 - 1, n))
    data = [rng.integers(0, 256, int(c), dtype=np.uint8).tobytes() for c in lengths]
    if kind == "pcap":
        raw = bytearray(hand_pcap([(int(x) // 10**9, int(x) % 10**9, d, len(d) + 10)
                                   for x, d in zip(t, data)], order=order, snaplen=262144))
        rec_at = 24 + 16 * 2500 + int(lengths[:2500].sum())
        cap_at = rec_at + 8
    else:
        texts = {"none": [None] * n, "one": ["dp/backward/AllReduce it 0 call 1"] * n,
                 "two": [["a", "pp/forward/SendRecv it 0"][k] for k in rng.integers(0, 2, n)]
                 }[comments]
        blocks = [shb(order), idb(order, 1, 0, tsresol=9, name="nic0")]
        blocks += [epb(order, 0, int(x), d, len(d) + 10,
                       comment_options(order, c) if c is not None else b"")
                   for x, d, c in zip(t, data, texts)]
        raw = bytearray(b"".join(blocks))
        rec_at = sum(len(b) for b in blocks[:2502])
        cap_at = rec_at + 20
    if corrupt and n > 2500:
        fmt = order + "I"
        raw[cap_at:cap_at + 4] = np.array(300000, fmt).tobytes()
    return bytes(raw)


@given(data=st.data(), kind=st.sampled_from(["pcap", "pcapng"]), order=st.sampled_from("<>"),
       caplen=st.sampled_from([64, 74, 0, 3]), odd=st.sampled_from([0, 0, 1, 5, 40]),
       corrupt=st.booleans(), comments=st.sampled_from(["none", "one", "two"]))
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_columnar_rows_equal_the_general_path(tmp_path, data, kind, order, caplen, odd,
                                             corrupt, comments):
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    n = data.draw(st.integers(N_MIN, N_MIN + 3000))
    path = tmp_path / f"c.{kind}"
    path.write_bytes(_capture(rng, kind, order, n, caplen, odd, corrupt, comments))
    fast, general = _read(path, general=False), _read(path, general=True)
    if isinstance(general, str):
        assert fast == general                      # the same error, the same byte offset
        return
    assert not isinstance(fast, str), fast
    for name in fast[0].dtype.names:             # (not the bytes: the rows have padding)
        assert fast[0][name].tolist() == general[0][name].tolist(), name
    assert fast[1] == general[1]
    assert fast[0].size == n


def test_a_headers_only_file_is_read_by_one_run(tmp_path):
    """Every record after the scalar walker's first look comes from one fixed-size run (the
    columnar path is taken, not only correct)."""
    rng = np.random.default_rng(1)
    path = tmp_path / "h.pcap"
    n = N_MIN + 5000
    path.write_bytes(_capture(rng, "pcap", "<", n, 64, 0, False, "none"))
    runs = []
    real = chain_module.fixed_run

    def spy(*args):
        out = real(*args)
        runs.append(out.size)
        return out

    with mock.patch.object(chain_module, "fixed_run", spy):
        rec = open_capture(path).read()
    assert rec.size == n and runs == [n - 2048]
    assert (np.diff(rec["offset"]) == 80).all()


@pytest.mark.parametrize("starts, step", [([], 0), ([5], 0), ([5, 9], 4), ([5, 9, 13], 4),
                                          ([5, 9, 14], 0), ([5, 9, 12, 17], 0), ([9, 5], 0)])
def test_even_step(starts, step):
    assert capture_module.even_step(np.array(starts, np.int64)) == step
