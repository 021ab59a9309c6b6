"""The compiled decode of RoCEv2 rows (analysis/decode_rows.py) against the numpy decode (the
reference, itself checked against scapy and tshark in test_inspect.py/test_decode.py): every
column of every row equal, on frames built by scapy (IPv4/IPv6, 802.1Q or not, every opcode,
any payload and PadCnt) and then mutated (bytes flipped in the headers, lengths, truncation by
the snaplen) so that rows of every malformed reason and rows the loop leaves to numpy (other
EtherTypes, protocols, ports, fragments) are mixed in one batch; and whole inspections equal
with the compiled loops forced on and off."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.analysis.test_inspect import write
from tokenpcap.analysis import decode_rows as R
from tokenpcap.analysis.decode import _decode
from tokenpcap.analysis.inspect import inspect_capture
from tokenpcap.pcap.reader import open_capture

scapy_all = pytest.importorskip("scapy.all")
from scapy.contrib.roce import BTH  # noqa: E402
from scapy.layers.inet import IP, UDP  # noqa: E402
from scapy.layers.inet6 import IPv6  # noqa: E402
from scapy.layers.l2 import Dot1Q, Ether  # noqa: E402
from scapy.packet import Raw  # noqa: E402

FRAME = st.fixed_dictionaries({
    "v6": st.booleans(), "vlan": st.booleans(), "opcode": st.one_of(st.sampled_from([0x04, 0x06, 0x07, 0x0A, 0x0B, 0x0C, 0x11, 0x81]),
                        st.integers(0, 255)),
    "payload": st.integers(0, 80), "pad": st.integers(0, 3), "qp": st.integers(0, 0xFFFFFF),
    "psn": st.integers(0, 0xFFFFFF), "tos": st.integers(0, 255), "sport": st.integers(0, 0xFFFF),
    "options": st.sampled_from([b"", b"\x01\x01\x01\x00", b"\x01" * 8]),
    "flips": st.lists(st.tuples(st.integers(0, 90), st.integers(0, 255)), max_size=2),
    "cut": st.integers(0, 3)})


def _frame(p: dict) -> bytes:
    """A RoCEv2 frame from scapy, then mutated: ``flips`` XOR header bytes (EtherType, IP
    version/IHL/lengths/protocol/fragment bits, UDP port and length, BTH), ``cut`` drops 0-3
    bytes off the end (the IP/UDP lengths then disagree with the frame)."""
    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    if p["vlan"]:
        eth = eth / Dot1Q(vlan=0x123, prio=5)
    ip = (IPv6(src="fd00::1", dst="fd00::2", tc=p["tos"]) if p["v6"] else
          IP(src="198.18.0.1", dst="198.18.0.2", tos=p["tos"], options=p["options"]))
    f = bytearray(bytes(eth / ip / UDP(sport=p["sport"], dport=4791, chksum=0) /
                        BTH(opcode=p["opcode"], padcount=p["pad"], dqpn=p["qp"], psn=p["psn"]) /
                        Raw(b"\xab" * p["payload"])))   # scapy appends the ICRC
    for at, x in p["flips"]:
        if at < len(f):
            f[at] ^= x
    return bytes(f[:len(f) - p["cut"]] if p["cut"] < len(f) else f)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.lists(FRAME, min_size=1, max_size=40), snaplen=st.sampled_from(
    [14, 40, 54, 62, 64, 74, 94, 262144]))
def test_compiled_rows_equal_numpy_rows(tmp_path, frames, snaplen):
    raw = [_frame(p) for p in frames]
    path = write(tmp_path / "d.pcap", raw, snaplen=snaplen)
    cap = open_capture(path)
    rec = cap.read()
    want = _decode(cap.data, rec)
    got = R.decode_rows(cap.data, rec, _decode)
    for k in want.cols:
        assert np.array_equal(got[k], want[k]), (k, got[k], want[k])


def test_compiled_loop_takes_the_rocev2_rows(tmp_path):
    """The loop decodes a plain RoCEv2 row itself (``rest`` sees only the others) and its
    fields are the ones scapy wrote."""
    raw = [_frame({"v6": False, "vlan": True, "opcode": 0x04, "payload": 16, "pad": 0,
                   "qp": 0x12345, "psn": 0xFFFFFE, "tos": 0x6B, "sport": 0xC001,
                   "options": b"", "flips": [], "cut": 0}),
           bytes(Ether(type=0x0806) / Raw(b"\0" * 46))]
    cap = open_capture(write(tmp_path / "t.pcap", raw))
    rec = cap.read()
    seen = []
    d = R.decode_rows(cap.data, rec, lambda data, r: (seen.append(r.size), _decode(data, r))[1])
    assert seen == [1]
    assert (d["destqp"][0], d["psn"][0], d["opcode"][0], d["vlan"][0], d["pcp"][0]) == \
        (0x12345, 0xFFFFFE, 0x04, 0x123, 5)
    assert (d["dscp"][0], d["ecn"][0], d["sport"][0], d["payload"][0]) == (0x6B >> 2, 3, 0xC001, 16)


@pytest.mark.parametrize("name", ["trace", "pcapng"])
def test_inspect_same_with_compiled_loops(tmp_path, monkeypatch, name):
    """A whole inspection (JSON) is the same with the compiled loops forced on (every capture
    counts as big) and off."""
    from tests.analysis.trace import write_trace
    path = tmp_path / f"t.{name}"
    labels = [["dp/backward/AllReduce step 0", None, "ack tp/forward/AllReduce mb 1"][i % 3]
              for i in range(3000)]
    write_trace(path, 3000, snaplen=74, fmt="pcap" if name == "trace" else "pcapng",
                comments=None if name == "trace" else labels, batch=700)
    out = {}
    for floor in (0, 1 << 60):
        monkeypatch.setattr(R, "COMPILED_MIN_RECORDS", floor)
        out[floor] = json.dumps(inspect_capture(path, max_records=1000, crc=False).to_json())
    assert out[0] == out[1 << 60]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(0, 2**64 - 1),
                          st.integers(0, 0xFFFFFF)), min_size=1, max_size=12),
       st.lists(st.integers(0, 11), min_size=1, max_size=300), st.integers(1, 80))
def test_compiled_flow_ids_equal_numpy_flow_ids(keys, picks, batch):
    """Batches of rows drawn from a few keys (IPv6-like upper halves, kinds, QPs): the compiled
    hash table gives every row the flow id the numpy factorization gives, across batches."""
    from tokenpcap.analysis.columns import Decoded
    from tokenpcap.analysis.flows import FlowTable
    rows = [keys[i % len(keys)] for i in picks]
    d = Decoded.zeros(len(rows))
    d["kind"][:] = [r[0] for r in rows]
    d["src_hi"][:] = [r[1] for r in rows]
    d["src_lo"][:] = [r[2] for r in rows]
    d["dst_lo"][:] = [r[1] * 7 for r in rows]
    d["destqp"][:] = [r[3] for r in rows]
    got = []
    for compiled in (False, True):
        t = FlowTable(limit=5)
        got.append(np.concatenate([t.ids(d[np.arange(a, min(a + batch, d.size))], compiled)
                                   for a in range(0, d.size, batch)]))
    assert np.array_equal(got[0], got[1])
