"""``inspect --against``: the right verdict on every kind of capture tokenpcap writes and on
slices of them (classic pcaps without comments, one NIC or one phase, time chunks; scale and
iterations from the provenance or the options).

Oracles: the plan (stage 3: ``build_plan`` per-NIC and per-phase bytes, ``nic_bytes_by_rank``),
TShark/editcap on the very same files (CTS count, one NIC filtered out, time chunks), and
"wrong on purpose" runs (another scale) that must fail, so that no check passes vacuously.
Dante at ``--scale 64`` keeps every capture small (~7 000 frames).
"""
from __future__ import annotations

import ipaddress
import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from tests.conftest import needs_tshark, simple_args, simple_on
from tokenpcap.cli import main

ROOT = Path(__file__).resolve().parents[2]
DANTE = ROOT / "profiles" / "scenarios" / "dante.yaml"
SCALE = 64
needs_editcap = pytest.mark.skipif(shutil.which("editcap") is None, reason="editcap missing")


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def against(*args) -> tuple[dict, dict]:
    """``inspect --json --against DANTE ARGS`` → (against block, the named checks)."""
    r = run("inspect", "--json", "--no-crc", "--against", DANTE, *args)
    assert r.exit_code == 0, r.output
    j = json.loads(r.output)
    return j["against"], {c["name"]: c for c in j["checks"]}


@pytest.fixture(scope="module")
def scenario():
    from tokenpcap.config.profiles import load_scenario
    return load_scenario(DANTE)


@pytest.fixture(scope="module")
def plan64(scenario):
    from tokenpcap.plan.build import build_plan
    return build_plan(scenario, scale=SCALE)


@pytest.fixture(scope="module")
def gen(tmp_path_factory, scenario):
    """``gen(name, fmt, split, **options)`` → the files of one Dante run at scale 64, cached."""
    g = pytest.importorskip("tokenpcap.generate.run")
    base = tmp_path_factory.mktemp("against")
    cache: dict[str, list[Path]] = {}

    def make(name, fmt="pcapng", split="none", iterations=None, **sel):
        if name not in cache:
            (base / name).mkdir()
            res = g.generate(scenario, g.GenerateOptions(
                out_dir=base / name, fmt=fmt, split=split, snaplen=128, scale=SCALE,
                iterations=iterations, selection=g.Selection(**sel)))
            cache[name] = [Path(f) for f, _, _ in res.files]
        return cache[name]
    return make


def nic_address(scenario, g: int) -> str:
    from tokenpcap.config.addresses import nic_addresses
    return str(ipaddress.IPv4Address(bytes(nic_addresses(scenario.cluster).ipv4[g])))


def test_plan_cells_add_up_to_the_plan(scenario, plan64):
    """Columns sum to the plan's per-phase bytes, rows to its per-NIC bytes; a rank selection
    keeps those ranks' bytes (their NICs' sums of ``nic_bytes_by_rank``)."""
    from tokenpcap.analysis.plancells import plan_cells
    pc = plan_cells(scenario, scale=SCALE, iterations=3)
    rows = {r.name: r.nic_bytes for r in plan64.rows if r.nic_bytes}
    assert dict(zip(pc.labels, pc.bytes.sum(axis=0).tolist())) == \
        {k: 3 * v for k, v in rows.items()}
    assert pc.bytes.sum(axis=1).tolist() == (3 * plan64.nic_bytes_per_nic()).tolist()
    sel = plan_cells(scenario, scale=SCALE, ranks=(17,))
    want = {r.name: int(r.nic_bytes_by_rank[17]) for r in plan64.rows if r.nic_bytes}
    nic17 = int(plan64.layout.nic_array(np.array([17]))[0])
    assert dict(zip(sel.labels, sel.bytes[nic17].tolist())) == want
    assert sel.bytes.sum() == sum(want.values())


