"""Headers-only batches (every frame cut at the snaplen, or a few shorter: ACKs), laid out by the
writers' compiled pass (pcap/layout.py): the files equal the records spelled out by hand with
``struct`` (tests/pcap/helpers.py), whether the records are of one size or of several, and
scapy's readers read back the same bytes, lengths, times, comments and interfaces."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .helpers import comment_options, epb, erf_record, hand_pcap, make_frames
from .test_pcap_writer import write

KINDS = [("pcap", "<"), ("pcap", ">"), ("pcapng", "<"), ("pcapng", ">"), ("erf", "<"),
         ("pcap-ib", "<"), ("pcap-ib", ">"), ("pcapng-ib", "<")]
TEXTS = ["dp/backward/AllReduce it 0 call 7 step 1", "ack pp/forward/SendRecv it 0 call 3 step 0"]


def _written(path, kind, order, t, frames, iface, comments, snaplen) -> bytes:
    write(kind, path, t, frames, order=order, iface=iface, snaplen=snaplen, comments=comments,
          threaded=False)
    return path.read_bytes()


@given(kind=st.sampled_from(KINDS), data=st.data(), snaplen=st.sampled_from([64, 74]),
       every=st.sampled_from([0, 1, 3, 8, 20]))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_headers_only_batches_equal_hand_spelled_records(tmp_path, kind, data, snaplen, every):
    """Random headers-only batches (every frame cut at the snaplen, or one in ``every`` shorter
    than it: ACK-sized, empty, one byte short; pcapng comments of one or two lengths): the file
    equals the hand-spelled records."""
    name, order = kind
    n = data.draw(st.integers(1, 120))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    lengths = snaplen + rng.integers(0, 200, n)
    if every:
        short = rng.random(n) < 1 / every
        lengths[short] = rng.choice([62, 0, snaplen - 1, 1], int(short.sum()))
    t = np.sort(rng.integers(0, (1 << 32) * 10**9 - 1, n)).tolist()
    iface = rng.integers(0, 4, n).tolist()
    style = data.draw(st.sampled_from(["none", "one", "two", "rare"]))
    comments = None
    if name.startswith("pcapng") and style != "none":
        k = {"one": np.zeros(n, int), "two": rng.integers(0, 2, n),
             "rare": (rng.random(n) < 0.05).astype(int)}[style]
        comments = [TEXTS[j] for j in k]
    frames = make_frames(lengths.tolist(), seed=n)
    fast = _written(tmp_path / f"a.{name}", name, order, t, frames, iface, comments, snaplen)
    caps = [f[:snaplen] for f in frames]
    if name in ("pcap", "pcap-ib"):
        ib = name == "pcap-ib"
        recs = []
        for ti, f, c, p in zip(t, frames, caps, iface):
            sec, ns = divmod(ti, 10**9)
            body = erf_record(_erf_ts(ti), 21, c, len(f), flags=4 | (p & 3)) if ib else c
            recs.append((sec, ns, body, len(f) + (16 if ib else 0)))
        assert fast == hand_pcap(recs, order=order, linktype=197 if ib else 1,
                                 snaplen=snaplen + (16 if ib else 0))
    elif name == "pcapng":
        blocks = b"".join(
            epb(order, p, ti, c, len(f), comment_options(order, comments[i])
                if comments is not None else b"")
            for i, (ti, f, c, p) in enumerate(zip(t, frames, caps, iface)))
        assert fast.endswith(blocks)
    elif name == "erf":
        assert fast == b"".join(erf_record(_erf_ts(ti), 21, c, len(f), flags=4 | (p & 3))
                                for ti, f, c, p in zip(t, frames, caps, iface))


def _erf_ts(ns: int) -> int:
    """ERF 32.32 fixed point, rounded to nearest (Endace EDM11-01), in exact integers."""
    sec, frac = divmod(ns, 10**9)
    return (sec << 32) | ((frac << 32) + 10**9 // 2) // 10**9


@given(data=st.data(), snaplen=st.sampled_from([64, 74]), order=st.sampled_from("<>"),
       ng=st.booleans())
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_headers_only_batches_read_back_by_scapy(tmp_path, data, snaplen, order, ng):
    """Headers-only batches written by the compiled layout (several batches, a few short
    frames) read back by scapy's raw readers, an independent implementation: the same captured
    bytes, wire lengths, times and, in pcapng, comments and interfaces."""
    su = pytest.importorskip("scapy.utils")
    n = data.draw(st.integers(1, 60))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    lengths = snaplen + rng.integers(0, 4000, n)
    lengths[rng.random(n) < 0.1] = 62
    frames = make_frames(lengths.tolist(), seed=n)
    t = np.sort(rng.integers(0, (1 << 32) * 10**9 - 1, n)).tolist()
    iface = rng.integers(0, 4, n).tolist()
    comments = [TEXTS[j] if j < 2 else None for j in rng.integers(0, 3, n)] if ng else None
    path = tmp_path / ("h.pcapng" if ng else "h.pcap")
    write("pcapng" if ng else "pcap", path, t, frames, order=order, iface=iface, snaplen=snaplen,
          comments=comments, batches=data.draw(st.integers(1, 3)), threaded=False)
    reader = su.RawPcapNgReader if ng else su.RawPcapReader
    with reader(str(path)) as r:
        got = list(r)
    assert [d for d, _ in got] == [f[:snaplen] for f in frames]
    assert [m.wirelen for _, m in got] == lengths.tolist()
    if ng:
        assert [((m.tshigh << 32) | m.tslow) for _, m in got] == t       # if_tsresol 9: ns
        assert [m.comments[0].decode() if m.comments else None for _, m in got] == comments
        assert [m.ifname.decode() for _, m in got] == [f"nic{i}" for i in iface]
    else:
        assert [m.sec * 10**9 + m.usec for _, m in got] == t               # usec holds ns
