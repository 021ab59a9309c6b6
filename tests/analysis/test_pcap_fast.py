"""A classic pcap read from its bytes to the sums (analysis/pcap_fast.py, pcap_pass.py) against
the reference (reader batches, decode, flow numbering, fold: itself checked against scapy,
tshark and capinfos in test_inspect.py): the whole report (JSON and text) equal on random
captures of several flows and phases written byte by byte here (either byte order, micro- or
nanosecond, times out of order), with data packets, ACKs, CNPs, ECN marks, small WRITE ONLY
packets, malformed rows (bytes flipped, frames cut), PFC, ARP and RoCEv1 frames, snaplens,
batch and region sizes that cut the file into many batches, the ICRC check on or off, a flow
limit, a file cut short and a corrupt record."""
from __future__ import annotations

import json
import struct

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.analysis.test_decode_rows import _frame
from tokenpcap.analysis import decode_rows
from tokenpcap.analysis import inspect as inspect_mod
from tokenpcap.analysis import pcap_fast
from tokenpcap.analysis.inspect import inspect_captures
from tokenpcap.analysis.report import render_text
from tokenpcap.errors import CaptureError
from tokenpcap.pcap import capture

pytest.importorskip("scapy.all")

T0_S = 1_700_000_000
#: (IPv6, VLAN, DestQP) of the flows a capture draws from; addresses vary with the index
FLOWS = [(False, False, 0x11), (False, True, 0x12), (True, False, 0x13), (False, False, 0x14)]
OPCODES = [0x06, 0x07, 0x08, 0x09, 0x0A, 0x0B, 0x04, 0x11, 0x81, 0x0C]

PACKET = st.fixed_dictionaries({
    "what": st.sampled_from(["roce"] * 12 + ["pfc", "arp", "rocev1"]),
    "flow": st.integers(0, len(FLOWS) - 1), "opcode": st.sampled_from(OPCODES),
    "payload": st.sampled_from([0, 0, 4, 16, 64, 5]), "pad": st.sampled_from([0, 0, 0, 3]),
    "psn": st.integers(0xFFFFF0, 0x1000010), "tos": st.sampled_from([0, 1, 2, 3, 0x6B]),
    "bad": st.sampled_from([None] * 8 + ["flip", "cut"]), "flip": st.tuples(
        st.integers(12, 60), st.integers(1, 255)), "dt_ns": st.integers(-3000, 20000)})


def _packet(p: dict, k: int) -> bytes:
    """The frame of one drawn packet (module docstring)."""
    if p["what"] == "pfc":        # 802.1Qbb: opcode 0x0101, class-enable vector, 8 pause times
        body = struct.pack(">HH8H", 0x0101, 1 << (k % 8), *([0xFFFF * (k % 2)] * 8))
        return bytes.fromhex("0180c2000001020000000001" "8808") + body + bytes(26)
    if p["what"] == "arp":
        return bytes.fromhex("ffffffffffff020000000001" "0806") + bytes(46)
    v6, vlan, qp = FLOWS[p["flow"]]
    if p["what"] == "rocev1":     # EtherType 0x8915, GRH (next header 0x1B), BTH, ICRC
        grh = struct.pack(">IHBB", 0x60000000, 12 + 4, 0x1B, 64) + bytes(15) + b"\x01" + \
            bytes(15) + b"\x02"
        bth = struct.pack(">BBHII", 0x0A, 0, 0xFFFF, qp, p["psn"] & 0xFFFFFF)
        return bytes.fromhex("020000000002020000000001" "8915") + grh + bth + bytes(4)
    return _frame({"v6": v6, "vlan": vlan, "opcode": p["opcode"], "payload": p["payload"],
                   "pad": p["pad"], "qp": qp, "psn": p["psn"] & 0xFFFFFF, "tos": p["tos"],
                   "sport": 0xC000 + p["flow"], "options": b"",
                   "flips": [p["flip"]] if p["bad"] == "flip" else [],
                   "cut": 2 if p["bad"] == "cut" else 0})


