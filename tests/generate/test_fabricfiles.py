"""The fabric side files: what is written reads back exactly (CSV and Parquet, any small
tables), a failure while writing leaves no file, and every kind of bad file is refused in one
line naming the file, the line, the column, what it holds and what was expected."""
from __future__ import annotations

import csv
import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenpcap.errors import InputError, OutputError
from tokenpcap.generate import fabricfiles
from tokenpcap.generate.fabricfiles import (file_columns, read_fabric_files, summary_name,
                                            table_name, write_fabric_files)
from tokenpcap.records.fabric import FABRIC_TABLES, FabricSummary, empty_log

I64 = st.integers(0, (1 << 63) - 1)


@st.composite
def fabric_logs(draw):
    """A random valid fabric log of a few switches, and its summary."""
    names = tuple(draw(st.lists(st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]),
                                        min_size=1, max_size=6),
                                min_size=1, max_size=4, unique=True)))
    sw = st.integers(0, len(names) - 1)
    port = st.integers(0, (1 << 31) - 1)
    prio = st.integers(0, 7)

    def rows(*fields):
        return draw(st.lists(st.tuples(*fields), max_size=6))

    pfc = [(t, s, p, pr, x, q if x else 0) for t, s, p, pr, x, q in
           rows(I64, sw, port, prio, st.integers(0, 1), st.integers(1, 65535))]
    peer = st.one_of(st.tuples(st.integers(0, 1 << 20), st.just(-1), st.just(-1)),
                     st.tuples(st.just(-1), sw, port))
    links = [(s, p, *pe, g, *c) for s, p, pe, g, c in rows(
        sw, port, peer, st.floats(1e-3, 1e4, allow_nan=False),
        st.tuples(I64, I64, I64, I64, I64, I64))]
    log = {
        "pfc": np.array(pfc, FABRIC_TABLES["pfc"]),
        "queues": np.array(rows(I64, sw, port, prio, st.integers(1, (1 << 63) - 1)),
                           FABRIC_TABLES["queues"]),
        "links": np.array(links, FABRIC_TABLES["links"]),
        "nics": np.array(rows(st.integers(0, (1 << 31) - 1), I64, I64, I64, I64),
                         FABRIC_TABLES["nics"]),
        "drops": np.array(rows(sw, port, prio, I64, I64), FABRIC_TABLES["drops"]),
    }
    summary = FabricSummary(names, draw(I64), draw(I64), draw(I64), draw(st.text(max_size=8)),
                            "leaf-spine", (3,), draw(st.integers(0, 10**6)))
    return log, summary


def csv_rows(path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def same(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes(), k


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(drawn=fabric_logs())
def test_round_trip(tmp_path_factory, fmt, drawn):
    log, summary = drawn
    d = tmp_path_factory.mktemp("fab")
    paths = write_fabric_files(d, "run", log, summary, fmt)
    assert [p.name for p in paths] == [table_name("run", t, fmt) for t in FABRIC_TABLES] + \
        ["run_fabric.json"]
    assert sorted(os.listdir(d)) == sorted(p.name for p in paths)      # no part left behind
    back, s2 = read_fabric_files(d, "run")
    assert s2 == summary
    same(back, log)


def test_csv_layout_names_beside_indices(tmp_path):
    log = empty_log()
    log["links"] = np.array([(1, 4, -1, 0, 7, 400.0, 2, 2048, 1, 0, 0, 1024),
                             (0, 7, 3, -1, -1, 100.0, 0, 0, 0, 1, 99, 0)], FABRIC_TABLES["links"])
    s = FabricSummary(("spine0", "leaf,1"), 2, 0, 0, "hpcc-ns3", "leaf-spine")
    write_fabric_files(tmp_path, "t", log, s)
    rows = csv_rows(tmp_path / "t_fabric-links.csv")
    assert rows[0] == ["switch", "switch_name", "port", "peer_nic", "peer_switch",
                       "peer_switch_name", "peer_port", "gbps", "tx_frames", "tx_bytes",
                       "pfc_sent", "pfc_received", "paused_ns", "max_queue_bytes"]
    assert rows[1][:7] == ["1", "leaf,1", "4", "-1", "0", "spine0", "7"]
    assert rows[2][:7] == ["0", "spine0", "7", "3", "-1", "", "-1"]
    doc = json.loads((tmp_path / "t_fabric.json").read_text())
    assert doc["summary"]["switch_names"] == ["spine0", "leaf,1"]
    cols = doc["tables"]["links"]["columns"]
    assert [c["name"] for c in cols] == rows[0]
    assert {c["name"]: c["unit"] for c in cols}["paused_ns"] == "ns"
    assert all(c["doc"] for c in cols)
    header = ",".join(file_columns("pfc")) + "\r\n"
    assert (tmp_path / "t_fabric-pfc.csv").read_bytes() == header.encode()


class Boom(Exception):
    pass


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("fail_at", [0, 2, 4])
@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), KeyboardInterrupt(),
                                 Boom("bug")])