def test_classic_pcap_of_the_whole_run(gen, plan64):
    """A classic pcap has no comments; the CTS writes (WRITE ONLY of 64 B) are left out,
    and every NIC's payload equals the plan's."""
    pcap = gen("pcap_none", fmt="pcap")[0]
    r = run("inspect", pcap, "--against", DANTE, "--scale", SCALE, "--strict", "--no-crc")
    assert r.exit_code == 0, r.output
    assert "compared:      32 NICs (total per NIC), exactly" in r.output
    a, checks = against(pcap, "--scale", SCALE)
    assert a["mode"] == "nic" and a["compared"] == 32 and a["differences"] == []
    assert {e["nic"]: e["capture_bytes"] for e in a["nics"]} == \
        dict(enumerate(plan64.nic_bytes_per_nic().tolist()))
    assert checks["against"]["ok"]


@needs_tshark
def test_cts_bytes_left_out_equal_tsharks_write_only_count(gen):
    pcap = gen("pcap_none", fmt="pcap")[0]
    out = subprocess.run(["tshark", "-r", str(pcap), "-Y", "infiniband.bth.opcode == 10",
                          "-T", "fields", "-e", "frame.number"], capture_output=True, text=True,
                         check=True).stdout.split()
    a, _ = against(pcap, "--scale", SCALE)
    assert len(out) > 0 and a["control_bytes"] == 64 * len(out)


@needs_tshark
def test_one_nic_filtered_out_of_a_classic_pcap(gen, scenario, plan64, tmp_path):
    """A NIC's frames cut out of the whole run with tshark: that NIC is compared
    exactly, the 31 others are named as not covered."""
    pcap = gen("pcap_none", fmt="pcap")[0]
    one = tmp_path / "nic5.pcap"
    subprocess.run(["tshark", "-r", str(pcap), "-Y", f"ip.src == {nic_address(scenario, 5)}",
                    "-w", str(one), "-F", "pcap"], check=True, capture_output=True)
    a, checks = against(one, "--scale", SCALE)
    assert [(e["nic"], e["capture_bytes"]) for e in a["nics"]] == \
        [(5, int(plan64.nic_bytes_per_nic()[5]))]
    assert checks["against"]["ok"] and "31 NICs not covered" in a["note"]


@needs_editcap
def test_editcap_time_chunks_are_upper_bounds(gen, tmp_path):
    """editcap cuts messages: each chunk is compared as upper bounds and passes; against
    a plan 16x smaller some chunk exceeds it."""
    pcap = gen("pcap_none", fmt="pcap")[0]
    subprocess.run(["editcap", "-c", "2500", str(pcap), str(tmp_path / "c.pcap")], check=True)
    chunks = sorted(tmp_path.glob("c_*.pcap"))
    assert len(chunks) >= 3
    failed = 0
    for c in chunks:
        a, checks = against(c, "--scale", SCALE)
        # the last chunk holds the optimizer's reductions whole: their phases are inferred
        assert checks["against"]["ok"], a["differences"][:3]
        assert a["bound"] or (c == chunks[-1] and "(those phases only, inferred)" in a["note"])
        a, checks = against(c, "--scale", 16 * SCALE)
        failed += not checks["against"]["ok"]
    assert failed > 0


@needs_tshark
@needs_editcap
def test_pcapng_pieces_keep_a_stale_provenance_comment(gen, scenario, plan64, tmp_path):
    """tshark -w and editcap copy the SHB comment ("split=none nics=all"): a NIC filtered out
    is compared on its own cells, the NICs absent are named, not failed; editcap chunks are
    time slices."""
    ng = gen("ng_none")[0]
    one = tmp_path / "nic3.pcapng"
    subprocess.run(["tshark", "-r", str(ng), "-Y", f"ip.src == {nic_address(scenario, 3)}",
                    "-w", str(one)], check=True, capture_output=True)
    a, checks = against(one)
    by_rank = {r.name: r.nic_bytes_by_rank for r in plan64.rows if r.nic_bytes}
    nic_of = plan64.layout.nic_array(np.arange(plan64.layout.world_size))
    assert {c["phase"]: c["capture_bytes"] for c in a["cells"]} == \
        {k: int(v[nic_of == 3].sum()) for k, v in by_rank.items() if v[nic_of == 3].sum()}
    assert checks["against"]["ok"] and "NICs 0-2,4-31: named by the provenance" in a["note"]
    subprocess.run(["editcap", "-c", "2500", str(ng), str(tmp_path / "c.pcapng")], check=True)
    # the tail chunk cuts no message and pairs every clear-to-send: nothing in it says it is a
    # slice (a QP's first PSN after its initial one would; docs/analysis.md), so it is left out
    for c in sorted(tmp_path.glob("c_*.pcapng"))[:-1]:
        a, checks = against(c)
        assert a["bound"] and checks["against"]["ok"] and a["scale"] == SCALE, (
            c.name, a["bound"], a["note"], a["differences"][:3])


