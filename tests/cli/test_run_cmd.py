"""``tokenpcap run`` and ``tokenpcap generate`` through click's CliRunner: exit codes and output."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.schedule.test_schedule import tiny_scenario
from tokenpcap.cli import main
from tokenpcap.plan.build import build_plan
from tokenpcap.config.profiles import load_scenario

ROOT = Path(__file__).resolve().parents[2]
DANTE = ROOT / "profiles" / "scenarios" / "dante.yaml"


def test_run_default_scenario_scaled(tmp_path):
    r = CliRunner().invoke(main, ["run", "-o", str(tmp_path), "--scale", "32", "--jobs", "2"])
    assert r.exit_code == 0, r.output
    files = sorted(tmp_path.glob("dante_node*_nic*.pcapng"))
    assert len(files) == 32
    assert "writing 32 pcapng files to" in r.output
    assert re.search(r"corpus: [\d,]+ tokens; one iteration takes 16,384 tokens\n", r.output)
    for label in ("dp/backward/AllReduce", "emb/backward/AllReduce", "pp/forward/SendRecv",
                  "pp/backward/SendRecv"):
        assert label in r.output
    m = re.search(r"packets ([\d,]+), file bytes ([\d,]+) \(expected ([\d,]+)\)", r.output)
    assert m and m.group(2) == m.group(3)
    assert sum(f.stat().st_size for f in files) == int(m.group(2).replace(",", ""))
    assert "clear-to-send packets" in r.output and "ACKs" in r.output
    assert "ms of simulated time" in r.output


def test_generate_prints_per_phase_payload_equal_to_the_plan(tmp_path):
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(out), "--format", "pcap",
                                  "--split", "phase", "--jobs", "1", "--seed", "3"])
    assert r.exit_code == 0, r.output
    plan = build_plan(load_scenario(path))
    for row in plan.rows:
        if row.nic_bytes:
            # table row: phase | packets | payload | plan NIC bytes (both the same)
            assert re.search(rf"{re.escape(row.name)}\s*│\s*[\d,]+\s*│\s*{row.nic_bytes:,}\s*│\s*"
                             rf"{row.nic_bytes:,}", r.output), row.name
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"cross_{row.name.replace('/', '-')}.pcap" for row in plan.rows if row.nic_bytes)


def test_generate_selection_options(tmp_path):
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(tmp_path / "o"), "--nics", "0-1",
                                  "--phases", "dp", "--iterations", "0:2", "--time-window", ":10ms",
                                  "--snaplen", "128", "--jobs", "1"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "cross_node00_nic0.pcapng", "cross_node01_nic0.pcapng"]
    assert "dp/backward/AllReduce" in r.output and "pp/forward" not in r.output


def test_library_errors_exit_1_usage_errors_exit_2(tmp_path):
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(tmp_path), "--format", "erf"])
    assert r.exit_code == 2
    assert "Invalid value for '--format': got 'erf' for transport 'rocev2'" in r.output
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(tmp_path), "--nics", "9"])
    assert r.exit_code == 2 and "got '9', expected indices in 0..7" in r.output
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(tmp_path), "--format", "cap"])
    assert r.exit_code == 2
    r = CliRunner().invoke(main, ["generate", str(path)])
    assert r.exit_code == 2 and "--output" in r.output
    r = CliRunner().invoke(main, ["run", str(tmp_path / "nope.yaml"), "-o", str(tmp_path)])
    assert r.exit_code == 1 and r.output.startswith("error: ")


def test_summary_plan_column_is_the_plan_at_the_runs_scale_times_iterations(tmp_path):
    """With --scale K and --iterations N the plan column beside the payload is the plan at
    scale K times N (not the unscaled one-iteration plan); every phase row matches."""
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(tmp_path / "o"), "--scale", "8",
                                  "--iterations", "2", "--jobs", "1", "--format", "pcap"])
    assert r.exit_code == 0, r.output
    plan = build_plan(load_scenario(path), scale=8)
    assert "plan at scale 8 × 2 iterations" in r.output
    for row in plan.rows:
        if row.nic_bytes:
            assert re.search(rf"{re.escape(row.name)}\s*│\s*[\d,]+\s*│\s*{2 * row.nic_bytes:,}\s*│"
                             rf"\s*{2 * row.nic_bytes:,}", r.output), row.name


# ------------------------------------------------------------------ bad values, unwritable outputs

BAD_VALUES = [  # every one a usage error (exit 2) naming its option, nothing written
    (["--ranks", "99"], "--ranks"), (["--ranks", "a-b"], "--ranks"),
    (["--nics", "-1"], "--nics"), (["--nics", "40"], "--nics"),
    (["--time-window", "abc"], "--time-window"), (["--time-window", "5:2"], "--time-window"),
    (["--iterations", "0"], "--iterations"), (["--iterations", "3:1"], "--iterations"),
    (["--format", "erf"], "--format"),
    (["--seed", str(2 ** 63)], "--seed"),                        # beyond int64
    (["--scale", "0"], "--scale"), (["--snaplen", "0"], "--snaplen"),
]


@pytest.mark.parametrize("args,option", BAD_VALUES)
def test_bad_option_values_exit_2_before_anything_is_created(tmp_path, args, option):
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    out = tmp_path / "new"
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(out), "--jobs", "1"] + args)
    assert r.exit_code == 2, r.output
    assert f"Invalid value for '{option}'" in r.output and "Traceback" not in r.output
    assert not out.exists()


def test_a_scenario_seed_beyond_64_bits_is_refused_before_writing(tmp_path):
    """generation.seed 2^63 fails at the up-front check, not in a writer process."""
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    path.write_text(path.read_text() + f"generation: {{seed: {2 ** 63}}}\n")
    out = tmp_path / "new"
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(out), "--jobs", "2"])
    assert r.exit_code == 1
    assert r.output.count("\n") == 1 and r.output.startswith(f"error: {path}: generation.seed: "
                                                              "got 9223372036854775808, expected")
    assert "9,223,372,036,854,775,807" in r.output     # the upper bound, as the loader prints it
    assert "writing" not in r.output and not out.exists()


def test_generate_checks_an_in_memory_seed_before_writing(tmp_path):
    """The library checks the seed up front too (a scenario built in memory skips the loader)."""
    import dataclasses

    from tokenpcap.errors import InputError
    from tokenpcap.generate.run import GenerateOptions, generate

    s = load_scenario(tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8))
    s = dataclasses.replace(s, generation=dataclasses.replace(s.generation, seed=2 ** 63))
    out = tmp_path / "o"
    out.mkdir()
    with pytest.raises(InputError, match="generation.seed: got 9223372036854775808, expected "
                                         "0..9223372036854775807"):
        generate(s, GenerateOptions(out_dir=out, jobs=2))
    with pytest.raises(InputError, match="--seed: got -1"):
        generate(s, GenerateOptions(out_dir=out, jobs=2, seed=-1))
    assert not list(out.iterdir())


def test_unwritable_outputs_are_one_line_errors(tmp_path, monkeypatch):
    """-o under a file, and a directory the file system refuses to create: one line, exit 1."""
    import errno

    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    afile = tmp_path / "afile"
    afile.write_text("x")
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(afile / "sub"), "--jobs", "1"])
    assert r.exit_code == 1 and r.output.startswith("error: ") and r.output.count("\n") == 1
    assert f"got a file ({afile}), expected a directory" in r.output

    def refuse(self, *a, **k):
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "mkdir", refuse)
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(tmp_path / "ro" / "x"),
                                  "--jobs", "1"])
    assert r.exit_code == 1 and r.output.count("\n") == 1
    assert "cannot create it: Read-only file system" in r.output


def test_a_refused_run_leaves_no_directory_it_created(tmp_path, monkeypatch):
    """Refusing for lack of disk space removes the new (empty) output directory,
    and keeps a directory that existed before."""
    import shutil

    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)

    class Usage:
        free = 1000

    monkeypatch.setattr(shutil, "disk_usage", lambda _: Usage())
    out = tmp_path / "a" / "b"
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(out), "--jobs", "1"])
    assert r.exit_code == 1 and "free space got 1,000 bytes" in r.output
    assert not (tmp_path / "a").exists()
    (tmp_path / "kept").mkdir()
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(tmp_path / "kept"), "--jobs", "1"])
    assert r.exit_code == 1 and (tmp_path / "kept").is_dir()


def test_gpt3_175b_every_nic_is_refused_at_once_for_its_size_on_disk(tmp_path):
    """The bundled GPT-3 175B scenario is within the timing engine's limits for a run that
    holds only the messages in progress (tests/schedule/test_limits.py), but `run` writes every
    NIC's frames: 30 TB, refused at once with one line from the plan's estimate, before the
    schedule is built, and nothing is left behind. The estimate is the plan's pcap file size
    (plan/sizing.py; its value is checked in tests/plan/test_plan.py) times the iterations."""
    g3 = ROOT / "profiles" / "scenarios" / "gpt3-175b-megatron.yaml"
    s = load_scenario(g3)
    need = int(build_plan(s).pcap["file_bytes"]) * s.generation.iterations
    assert 30e12 < need < 31e12, need                 # the 30 TB of every NIC's frames
    out = str(tmp_path / "new" / "x")
    r = CliRunner().invoke(main, ["run", str(g3), "-o", out])
    assert r.exit_code == 1 and r.output.count("\n") == 1, r.output
    assert r.output.startswith(f"error: {out}: free space got ")
    assert f" {need:,} bytes of the capture (estimated from the plan before simulating" \
        in r.output
    assert not (tmp_path / "new").exists()


# signals, kills, a full disk and concurrent runs: tests/generate/test_faults.py


def test_a_second_run_into_the_same_directory_names_the_files_it_did_not_write(tmp_path):
    """Per-NIC files then --split none into one directory would mix two runs, and `inspect DIR`
    would count the traffic twice: the second run names the capture files it did not write."""
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    out = tmp_path / "out"
    first = CliRunner().invoke(main, ["generate", str(path), "-o", str(out), "--jobs", "1"])
    assert first.exit_code == 0, first.output
    assert "also holds" not in first.output
    n_first = len(list(out.iterdir()))
    again = CliRunner().invoke(main, ["generate", str(path), "-o", str(out), "--jobs", "1"])
    assert again.exit_code == 0 and "also holds" not in again.output     # same files, rewritten
    second = CliRunner().invoke(main, ["generate", str(path), "-o", str(out), "--jobs", "1",
                                       "--split", "none"])
    assert second.exit_code == 0, second.output
    text = " ".join(second.output.split())          # rich wraps long lines
    note = re.search(r"note: (\S+) also holds (\d+) capture files this run did not write", text)
    assert note and int(note.group(2)) == n_first, second.output
    assert "inspect DIR would add them to this run's" in text


def test_one_file_left_by_another_run_is_named_in_the_singular(tmp_path):
    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    out = tmp_path / "out"
    first = CliRunner().invoke(main, ["generate", str(path), "-o", str(out), "--jobs", "1",
                                      "--split", "none"])
    assert first.exit_code == 0 and "writing 1 pcapng file to" in first.output, first.output
    (left,) = out.iterdir()
    second = CliRunner().invoke(main, ["generate", str(path), "-o", str(out), "--jobs", "1"])
    text = " ".join(second.output.split())
    assert second.exit_code == 0 and "writing 8 pcapng files to" in text, second.output
    assert (f"also holds 1 capture file this run did not write (e.g. {left.name}); inspect DIR "
            "would add it to this run's") in text


def test_run_a_workload_scenario_without_a_corpus(tmp_path):
    out = tmp_path / "o"
    r = CliRunner().invoke(main, ["run", str(ROOT / "profiles" / "scenarios" / "incast-63x16m.yaml"),
                                  "-o", str(out), "--scale", "256", "-j", "1"])
    assert r.exit_code == 0, r.output
    assert "corpus:" not in r.output and len(list(out.glob("*.pcapng"))) == 64
    assert re.search(r"wl/run/SendRecv\s+│\s+1,008\s+│\s+4,128,768\s+│\s+4,128,768", r.output)


def test_an_output_under_a_dangling_symlink_names_the_link(tmp_path):
    """``-o LINK`` or ``-o LINK/sub`` where LINK points at nothing said "cannot create it: File
    exists" (mkdir's errno on the link itself); now it names the link and its target. mkdir -p
    refuses the same path (the oracle that the target really is missing)."""
    import subprocess

    path = tiny_scenario(tmp_path, "cross", dp=2, tp=2, pp=2, gbs=8)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    assert subprocess.run(["mkdir", "-p", str(link / "sub")], capture_output=True).returncode != 0
    for out in (link, link / "sub"):
        r = CliRunner().invoke(main, ["generate", str(path), "-o", str(out), "--jobs", "1"])
        assert r.exit_code == 1 and r.output == (
            f"error: {out}: output directory: got a symbolic link {link} to "
            f"{tmp_path / 'nowhere'}, which does not exist, expected a directory\n"), r.output
    assert not (tmp_path / "nowhere").exists()
