"""Replay: a generated RoCEv2 trace (``tokenpcap generate``) through tcpreplay over a veth pair between two network
namespaces (MTU 9000), captured with tcpdump on the other side; inspect proves every frame
arrived intact (count, bytes, ICRCs, byte-identical frames).

Only the two namespaces this test creates are touched (no IP addresses are configured: the
frames are replayed at layer 2), and they are deleted afterwards whatever happens. Skipped with
the reason where namespaces cannot be made (not root, no ``ip netns``, no tcpreplay/tcpdump).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from tests.analysis.trace import write_trace
from tokenpcap.analysis.against_timing import render_timing_text, score_replay
from tokenpcap.analysis.inspect import inspect_capture
from tokenpcap.pcap.reader import open_capture

N_FRAMES = 2000
MTU = 9000


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, check=check, timeout=60)


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    for tool in ("ip", "tcpreplay", "tcpdump"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    probe = f"tpprobe{os.getpid()}"
    r = _run("ip", "netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"ip netns add fails here: {r.stderr.strip()}"
    _run("ip", "netns", "del", probe, check=False)
    return None


REASON = _why_not()


def _generated(tmp_path):
    """Two NICs' frames of one Dante iteration (``tokenpcap generate``, sizes / 64), as a
    nanosecond pcap; the synthetic trace of tests/analysis/trace.py where generate is missing."""
    try:
        from tokenpcap.generate.run import GenerateOptions, Selection, generate
        from tokenpcap.config.profiles import load_scenario
    except ImportError:
        write_trace(tmp_path / "sent.pcap", N_FRAMES)
        return tmp_path / "sent.pcap"
    root = Path(__file__).resolve().parents[2]
    out = tmp_path / "gen"
    out.mkdir()
    res = generate(load_scenario(root / "profiles" / "scenarios" / "dante.yaml"),
                   GenerateOptions(out_dir=out, fmt="pcap", split="none", scale=64,
                                   selection=Selection(nics=frozenset({0, 8}))))
    return res.files[0][0]


@pytest.fixture
def veth_pair():
    """Two namespaces joined by a veth pair with MTU 9000; yields (ns_a, ns_b); always cleaned."""
    ns_a, ns_b = f"tpA{os.getpid()}", f"tpB{os.getpid()}"
    try:
        _run("ip", "netns", "add", ns_a)
        _run("ip", "netns", "add", ns_b)
        _run("ip", "link", "add", "tpveth0", "mtu", str(MTU), "netns", ns_a, "type", "veth",
             "peer", "name", "tpveth1", "mtu", str(MTU), "netns", ns_b)
        for ns, dev in ((ns_a, "tpveth0"), (ns_b, "tpveth1")):
            _run("ip", "netns", "exec", ns, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1",
                 check=False)
            _run("ip", "-n", ns, "link", "set", dev, "up")
        yield ns_a, ns_b
    finally:
        _run("ip", "netns", "del", ns_a, check=False)
        _run("ip", "netns", "del", ns_b, check=False)


@pytest.mark.root
@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_replay_through_veth_arrives_intact(tmp_path, veth_pair):
    ns_a, ns_b = veth_pair
    sent = _generated(tmp_path)
    n_frames = inspect_capture(sent).packets
    got = tmp_path / "got.pcap"
    dump = subprocess.Popen(
        ["ip", "netns", "exec", ns_b, "tcpdump", "-i", "tpveth1", "-s", "0", "-U", "-n",
         "-B", "131072",
         "--time-stamp-precision=nano", "-c", str(n_frames), "-w", str(got), "udp dst port 4791"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while dump.poll() is None and time.monotonic() < deadline:
            if "listening on" in dump.stderr.readline():
                break
        r = _run("ip", "netns", "exec", ns_a, "tcpreplay", "-i", "tpveth0", "--mbps", "1000",
                 str(sent))
        assert re.search(r"Successful packets:\s+%d\b" % n_frames, r.stdout), r.stdout
        assert re.search(r"Failed packets:\s+0\b", r.stdout), r.stdout
        dump.wait(timeout=30)
    finally:
        if dump.poll() is None:
            dump.terminate()
            dump.wait(timeout=10)
        dump.stderr.close()
    a, b = inspect_capture(sent), inspect_capture(got)
    assert b.packets == a.packets == n_frames
    assert b.bytes == a.bytes and b.captured_bytes == a.bytes
    assert b.roce["icrc_ok"] == n_frames and b.roce["icrc_bad"] == 0
    assert b.roce["payload_bytes"] == a.roce["payload_bytes"]
    assert (b.roce["psn_gaps"], b.roce["psn_reordered"]) == (0, 0)
    ca, cb = open_capture(sent), open_capture(got)
    assert [ca.frame(r) for r in ca.read()] == [cb.frame(r) for r in cb.read()]
    # scored as a lab scores a replay: nothing missing, extra or reordered; the start error is
    # tcpreplay's --mbps 1000 pacing against the 400 Gb/s schedule (printed, not bounded)
    score = score_replay([got], [sent])
    assert (score["matched"], score["missing"], score["extra"]) == (n_frames, 0, 0)
    assert score["reordered"] == 0 and score["ok"]
    assert score["start_error"]["count"] > 0
    print(render_timing_text(score))


def test_tcpreplay_version_is_known():
    """The replay card (docs/analysis.md) names the tcpreplay version it was checked with."""
    if shutil.which("tcpreplay") is None:
        pytest.skip("tcpreplay is not installed")
    out = _run("tcpreplay", "--version", check=False).stdout + \
        _run("tcpreplay", "--version", check=False).stderr
    assert "tcpreplay version: 4." in out