def test_failure_mid_write_leaves_nothing(tmp_path, monkeypatch, fmt, fail_at, exc):
    """Whatever stops the writer after some tables are written, the directory holds exactly
    what it held before (here: one unrelated file)."""
    (tmp_path / "keep.txt").write_text("x")
    calls = []
    real = fabricfiles._write_csv if fmt == "csv" else fabricfiles._write_parquet

    def failing(*args):
        calls.append(1)
        if len(calls) > fail_at:
            path = [a for a in args if hasattr(a, "open")][0]
            path.write_bytes(b"half a tab")          # a partial file on disk
            raise exc
        return real(*args)

    monkeypatch.setattr(fabricfiles, "_write_csv" if fmt == "csv" else "_write_parquet", failing)
    log = empty_log()
    log["nics"] = np.zeros(3, FABRIC_TABLES["nics"])
    s = FabricSummary(("s",), 0, 0, 0, "", "single-switch")
    with pytest.raises(type(exc)) if not isinstance(exc, OSError) else \
            pytest.raises(OutputError, match=r"cannot write: No space left on device"):
        write_fabric_files(tmp_path, "t", log, s, fmt)
    assert os.listdir(tmp_path) == ["keep.txt"]


def test_failure_while_renaming_leaves_nothing(tmp_path, monkeypatch):
    real = os.replace
    done = []

    def replace(a, b):
        if len(done) == 3:
            raise OSError(30, "Read-only file system")
        done.append(b)
        return real(a, b)

    monkeypatch.setattr(fabricfiles.os, "replace", replace)
    with pytest.raises(OutputError, match=r"t_fabric-nics.csv: cannot write: Read-only"):
        write_fabric_files(tmp_path, "t", empty_log(), FabricSummary((), 0, 0, 0, "", "x"))
    assert os.listdir(tmp_path) == []


def test_writer_refuses_bad_input(tmp_path):
    s = FabricSummary(("s",), 0, 0, 0, "", "single-switch")
    log = empty_log()
    with pytest.raises(InputError, match=r"format: got 'xml', expected one of csv, parquet"):
        write_fabric_files(tmp_path, "t", log, s, "xml")
    with pytest.raises(InputError, match=r"stem: got 'a/b'"):
        write_fabric_files(tmp_path, "a/b", log, s)
    bad = dict(log, drops=np.array([(1, 0, 0, 1, 64)], FABRIC_TABLES["drops"]))
    with pytest.raises(InputError, match=r"drops: row 0: switch: got 1, expected 0..0"):
        write_fabric_files(tmp_path, "t", bad, s)
    with pytest.raises(InputError, match=r"fabric log: pfc: got missing"):
        write_fabric_files(tmp_path, "t", {}, s)
    assert os.listdir(tmp_path) == []


def test_parquet_without_pyarrow_is_one_line(tmp_path, monkeypatch):
    import builtins
    real = builtins.__import__

    def no_arrow(name, *a, **k):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_arrow)
    with pytest.raises(InputError, match=r"^fabric files: format parquet: got no pyarrow, "
                                         r"expected it installed \(pip install "):
        write_fabric_files(tmp_path, "t", empty_log(), FabricSummary((), 0, 0, 0, "", "x"),
                           "parquet")
    assert os.listdir(tmp_path) == []


