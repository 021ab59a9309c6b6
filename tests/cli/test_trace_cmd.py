"""`tokenpcap trace` through click's CliRunner: exit codes, one-line answers, JSON."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tokenpcap.cli import main

ROOT = Path(__file__).resolve().parents[2]
DANTE = str(ROOT / "profiles" / "scenarios" / "dante.yaml")


@pytest.fixture
def run(tmp_path_factory, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TOKENPCAP_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "trace-cache"))

    def _run(*args: str):  # type: ignore[no-untyped-def]
        return CliRunner().invoke(main, list(args))

    return _run


def test_trace_json_names_the_pipeline_messages_of_the_first_verse(run):  # type: ignore[no-untyped-def]
    res = run("trace", DANTE, "Nel mezzo del cammin di nostra vita", "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["located"]["token_start"] == 3 and len(d["located"]["ids"]) == 7
    nic = [k for k in d["carriers"] if k["on_nic"]]
    assert {k["label"] for k in nic} == {"pp/forward/SendRecv", "pp/backward/SendRecv"}
    # 7 tokens x 768 hidden x 2 bytes (bf16) of each 128-token PP message
    assert all(k["token_bytes"] == 7 * 768 * 2 for k in nic)
    assert set(d["filters"]) == {"node00/nic0", "node02/nic0"}


def test_trace_text_output(run):  # type: ignore[no-untyped-def]
    res = run("trace", DANTE, "vita   mi ritrovai")
    assert res.exit_code == 0, res.output
    assert "whitespace-insensitive match 1 of 1" in res.stdout
    assert "iteration 0, microbatch 0, DP replica 0" in res.stdout
    assert "node00/nic0: ip.src == 198.18.0.1 && ((infiniband.bth.destqp ==" in res.stdout


@pytest.mark.parametrize("args, words", [
    (("to be or not to be",), "not in the corpus"),
    (("l'amor che move il sole e l'altre stelle",), "dropped tail of an epoch"),
    (("Nel mezzo", "--occurrence", "3"), "--occurrence: got 3, expected 1..1"),
    (("Nel mezzo", "--capture", "/nonexistent"), "--capture: got a path that does not exist"),
])
def test_trace_answers_in_one_line_exit_1(run, args, words):  # type: ignore[no-untyped-def]
    res = run("trace", DANTE, *args)
    assert res.exit_code == 1
    assert words in res.output and res.output.count("\n") == 1 and "Traceback" not in res.output


def test_trace_usage_errors_exit_2(run):  # type: ignore[no-untyped-def]
    assert run("trace", DANTE).exit_code == 2
    assert run("trace", DANTE, "Nel", "--occurrence", "0").exit_code == 2


def test_trace_refuses_a_workload_scenario_in_one_line():
    path = str(ROOT / "profiles" / "scenarios" / "incast-63x16m.yaml")
    res = CliRunner().invoke(main, ["trace", path, "ciao"])
    assert res.exit_code == 1
    assert res.output == (f"error: {path}: a workload scenario has no model: trace (following a "
                          "corpus's tokens) needs a training scenario (model, parallelism, "
                          "training)\n")