def test_one_nic_and_one_phase_pcapng(gen, plan64):
    """A NIC's file is compared on its (NIC, phase) cells (a stage-0 NIC sends no
    pp/backward: not a selection), a phase's file on every NIC of that phase; another scale
    fails both."""
    files = gen("ng_nic", split="nic")
    by_rank = {r.name: r.nic_bytes_by_rank for r in plan64.rows if r.nic_bytes}
    nic_of = plan64.layout.nic_array(np.arange(plan64.layout.world_size))
    for g, f in ((0, files[0]), (16, files[16])):
        assert f"node{g // 8:02d}_nic{g % 8}" in f.name
        a, checks = against(f)
        want = {(g, k): int(v[nic_of == g].sum()) for k, v in by_rank.items()
                if v[nic_of == g].sum()}
        assert {(c["nic"], c["phase"]): c["capture_bytes"] for c in a["cells"]} == want
        assert a["compared"] == len(want) and checks["against"]["ok"]
        assert "phases" not in (a["note"] or "")           # pp/forward or backward: plan 0
        assert not against(f, "--scale", 2 * SCALE)[1]["against"]["ok"]
    phase = [f for f in gen("ng_phase", split="phase") if "pp-forward" in f.name][0]
    a, checks = against(phase)
    assert a["compared"] == 16 and checks["against"]["ok"]
    assert sum(c["capture_bytes"] for c in a["cells"]) == \
        {r.name: r.nic_bytes for r in plan64.rows}["pp/forward/SendRecv"]
    assert not against(phase, "--scale", 2 * SCALE)[1]["against"]["ok"]


def test_whole_run_split_and_unsplit_pcapng(gen, plan64):
    cells = sum(int((r.nic_bytes_by_nic(plan64.layout) > 0).sum()) for r in plan64.rows)
    for files in (gen("ng_nic", split="nic"), gen("ng_phase", split="phase"), gen("ng_none")):
        a, checks = against(*files)
        assert a["mode"] == "nic_phase" and a["compared"] == cells and checks["against"]["ok"]
        assert a["not_compared"] == []


def test_classic_pcap_of_one_phase(gen, plan64):
    """Without comments the phases are inferred from the per-NIC bytes."""
    files = {f.name: f for f in gen("pcap_phase", fmt="pcap", split="phase")}
    a, checks = against(files["dante_pp-forward-SendRecv.pcap"], "--scale", SCALE)
    assert checks["against"]["ok"] and a["compared"] == 16
    assert "['pp/forward/SendRecv']" in a["note"]
    a, checks = against(files["dante_dp-backward-AllReduce.pcap"], "--scale", SCALE)
    assert checks["against"]["ok"] and a["compared"] == 32


def test_nothing_comparable_fails_under_strict(tmp_path):
    """A capture without RDMA data compares nothing: said so, and --strict fails."""
    from tests.analysis.test_inspect import write
    arp = bytes.fromhex("ffffffffffff020000000001080600010800060400010200000000010a000001"
                        "0000000000000a000002") + bytes(18)
    f = write(tmp_path / "arp.pcap", [arp] * 3)
    r = run("inspect", f, "--against", DANTE, "--strict")
    assert r.exit_code == 1 and "nothing comparable" in r.output
    assert run("inspect", f, "--strict").exit_code == 0


