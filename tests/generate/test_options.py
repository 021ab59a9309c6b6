"""options: every option generate cannot honour is refused by name before any work, and the
provenance comment records the options a run was given (read back by the provenance parser)."""
from __future__ import annotations

from dataclasses import replace

import pytest

from tests.schedule.test_schedule import tiny_scenario
from tokenpcap.config.profiles import load_scenario
from tokenpcap.errors import InputError, OutputError
from tokenpcap.generate.options import (EPOCH_NS, MAX_SEED, GenerateOptions, check_options,
                                        provenance_comment)
from tokenpcap.generate.select import Selection, parse_window
from tokenpcap.records.provenance import parse_provenance


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    d = tmp_path_factory.mktemp("options")
    return load_scenario(tiny_scenario(d, "tiny", dp=2, tp=2, pp=2, gbs=8)), d


def test_epoch_is_2024_01_01_utc():
    from datetime import datetime, timezone
    assert EPOCH_NS == int(datetime(2024, 1, 1, tzinfo=timezone.utc).timestamp()) * 10**9


@pytest.mark.parametrize("change, match", [
    (dict(fmt="erf"), "erf"),
    (dict(split="rank"), r"--split: got 'rank', expected one of nic, phase, none"),
    (dict(snaplen=0), r"--snaplen: got 0, expected 1\.\.262144"),
    (dict(snaplen=262145), r"--snaplen: got 262145"),
    (dict(scale=0), r"--scale/--jobs: got 0/1"),
    (dict(jobs=0), r"--scale/--jobs: got 1/0"),
    (dict(iterations=0), r"--iterations: got 0, expected an integer >= 1"),
    (dict(seed=-1), r"--seed: got -1, expected 0\.\."),
    (dict(seed=MAX_SEED + 1), rf"--seed: got {MAX_SEED + 1}"),
    (dict(scale=MAX_SEED + 1), r"--scale: got 9,223,372,036,854,775,808, expected at most "),
])
def test_each_bad_option_is_refused_by_name(scenario, change, match):
    s, d = scenario
    with pytest.raises(InputError, match=match):
        check_options(s, GenerateOptions(out_dir=d, **change))
    check_options(s, GenerateOptions(out_dir=d, seed=MAX_SEED))


def test_a_scenario_seed_out_of_range_and_a_missing_directory(scenario):
    s, d = scenario
    bad = replace(s, generation=replace(s.generation, seed=MAX_SEED + 1))
    with pytest.raises(InputError, match=r"generation\.seed: got 9223372036854775808"):
        check_options(bad, GenerateOptions(out_dir=d))
    check_options(bad, GenerateOptions(out_dir=d, seed=1))          # --seed overrides it
    with pytest.raises(OutputError, match="got no such directory"):
        check_options(s, GenerateOptions(out_dir=d / "missing"))


def test_provenance_records_the_options_and_an_open_window_stays_open(scenario):
    s, d = scenario
    opt = GenerateOptions(out_dir=d, scale=16, seed=7, split="phase", snaplen=128,
                          selection=Selection(nics=frozenset({1, 3}), iterations=range(1, 3),
                                              window_ns=parse_window("2us:")))
    p = parse_provenance(provenance_comment(s, opt, 3))
    assert (p["scenario"], p["scale"], p["seed"], p["split"], p["snaplen"]) == (
        "tiny", 16, 7, "phase", 128)
    assert p["iterations"] == (1, 3) and p["nics"] == (1, 3) and p["ranks"] is None
    assert p["time_window"] == (2000, None) and p["selection"]
    closed = replace(opt, selection=Selection(window_ns=parse_window("0:5us")))
    assert parse_provenance(provenance_comment(s, closed, 2))["time_window"] == (0, 5000)
    whole = parse_provenance(provenance_comment(s, GenerateOptions(out_dir=d)))
    assert whole["iterations"] == (0, s.generation.iterations) and not whole["selection"]
    assert whole["seed"] == s.generation.seed
