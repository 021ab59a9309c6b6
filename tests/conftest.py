"""Shared fixtures: paths to the repository's profiles, samples and the real-world cases."""
from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASES = ROOT / "tests" / "cases"

# A test run started in the background of a script (bash sets SIGINT to SIG_IGN for a job
# started with '&' without job control, as CI runners and `nohup ... &` do) would pass that
# SIG_IGN to every command the tests run, and a command keeps an ignored signal ignored: the
# tests that stop a command with SIGINT need it delivered, as at a terminal. The tests of the
# ignored case set SIG_IGN themselves.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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


#: The channels each bundled scenario set by hand before NCCL's own choice became the default
#: (``collectives.channels``): tests about other things keep the numbers they derived on them.
HAND_SET_CHANNELS = {"dante": 2, "gpt2-all-cross": 1, "llama2-7b-a100-ib": 2,
                     "mixtral-8x7b-ep-64": 2, "gpt3-175b-megatron": 2, "llama3.1-405b-2048": 2,
                     "llama3-70b-64n": 2, "llama3-70b-64k-cp4": 2}


def simple_on(name: str | None = None) -> dict:
    """``load_scenario`` overrides for NCCL's Simple protocol (raw payload, no LL/LL128 lines)
    and, for a bundled ``name``, its hand-set channels (:data:`HAND_SET_CHANNELS`)."""
    out = {"collectives.NCCL_PROTO": "Simple", "collectives.NCCL_P2P_LL_THRESHOLD": 0}
    if name is not None:
        out["collectives.channels"] = HAND_SET_CHANNELS[name]
    return out


def simple_args(name: str | None = None) -> list[str]:
    """:func:`simple_on` as ``--set KEY=VALUE`` command-line arguments."""
    return [a for k, v in simple_on(name).items() for a in ("--set", f"{k}={v}")]