def test_time_window_selection_is_bounded(gen):
    files = gen("ng_win", window_ns=(100_000, 300_000))
    a, checks = against(*files)
    assert a["bound"] and checks["against"]["ok"] and a["compared"] > 0
    assert "time window" in a["note"]
    assert not against(*files, "--scale", 16 * SCALE)[1]["against"]["ok"]


def test_rank_selection(gen, plan64):
    files = gen("ng_ranks", split="nic", ranks=frozenset({0, 1, 17}))
    a, checks = against(*files)
    want = {r.name: int(r.nic_bytes_by_rank[17]) for r in plan64.rows if r.nic_bytes_by_rank[17]}
    nic17 = int(plan64.layout.nic_array(np.array([17]))[0])
    assert {c["phase"]: c["capture_bytes"] for c in a["cells"] if c["nic"] == nic17} == want
    assert checks["against"]["ok"]


def test_scale_and_iterations_from_provenance_or_options(gen):
    """A pcapng knows its scale and iterations; a classic pcap needs the options."""
    ng = gen("ng_iter", iterations=2)
    a, checks = against(*ng)
    assert (a["scale"], a["iterations"], checks["against"]["ok"]) == (SCALE, 2, True)
    pcap = gen("pcap_iter", fmt="pcap", iterations=2)
    assert not against(*pcap)[1]["against"]["ok"]                       # 1 x unscaled
    assert not against(*pcap, "--scale", SCALE)[1]["against"]["ok"]     # 1 iteration
    for it in ("2", "1:3"):
        a, checks = against(*pcap, "--scale", SCALE, "--iterations", it)
        assert checks["against"]["ok"] and a["iterations"] == 2
    assert not against(*ng, "--iterations", "1")[1]["against"]["ok"]    # option overrides


@pytest.mark.parametrize("args", [("--scale", "0"), ("--iterations", "0"),
                                  ("--iterations", "3:1"), ("--iterations", "x")])
def test_bad_scale_or_iterations_is_a_usage_error(tmp_path, args):
    from tests.analysis.test_inspect import write
    f = write(tmp_path / "e.pcap", [bytes(60)])
    r = run("inspect", f, "--against", DANTE, *args)
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert f"Invalid value for '{args[0]}'" in r.output
    r = run("inspect", f, "--scale", "4")
    assert r.exit_code == 2 and "--scale and --iterations need --against" in r.output


@pytest.mark.slow
def test_native_infiniband_erf(tmp_path):
    """ERF (type 21, no comments, no provenance) of an InfiniBand run: NICs by LID, CTS left
    out, compared per NIC at the scale given; unscaled it differs."""
    g = pytest.importorskip("tokenpcap.generate.run")
    from tokenpcap.plan.build import build_plan
    from tokenpcap.config.profiles import load_scenario
    path = ROOT / "profiles" / "scenarios" / "llama2-7b-a100-ib.yaml"
    s = load_scenario(path)
    res = g.generate(s, g.GenerateOptions(out_dir=tmp_path, fmt="erf", split="none",
                                          snaplen=64, scale=4096))
    erf = res.files[0][0]
    r = run("inspect", "--json", "--no-crc", erf, "--against", path, "--scale", 4096)
    j = json.loads(r.output)
    a = j["against"]
    assert j["kinds"] == {"InfiniBand": j["packets"]} and a["mode"] == "nic"
    assert {e["nic"]: e["capture_bytes"] for e in a["nics"]} == \
        dict(enumerate(build_plan(s, scale=4096).nic_bytes_per_nic().tolist()))
    assert a["differences"] == [] and a["control_bytes"] == res.cts_payload
    r = run("inspect", erf, "--against", path, "--strict", "--no-crc")
    assert r.exit_code == 1 and "scale 1, 1 iteration; scale and iterations assumed" in r.output
    assert "of the plan's bytes: made with --scale" in r.output


