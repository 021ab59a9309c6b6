"""``plan --time``: one iteration timed, its MFU by Megatron-LM's formula and where its time goes."""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from tokenpcap.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_dantes_iteration_its_mfu_and_parts(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TOKENPCAP_CACHE_DIR", str(tmp_path))
    r = CliRunner().invoke(main, ["plan", "--time", "--json", "--no-tokens", "-q"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    it = data["iteration"]
    assert sum(it["parts_ns"].values()) == it["iteration_ns"] > 0
    assert min(it["parts_ns"].values()) >= 0
    # MFU = model FLOPs / (T x 32 GPUs x 989 TFLOP/s): Megatron-LM's throughput / peak
    assert it["model_flops"] == data["model_flops"]
    assert abs(it["mfu"] - data["model_flops"] / (it["iteration_ns"] * 1e-9 * 32 * 989e12)) < 1e-12
    assert it["kernel_efficiency"] == {"gemm": 0.45, "attention": 0.45}
    text = CliRunner().invoke(main, ["plan", "--time", "--no-tokens", "-q"])
    assert text.exit_code == 0
    assert f"MFU {100 * it['mfu']:.1f} %" in text.stdout
    assert "pipeline bubble by (p - 1) / (v m): 25.0 %" in text.stdout


def test_a_workload_has_nothing_to_time(tmp_path):  # type: ignore[no-untyped-def]
    r = CliRunner().invoke(main, ["plan", "--time",
                                  str(ROOT / "profiles" / "scenarios" / "incast-63x16m.yaml")])
    assert r.exit_code == 2 and "a workload scenario has no model" in r.output
    assert "Traceback" not in r.output


def test_the_published_mfu_is_printed_beside_the_schedules(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    """A scenario's ``published:`` MFU and source, in --json with the relative gap
    ``mfu / published - 1`` and in the text beside the MFU; the pipeline's three parts add up
    to its part of the table."""
    monkeypatch.setenv("TOKENPCAP_CACHE_DIR", str(tmp_path))
    base = ROOT / "profiles" / "scenarios"
    text = (base / "dante.yaml").read_text(encoding="utf-8")
    for rel in ("../../samples/divina_commedia.txt", "../models/gpt2-small.yaml",
                "../clusters/h100-rocev2-400g.yaml"):
        text = text.replace(rel, str((base / rel).resolve()))
    path = tmp_path / "dante-published.yaml"
    path.write_text(text + 'published: {mfu: 0.2, source: "a paper, Table 9"}\n', "utf-8")
    r = CliRunner().invoke(main, ["plan", "--time", "--json", "--no-tokens", "-q", str(path)])
    assert r.exit_code == 0, r.output
    it = json.loads(r.stdout)["iteration"]
    assert it["published"]["mfu"] == 0.2 and it["published"]["source"] == "a paper, Table 9"
    assert it["published"]["relative_gap"] == it["mfu"] / 0.2 - 1
    assert sum(it["pipeline_parts_ns"].values()) == it["parts_ns"]["pipeline bubble and waits"]
    out = CliRunner().invoke(main, ["plan", "--time", "--no-tokens", "-q", str(path)]).stdout
    gap = 100 * (it["mfu"] / 0.2 - 1)
    assert (f"published MFU 20.0 % (a paper, Table 9); the schedule's {100 * it['mfu']:.1f} % "
            f"is {gap:+.1f} % of it") in " ".join(out.split())
