"""inspect --against-timing: a replay capture scored against the capture that was sent. The
replays here are the sent frames rewritten by hand (tests.pcap.helpers.hand_pcap) with known
faults, so every count is known exactly: drops, a duplicate, two swaps (one across QPs, one
within a QP), a pause that delays the later messages, CE marks and a PFC frame."""
from __future__ import annotations

import json
import struct

import numpy as np
from click.testing import CliRunner

from tests.analysis.trace import packets, write_trace
from tests.pcap.helpers import hand_pcap
from tokenpcap.analysis.against_timing import first_packet_opcodes, score_replay
from tokenpcap.cli import main
from tokenpcap.pcap.reader import open_capture

N, QPS = 2000, 4
OFFSET_NS = 1_000_000_000            # the replay's clock runs one second after the sender's
PAUSE_AT, PAUSE_NS = 1030, 700       # every packet sent from row 1030 on arrives 700 ns late


def _sent(tmp_path):
    path = tmp_path / "sent.pcap"
    write_trace(path, N, qps=QPS)
    cap = open_capture(path)
    rows = cap.read()
    return path, [cap.frame(r) for r in rows], rows["time_ns"].astype(np.int64).tolist()


def _write(path, frames_times):
    recs = [(t // 10**9, t % 10**9, f, len(f)) for f, t in frames_times]
    path.write_bytes(hand_pcap(recs, nsec=True))
    return path


def _faulty(tmp_path):
    """The replay with the module docstring's faults, in arrival order."""
    sent, frames, times = _sent(tmp_path)
    order = list(range(N))
    order[200], order[201] = 201, 200              # two QPs: reordered overall only
    order[300], order[304] = 304, 300              # QP 0 both: 301-303 and 300 arrive late
    arrivals = []
    for slot, i in enumerate(order):                # each arrives in the slot it was sent in,
        if i in (5, 100, 777):                      # the swapped ones in each other's slots
            continue
        pause = PAUSE_NS if i >= PAUSE_AT else 0
        arrivals.append((frames[i], times[slot] + OFFSET_NS + pause))
        if i == 50:
            arrivals.append((frames[i], times[i] + OFFSET_NS + 1))
    return sent, _write(tmp_path / "got.pcap", arrivals)


def test_each_fault_is_counted_and_named(tmp_path):
    sent, got = _faulty(tmp_path)
    s = score_replay([got], [sent])
    assert (s["missing"], s["extra"], s["duplicates"]) == (3, 1, 1)
    assert s["matched"] == N - 3
    assert (s["reordered"], s["reordered_in_qp"]) == (1 + 4, 1)
    p = packets(N, QPS)
    assert [(e["dest_qp"], e["psn"], e["index"]) for e in s["examples"]["missing"]] == [
        (int(p["dest_qp"][i]), int(p["psn"][i]), i) for i in (5, 100, 777)]
    assert s["examples"]["extra"][0]["psn"] == int(p["psn"][50])
    assert not s["ok"]


def test_message_start_error_is_arrival_minus_sending_less_the_clock_offset(tmp_path):
    sent, got = _faulty(tmp_path)
    s = score_replay([got], [sent])
    assert s["clock_offset_ns"] == OFFSET_NS          # most packets arrive before the pause
    p = packets(N, QPS)
    firsts = np.flatnonzero(first_packet_opcodes()[p["opcode"]])
    assert s["start_error"]["count"] == firsts.size == 16
    # the messages opened from row PAUSE_AT on (rows 1536-1539) are 700 ns late
    late = int((firsts >= PAUSE_AT).sum())
    assert s["start_error"]["max_abs_ns"] == PAUSE_NS
    assert s["start_error"]["mean_ns"] == late * PAUSE_NS / firsts.size
    g = s["gaps"]
    assert g["sent_median_ns"] == 84 and g["wasserstein_ns"] > 0


def test_an_exact_replay_scores_clean(tmp_path):
    sent, frames, times = _sent(tmp_path)
    got = _write(tmp_path / "same.pcap", [(f, t + 5) for f, t in zip(frames, times)])
    s = score_replay([got], [sent])
    assert (s["matched"], s["missing"], s["extra"], s["reordered"]) == (N, 0, 0, 0)
    assert s["start_error"]["max_abs_ns"] == 0 and s["gaps"]["wasserstein_ns"] == 0
    assert s["ok"]


def _pfc(classes: int, quanta: int) -> bytes:
    """IEEE 802.1Qbb PFC frame: MAC control 0x8808, opcode 0x0101, class-enable vector, 8
    pause times, padded to 60 bytes."""
    body = struct.pack(">HH8H", 0x0101, classes, *[quanta] * 8)
    return (b"\x01\x80\xc2\x00\x00\x01" + b"\x02\x00\x00\x00\x00\x09" + b"\x88\x08" +
            body).ljust(60, b"\x00")


def test_the_labs_counters_pfc_and_ce_are_counted_in_each_capture(tmp_path):
    sent, frames, times = _sent(tmp_path)
    marked = []
    for i, f in enumerate(frames):
        if i % 10 == 0:                             # ECN 10 -> 11 (CE) in the IPv4 TOS byte
            f = f[:15] + bytes([f[15] | 0x03]) + f[16:]
        marked.append((f, times[i]))
    marked.insert(7, (_pfc(0x0008, 0xFFFF), times[7]))
    s = score_replay([_write(tmp_path / "ce.pcap", marked)], [sent])
    assert s["received"]["ce_marked"] == N // 10 and s["sent"]["ce_marked"] == 0
    assert s["received"]["pfc_frames"] == 1 and s["received"]["pfc_by_class"][3] == 1
    assert s["missing"] == s["extra"] == 0          # a CE mark is not another packet


def test_the_cli_reports_and_strict_fails_on_faults(tmp_path):
    sent, got = _faulty(tmp_path)
    r = CliRunner().invoke(main, ["inspect", str(got), "--against-timing", str(sent),
                                  "--strict"])
    assert r.exit_code == 1
    assert "  missing:             3" in r.output and "verdict:             FAULTS" in r.output
    assert "    missing: QP 0x000101 PSN" in r.output
    r = CliRunner().invoke(main, ["inspect", str(got), "--against-timing", str(sent), "--json"])
    doc = json.loads(r.stdout)
    assert doc["against_timing"]["reordered_in_qp"] == 1 and doc["ok"] is False
