"""SimAI's EndToEnd.csv read back: the real runs in tests/cases/simai/, every malformed line named
in one line, and a Hypothesis round trip through a writer that formats as ``Layer::report`` does.

The fixtures are real runs of SimAI's analytical backend, built from the public source of
aliyun/SimAI at commit f5efb5a93ea9be7db25a8843f9f7ff54044f6062 (SimAI 1.6, 2026-04-24: the
last commit whose ``astra-sim-alibabacloud`` builds alone; later ones take their MockNccl sources
from the SimCCL submodule, and the SimCCL snapshot we had, aliyun/SimCCL at 403610a, holds none;
``Layer::report`` and ``Workload::report`` differ from head cef83f9d only by an ``&& EndToEnd``
guard) with g++ 12.2 and cmake 3.25 on Debian 12::

    git archive f5efb5a9 astra-sim-alibabacloud | tar -x
    cd astra-sim-alibabacloud/build/simai_analytical && mkdir build && cd build
    cmake -DUSE_ANALYTICAL=TRUE .. && make        # 6 minutes, make -j1 under nice at load 5
    SIMAI=$PWD/simai_analytical/SimAI_analytical

and run from the directory holding ``astra-sim-alibabacloud`` (SimAI opens
``astra-sim-alibabacloud/inputs/ratio/*.csv`` relative to it, and writes ``./results/``), with
our cluster's rates in SimAI's GB/s of 2^30 bytes (NIC 400 Gb/s = 46.566, NVLink 450 GB/s =
419.095)::

    tokenpcap export profiles/scenarios/dante.yaml --to simai -o run/dante.txt
    tokenpcap export profiles/scenarios/mixtral-8x7b-ep.yaml --to simai -o run/mixtral.txt
    mkdir -p results
    $SIMAI -w run/dante.txt -g 32 -g_p_s 8 -n_p_s 8 -nv 419.095 -nic 46.566 -g_type H100 -r dante-
    $SIMAI -w run/mixtral.txt -g 32 -g_p_s 8 -n_p_s 8 -nv 419.095 -nic 46.566 -g_type H100 \\
        -r mixtral-

giving ``results/dante-EndToEnd.csv`` (68 records) and ``results/mixtral-EndToEnd.csv`` (467
records, renamed mixtral-8x7b-ep-EndToEnd.csv here), each in 0.02 s.
"""
from __future__ import annotations

import csv
import math
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tokenpcap.errors import InputError
from tokenpcap.export.simai_csv import (ROW_COLUMNS, SUMMARY_KEYS, layer_header,
                                        read_end_to_end)

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "cases" / "simai"
DANTE = CASES / "dante-EndToEnd.csv"
MIXTRAL = CASES / "mixtral-8x7b-ep-EndToEnd.csv"


def test_dante_run_reads_as_python_csv_sees_it():
    e = read_end_to_end(DANTE)
    table = list(csv.reader(DANTE.read_text().splitlines()))   # oracle: the stdlib's CSV reader
    assert [k.strip() for k in table[0]] == list(SUMMARY_KEYS)
    assert e.file_name == "dante-" and e.run_name == "Analytical_test"
    assert len(e.rows) == len(table) - 3 == 68
    for row, cells in zip(e.rows, table[3:]):
        assert row.layer == cells[0]
        for name, cell in zip(ROW_COLUMNS, cells[2:]):
            v = getattr(row, name)
            if name.endswith("_ns"):
                assert v == int(cell) * 1000
            else:
                assert (math.isnan(v) and "nan" in cell) or v == float(cell)
    assert e.summary["Expose DP comm"] == 635_000 and e.summary["Total time"] == 1_223_000
    assert e.shares["Expose DP comm"] == "51.94"
    # the summary is the sum of the rows (SimAI sums unrounded µs, the rows are rounded)
    wg = sum(r.wg_exposed_ns for r in e.rows)
    tp = sum(r.fwd_exposed_ns + r.ig_exposed_ns for r in e.rows)
    assert wg == e.summary["Expose DP comm"]
    assert abs(tp - e.summary["Expose TP comm"]) <= 500 * 2 * len(e.rows)
    comp = sum(r.fwd_compute_ns + r.ig_compute_ns + r.wg_compute_ns for r in e.rows)
    assert abs(comp - e.summary["total comp"]) <= 500 * 3 * len(e.rows)


