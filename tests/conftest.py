"""Shared fixtures: paths to the repository's profiles, samples and the real-world cases."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "cases"


@pytest.fixture(autouse=True)
def no_stage_lines(monkeypatch):  # type: ignore[no-untyped-def]
    """Stage lines depend on how long a step takes on this machine (tokenpcap.cli.progress):
    off in every test, so that no output depends on the load; tests/cli/test_progress.py
    turns them on."""
    from tokenpcap.cli import progress

    monkeypatch.setattr(progress, "AFTER_S", float("inf"))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def corpus_path() -> Path:
    return ROOT / "samples" / "divina_commedia.txt"


@pytest.fixture(scope="session")
def scapy_vectors() -> dict:
    """``tests/cases/scapy-roce-vectors.json``: RoCEv2 frames built with scapy (tests/cases/README.md)."""
    return json.loads((CASES / "scapy-roce-vectors.json").read_text())


@pytest.fixture(scope="session")
def hw_frames() -> dict:
    """``tests/cases/hw-frames.json``: frames captured from real hardware (tests/cases/README.md)."""
    return json.loads((CASES / "hw-frames.json").read_text())


def tshark_path() -> str | None:
    return shutil.which("tshark")


needs_tshark = pytest.mark.skipif(tshark_path() is None, reason="tshark is not installed")