def test_nics_without_data_are_named_as_the_plan_has_them(tmp_path):
    """inspect names the NICs of the capture that carry no data, and why; they are exactly the
    NICs to which the plan gives no bytes: a DP ring over 4 nodes of 8 GPUs on 2 channels
    crosses nodes on NICs 0 and 1 of every node only."""
    from tests.schedule.test_schedule import tiny_scenario
    from tokenpcap.analysis.inspect import inspect_captures
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.plan.build import build_plan

    g = pytest.importorskip("tokenpcap.generate.run")
    s = load_scenario(tiny_scenario(tmp_path, "two-channels", dp=32, tp=1, pp=1, gbs=32,
                                    cluster="h100-rocev2-400g", channels=2))
    (tmp_path / "out").mkdir()
    res = g.generate(s, g.GenerateOptions(out_dir=tmp_path / "out", fmt="pcapng", split="none",
                                          scale=16))
    rep = inspect_captures([f for f, _, _ in res.files], crc=False)
    per_nic = build_plan(s, scale=16).nic_bytes_per_nic()
    idle = {nic_address(s, n) for n in np.flatnonzero(per_nic == 0).tolist()}
    assert len(idle) == 24
    assert {e["address"] for e in rep.idle_nics} == idle
    assert {e["reason"] for e in rep.idle_nics} == {"no_packet"}
    assert any(n.startswith("24 NIC(s) of the capture send no packet: node0/nic2 (198.18.0.3)")
               for n in rep.notes)
    assert any(n.startswith("why a NIC carries no data") for n in rep.notes)
    data = {e["address"]: e["data_payload_bytes"] for e in rep.nics}
    for n in np.flatnonzero(per_nic).tolist():
        assert data[nic_address(s, n)] == per_nic[n]


def _with_provenance(path: Path, comment: str) -> Path:
    """16 RoCE packets of tests/analysis/trace.py in a pcapng whose section comment is
    ``comment``."""
    from tests.analysis.trace import context, packets
    from tokenpcap.pcap import Interface, PcapngWriter
    from tokenpcap.wire.builder import FrameBuilder

    b, p = FrameBuilder(context()), packets(16)
    with PcapngWriter(path, [Interface(name=f"node0/nic{g}") for g in range(8)],
                      section_comment=comment) as w:
        w.write_batch(p["time_ns"], b.frame_bytes(p), lambda o, off, c: b.fill(p, o, off, c),
                      interface=p["nic"])
    return path


def test_more_iterations_than_a_capture_holds_are_one_line_not_an_overflow(tmp_path):
    """A provenance comment (or --iterations) claiming 10^18 iterations overflowed int64 in the
    plan cells (a traceback); now one line naming where the number came from."""
    from tokenpcap.config.profiles import MAX_ITERATIONS
    from tokenpcap.records.provenance import provenance_comment

    line = provenance_comment(scenario="dante", scale=64, iterations=(0, 10**18), split="none",
                              snaplen=128, seed=1, clear_to_send=True)
    f = _with_provenance(tmp_path / "p.pcapng", line)
    r = run("inspect", f, "--against", DANTE)
    assert r.exit_code == 1 and r.output == (
        f"error: {f}: provenance iterations: got 1,000,000,000,000,000,000 iterations, expected "
        f"at most {MAX_ITERATIONS:,} (the most one capture holds)\n"), r.output
    r = run("inspect", f, "--against", DANTE, "--iterations", str(10**20))
    assert r.exit_code == 1 and r.output.startswith("error: --iterations: got 100,000,000,000")