def test_mixtral_run_counts_exposed_ep_by_the_forward_column():
    """SimAI's summary puts a record's exposed forward + input-gradient communication under EP
    when the record's forward type is ``_EP`` and under TP otherwise (``Layer::report`` tests
    ``fwd_pass_group_type`` only), so the backward AllToAlls (input-gradient column, forward
    NONE) count as TP."""
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.export.simai import simai_workload
    from tokenpcap.plan.build import build_plan

    e = read_end_to_end(MIXTRAL)
    wl = simai_workload(build_plan(load_scenario(ROOT / "profiles" / "scenarios" /
                                                 "mixtral-8x7b-ep.yaml")))
    assert [r.layer for r in e.rows] == [r.id for r in wl.records]
    fwd_ep = {r.id for r in wl.records if r.fwd_type.endswith("_EP")}
    ep = sum(r.fwd_exposed_ns + r.ig_exposed_ns for r in e.rows if r.layer in fwd_ep)
    tp = sum(r.fwd_exposed_ns + r.ig_exposed_ns for r in e.rows if r.layer not in fwd_ep)
    assert ep > 0 and any(r.ig_type.endswith("_EP") for r in wl.records)
    assert abs(ep - e.summary["Expose_EP_comm"]) <= 500 * len(fwd_ep)
    assert abs(tp - e.summary["Expose TP comm"]) <= 500 * 2 * (len(e.rows) - len(fwd_ep))


GOOD = DANTE.read_text().splitlines()


@pytest.mark.parametrize("line, text, message", [
    (1, "File name, Expose DP comm", "line 1: summary keys: got 'File name, Expose DP comm'"),
    (2, GOOD[1].replace("635 (51.94%)", "635"), "line 2: Expose DP comm: got '635', expected "
                                                 "'N (P%)'"),
    (2, GOOD[1].replace(", 1223", ", 12x3"), "line 2: Total time: got '12x3', expected an integer"),
    (3, GOOD[2] + ",workload finished at", "line 3: layer header: got"),
    (4, GOOD[3].replace(",0,0,0,5,", ",0,0,x,5,", 1), "line 4: ig compute: got 'x', expected an "
                                                      "integer (µs)"),
    (5, GOOD[4] + ",7", "line 5: row: got"),
    (6, GOOD[5].replace("310.48", "310.4"), "line 6: fwd algbw: got '310.4', expected GB/s"),
    (7, GOOD[6].replace("Analytical_test", "other"), "line 7: run name: got 'other', expected the "
                                                       "header's, 'Analytical_test'"),
    (8, " " + GOOD[7], "line 8: layer_name: got ' layer0_mlp_in'"),
    # numbers SimAI cannot write: past int64 ns, past Python's int-string limit, past a double
    (2, GOOD[1].replace(", 1223", ", " + "9" * 17), "line 2: Total time: got '99999999999999999'"
                                                     ", expected an integer (µs) within "),
    (2, GOOD[1].replace(", 1223", ", 9223372036854776"), "line 2: Total time: got "
                                                         "'9223372036854776', expected"),
    (2, GOOD[1].replace("635 (51.94%)", "9" * 5000 + " (51.94%)"), "line 2: Expose DP comm: got "
                                                                    "'99999999"),
    (4, GOOD[3].replace(",0,0,0,5,", ",0,0," + "7" * 400 + ",5,", 1),
     "... (400 characters)', expected an integer (µs) within"),
    (6, GOOD[5].replace("310.48", "9" * 400 + ".48"), "line 6: fwd algbw: got '9999"),
    (6, GOOD[5].replace("310.48", "99999999999999999999.48"), "line 6: fwd algbw: got "
                                                              "'99999999999999999999.48', expected "
                                                              "GB/s with 2 decimals within"),
])
def test_malformed_lines_are_named(tmp_path, line, text, message):
    lines = list(GOOD)
    lines[line - 1] = text
    p = tmp_path / "e.csv"
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as err:
        read_end_to_end(p)
    assert str(err.value).startswith(f"{p}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_short_missing_and_undecodable_files(tmp_path):
    (tmp_path / "two.csv").write_text("\n".join(GOOD[:2]) + "\n")
    with pytest.raises(InputError, match=r"two.csv: line 3: file: got 'end of file'"):
        read_end_to_end(tmp_path / "two.csv")
    with pytest.raises(InputError, match="got no such file, expected SimAI_analytical"):
        read_end_to_end(tmp_path / "none.csv")
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InputError, match="bin.csv: cannot read"):
        read_end_to_end(tmp_path / "bin.csv")


