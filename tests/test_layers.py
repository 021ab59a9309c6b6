"""The layering contract of pyproject.toml ``[tool.importlinter]`` holds: stages import only
earlier stages and the foundation (``wire``, ``pcap``, ``records``, ``errors``)."""
from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.conftest import ROOT


def test_import_linter_contract_is_kept():
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    done = subprocess.run([exe, "--config", str(ROOT / "pyproject.toml")], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "1 kept, 0 broken" in done.stdout


def test_the_contract_would_catch_an_upward_import(tmp_path):
    """The contract is not vacuous: a module of the plan importing the schedule breaks it."""
    exe = shutil.which("lint-imports")
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    pkg = tmp_path / "tokenpcap"
    shutil.copytree(ROOT / "tokenpcap", pkg, ignore=shutil.ignore_patterns("__pycache__"))
    (pkg / "plan" / "upward.py").write_text("from tokenpcap.schedule import runner  # noqa\n")
    cfg = tmp_path / "pyproject.toml"
    cfg.write_text((ROOT / "pyproject.toml").read_text())
    done = subprocess.run([exe, "--config", str(cfg)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env={"PYTHONPATH": str(tmp_path),
                                                        "PATH": "/usr/bin:/bin"})
    assert done.returncode != 0
    assert "tokenpcap.plan.upward -> tokenpcap.schedule.runner" in done.stdout
