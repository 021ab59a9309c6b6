"""The congestion-control side files (tokenpcap.generate.ccfiles): write then read gives the same
tables (a Hypothesis round trip over random logs, CSV and Parquet), the JSON documents every
column of tokenpcap.records.cc, and bad files are refused in one line."""
from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.errors import InputError
from tokenpcap.generate.ccfiles import (cc_file_columns, cc_summary_name, read_cc_files,
                                        write_cc_files)
from tokenpcap.records.cc import CC_COLUMN_DOCS, CC_TABLES

SWITCHES = ("leaf0-0", "spine0")
FORMATS = ["csv"] + (["parquet"] if importlib.util.find_spec("pyarrow") else [])


@st.composite
def cc_logs(draw):
    log = {}
    for t, dt in CC_TABLES.items():
        n = draw(st.integers(0, 5))
        a = np.zeros(n, dt)
        for c in dt.names:
            if dt[c].kind == "f":
                a[c] = draw(st.lists(st.floats(0, 1), min_size=n, max_size=n))
            else:
                hi = 1 if c == "switch" else 255 if dt[c].kind == "u" else 1 << 40
                hi = min(hi, int(np.iinfo(dt[c]).max))
                a[c] = draw(st.lists(st.integers(0, hi), min_size=n, max_size=n))
        log[t] = a
    return log


@settings(max_examples=25, deadline=None)
@given(log=cc_logs(), fmt=st.sampled_from(FORMATS))
def test_write_then_read_gives_the_same_tables(tmp_path_factory, log, fmt):
    d = tmp_path_factory.mktemp("cc")
    paths = write_cc_files(d, "run", log, SWITCHES, fmt)
    assert [p.name for p in paths] == [f"run_fabric-{t}.{fmt}" for t in CC_TABLES] + \
        [cc_summary_name("run")]
    got = read_cc_files(d, "run")
    for t in CC_TABLES:
        assert got[t].dtype == log[t].dtype and got[t].tobytes() == log[t].tobytes()


def test_the_json_documents_every_column_and_names_the_switch(tmp_path):
    log = {t: np.zeros(1, dt) for t, dt in CC_TABLES.items()}
    log["ce_ports"]["switch"] = 1
    write_cc_files(tmp_path, "run", log, SWITCHES)
    doc = json.loads((tmp_path / cc_summary_name("run")).read_text())
    for t in CC_TABLES:
        cols = [c["name"] for c in doc["tables"][t]["columns"]]
        assert cols == cc_file_columns(t)
        assert set(CC_COLUMN_DOCS[t]) <= set(cols)
    text = (tmp_path / "run_fabric-ce_ports.csv").read_bytes().decode()
    assert text == "switch,switch_name,port,ce_marked\r\n1,spine0,0,0\r\n"


def test_a_switch_outside_the_names_writes_nothing(tmp_path):
    log = {t: np.zeros(1, dt) for t, dt in CC_TABLES.items()}
    log["ce_ports"]["switch"] = 2
    with pytest.raises(InputError, match=r"ce_ports: switch: got 2, expected 0\.\.1"):
        write_cc_files(tmp_path, "run", log, SWITCHES)
    assert list(tmp_path.iterdir()) == []


def test_a_bad_value_is_one_line_naming_file_line_and_column(tmp_path):
    log = {t: np.zeros(1, dt) for t, dt in CC_TABLES.items()}
    write_cc_files(tmp_path, "run", log, SWITCHES)
    p = tmp_path / "run_fabric-cnps.csv"
    p.write_text("time_ns,np_nic,rp_nic,qp\r\n-5,0,0,0\r\n")
    with pytest.raises(InputError, match=r"run_fabric-cnps\.csv: line 2: column time_ns: got "
                                         r"'-5', expected an integer"):
        read_cc_files(tmp_path, "run")


def test_no_json_is_no_cc_log(tmp_path):
    assert read_cc_files(tmp_path, "run") is None


_TOKENS = st.sampled_from(["0", "1", "-1", " 7", "+5", "007", "1_000", "2.5", "1e3", "nan",
                           "inf", "", "x", "9223372036854775807", "9223372036854775808",
                           "-9223372036854775809", "4294967295", "4294967296", "255", "256"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_TOKENS, st.integers(-2**64, 2**64).map(str),
                          st.floats(allow_nan=False).map(repr)), max_size=6),
       st.sampled_from(["int64", "int32", "uint8", "float64"]),   # the dtypes of CC_TABLES
       st.sampled_from(["time_ns", "src_nic"]))
def test_a_column_read_at_once_is_the_column_read_value_by_value(values, dtype, column):
    """The column converted by numpy equals Python's ``int``/``float`` of each value in range,
    and a column with one bad value is refused the same way (the same first line named)."""
    from tokenpcap.generate.ccfiles import _typed, _typed_each

    dt = np.dtype(dtype)

    def where(i):
        return f"line {i + 2}"

    def run(fn):
        try:
            return fn("t.csv", where, column, list(values), dt)
        except InputError as err:
            return str(err)

    fast, each = run(_typed), run(_typed_each)
    if isinstance(each, str):
        assert fast == each
    else:
        assert fast.dtype == dt and np.array_equal(fast, each, equal_nan=True)


def test_a_parquet_null_is_refused_not_read_as_nan():
    from tokenpcap.generate.ccfiles import _typed

    with pytest.raises(InputError, match=r"row 2: column rate_gbps: got None, expected a number"):
        _typed("t.parquet", lambda i: f"row {i + 1}", "rate_gbps", [1.5, None],
               np.dtype("float64"))
