"""The capture provenance line (tokenpcap.records.provenance): its exact text (docs/generate.md,
"Capture provenance"), round trips, malformed lines, and the SHB opt_comment of generated pcapng files read two independent ways:
the pcapng block layout by hand (draft-ietf-opsawg-pcapng Sec. 4.1, 3.5: SHB type 0x0A0D0D0A,
byte-order magic, version, section length, then options code 1 = opt_comment) and capinfos."""
from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.schedule.test_schedule import tiny_scenario
from tokenpcap.errors import DecodeError
from tokenpcap.generate.run import GenerateOptions, Selection, generate
from tokenpcap.config.profiles import load_scenario
from tokenpcap.records.provenance import (KEYS, MAX_SCALE, is_provenance, parse_provenance,
                                          provenance_comment)
from tokenpcap.records.points import parse_point


def shb_comments(path: Path) -> list[str]:
    """opt_comment values of the first Section Header Block, parsed from the spec's layout."""
    data = path.read_bytes()
    btype, = struct.unpack_from("<I", data, 0)
    assert btype == 0x0A0D0D0A
    bom, = struct.unpack_from("<I", data, 8)
    end = "<" if bom == 0x1A2B3C4D else ">"
    blen, = struct.unpack_from(end + "I", data, 4)
    pos, out = 8 + 4 + 2 + 2 + 8, []
    while pos < blen - 4:
        code, n = struct.unpack_from(end + "HH", data, pos)
        if code == 0:
            break
        if code == 1:
            out.append(data[pos + 4:pos + 4 + n].decode())
        pos += 4 + (n + 3) // 4 * 4
    return out


def test_the_exact_documented_line():
    line = provenance_comment(scenario="dante", scale=16, iterations=(0, 2), split="nic",
                              nics=None, ranks=[3, 1, 2], phases=("dp", "pp/forward"),
                              time_window=(0, 500_000), snaplen=262144, seed=7,
                              clear_to_send=True)
    assert line == ("tokenpcap scenario=dante scale=16 iterations=0:2 split=nic nics=all "
                    "ranks=1,2,3 phases=dp,pp/forward time_window=0:500000 snaplen=262144 "
                    "seed=7 clear_to_send=1")
    d = parse_provenance(line)
    assert d == {"scenario": "dante", "scale": 16, "iterations": (0, 2), "split": "nic",
                 "nics": None, "ranks": (1, 2, 3), "phases": ("dp", "pp/forward"),
                 "time_window": (0, 500_000), "snaplen": 262144, "seed": 7,
                 "clear_to_send": True, "point": "nic-tx", "selection": True}
    assert is_provenance(line) and not is_provenance("dp/backward/AllReduce it 0")


def test_selection_flag():
    base = dict(scenario="x", scale=1, split="none", snaplen=64, seed=0, clear_to_send=False)
    assert not parse_provenance(provenance_comment(iterations=(0, 3), nics=[0], **base))["selection"]
    assert parse_provenance(provenance_comment(iterations=(1, 3), **base))["selection"]
    assert parse_provenance(provenance_comment(iterations=(0, 1), time_window=(5, None),
                                               **base))["time_window"] == (5, None)


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), min_size=1,
                max_size=20)
