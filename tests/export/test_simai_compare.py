"""A real SimAI_analytical run of Dante's workload export (tests/cases/simai/, made as
tests/export/test_simai_csv.py says) set beside our schedule: every row matched to its record
exactly once, the size SimAI used recovered from its own algbw, our spans within the α–β bounds of
NVLink, and a file of another export refused before anything is scheduled."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import simple_on
from tokenpcap.config.profiles import load_scenario
from tokenpcap.errors import InputError
from tokenpcap.export.simai import simai_workload
from tokenpcap.export.simai_compare import (SimaiComparison, call_spans, compare_simai,
                                            report_lines)
from tokenpcap.export.simai_csv import read_end_to_end
from tokenpcap.schedule.runner import NVLINK_LATENCY_NS

ROOT = Path(__file__).resolve().parents[2]
DANTE = ROOT / "tests" / "cases" / "simai" / "dante.yaml"   # Dante as SimAI ran it
CSV = ROOT / "tests" / "cases" / "simai" / "dante-EndToEnd.csv"


@pytest.fixture(scope="module")
def dante() -> SimaiComparison:
    return compare_simai(DANTE, CSV)


def test_every_row_matches_its_record_once(dante):
    e = read_end_to_end(CSV)
    with_comm = [r for r in e.rows if r.fwd_comm_ns or r.ig_comm_ns or r.wg_comm_ns]
    assert dante.not_reported == []
    assert sorted({x.line for x in dante.entries}) == [r.line for r in with_comm]
    assert len(dante.entries) == 63 and len({x.call_id for x in dante.entries}) == 63
    by_line = {r.line: r for r in e.rows}
    for x in dante.entries:
        assert by_line[x.line].layer == x.record
        assert x.sim_total_ns == getattr(by_line[x.line], f"{x.column}_comm_ns") > 0


def test_simais_algbw_gives_back_the_size_of_the_matched_record(dante):
    """SimAI writes algbw = size / unrounded time (``Layer::compute_busbw``, GB of 2^30 B) and
    the time rounded to µs: size / algbw must be that time within half a µs, for the record's
    own size (a row matched to the wrong record or column fails this)."""
    e = read_end_to_end(CSV)
    by_line = {r.line: r for r in e.rows}
    for x in dante.entries:
        algbw = getattr(by_line[x.line], f"{x.column}_algbw")
        t_us = x.message_bytes / (algbw * 2**30) * 1e6
        assert abs(t_us - x.sim_total_ns / 1000) <= 0.5 + t_us * 0.01 / algbw, x.record


def test_our_tp_spans_keep_to_nvlinks_alpha_beta_bounds(dante):
    """nccl-tests' bus bandwidth (PERFORMANCE.md: AllGather/ReduceScatter S(n-1)/n / t,
    AllReduce 2S(n-1)/n / t) of a TP call inside a node cannot exceed the NVLink rate, and the
    span holds at least one NVLink latency on top of the bytes at that rate."""
    rate_bytes_per_ns = load_scenario(DANTE).cluster.nvlink_gbps / 8
    tp = [x for x in dante.entries if x.label.startswith("tp/")]
    assert len(tp) == 62
    for x in tp:
        n = x.group_ranks
        factor = 2 * (n - 1) / n if x.label.endswith("AllReduce") else (n - 1) / n
        wire_ns = x.message_bytes * factor / rate_bytes_per_ns
        assert x.ours_ns >= wire_ns + NVLINK_LATENCY_NS, x.record
    dp = [x for x in dante.entries if x.label.startswith("dp/")]
    assert [x.simai_type for x in dp] == ["ALLREDUCE"] and dp[0].ours_ns > 0


def test_call_spans_from_messages_and_nvlink_copies():
    from tokenpcap.schedule.engine.nic import MSG_STATE_DTYPE
    from tokenpcap.schedule.runner import NVLINK_DTYPE

    m = np.zeros(3, MSG_STATE_DTYPE)
    m["call_id"], m["ready_ns"], m["arrival_ns"] = [5, 5, 7], [100, 50, 10], [400, 300, 20]
    nv = np.zeros(2, NVLINK_DTYPE)
    nv["call_id"], nv["start_ns"], nv["arrival_ns"] = [5, 9], [20, 0], [90, 33]
    assert call_spans(m, nv, [5, 7, 8]) == {5: 380, 7: 10}
    assert call_spans(m[:0], nv[:0], [5]) == {}


def test_report_names_groups_summary_and_left_out(dante):
    text = "\n".join(report_lines(dante))
    assert text.splitlines()[0].split()[:4] == ["group", "calls", "rows", "MB"]
    rows = {line.split()[0]: line.split() for line in text.splitlines()[2:9]}
    assert set(rows) == {"tp/forward/AllReduce", "tp/backward/AllGather", "tp/forward/AllGather",
                         "tp/forward/ReduceScatter", "tp/backward/ReduceScatter",
                         "dp/backward/AllReduce", "all"}
    assert rows["all"][1:3] == ["63", "63"]
    assert rows["dp/backward/AllReduce"][5] == "635.000"           # SimAI's 635 µs
    assert "SimAI summary µs: DP 635, DP_EP 0, TP 293" in text
    assert "SimAI reported every one of the 62 records with a collective" in text
    assert "pp/forward/SendRecv (activation) 1.573 MB" in text


def test_records_missing_from_the_file_are_reported(tmp_path):
    lines = CSV.read_text().splitlines(keepends=True)
    keep = [ln for ln in lines if not ln.startswith(("layer3_mlp_in,", "dense_grad_bucket0,"))]
    (tmp_path / "e.csv").write_text("".join(keep))
    c = compare_simai(DANTE, tmp_path / "e.csv")
    assert c.not_reported == ["layer3_mlp_in", "dense_grad_bucket0"]
    missing = [x for x in c.entries if x.line < 0]
    assert [x.record for x in missing] == c.not_reported
    assert all(x.sim_total_ns is None and x.ours_ns > 0 for x in missing)
    text = "\n".join(report_lines(c))
    assert "not reported by SimAI: 2 records: layer3_mlp_in, dense_grad_bucket0" in text
    dp = [ln for ln in text.splitlines() if ln.startswith("dp/backward/AllReduce")][0].split()
    assert dp[1:3] == ["1", "0"] and dp[4] == "-"


@pytest.mark.parametrize("scale, edit, message", [
    (64, None, "line 5: fwd compute: got 10 µs, expected 0 µs (layer0 of this scenario's export"),
    (1, ("layer5_mlp_out_grad,", "layer9_mlp_out_grad,"),
     "line 70: layer_name: got 'layer9_mlp_out_grad', expected a layer record of this "
     "scenario's export"),
    (1, ("layer5_mlp_in_regather,", "layer5_mlp_out_grad,"),
     "line 70: layer_name: got 'layer5_mlp_out_grad', expected each record once"),
])
def test_a_file_of_another_export_is_refused(tmp_path, scale, edit, message):
    text = CSV.read_text()
    if edit:
        text = text.replace(*edit)
    (tmp_path / "e.csv").write_text(text)
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        compare_simai(DANTE, tmp_path / "e.csv", scale=scale)


def test_the_workload_keeps_the_calls_it_was_made_from():
    from tokenpcap.plan.build import build_plan

    plan = build_plan(load_scenario(DANTE))
    wl = simai_workload(plan)
    calls = {c.call_id: c for c in plan.calls(0)}
    for r in wl.records:
        for k in ("fwd", "ig", "wg"):
            cid = getattr(r, f"{k}_call")
            assert (cid >= 0) == (getattr(r, f"{k}_type") != "NONE"), (r.id, k)
            if cid >= 0:
                assert calls[cid].message_bytes == getattr(r, f"{k}_bytes")
                assert calls[cid].microbatch in (0, -1)


def test_nvlink_calls_timed_as_a_whole_take_their_alpha_beta_time():
    """With NVLink-only calls timed as a whole (large jobs: Mixtral with EP), a TP call's span
    is the schedule's α–β time: ceil(B·8/nvlink_gbps) + steps·NVLINK_LATENCY_NS, B the bytes one
    rank sends (Thakur, Rabenseifner & Gropp 2005; ring AllGather: n−1 steps of S/n)."""
    from tokenpcap.plan.build import build_plan
    from tokenpcap.schedule.runner import Schedule

    s = load_scenario(DANTE, simple_on("dante"))       # Simple: B is the data, no LL lines
    plan = build_plan(s)
    sched = Schedule(plan, iterations=1, nics=(), nvlink_copies=0)
    for _ in sched.run():
        pass
    assert sched.nvlink_mode == "collectives"
    whole = sched.whole_call_ns
    wl = simai_workload(plan)
    ag = [r for r in wl.records if r.fwd_type == "ALLGATHER"]
    assert len(ag) == 12
    for r in ag:
        n = s.parallelism.tp
        b = r.fwd_bytes // n * (n - 1)
        assert whole[r.fwd_call] == -(-b * 8 // int(s.cluster.nvlink_gbps)) + \
            (n - 1) * NVLINK_LATENCY_NS
