"""A seeded slice of the fuzz campaign in CI (a minute or two): every surface of
tests/fuzz_surfaces.py on cases drawn as the campaign draws them, and a short run of
benchmarks/fuzz_campaign.py itself over all targets, so a regression of any kind (a traceback,
a hang, an exit-0 wrong output, an error of more than one line) fails the build."""
from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from tests.fuzz_surfaces import SURFACES, run_surface
from tests.fuzzing import ROOT

#: cases per surface in the slice (the long campaign runs a million over all targets)
SLICE = {"simai": 400, "fct": 400, "pfc": 400, "numeric": 150, "path": 60, "signal": 12,
         "many": 8}


def _cheap(target: str, data: bytes) -> bool:
    """The slice keeps many-section and many-flow captures small (the campaign runs the large
    ones: up to 6,000 sections and 400,000 flows)."""
    if target != "many":
        return True
    case = json.loads(data)
    return case["n"] <= (6000 if case["kind"] == "sections" else 1000)


@pytest.mark.parametrize("target", sorted(SLICE))
def test_a_seeded_slice_of_each_surface_gives_results_or_one_clean_error(tmp_path, target):
    outcomes: dict[str, int] = {}
    i = 0
    while sum(outcomes.values()) < SLICE[target]:
        rng = random.Random(2026_12_04 * 1_000_003 + i)
        i += 1
        data = SURFACES[target].make(rng, tmp_path)
        if not _cheap(target, data):
            continue
        got = run_surface(target, data, tmp_path / target)
        assert got in ("ok", "error"), data
        outcomes[got] = outcomes.get(got, 0) + 1
    assert outcomes, target


def test_the_campaign_runs_clean_on_a_seeded_slice(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fuzz_campaign.py"),
                        "--cases", "6000", "--workers", "1", "--seed", "20261204",
                        "--out", str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    summary = [line for line in r.stdout.splitlines() if line.startswith("cases ")]
    assert summary and ", crashes 0, hangs 0, workers killed silent 0" in summary[0], r.stdout


def test_a_numeric_case_past_its_budget_is_counted_long_and_a_small_one_runs(tmp_path):
    """Jobs of the fuzz scenario (8 GPUs, dp 2, 12 layers) past a numeric case's budget by
    the engine's own estimates are counted long, not run into the case's limit:
    global_batch_size 1024 on the queued DCQCN fabric announces about 77 s of timing (its
    packets x links, 266 MB of state), past half the 120 s limit; 16384 on the ideal fabric
    about 43 s but 4.2 GB of engine state. The campaign's case 688575 (seed 20261204),
    4096 on the queued fabric (about 307 s, 1.06 GB), ran into the limit before and peaked
    at 1.44 GB. The same job at 8 sequences runs to its result."""
    cases = {"long": [("queued", 1024), ("ideal", 16384), ("queued", 4096)],
             "ok": [("queued", 8)]}
    for want, jobs in cases.items():
        for base, gb in jobs:
            data = json.dumps({"base": base, "sets": [f"training.global_batch_size={gb}"]})
            assert run_surface("numeric", data.encode(), tmp_path / f"{base}{gb}") == want
