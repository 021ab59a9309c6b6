"""``--set KEY=VALUE`` through the command line: a --set equal to the YAML changes no byte of
the output, one that differs acts as the edited file does (a copy of the scenario with the key
changed, its relative paths kept), and a bad key or value is one line with exit 1, a malformed
``KEY=VALUE`` a usage error (exit 2)."""
from __future__ import annotations

import filecmp
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tokenpcap.cli import main

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "profiles" / "scenarios"
DANTE = str(SCEN / "dante.yaml")


def _run(*args: str):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, list(args))


def _files(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


def test_a_set_equal_to_the_yaml_gives_byte_identical_captures(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    common = ["--scale", "1000", "--nics", "0-1"]
    assert _run("generate", DANTE, "-o", str(a), *common).exit_code == 0
    r = _run("generate", DANTE, "-o", str(b), *common, "--set", "parallelism.dp=4",
             "--set", "collectives.channels=auto", "--set", "generation.clear_to_send=true",
             "--set", "cluster.nodes=4", "--set", "model.layers=12")
    assert r.exit_code == 0, r.output
    assert _files(a) == _files(b) and _files(a)
    match, mismatch, errors = filecmp.cmpfiles(a, b, _files(a), shallow=False)
    assert mismatch == errors == [] and match


def test_a_set_acts_as_the_edited_file(tmp_path):
    """plan --json of dante with --set parallelism.dp=8 --set cluster.nodes=8 equals the plan
    of an edited copy (its model and cluster inlined from the files, so no path breaks)."""
    data = yaml.safe_load(Path(DANTE).read_text())
    data["parallelism"]["dp"] = 8
    data["corpus"] = str((SCEN / data["corpus"]).resolve())
    data["model"] = yaml.safe_load((SCEN / data["model"]).read_text())
    cluster = yaml.safe_load((SCEN / data["cluster"]).read_text())
    cluster["nodes"] = 8
    data["cluster"] = cluster
    copy = tmp_path / "dante.yaml"
    copy.write_text(yaml.safe_dump(data))
    edited = _run("plan", str(copy), "--json", "--no-tokens")
    r = _run("plan", DANTE, "--json", "--no-tokens", "--set", "parallelism.dp=8",
             "--set", "cluster.nodes=8")
    assert r.exit_code == edited.exit_code == 0, r.output + edited.output
    assert r.stdout.replace(DANTE, "X") == edited.stdout.replace(str(copy), "X")
    assert '"dp": 8' in r.stdout


@pytest.mark.parametrize("setting, message", [
    ("parallelism.dpp=2", "error: --set: parallelism.dpp: got 'dpp', expected a known key"),
    ("parallelism.dp=two", "error: --set: parallelism.dp: got 'two', expected an integer >= 1"),
    ("cluster.fabric.model=bogus",
     "error: --set: cluster.fabric.model: got 'bogus', expected one of 'ideal', 'queued'"),
    ("model.layers.x=1", "error: --set: model.layers.x: got 1, expected a key of a mapping"),
    ("generation.clear_to_send=maybe", "error: --set: generation.clear_to_send: got 'maybe'"),
])
def test_a_bad_key_or_value_is_one_line_with_exit_1(setting, message):
    for cmd in (["plan", DANTE, "--no-tokens"], ["export", DANTE, "--to", "simai", "-o", "x"]):
        r = _run(*cmd, "--set", setting)
        assert r.exit_code == 1, r.output
        assert r.output.startswith(message) and r.output.count("\n") == 1, r.output


@pytest.mark.parametrize("setting", ["parallelism", "=4", "parallelism..dp=2", "a.b=[1,"])
def test_a_malformed_set_is_a_usage_error(setting):
    r = _run("plan", DANTE, "--set", setting)
    assert r.exit_code == 2 and "Invalid value for '--set'" in r.output, r.output


def test_every_command_that_reads_a_scenario_has_set():
    for name in ("generate", "run", "plan", "plot", "export", "trace", "compare", "inspect"):
        assert "--set" in {o for p in main.get_command(None, name).params for o in p.opts}, name
