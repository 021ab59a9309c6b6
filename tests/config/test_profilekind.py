"""A model or cluster profile given where a scenario is expected is named as such, in one line:
every bundled model and cluster profile, on the library call and on every command that takes a
scenario; every bundled scenario still loads."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from tokenpcap.cli import main
from tokenpcap.config.profiles import load_scenario
from tokenpcap.errors import ProfileError

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "profiles"
KINDS = [(p, "a model profile", "'model'") for p in sorted((PROFILES / "models").glob("*.yaml"))]
KINDS += [(p, "a cluster profile", "'cluster'")
          for p in sorted((PROFILES / "clusters").glob("*.yaml"))]


@pytest.mark.parametrize("path, kind, key", KINDS, ids=lambda v: getattr(v, "name", None))
def test_a_bundled_model_or_cluster_is_named_as_such(path, kind, key):
    with pytest.raises(ProfileError) as err:
        load_scenario(path)
    assert err.value.got == kind and err.value.key == "<document>"
    assert f"a scenario names this file under its {key} key" in str(err.value)


@pytest.mark.parametrize("command", [["plan"], ["generate", "-o", "OUT"], ["run", "-o", "OUT"],
                                     ["export", "--to", "csv", "-o", "OUT/x.csv"]])
def test_every_scenario_command_says_it_in_one_line(tmp_path, command):
    model = PROFILES / "models" / "gpt2-small.yaml"
    args = [a.replace("OUT", str(tmp_path / "o")) for a in command]
    res = CliRunner().invoke(main, [args[0], str(model), *args[1:]])
    assert res.exit_code == 1, res.output
    [line] = res.stderr.strip().splitlines()
    assert line == (f"error: {model}: <document>: got 'a model profile', expected a scenario "
                    "(corpus, model, cluster, parallelism, training: see profiles/scenarios/); "
                    "a scenario names this file under its 'model' key")
    assert not (tmp_path / "o").exists()


def test_every_bundled_scenario_still_loads():
    for path in sorted((PROFILES / "scenarios").glob("*.yaml")):
        load_scenario(path)
