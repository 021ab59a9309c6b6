"""A non-editable install carries the bundled profiles and corpus: setup.py's ``build_py`` (what
``pip install .`` and a wheel build run) lays the package out with ``tokenpcap/_bundled/``, and the
package so laid out, outside the checkout, finds its default scenario, the scenario's model and
cluster and the corpus by their relative paths, and plans Dante."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """The package as ``build_py`` lays it out for a wheel (``build/lib``)."""
    out = tmp_path_factory.mktemp("build") / "lib"
    r = subprocess.run([sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(out)],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return out


def test_the_wheel_layout_holds_every_profile_and_the_corpus(built):
    bundled = built / "tokenpcap" / "_bundled"
    for name in ("profiles", "samples"):
        ours = sorted(p.relative_to(ROOT / name) for p in (ROOT / name).rglob("*") if p.is_file())
        got = sorted(p.relative_to(bundled / name) for p in (bundled / name).rglob("*")
                     if p.is_file())
        assert got == ours and ours, name
    dante = bundled / "profiles" / "scenarios" / "dante.yaml"
    assert dante.read_bytes() == (ROOT / "profiles" / "scenarios" / "dante.yaml").read_bytes()


def test_the_installed_layout_plans_the_default_scenario_outside_the_checkout(built, tmp_path):
    """``python -m tokenpcap plan --json`` with only the built package on the path, run from an
    empty directory: the default scenario resolves inside ``_bundled`` and gives the checkout's
    plan (the same JSON but for the corpus's path)."""
    env = {**os.environ, "PYTHONPATH": str(built)}
    cmd = [sys.executable, "-m", "tokenpcap", "plan", "--json"]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    where = subprocess.run([sys.executable, "-c", "import tokenpcap.config.profiles as p; "
                            "print(p.default_scenario_path())"], cwd=tmp_path, env=env,
                           capture_output=True, text=True).stdout.strip()
    assert Path(where).is_relative_to(built / "tokenpcap" / "_bundled")
    here = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert here.returncode == 0, here.stderr
    got, want = json.loads(r.stdout), json.loads(here.stdout)
    assert Path(got["tokens"].pop("corpus")).is_relative_to(built / "tokenpcap" / "_bundled")
    assert Path(want["tokens"].pop("corpus")) == ROOT / "samples" / "divina_commedia.txt"
    assert got == want
