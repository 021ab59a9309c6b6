"""Headers-only batches written from fixed-size slots (tokenpcap/pcap/slots.py): the files equal
the packed layout's bytes and hand-spelled records (``struct``, tests/pcap/helpers.py), with
and without the shorter records whose slot gaps ``writev`` skips."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.pcap import pcapng as pcapng_module
from tokenpcap.pcap import slots
from tokenpcap.pcap import writer as writer_module

from .helpers import comment_options, epb, erf_record, hand_pcap, make_frames
from .test_pcap_writer import write

KINDS = [("pcap", "<"), ("pcap", ">"), ("pcapng", "<"), ("pcapng", ">"), ("erf", "<"),
         ("pcap-ib", "<"), ("pcap-ib", ">"), ("pcapng-ib", "<")]
TEXTS = ["dp/backward/AllReduce it 0 call 7 step 1", "ack pp/forward/SendRecv it 0 call 3 step 0"]


def _written(path, kind, order, t, frames, iface, comments, snaplen, *, use_slots: bool):
    """The file's bytes, and how many batches took the slot path."""
    taken = []
    real = slots.slot_size

    def spy(rec_bytes):
        size = real(rec_bytes) if use_slots else None
        taken.append(size is not None)
        return size

    with mock.patch.object(writer_module, "slot_size", spy), \
            mock.patch.object(pcapng_module, "slot_size", spy):
        write(kind, path, t, frames, order=order, iface=iface, snaplen=snaplen,
              comments=comments, threaded=False)
    return path.read_bytes(), sum(taken)


@given(kind=st.sampled_from(KINDS), data=st.data(), snaplen=st.sampled_from([64, 74]),
       every=st.sampled_from([0, 1, 3, 8, 20]))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_slot_layout_writes_the_packed_bytes(tmp_path, kind, data, snaplen, every):
    """Random headers-only batches (every frame cut at the snaplen, or one in ``every`` shorter
    than it: ACK-sized, empty, one byte short): the slot layout's file equals the packed
    layout's byte for byte, and the hand-spelled records."""
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
    fast, used = _written(tmp_path / f"a.{name}", name, order, t, frames, iface, comments,
                          snaplen, use_slots=True)
    packed, none = _written(tmp_path / f"b.{name}", name, order, t, frames, iface, comments,
                            snaplen, use_slots=False)
    assert none == 0
    assert fast == packed
    if every == 0 and comments is None:
        assert used == 1                      # one size: always slots
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


def test_slot_size_rule():
    """One size: slots whatever the size; some shorter: slots only for short records (at most
    4096 bytes) with at most one in eight shorter; nothing for an empty batch."""
    assert slots.slot_size(np.full(5, 4186)) == 4186
    assert slots.slot_size(np.array([80] * 7 + [78])) == 80
    assert slots.slot_size(np.array([80] * 6 + [78] * 2)) is None
    assert slots.slot_size(np.array([4186] * 9 + [78])) is None
    assert slots.slot_size(np.zeros(0, np.int64)) is None


@pytest.mark.parametrize("short", [[], [0], [5], [9], [0, 9], [3, 4]])
def test_run_iovecs_cover_exactly_the_records(short):
    """The iovec table names every record's bytes once, in order, and no gap byte."""
    size, n, head = 12, 10, 4
    rec = np.full(n, size)
    rec[short] = [5, 0][: len(short)] if len(short) <= 2 else 5
    out = np.arange(head + size * n, dtype=np.uint8)
    iov = slots.run_iovecs(out, size, rec, head)
    got = b"".join(bytes((np.ctypeslib.as_array(
        (np.ctypeslib.ctypes.c_uint8 * int(ln)).from_address(int(a))))) for a, ln in iov)
    want = out[:head].tobytes() + b"".join(out[head + i * size: head + i * size + int(rec[i])]
                                           .tobytes() for i in range(n))
    assert got == want