idx = st.none() | st.lists(st.integers(0, 4096), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(name=names, scale=st.integers(1, MAX_SCALE), a=st.integers(0, 50), n=st.integers(1, 50),
       split=st.sampled_from(["nic", "phase", "none"]), nics=idx, ranks=idx,
       phases=st.none() | st.lists(names, min_size=1, max_size=4),
       tw=st.none() | st.tuples(st.integers(0, 10**12), st.none() | st.integers(1, 10**12)),
       snap=st.integers(1, 262144), seed=st.integers(0, 2**63 - 1), cts=st.booleans())
def test_round_trip(name, scale, a, n, split, nics, ranks, phases, tw, snap, seed, cts):
    if tw is not None and tw[1] is not None:
        tw = (tw[0], tw[0] + tw[1])
    line = provenance_comment(scenario=name, scale=scale, iterations=(a, a + n), split=split,
                              nics=nics, ranks=ranks, phases=phases, time_window=tw,
                              snaplen=snap, seed=seed, clear_to_send=cts)
    assert "\n" not in line and all("=" in w for w in line.split(" ")[1:])
    assert [w.split("=")[0] for w in line.split(" ")[1:]] == list(KEYS)
    d = parse_provenance(line)
    assert d["scenario"] == name and d["scale"] == scale and d["iterations"] == (a, a + n)
    assert d["nics"] == (None if nics is None else tuple(sorted(set(nics))))
    assert d["ranks"] == (None if ranks is None else tuple(sorted(set(ranks))))
    assert d["phases"] == (None if not phases else tuple(phases))
    assert d["time_window"] == tw and d["snaplen"] == snap and d["seed"] == seed
    assert d["clear_to_send"] is cts and d["split"] == split


@pytest.mark.parametrize("point", ["nic-tx", "nic-rx", "switch:leaf0-3:2", "switch:spine1-0:17",
                                   "switch:switch0:0"])
def test_point_is_written_only_when_not_nic_tx_and_reads_back(point):
    """nic-tx leaves the line as it was before points (the documented line above has none); the
    others append point=... after clear_to_send, and the parser accepts both."""
    base = dict(scenario="x", scale=1, iterations=(0, 1), split="nic", snaplen=64, seed=0,
                clear_to_send=False)
    plain = provenance_comment(**base)
    line = provenance_comment(**base, point=parse_point(point))
    if point == "nic-tx":
        assert line == plain and "point=" not in line
    else:
        assert line == plain + f" point={point}"
        assert [w.split("=")[0] for w in line.split(" ")[1:]] == list(KEYS) + ["point"]
    d = parse_provenance(line)
    assert d["point"] == point and parse_point(d["point"]) == parse_point(point)
    assert "extra" not in d
    assert d["selection"] is point.startswith("switch:")       # a port carries only some frames


@pytest.mark.parametrize("text,key", [
    ("tokenpcap scenario=x scale=1 iterations=0:1 split=nic nics=all ranks=all phases=all "
     "time_window=all snaplen=1 seed=0 clear_to_send=1 point=nic", "point: got 'nic'"),
    ("hello", "expected a line starting with 'tokenpcap'"),
    ("tokenpcap scenario=x", "scale: got missing"),
    ("tokenpcap scenario=x scale=0 iterations=0:1 split=nic nics=all ranks=all phases=all "
     "time_window=all snaplen=1 seed=0 clear_to_send=1", "scale: got '0'"),
    ("tokenpcap scenario=x scale=1 iterations=2:1 split=nic nics=all ranks=all phases=all "
     "time_window=all snaplen=1 seed=0 clear_to_send=1", "iterations: got '2:1'"),
    ("tokenpcap scenario=x scale=1 iterations=0:1 split=qp nics=all ranks=all phases=all "
     "time_window=all snaplen=1 seed=0 clear_to_send=1", "split: got 'qp'"),
    ("tokenpcap scenario=x scale=1 iterations=0:1 split=nic nics=a ranks=all phases=all "
     "time_window=all snaplen=1 seed=0 clear_to_send=1", "nics: got 'a'"),
    ("tokenpcap scenario=x scale=1 iterations=0:1 split=nic nics=all ranks=all phases=all "
     "time_window=5:5 snaplen=1 seed=0 clear_to_send=1", "time_window: got '5:5'"),
    ("tokenpcap scenario=x scale=1 iterations=0:1 split=nic nics=all ranks=all phases=all "
     "time_window=all snaplen=1 seed=0 clear_to_send=yes", "clear_to_send: got 'yes'"),
])
def test_malformed_lines_name_the_key(text, key):
    with pytest.raises(DecodeError, match=key.replace("(", r"\(")):
        parse_provenance(text)


def test_generated_pcapng_files_carry_the_line_in_their_shb(tmp_path):
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    s = load_scenario(path)
    out = tmp_path / "o"
    out.mkdir()
    res = generate(s, GenerateOptions(out_dir=out, fmt="pcapng", split="nic", scale=4, seed=5,
                                      iterations=2, snaplen=128, jobs=1,
                                      selection=Selection(phases=("dp",), ranks=frozenset({0, 4}),
                                                          iterations=range(1, 2))))
    assert res.files
    want = ("tokenpcap scenario=cross scale=4 iterations=1:2 split=nic nics=all ranks=0,4 "
            "phases=dp time_window=all snaplen=128 seed=5 clear_to_send=1")
    for f, _, size in res.files:
        assert shb_comments(f) == [want]
        assert f.stat().st_size == size          # the predicted size counts the comment
    assert res.expected_bytes == res.file_bytes
    if shutil.which("capinfos"):
        r = subprocess.run(["capinfos", "-k", str(res.files[0][0])], capture_output=True,
                           text=True, check=True)
        assert want in r.stdout


def test_classic_pcap_has_no_place_for_it_and_is_unchanged(tmp_path):
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    out = tmp_path / "o"
    out.mkdir()
    res = generate(load_scenario(path), GenerateOptions(out_dir=out, fmt="pcap", split="none",
                                                        scale=8, jobs=1))
    assert res.files[0][0].read_bytes()[:4] == bytes.fromhex("4d3cb2a1")   # ns pcap, LE
    assert res.expected_bytes == res.file_bytes


@pytest.mark.parametrize("key, value, match", [
    ("nics", "0-99999999999", "nics: got index 99,999,999,999, expected at most 1,048,576"),
    ("ranks", "5,0-1048577", "ranks: got index 1,048,577"),
    ("scale", "9" * 5000, "scale: got"),
    ("seed", "9" * 20, "seed: got"),
    ("iterations", "0:" + "9" * 5000, "iterations: got"),
    ("time_window", "1:" + "9" * 5000, "time_window: got"),
])
def test_hostile_numbers_are_refused_not_expanded_or_converted(key, value, match):
    """A range is expanded only up to MAX_INDEX (before: nics=0-99999999999 filled memory until
    the kernel killed inspect); a number has at most 19 digits (Python refuses to convert more
    than 4,300 with a ValueError that escaped as a traceback)."""
    import re

    line = provenance_comment(scenario="d", scale=1, iterations=(0, 1), split="nic",
                              snaplen=64, seed=1, clear_to_send=True)
    line = re.sub(rf"\b{key}=\S*", f"{key}={value}", line)
    with pytest.raises(DecodeError, match=match) as err:
        parse_provenance(line)
    assert "\n" not in str(err.value)
    assert parse_provenance(re.sub(r"nics=\S*", f"nics=0-{1 << 20}", line.replace(
        f"{key}={value}", "seed=1") if key == "seed" else line.replace(f"{key}={value}", {
            "nics": "nics=all", "ranks": "ranks=all", "scale": "scale=1",
            "iterations": "iterations=0:1", "time_window": "time_window=all"}[key])))["nics"][-1] \
        == 1 << 20


@settings(max_examples=200, deadline=None)
@given(values=st.lists(st.integers(0, 5000), min_size=1, max_size=60))
def test_index_ranges_read_back_to_the_same_indices(values):
    """index_ranges writes runs as ranges; the parser reads the text back to the same sorted
    distinct tuple, and the text has one item per run, not per index."""
    from tokenpcap.records.provenance import index_ranges

    text = index_ranges(values)
    base = dict(scenario="x", scale=1, iterations=(0, 1), split="none", snaplen=64, seed=0,
                clear_to_send=False)
    line = provenance_comment(**base).replace("ranks=all", f"ranks={text}")
    want = tuple(sorted(set(values)))
    assert parse_provenance(line)["ranks"] == want
    runs = 1 + sum(b != a + 1 for a, b in zip(want, want[1:]))
    assert len(text.split(",")) == runs


def test_a_scale_past_int64_is_refused_by_every_command_before_it_reaches_a_capture(tmp_path):
    """``generate --scale 99999999999999999999`` wrote ``scale=99999999999999999999`` into the
    capture, which ``trace --capture`` then refused and ``inspect --against`` ignored (comparing
    at scale 1: "3 of 4 cells differ"). Every command's ``--scale`` now stops at
    MAX_SCALE = 2^63 - 1 (usage error), the largest the comment carries back (the round trip
    above draws scales up to it), and the comment refuses one past it."""
    from click.testing import CliRunner

    from tokenpcap.cli import main
    from tokenpcap.errors import InputError

    assert MAX_SCALE == 2**63 - 1
    dante = str(Path(__file__).resolve().parents[2] / "profiles" / "scenarios" / "dante.yaml")
    big = str(MAX_SCALE + 1)
    for args in (["generate", dante, "-o", str(tmp_path / "o")], ["run", dante, "-o",
                 str(tmp_path / "o")], ["plan", dante], ["export", dante, "--to", "csv", "-o",
                 str(tmp_path / "x.csv")], ["plot", dante, "-o", str(tmp_path / "p")],
                 ["trace", dante, "Nel"], ["inspect", dante], ["compare", dante, "--hpcc-fct",
                 dante]):
        r = CliRunner().invoke(main, [*args, "--scale", big])
        assert r.exit_code == 2 and f"'--scale': {big} is not in the range" in r.output, args
    assert not list(tmp_path.iterdir())
    with pytest.raises(InputError, match="out of range"):
        provenance_comment(scenario="s", scale=MAX_SCALE + 1, iterations=(0, 1), split="nic",
                           snaplen=1, seed=0, clear_to_send=True)