# --- bad files ------------------------------------------------------------------------------

@pytest.fixture
def written(tmp_path):
    log = empty_log()
    log["pfc"] = np.array([(100, 0, 2, 3, 1, 65535), (900, 0, 2, 3, 0, 0)],
                          FABRIC_TABLES["pfc"])
    log["queues"] = np.array([(0, 1, 0, 3, 4096)], FABRIC_TABLES["queues"])
    log["links"] = np.array([(0, 2, 5, -1, -1, 400.0, 9, 9000, 2, 0, 0, 512)],
                            FABRIC_TABLES["links"])
    s = FabricSummary(("leaf0", "spine0"), 9, 0, 0, "", "leaf-spine")
    write_fabric_files(tmp_path, "t", log, s)
    return tmp_path


def edit(path, line: int, column: str, value: str) -> None:
    rows = csv_rows(path)
    rows[line - 1][rows[0].index(column)] = value
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows(rows)


@pytest.mark.parametrize("table,line,column,value,message", [
    ("pfc", 2, "priority", "8", r"line 2: column priority: got 8, expected an integer in 0..7"),
    ("pfc", 3, "time_ns", "x", r"line 3: column time_ns: got 'x', expected an integer"),
    ("pfc", 2, "time_ns", "+5", r"line 2: column time_ns: got '\+5', expected an integer"),
    ("pfc", 2, "time_ns", "99999999999999999999", r"line 2: column time_ns: got "
                                                   r"'99999999999999999999', expected an integer"),
    ("pfc", 2, "quanta", "70000", r"line 2: column quanta: got 70000, expected an integer in "
                                  r"0..65,535"),
    ("pfc", 3, "quanta", "5", r"line 3: column quanta: got 5 with xoff 0, expected 0 \(XON\)"),
    ("pfc", 2, "quanta", "0", r"line 2: column quanta: got 0 with xoff 1, expected > 0"),
    ("pfc", 2, "xoff", "2", r"line 2: column xoff: got 2, expected an integer in 0..1"),
    ("pfc", 2, "switch", "2", r"line 2: column switch: got 2, expected 0..1 \(the 2 switches"),
    ("pfc", 2, "switch_name", "leaf9", r"line 2: column switch_name: got 'leaf9', expected "
                                       r"'leaf0' \(switch 0\)"),
    ("queues", 2, "max_bytes", "0", r"line 2: column max_bytes: got 0, expected an integer in 1"),
    ("links", 2, "gbps", "nan", r"line 2: column gbps: got 'nan', expected a number > 0"),
    ("links", 2, "tx_bytes", "-1", r"line 2: column tx_bytes: got -1, expected an integer in 0"),
    ("links", 2, "peer_switch_name", "spine0", r"column peer_switch_name: got 'spine0', "
                                               r"expected '' \(switch -1\)"),
    ("links", 1, "port", "prt", r"line 1: column 3: got 'prt', expected 'port'"),
])
def test_bad_csv_is_one_line(written, table, line, column, value, message):
    path = written / table_name("t", table)
    edit(path, line, column, value)
    with pytest.raises(InputError) as e:
        read_fabric_files(written, "t")
    text = str(e.value)
    assert "\n" not in text and text.startswith(f"{path}: ")
    assert __import__("re").search(message, text), text


def test_bad_csv_shapes(written):
    path = written / table_name("t", "pfc")
    with open(path, "a") as f:
        f.write("1,2\r\n")
    with pytest.raises(InputError, match=r"t_fabric-pfc.csv: line 4: got 2 fields, expected 7"):
        read_fabric_files(written, "t")
    path.write_text("")
    with pytest.raises(InputError, match=r"t_fabric-pfc.csv: line 1: got an empty file"):
        read_fabric_files(written, "t")
    path.write_text(",".join(file_columns("pfc")[:-1]) + "\r\n")
    with pytest.raises(InputError, match=r"line 1: column 7: got 'nothing', expected 'quanta'"):
        read_fabric_files(written, "t")
    path.unlink()
    with pytest.raises(InputError, match=r"t_fabric-pfc.csv: got no such file, expected the pfc"):
        read_fabric_files(written, "t")


