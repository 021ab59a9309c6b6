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
