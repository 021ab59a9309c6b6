"""SimAI's analytical backend run on every pipeline stage's workload file: it reads each file,
reports every record in order, charges each layer the compute we wrote (whether the layer has a
collective or not) and times the MoE layers' expert AllToAlls at the size we wrote.

The fixtures in ``tests/cases/simai/stages/`` are real runs of ``SimAI_analytical`` built from
aliyun/SimAI at f5efb5a93ea9be7db25a8843f9f7ff54044f6062 exactly as ``test_simai_csv.py``
describes (2026-12-07, g++ 12.2, cmake 3.25, Debian 12), run from the directory holding
``astra-sim-alibabacloud`` on the exports of this tree::

    tokenpcap export profiles/scenarios/dante.yaml --to simai -o run/dante-tp1.txt \\
        --set parallelism.tp=1 --set parallelism.dp=16 --set parallelism.sequence_parallel=false
    tokenpcap export profiles/scenarios/deepseek-v3-2048.yaml --to simai -o run/dsv3-16n.txt \\
        --set parallelism.dp=8 --set parallelism.ep=8 --set training.global_batch_size=16 \\
        --set cluster.nodes=16 --set training.mfu=0.45
    for f in dante-tp1 dante-tp1-stage1; do
        $SIMAI -w run/$f.txt -g 32 -g_p_s 8 -n_p_s 8 -nv 419.095 -nic 46.566 -g_type H100 -r $f-
    done
    for f in run/dsv3-16n*.txt; do f=$(basename $f .txt)
        $SIMAI -w run/$f.txt -g 128 -g_p_s 8 -n_p_s 8 -nv 186.265 -nic 46.566 -g_type H800 -r $f-
    done

(``training.mfu=0.45``: every kernel at 45 % of the peak, the efficiency the runs were made with;
SimAI echoes whatever compute the file carries. ``-nv``/``-nic``: the clusters' NVLink and NIC rates in SimAI's GB/s of 2^30 bytes: 3600 Gb/s =
419.095, 1600 Gb/s = 186.265, 400 Gb/s = 46.566.) Each run takes under 0.4 s; the 18
``results/*-EndToEnd.csv`` files are kept as they came out. The full ``deepseek-v3-2048`` (2,048
GPUs, 120 microbatches) exports in about a minute and SimAI runs its 16 files the same way (each
stage's layer compute is the same; only ``ga``, ``all_gpus`` and the DP sizes differ): the test
uses the 16-node variant so that it plans in a second. Its token dispatch is FP8 with its
scales (242,221,056 B per AllToAll), the combine bf16 (469,762,048 B), as the profile says.

SimAI prints a time as ``std::fixed << std::setprecision(0)`` of ticks / 1000
(``Layer::report``), i.e. our ns rounded to whole µs as printf rounds.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from tokenpcap.config.profiles import load_scenario
from tokenpcap.export.simai import write_simai
from tokenpcap.export.simai_csv import read_end_to_end
from tokenpcap.plan.build import build_plan

from tests.export.test_simai import parse

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "profiles" / "scenarios"
RUNS = ROOT / "tests" / "cases" / "simai" / "stages"


def _dante_tp1():
    s = load_scenario(SCEN / "dante.yaml")
    return dataclasses.replace(s, parallelism=dataclasses.replace(
        s.parallelism, tp=1, dp=16, sequence_parallel=False))


def _deepseek_16n():
    s = load_scenario(SCEN / "deepseek-v3-2048.yaml")
    return dataclasses.replace(
        s, parallelism=dataclasses.replace(s.parallelism, dp=8, ep=8),
        model=dataclasses.replace(s.model, moe=dataclasses.replace(   # SimAI's ALLTOALL_EP
            s.model.moe, token_dispatcher="alltoall")),
        training=dataclasses.replace(s.training, global_batch_size=16, mfu=0.45),
        cluster=dataclasses.replace(s.cluster, nodes=16))


def _us_as_simai_prints(ns: int) -> int:
    """``setprecision(0)`` of ns / 1000, back in ns (the reader keeps whole µs x 1000)."""
    return int(f"{ns / 1000:.0f}") * 1000


@pytest.mark.parametrize("prefix, scenario, stages", [
    ("dante-tp1", _dante_tp1, 2), ("dsv3-16n", _deepseek_16n, 16)])
def test_simai_ran_every_stages_records_with_our_compute(tmp_path, prefix, scenario, stages):
    plan = build_plan(scenario())
    paths = write_simai(plan, tmp_path / f"{prefix}.txt")
    assert len(paths) == stages
    layers_seen: set[str] = set()
    for path in paths:
        _, records = parse(path.read_text())
        run = read_end_to_end(RUNS / f"{path.stem}-EndToEnd.csv")
        assert run.file_name == f"{path.stem}-"
        # SimAI reported each record of the file we write today, in order: nothing skipped
        assert [r.layer for r in run.rows] == [r[0] for r in records]
        for row, rec in zip(run.rows, records):
            assert row.fwd_compute_ns == _us_as_simai_prints(int(rec[2]))
            assert row.ig_compute_ns == _us_as_simai_prints(int(rec[5]))
            assert row.wg_compute_ns == _us_as_simai_prints(int(rec[8]))
            if rec[3] == "ALLTOALL_EP" and int(rec[4]) >= 1 << 20:
                # SimAI timed the expert AllToAll at our size: algbw (GiB/s) x time = bytes
                size = row.fwd_algbw * 2**30 * row.fwd_comm_ns * 1e-9
                assert size == pytest.approx(int(rec[4]), rel=1e-3)
        layers_seen |= {r[0] for r in records if r[0].startswith("layer") and "_" not in r[0]}
        # SimAI's total compute is the sum of the compute it charged per record
        charged = sum(r.fwd_compute_ns + r.ig_compute_ns + r.wg_compute_ns for r in run.rows)
        assert abs(run.summary["total comp"] - charged) <= 500 * 3 * len(run.rows)
        assert run.summary["total comp"] > 0
    assert layers_seen == {f"layer{k}" for k in range(plan.scenario.model.layers)}