def test_bad_summary_files(written):
    j = written / summary_name("t")
    doc = json.loads(j.read_text())
    with pytest.raises(InputError, match=r"u_fabric.json: got no such file, expected the fabric"):
        read_fabric_files(written, "u")
    j.write_text("{\n  'x'")
    with pytest.raises(InputError, match=r"t_fabric.json: line 2: got invalid JSON"):
        read_fabric_files(written, "t")
    for change, message in (({"version": 2}, r"version: got 2, expected 1"),
                            ({"format": "pcap"}, r"format: got 'pcap', expected"),
                            ({"file_format": "xls"}, r"file_format: got 'xls'"),
                            ({"summary": {**doc["summary"], "packet_hops": -3}},
                             r"t_fabric.json: summary: packet_hops: got -3")):
        j.write_text(json.dumps({**doc, **change}))
        with pytest.raises(InputError, match=message):
            read_fabric_files(written, "t")
    doc["tables"]["pfc"]["rows"] = 5
    j.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"t_fabric-pfc.csv: got 2 rows, expected 5"):
        read_fabric_files(written, "t")


def test_bad_parquet(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    log = empty_log()
    log["nics"] = np.array([(0, 1, 2, 3, 4), (1, 0, 0, 0, 0)], FABRIC_TABLES["nics"])
    write_fabric_files(tmp_path, "t", log, FabricSummary((), 0, 0, 0, "", "x"), "parquet")
    path = tmp_path / "t_fabric-nics.parquet"
    t = pq.read_table(path)
    pq.write_table(t.set_column(1, "pfc_received", pa.array([1, -2], pa.int64())), path)
    with pytest.raises(InputError, match=r"nics.parquet: row 2: column pfc_received: got -2"):
        read_fabric_files(tmp_path, "t")
    pq.write_table(t.set_column(1, "pfc_received", pa.array([1, 2], pa.int32())), path)
    with pytest.raises(InputError, match=r"column pfc_received: got type int32, expected int64"):
        read_fabric_files(tmp_path, "t")
    pq.write_table(t.set_column(1, "pfc_received", pa.array([1, None], pa.int64())), path)
    with pytest.raises(InputError, match=r"row 2: column pfc_received: got null"):
        read_fabric_files(tmp_path, "t")
    pq.write_table(t.rename_columns(["nic", "pfc", "paused_ns", "rx_frames", "rx_bytes"]), path)
    with pytest.raises(InputError, match=r"schema: column 2: got 'pfc', expected 'pfc_received'"):
        read_fabric_files(tmp_path, "t")
    path.write_bytes(b"not parquet")
    with pytest.raises(InputError, match=r"nics.parquet: got .*, expected a Parquet file"):
        read_fabric_files(tmp_path, "t")


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_chunks_keep_rows_and_line_numbers(tmp_path, monkeypatch, fmt):
    """Tables longer than a chunk are written and read chunk by chunk: the same rows come
    back, and a bad value in a later chunk names its own line."""
    monkeypatch.setattr(fabricfiles, "CHUNK_ROWS", 3)
    log = empty_log()
    q = np.zeros(10, FABRIC_TABLES["queues"])
    q["time_ns"], q["switch"], q["port"] = np.arange(10) * 100, np.arange(10) % 2, 4
    q["priority"], q["max_bytes"] = 3, np.arange(10) + 1
    log["queues"] = q
    s = FabricSummary(("a", "b"), 0, 0, 0, "", "x")
    write_fabric_files(tmp_path, "t", log, s, fmt)
    back, _ = read_fabric_files(tmp_path, "t")
    same(back, log)
    if fmt == "csv":
        path = tmp_path / "t_fabric-queues.csv"
        assert len(csv_rows(path)) == 11
        edit(path, 9, "switch_name", "a")           # row 8 is switch 1 ("b")
        with pytest.raises(InputError, match=r"line 9: column switch_name: got 'a', expected "
                                             r"'b' \(switch 1\)"):
            read_fabric_files(tmp_path, "t")
