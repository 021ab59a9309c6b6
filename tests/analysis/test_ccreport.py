"""``inspect --fabric`` on a DCQCN run (tokenpcap.analysis.ccreport through the CLI): the CE and
CNP counts per QP it shows equal the congestion-control side files, and those equal the CNP
frames TShark finds in the receiver's capture (``infiniband.bth.opcode == 0x81``).
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from click.testing import CliRunner

from tests.generate.test_ccfiles_run import STEM, run, tshark_count
from tokenpcap.analysis.ccreport import cc_report
from tokenpcap.cli import main
from tokenpcap.generate.ccfiles import read_cc_files


def test_inspect_fabric_shows_the_side_files_counts_per_qp(tmp_path):
    out, res = run(tmp_path, "nic-tx")
    log = read_cc_files(out, STEM)
    got = CliRunner().invoke(main, ["inspect", "--fabric", str(out), "--json"])
    assert got.exit_code == 0, got.output
    cc = json.loads(got.output)["fabric"]["cc"]
    qps = np.sort(log["ce_qps"], order="qp")
    assert [r["qp"] for r in cc["qps"]] == qps["qp"].tolist()
    assert [r["ce_received"] for r in cc["qps"]] == qps["ce_received"].tolist()
    assert [r["cnps_received"] for r in cc["qps"]] == qps["cnps_received"].tolist()
    per_qp = np.bincount(log["cnps"]["qp"], minlength=int(qps["qp"].max()) + 1)
    assert [r["cnp_events"] for r in cc["qps"]] == per_qp[qps["qp"]].tolist()
    assert cc["cnps"] == log["cnps"].size and cc["rate_changes"] == log["rates"].size
    assert cc["ce_marked"] == int(log["ce_ports"]["ce_marked"].sum())
    assert all(c["ok"] for c in cc["checks"])
    text = CliRunner().invoke(main, ["inspect", "--fabric", str(out)])
    assert text.exit_code == 0, text.output
    assert f"CNPs:                {log['cnps'].size:,} " in text.output
    assert "ok   cc-cnps" in text.output
    if shutil.which("tshark") is not None:
        (cap,) = [p for p, _, _ in res.files]
        assert cc["cnps"] == tshark_count(cap, "infiniband.bth.opcode == 0x81")


def test_a_cnp_the_counter_misses_fails_the_check():
    qps = np.zeros(1, [("qp", "<i8"), ("src_nic", "<i4"), ("dst_nic", "<i4"),
                       ("ce_received", "<i8"), ("cnps_received", "<i8")])
    qps[0] = (3, 1, 0, 2, 1)
    from tokenpcap.records.cc import CC_TABLES
    log = {t: np.zeros(0, dt) for t, dt in CC_TABLES.items()}
    log["ce_qps"] = qps.astype(CC_TABLES["ce_qps"])
    log["cnps"] = np.zeros(2, CC_TABLES["cnps"])
    log["cnps"]["qp"] = 3
    (check,) = cc_report(log)["checks"]
    assert not check["ok"] and check["detail"] == "qp 3: 2 CNP events, cnps_received 1"


@pytest.mark.parametrize("missing", ["cnps", "ce_qps"])
def test_a_missing_table_file_is_one_line(tmp_path, missing):
    out, _ = run(tmp_path, "nic-tx")
    (out / f"{STEM}_fabric-{missing}.csv").unlink()
    got = CliRunner().invoke(main, ["inspect", "--fabric", str(out)])
    assert got.exit_code == 1
    assert f"{STEM}_fabric-{missing}.csv: got no such file, expected the {missing} table" \
        in got.output