# ----------------------------------------------------------------- writer as Layer::report's
def _fixed0(us: float) -> str:
    """``std::fixed << std::setprecision(0)`` of a finite double (round half to even, as printf)."""
    return f"{us:.0f}"


def _fixed2(v: float) -> str:
    return "-nan" if math.isnan(v) else ("inf" if math.isinf(v) else f"{v:.2f}")


_us = st.floats(min_value=0, max_value=1e9, allow_nan=False)
_bw = st.one_of(st.floats(min_value=0, max_value=1e6, allow_nan=False, allow_infinity=False),
                st.just(math.nan), st.just(math.inf))
_id = st.text(st.characters(min_codepoint=33, max_codepoint=126, blacklist_characters=","),
              min_size=1, max_size=30)
_row = st.tuples(_id, st.lists(_us, min_size=6, max_size=6),
                 st.lists(st.tuples(_us, _bw, _bw), min_size=3, max_size=3))


def write_like_simai(rows, summary: list[float], file_name: str) -> str:
    """An EndToEnd.csv as ``Layer::report`` (ANALYTI) and ``CSVWriter::write_res`` write it."""
    total = sum(summary[-3:])
    pct = [f"{(v / total * 100) if total else math.nan:.2f}".replace("nan", "-nan")
           for v in summary]
    keys = ", ".join(SUMMARY_KEYS)
    values = ", ".join([file_name] + [f"{_fixed0(v)} ({p}%)" for v, p in zip(summary, pct)]
                       + [_fixed0(total)])
    out = [keys, values, layer_header()]
    for layer, six, three in rows:
        cells = [layer, "Analytical_test"] + [_fixed0(v) for v in six]
        for t, a, b in three:
            cells += [_fixed0(t), _fixed2(a), _fixed2(b)]
        out.append(",".join(cells))
    return "\n".join(out) + "\n"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# a total of 2.2e-16 us: shares of 4.5e17 %, which SimAI's %.2f prints as 18 digits
@example(rows=[], summary=[0.0, 0.0, 0.0, 0.0, 1.0, 2.220446049250313e-16, 0.0, 0.0], file_name="")
@given(rows=st.lists(_row, max_size=8), summary=st.lists(_us, min_size=8, max_size=8),
       file_name=st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=20))
def test_round_trip_through_a_writer_like_simais(tmp_path, rows, summary, file_name):
    p = tmp_path / "rt.csv"
    p.write_text(write_like_simai(rows, summary, file_name))
    e = read_end_to_end(p)
    assert e.file_name == file_name.strip()
    assert [r.layer for r in e.rows] == [r[0] for r in rows]
    for got, (_, six, three) in zip(e.rows, rows):
        want = [int(_fixed0(v)) * 1000 for v in six]
        for t, a, b in three:
            want += [int(_fixed0(t)) * 1000, round(a, 2) if math.isfinite(a) else a,
                     round(b, 2) if math.isfinite(b) else b]
        for name, w in zip(ROW_COLUMNS, want):
            g = getattr(got, name)
            assert (math.isnan(g) and math.isnan(w)) or g == pytest.approx(w, abs=0.006), name
    for k, v in zip(SUMMARY_KEYS[1:-1], summary):
        assert e.summary[k] == int(_fixed0(v)) * 1000


_HOSTILE = ("", " ", "-", "nan", "-nan", "inf", "1e400", "NaN or Inf", "9" * 40, "-0", "0x10",
            "5 (1.00%)", "\x00", "٣", "1,2", "\r")


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), cells=st.booleans())
def test_a_damaged_file_is_read_or_refused_in_one_line(tmp_path, seed, cells):
    """The project's byte mutations (tests/fuzzing.py: flips, truncation, insertion, splices
    with the Mixtral run) or a cell of a random line replaced by a hostile value."""
    from tests.fuzzing import mutate

    rng = random.Random(seed)
    data = DANTE.read_bytes()
    if cells:
        lines = data.decode().split("\n")
        n = rng.randrange(len(lines))
        f = lines[n].split(",")
        f[rng.randrange(len(f))] = rng.choice(_HOSTILE)
        lines[n] = ",".join(f)
        data = "\n".join(lines).encode("utf-8", "surrogatepass")
    else:
        data = mutate(data, rng, other=MIXTRAL.read_bytes())
    p = tmp_path / "f.csv"
    p.write_bytes(data)
    try:
        e = read_end_to_end(p)
    except InputError as err:
        assert str(err).startswith(f"{p}: ") and "\n" not in str(err)
    else:
        assert all(r.layer and not any(c.isspace() for c in r.layer) for r in e.rows)