def write_pcap(path, frames: list[bytes], times_ns: list[int], *, snaplen: int, big: bool,
               nanosecond: bool) -> None:
    """A classic pcap written byte by byte (draft-ietf-opsawg-pcap §4-5), not by our writer."""
    o = ">" if big else "<"
    magic = 0xA1B23C4D if nanosecond else 0xA1B2C3D4
    out = [struct.pack(o + "IHHiIII", magic, 2, 4, 0, 0, snaplen, 1)]
    for f, t in zip(frames, times_ns):
        sec, ns = divmod(t, 10**9)
        c = min(len(f), snaplen)
        out.append(struct.pack(o + "IIII", sec, ns if nanosecond else ns // 1000, c, len(f)))
        out.append(f[:c])
    path.write_bytes(b"".join(out))


def _both(monkeypatch, paths, **kw) -> tuple[str, str, bool]:
    """(JSON and text of the fast path, the same of the reference, whether the fast path
    folded a batch itself)."""
    monkeypatch.setattr(decode_rows, "COMPILED_MIN_RECORDS", 0)
    folded = []
    real_fold = pcap_fast._Batch._fold

    def fold(self, n, rank):  # type: ignore[no-untyped-def]
        folded.append(n)
        real_fold(self, n, rank)

    monkeypatch.setattr(pcap_fast._Batch, "_fold", fold)
    out = []
    for fast in (True, False):
        monkeypatch.setattr(inspect_mod, "takes", pcap_fast.takes if fast else
                            lambda cap: False)
        rep = inspect_captures(paths, **kw)
        out.append(json.dumps(rep.to_json()) + "\n" + render_text(rep))
    return out[0], out[1], bool(folded)


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(files=st.lists(st.lists(PACKET, min_size=1, max_size=40), min_size=1, max_size=2),
       snaplen=st.sampled_from([64, 74, 96, 262144]), big=st.booleans(),
       nanosecond=st.booleans(), max_records=st.integers(1, 9), region=st.integers(60, 900),
       crc=st.booleans(), max_flows=st.sampled_from([2, 3, 1 << 18]),
       cut=st.sampled_from([0, 0, 0, 1, 7, 20]))
def test_fast_pass_equals_the_reference(tmp_path, monkeypatch, files, snaplen, big, nanosecond,
                                        max_records, region, crc, max_flows, cut):
    monkeypatch.setattr(capture, "REGION", region)
    paths = []
    for j, packets in enumerate(files):
        frames = [_packet(p, k) for k, p in enumerate(packets)]
        times, t = [], T0_S * 10**9
        for p in packets:
            t += p["dt_ns"] * (1 if nanosecond else 1000)
            times.append(t)
        path = tmp_path / f"c{j}.pcap"
        write_pcap(path, frames, times, snaplen=snaplen, big=big, nanosecond=nanosecond)
        if cut and j == len(files) - 1:
            path.write_bytes(path.read_bytes()[:-cut])
        paths.append(path)
    fast, ref, folded = _both(monkeypatch, paths, max_records=max_records, crc=crc,
                              max_flows=max_flows)
    event(f"a batch folded by the pass: {folded}")
    assert fast == ref


def test_a_plain_trace_is_folded_by_the_fast_pass(tmp_path, monkeypatch):
    """A headers-only trace of eight interleaved flows across the PSN wrap, cut into 13
    batches over several regions: the pass folds every batch itself (the reference's
    ``add_batch`` is never called) and the report is the reference's."""
    from tests.analysis.trace import write_trace

    write_trace(tmp_path / "t.pcap", 3000, snaplen=64, batch=700)
    monkeypatch.setattr(capture, "REGION", 20_000)
    calls = []
    real = inspect_mod.add_batch
    monkeypatch.setattr(inspect_mod, "add_batch", lambda *a: (calls.append(1), real(*a))[1])
    fast, ref, folded = _both(monkeypatch, [tmp_path / "t.pcap"], max_records=250, crc=True)
    assert fast == ref and folded
    assert len(calls) >= 3000 // 250        # all of them by the reference's run
    assert json.loads(fast.split("\n", 1)[0])["roce"]["psn_gaps"] == 0


def test_a_corrupt_record_raises_the_readers_error(tmp_path, monkeypatch):
    """A record whose caplen is above the snaplen: the same error (message and byte offset)
    by both paths."""
    frames = [_packet({"what": "arp"}, 0)] * 5
    path = tmp_path / "bad.pcap"
    write_pcap(path, frames, [T0_S * 10**9] * 5, snaplen=64, big=False, nanosecond=True)
    raw = bytearray(path.read_bytes())
    at = 24 + 3 * (16 + 60)
    raw[at + 8:at + 12] = struct.pack("<I", 300_000)
    path.write_bytes(bytes(raw))
    errors = []
    monkeypatch.setattr(decode_rows, "COMPILED_MIN_RECORDS", 0)
    for fast in (True, False):
        monkeypatch.setattr(inspect_mod, "takes", pcap_fast.takes if fast else
                            lambda cap: False)
        with pytest.raises(CaptureError) as err:
            inspect_captures([path])
        errors.append(str(err.value))
    assert errors[0] == errors[1] and f"byte offset {at}" in errors[0]