def test_files_of_different_runs_are_named_by_value_not_listed_whole(tmp_path):
    """A directory where one run's files meet another's (``generate --nics 0 --scale 4`` into
    the directory of a ``run``) is refused naming each value, how many files carry it and the
    first of them: the message does not grow with the number of NICs (it listed all 32 paths)."""
    from tokenpcap.records.provenance import provenance_comment

    def comment(scale, iterations=(0, 1)):
        return provenance_comment(scenario="dante", scale=scale, iterations=iterations,
                                  split="nic", snaplen=128, seed=1, clear_to_send=True)

    (tmp_path / "d").mkdir()
    for g in range(40):
        _with_provenance(tmp_path / "d" / f"n{g:02d}.pcapng", comment(4 if g == 7 else 64))
    r = run("inspect", tmp_path / "d", "--against", DANTE)
    assert r.exit_code == 1 and r.output == (
        f"error: {tmp_path / 'd'}: provenance scale: got 4 in 1 file (n07.pcapng) and 64 in 39 "
        "files (n00.pcapng, …), expected one value (the files of one run)\n"), r.output
    (tmp_path / "e").mkdir()
    a = _with_provenance(tmp_path / "e" / "a.pcapng", comment(64, (0, 2)))
    b = _with_provenance(tmp_path / "b.pcapng", comment(64))
    r = run("inspect", a, b, "--against", DANTE)
    assert r.exit_code == 1 and r.output == (
        f"error: {a}: provenance iterations: got 0:1 in 1 file ({b}) and 0:2 in 1 file ({a}), "
        "expected one value (the files of one run)\n"), r.output


@pytest.mark.parametrize("name, scale, fmt", [
    ("gpt2-all-cross", 16384, "pcap"), ("gpt2-all-cross", 16384, "pcapng"),
    ("llama2-7b-a100-ib", 65536, "erf")])
def test_data_messages_of_the_cts_size_are_not_counted_as_cts(tmp_path, name, scale, fmt):
    """At these scales some data messages are exactly ``CTS_BYTES`` long, one packet each. On
    the wire a clear-to-send is an RDMA WRITE ONLY without immediate (0x0A) while every data
    message of a clear-to-send run ends with immediate (its ONLY is 0x0B): the opcode, not the
    size, tells them apart, in pcap, pcapng and ERF alike. Oracles: the generator's own count
    of the CTS packets it wrote (``GenerateResult.cts_packets``/``cts_payload``) and, in
    pcapng, the ``cts`` comments of those packets."""
    g = pytest.importorskip("tokenpcap.generate.run")
    from tokenpcap.analysis.decode import decode_batch
    from tokenpcap.analysis.inspect import inspect_capture
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.pcap.reader import open_capture
    from tokenpcap.records import CTS_BYTES
    from tokenpcap.wire.rdma import WRITE_ONLY, WRITE_ONLY_IMM
    path = ROOT / "profiles" / "scenarios" / f"{name}.yaml"
    # Simple on the channels these scales were found on: raw payload, 64-byte data messages
    res = g.generate(load_scenario(path, simple_on(name)), g.GenerateOptions(
        out_dir=tmp_path, fmt=fmt, split="none", scale=scale))
    capture = res.files[0][0]
    cap = open_capture(capture)
    dec = decode_batch(cap.data, cap.read(), cap.views)
    cts_sized = dec["payload"] == CTS_BYTES
    assert ((dec["opcode"] == WRITE_ONLY_IMM) & cts_sized).sum() > 0      # the trap is there
    assert ((dec["opcode"] == WRITE_ONLY) & cts_sized).sum() == res.cts_packets > 0
    rep = inspect_capture(capture)
    counted = sum(n for (_, _, _, size), n in rep.small_writes.items() if size == CTS_BYTES)
    assert counted == res.cts_packets
    if fmt == "pcapng":                 # the comments name every CTS packet
        assert sum(e["packets"] for e in rep.phases if e["name"].endswith("[cts]")) == \
            res.cts_packets
        assert {k: n for k, n in rep.small_writes.items() if not k[0].endswith("[cts]")} == {}
    r = run("inspect", "--json", "--no-crc", capture, "--against", path, "--scale", scale,
            *simple_args(name))
    a = json.loads(r.output)["against"]
    assert a["control_bytes"] == res.cts_payload == CTS_BYTES * res.cts_packets
    assert a["differences"] == [] and a["compared"] > 0
