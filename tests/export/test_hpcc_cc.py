"""The congestion control of a queued fabric against the HPCC ns-3 config ``export --to hpcc``
writes (tokenpcap.export.hpcc_cc): the mode follows the fabric's ``cc`` unless ``--hpcc-cc``
says otherwise, and every ECN/DCQCN/CNP setting the simulator does not run is named.

The oracle for "what the simulator runs" is the config file itself, read back: run.py's values
at 400 Gb/s (``KMIN_MAP`` 1600 KB = 1,600,000 B as switch-mmu.cc's ``ConfigEcn`` multiplies by
1000, ``KMAX_MAP`` 6400 KB, ``PMAX_MAP`` 0.20, ``RATE_AI`` 80 Mb/s, ``RATE_HAI`` 800 Mb/s,
``MIN_RATE`` 1000 Mb/s, ``RP_TIMER`` 300 us, ``RATE_DECREASE_INTERVAL`` 4 us).
"""
from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner

from tests.export.test_hpcc_fabric import cluster_file, messages, read_config
from tokenpcap.cli import main
from tokenpcap.config.cluster_profile import load_cluster
from tokenpcap.export.hpcc import write_hpcc
from tokenpcap.export.hpcc_cc import cc_gaps, default_cc

ROOT = Path(__file__).resolve().parents[2]
NS3_DCQCN = ROOT / "profiles" / "clusters" / "h100-rocev2-64x1-hpcc-ns3-dcqcn.yaml"


def test_the_hpcc_ns3_preset_is_what_the_written_config_runs(tmp_path):
    c = load_cluster(NS3_DCQCN)
    assert default_cc(c) == "dcqcn" and cc_gaps(c, "dcqcn") == []
    cfg = read_config(write_hpcc(messages([(1, 0)]), c, tmp_path / "x.txt", cc="dcqcn")[2])
    ecn, dq = c.fabric.ecn, c.fabric.dcqcn
    assert cfg["KMIN_MAP"][2] == str(ecn.kmin_bytes // 1000)
    assert cfg["KMAX_MAP"][2] == str(ecn.kmax_bytes // 1000)
    assert float(cfg["PMAX_MAP"][2]) == ecn.pmax
    assert cfg["RATE_AI"] == [f"{dq.rpg_ai_rate}Mb/s"] and cfg["RATE_HAI"] == [f"{dq.rpg_hai_rate}Mb/s"]
    assert cfg["MIN_RATE"] == [f"{dq.rpg_min_rate}Mb/s"]
    assert cfg["RP_TIMER"] == [str(dq.rpg_time_reset)]
    assert cfg["RATE_DECREASE_INTERVAL"] == [str(dq.rate_reduce_monitor_period)]


def test_connectx_defaults_are_named_key_by_key(tmp_path):
    """DCQCN with no preset (ConnectX defaults): ns-3 runs run.py's values instead."""
    c = load_cluster(cluster_file(tmp_path, {"model": "queued", "cc": "dcqcn",
                                             "topology": {"kind": "single-switch"}}, 8, 1))
    gaps = cc_gaps(c, "dcqcn")
    text = "\n".join(gaps)
    assert "fabric.ecn.kmin_bytes: got 1,048,576, HPCC ns-3 runs 1,600,000" in text
    assert "fabric.ecn.kmax_bytes: got 2,097,152, HPCC ns-3 runs 6,400,000" in text
    assert "fabric.ecn.pmax: got 0.05, HPCC ns-3 runs 0.2" in text
    assert "fabric.dcqcn.rpg_ai_rate: got 5, HPCC ns-3 runs 80" in text
    assert "fabric.dcqcn.rpg_min_rate: got 1, HPCC ns-3 runs 1,000" in text
    assert "fabric.np.min_time_between_cnps: got 4, HPCC ns-3 runs 0" in text
    assert "fabric.np.cnp_in_ack: got false, HPCC ns-3 runs true" in text
    assert all("\n" not in g and g.startswith("fabric.") for g in gaps)
    # another mode: the fabric's own cc is named, and nothing of DCQCN's parameters
    other = cc_gaps(c, "hpcc")
    assert len(other) == 1 and other[0].startswith("fabric.cc: got dcqcn, HPCC ns-3 runs "
                                                   "--hpcc-cc hpcc")


def test_pfc_only_fabric_exports_cc_mode_0_by_default_and_ideal_stays_hpcc(tmp_path):
    q = load_cluster(cluster_file(tmp_path, {"model": "queued", "preset": "hpcc-ns3",
                                             "topology": {"kind": "single-switch"}}, 8, 1))
    assert default_cc(q) == "none" and cc_gaps(q, "none") == []
    assert cc_gaps(q, "dcqcn")[0].startswith("fabric.cc: got none, HPCC ns-3 runs --hpcc-cc "
                                             "dcqcn (our engine runs PFC only")
    ideal = load_cluster(cluster_file(tmp_path, {"model": "ideal"}, 8, 1))
    assert default_cc(ideal) == "hpcc" and cc_gaps(ideal, "dcqcn") == []


def test_the_cli_follows_the_fabric_and_warns_of_what_it_cannot(tmp_path):
    path = cluster_file(tmp_path, {"model": "queued", "cc": "dcqcn",
                                   "topology": {"kind": "single-switch"}}, 8, 1)
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump({
        "name": "s", "cluster": str(path), "workload": {"kind": "incast", "senders": 2,
                                                        "bytes": 65536},
        "generation": {"clear_to_send": False}}))
    out = tmp_path / "o" / "s.txt"
    r = CliRunner().invoke(main, ["export", str(scen), "--to", "hpcc", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert read_config(out.with_name("s-config.txt"))["CC_MODE"] == ["1"]
    warn = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: ")]
    assert any(ln.endswith("fabric.dcqcn.rpg_ai_rate: got 5, HPCC ns-3 runs 80 (the hpcc-ns3 "
                           "preset's value at 400 Gb/s)") for ln in warn), warn
    assert not any("fabric.cc:" in ln for ln in warn)
    r = CliRunner().invoke(main, ["export", str(scen), "--to", "hpcc", "--hpcc-cc", "hpcc",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert read_config(out.with_name("s-config.txt"))["CC_MODE"] == ["3"]
    assert any("fabric.cc: got dcqcn, HPCC ns-3 runs --hpcc-cc hpcc" in ln
               for ln in r.stderr.splitlines())
