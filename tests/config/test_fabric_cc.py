"""The congestion-control keys of ``fabric:`` (``cc``, ``ecn``, ``dcqcn``, ``np``): without a
preset a user gets the ConnectX firmware defaults and SONiC's lossless WRED; every preset carries
the numbers of its primary source (HPCC ``run.py`` and ``rdma-hw.cc``, SONiC ``qos_config.j2``,
SimAI.conf); a fabric without them is the profile it was before; every bad value is one line
naming the file, the dotted key and the value."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.test_profiles import cluster_dict, expect_profile_error, write
from tokenpcap.config.cc_types import DcqcnConfig, EcnConfig, NpConfig
from tokenpcap.config.fabric_cc import ecn_thresholds
from tokenpcap.config.profiles import load_cluster

_Q = {"model": "queued"}
_D = {"model": "queued", "cc": "dcqcn"}


def _fabric(tmp_path: Path, fabric, **over):  # type: ignore[no-untyped-def]
    return load_cluster(write(tmp_path / "c.yaml", cluster_dict(fabric=fabric, **over))).fabric


def test_without_a_preset_dcqcn_and_the_np_are_the_connectx_firmware_defaults(tmp_path: Path):
    """Two ``mlxconfig -q`` dumps of ConnectX firmware: RPG_TIME_RESET 300, RPG_BYTE_RESET
    32767, RPG_THRESHOLD 1, RPG_AI_RATE 5, RPG_HAI_RATE 50, RPG_GD 11, RPG_MIN_DEC_FAC 50,
    RPG_MIN_RATE 1, RATE_TO_SET_ON_FIRST_CNP 0, DCE_TCP_G 1019, DCE_TCP_RTT 1,
    INITIAL_ALPHA_VALUE 1023, RATE_REDUCE_MONITOR_PERIOD 4, MIN_TIME_BETWEEN_CNPS 4, CNP_DSCP 48,
    CNP_802P_PRIO 6; SONiC AZURE_LOSSLESS WRED 1,048,576 / 2,097,152 B, 5 %."""
    f = _fabric(tmp_path, _D)
    d = f.dcqcn
    assert (d.rpg_time_reset, d.rpg_byte_reset, d.rpg_threshold, d.rpg_ai_rate, d.rpg_hai_rate,
            d.rpg_gd, d.rpg_min_dec_fac, d.rpg_min_rate, d.rate_to_set_on_first_cnp,
            d.dce_tcp_g, d.dce_tcp_rtt, d.initial_alpha_value, d.rate_reduce_monitor_period,
            d.clamp_tgt_rate, d.clamp_tgt_rate_after_time_inc) == (
        300, 32767, 1, 5, 50, 11, 50, 1, 0, 1019, 1, 1023, 4, False, True)
    assert (d.rpg_time_reset_ns, d.dce_tcp_rtt_ns, d.rate_reduce_monitor_period_ns) == (
        300_000, 1_000, 4_000)
    n = f.np
    assert (n.min_time_between_cnps, n.min_time_between_cnps_ns, n.cnp_dscp, n.cnp_802p_prio,
            n.cnp_udp_sport, n.cnp_in_ack) == (4, 4_000, 48, 6, 0, False)
    e = f.ecn
    assert (e.enabled, e.kmin_bytes, e.kmax_bytes, e.pmax, e.mark_at, e.priorities,
            e.rate_scaled) == (True, 1_048_576, 2_097_152, 0.05, "dequeue", (3,), False)
    assert f.cc == "dcqcn"


def test_cc_none_marks_nothing_unless_asked_and_the_fabric_is_as_before(tmp_path: Path):
    """``cc`` absent is ``none`` (PFC only): marking is off unless ``ecn.enabled`` says so, and
    the dataclass defaults are what the loader gives, so a fabric written before these keys
    loads to the same profile apart from them."""
    f = _fabric(tmp_path, _Q)
    assert f.cc == "none" and not f.ecn.enabled
    assert (f.ecn, f.dcqcn, f.np) == (EcnConfig(), DcqcnConfig(), NpConfig())
    assert _fabric(tmp_path, {**_Q, "ecn": {"enabled": True}}).ecn.enabled
    assert not _fabric(tmp_path, {**_D, "ecn": {"enabled": False}}).ecn.enabled
    # the data class follows network.pcp
    g = _fabric(tmp_path, {**_D, "pfc": {"priorities": [4]}},
                network={"pcp": 4, "dscp": 26, "ecn": 2})
    assert g.ecn.priorities == (4,) and g.pfc.priorities == (4,)


@pytest.mark.parametrize("gbps,kmin,kmax,ai,hai", [(400, 1_600_000, 6_400_000, 80, 800),
                                                   (100, 400_000, 1_600_000, 20, 200)])
def test_hpcc_ns3_preset_is_run_py_and_rdma_hw_cc(tmp_path: Path, gbps, kmin, kmax, ai, hai):
    """HPCC ``run.py --cc dcqcn`` at ``bw`` Gb/s: KMIN_MAP ``100*bw/25`` and KMAX_MAP
    ``400*bw/25`` KB (``switch-mmu.cc`` ``ConfigEcn`` x 1000), PMAX 0.2, RATE_AI ``5*bw/25``,
    RATE_HAI ``50*bw/25`` Mb/s, MIN_RATE 1000 Mb/s, EWMA_GAIN 1/256, RP_TIMER 300,
    ALPHA_RESUME_INTERVAL 1, RATE_DECREASE_INTERVAL 4, FAST_RECOVERY_TIMES 1; ``rdma-hw.cc``:
    no byte counter, alpha = 1 on the first CNP, the CNP flag in every CE packet's ACK."""
    f = _fabric(tmp_path, {**_D, "preset": "hpcc-ns3"}, link_gbps=gbps)
    e, d, n = f.ecn, f.dcqcn, f.np
    assert (e.enabled, e.kmin_bytes, e.kmax_bytes, e.pmax, e.mark_at, e.rate_scaled) == (
        True, kmin, kmax, 0.2, "dequeue", True)
    assert (d.rpg_ai_rate, d.rpg_hai_rate, d.rpg_min_rate, d.rpg_byte_reset) == (ai, hai, 1000, 0)
    # g = (1024 - dce_tcp_g) / 1024 = 1/256; alpha 1024/1024 = 1
    assert ((1024 - d.dce_tcp_g) / 1024, d.initial_alpha_value / 1024) == (0.00390625, 1.0)
    assert (d.rpg_time_reset, d.dce_tcp_rtt, d.rate_reduce_monitor_period, d.rpg_threshold,
            d.rpg_gd, d.clamp_tgt_rate, d.rate_to_set_on_first_cnp) == (300, 1, 4, 1, 11,
                                                                         False, 0)
    assert (n.min_time_between_cnps, n.cnp_in_ack) == (0, True)
    # a port of r Gb/s gets run.py's 4r / 16r KB: an 800G uplink at a 400G NIC rate, or 2x
    up = 2 * gbps
    assert ecn_thresholds(e, up, gbps) == (100 * up // 25 * 1000, 400 * up // 25 * 1000)
    assert ecn_thresholds(e, gbps, gbps) == (kmin, kmax)


def test_sonic_presets_and_simai_carry_their_sources_numbers(tmp_path: Path):
    """SONiC ``qos_config.j2`` AZURE_LOSSLESS (th5-400g, spectrum4-400g); SimAI.conf at 400G:
    KMIN 800, KMAX 3200 KB, PMAX 0.2, BUFFER_SIZE 32, RP_TIMER 900, RATE_AI 50, RATE_HAI 100,
    MIN_RATE 100 Mb/s; DCQCN and the NP of the SONiC presets are the ConnectX defaults."""
    for preset in ("th5-400g", "spectrum4-400g"):
        f = _fabric(tmp_path, {**_D, "preset": preset})
        assert (f.ecn.kmin_bytes, f.ecn.kmax_bytes, f.ecn.pmax, f.ecn.rate_scaled) == (
            1_048_576, 2_097_152, 0.05, False)
        assert (f.dcqcn, f.np) == (DcqcnConfig(), NpConfig())
        assert ecn_thresholds(f.ecn, 800, 400) == (1_048_576, 2_097_152)
    s = _fabric(tmp_path, {**_D, "preset": "simai-400g"})
    assert (s.ecn.kmin_bytes, s.ecn.kmax_bytes, s.ecn.pmax, s.switch.buffer_bytes) == (
        800_000, 3_200_000, 0.2, 32 * 1024 * 1024)
    assert (s.dcqcn.rpg_time_reset, s.dcqcn.rpg_ai_rate, s.dcqcn.rpg_hai_rate,
            s.dcqcn.rpg_min_rate, s.dcqcn.dce_tcp_g) == (900, 50, 100, 100, 1020)
    # a key given overrides the preset's
    o = _fabric(tmp_path, {**_D, "preset": "hpcc-ns3", "dcqcn": {"rpg_ai_rate": 5},
                           "ecn": {"pmax": 0.5}})
    assert (o.dcqcn.rpg_ai_rate, o.dcqcn.rpg_hai_rate, o.ecn.pmax, o.ecn.kmin_bytes) == (
        5, 800, 0.5, 1_600_000)
    # no preset turns DCQCN on
    assert _fabric(tmp_path, {**_Q, "preset": "hpcc-ns3"}).cc == "none"


@pytest.mark.parametrize("fabric,over,key,got,expected", [
    ({**_D, "ecn": {"kmin_bytes": 3_000_000}}, {}, "fabric.ecn.kmin_bytes", "3000000",
     "at most fabric.ecn.kmax_bytes 2,097,152"),
    ({**_D, "ecn": {"pmax": 1.5}}, {}, "fabric.ecn.pmax", "1.5", ">= 0 and <= 1"),
    ({**_D, "ecn": {"pmax": -0.1}}, {}, "fabric.ecn.pmax", "-0.1", ">= 0 and <= 1"),
    ({**_D, "ecn": {"mark_at": "ingress"}}, {}, "fabric.ecn.mark_at", "'ingress'",
     "one of 'dequeue', 'enqueue'"),
    ({**_D, "ecn": {"priorities": [3, 6]}}, {}, "fabric.ecn.priorities", "[3, 6]",
     "without switch.control_priority 6"),
    ({**_D, "dcqcn": {"rpg_ai_rate": 500_000}}, {}, "fabric.dcqcn.rpg_ai_rate", "500000",
     "at most the NIC's line rate 400,000 Mb/s"),
    ({**_D, "dcqcn": {"rpg_min_rate": 200_000}}, {"link_gbps": 100},
     "fabric.dcqcn.rpg_min_rate", "200000", "at most the NIC's line rate 100,000 Mb/s"),
    ({**_D, "dcqcn": {"rate_to_set_on_first_cnp": 400_001}}, {},
     "fabric.dcqcn.rate_to_set_on_first_cnp", "400001", "line rate"),
    ({**_D, "dcqcn": {"rpg_time_reset": 0}}, {}, "fabric.dcqcn.rpg_time_reset", "0",
     "an integer in [1, 1,000,000]"),
    ({**_D, "dcqcn": {"rate_reduce_monitor_period": 0}}, {},
     "fabric.dcqcn.rate_reduce_monitor_period", "0", "an integer in [1,"),
    ({**_D, "dcqcn": {"dce_tcp_rtt": 0}}, {}, "fabric.dcqcn.dce_tcp_rtt", "0",
     "an integer in [1, 131,071]"),
    ({**_D, "dcqcn": {"rpg_gd": 12}}, {}, "fabric.dcqcn.rpg_gd", "12", "an integer in [10, 11]"),
    ({**_D, "dcqcn": {"dce_tcp_g": 1024}}, {}, "fabric.dcqcn.dce_tcp_g", "1024",
     "an integer in [0, 1023]"),
    ({**_D, "dcqcn": {"rpg_min_dec_fac": 101}}, {}, "fabric.dcqcn.rpg_min_dec_fac", "101",
     "an integer in [0, 100]"),
    ({**_D, "np": {"cnp_802p_prio": 3}}, {}, "fabric.np.cnp_802p_prio", "3",
     "other than the data's network.pcp 3"),
    # the data's lossy class: PFC off, the data at 3, the CNPs at 3 too
    ({**_D, "pfc": {"enabled": False}, "np": {"cnp_802p_prio": 3}}, {},
     "fabric.np.cnp_802p_prio", "3", "other than the data's network.pcp 3"),
    ({**_D, "np": {"cnp_802p_prio": 7}}, {}, "fabric.np.cnp_802p_prio", "7",
     "switch.control_priority 6"),
    ({**_D, "np": {"cnp_dscp": 64}}, {}, "fabric.np.cnp_dscp", "64", "an integer in [0, 63]"),
    ({**_D, "np": {"min_time_between_cnps": -1}}, {}, "fabric.np.min_time_between_cnps", "-1",
     "an integer in [0,"),
    ({"model": "ideal", "cc": "dcqcn"}, {}, "fabric.cc", "'dcqcn'", "'none' under model 'ideal'"),
    ({"cc": "dcqcn"}, {}, "fabric.cc", "'dcqcn'", "'none' under model 'ideal'"),
    ({**_Q, "cc": "hpcc"}, {}, "fabric.cc", "'hpcc'", "one of 'none', 'dcqcn'"),
    ({"ecn": {"enabled": True}}, {}, "fabric.model", "'ideal'", "'queued' when the fabric "
                                                                 "sets ecn"),
    ({**_D, "dcqcn": {"rpg_ai": 5}}, {}, "fabric.dcqcn.rpg_ai", "'rpg_ai'", "a known key"),
])
def test_cc_errors(tmp_path: Path, fabric, over, key, got, expected):  # type: ignore[no-untyped-def]
    f = write(tmp_path / "c.yaml", cluster_dict(fabric=fabric, **over))
    expect_profile_error(lambda: load_cluster(f), f, key, got, expected)


def test_unused_dcqcn_values_are_not_checked_without_dcqcn(tmp_path: Path):
    """A rate above the line or a CNP class equal to the data's changes nothing while ``cc``
    is ``none`` (no CNP is sent): loading does not refuse it; ``cc: none`` under an ideal
    fabric is the ideal profile."""
    f = _fabric(tmp_path, {**_Q, "dcqcn": {"rpg_ai_rate": 500_000}, "np": {"cnp_802p_prio": 3}})
    assert f.dcqcn.rpg_ai_rate == 500_000
    assert _fabric(tmp_path, {"cc": "none"}) == _fabric(tmp_path, None)


def test_a_bad_cc_value_is_one_line_and_exit_1_on_the_command_line(tmp_path: Path):
    import subprocess
    import sys

    c = write(tmp_path / "c.yaml", cluster_dict(fabric={**_D, "ecn": {"kmin_bytes": 3_000_000}}))
    s = write(tmp_path / "s.yaml", {"cluster": str(c), "workload": {
        "kind": "incast", "senders": [1], "receiver": 0, "bytes": 4096}})
    r = subprocess.run([sys.executable, "-m", "tokenpcap", "plan", str(s)], capture_output=True,
                       text=True, cwd=Path(__file__).resolve().parents[2])
    assert r.returncode == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "fabric.ecn.kmin_bytes: got 3000000" in lines[0], r.stderr


@pytest.mark.parametrize("gbps", [400, 100])
def test_hpcc_ns3_preset_equals_the_config_the_hpcc_export_writes(tmp_path: Path, gbps):
    """``export --to hpcc --hpcc-cc dcqcn`` writes run.py's DCQCN and ECN lines for the cluster
    (``export/hpcc.py``, its own reading of run.py): the preset's values are the simulator's."""
    import numpy as np

    from tokenpcap.export.hpcc import write_hpcc
    from tokenpcap.schedule.engine.table import MSG_STATE_DTYPE

    c = load_cluster(write(tmp_path / "c.yaml", cluster_dict(
        fabric={**_D, "preset": "hpcc-ns3"}, link_gbps=gbps)))
    m = np.zeros(1, MSG_STATE_DTYPE)
    m["src_nic"], m["dst_nic"], m["size_bytes"], m["n_packets"] = 1, 0, 4096, 1
    cfg = dict(line.split(" ", 1) for line in
               write_hpcc(m, c, tmp_path / "f.txt", cc="dcqcn")[2].read_text().splitlines() if line)
    e, d = c.fabric.ecn, c.fabric.dcqcn
    kmin, kmax, pmax = (cfg[k].split()[1:] for k in ("KMIN_MAP", "KMAX_MAP", "PMAX_MAP"))
    for i in range(0, len(kmin), 2):
        port_gbps = int(kmin[i]) / 1e9
        assert ecn_thresholds(e, port_gbps, gbps) == (int(kmin[i + 1]) * 1000,
                                                      int(kmax[i + 1]) * 1000)
        assert float(pmax[i + 1]) == e.pmax
    assert (cfg["RATE_AI"], cfg["RATE_HAI"], cfg["MIN_RATE"]) == (
        f"{d.rpg_ai_rate}Mb/s", f"{d.rpg_hai_rate}Mb/s", f"{d.rpg_min_rate}Mb/s")
    assert float(cfg["EWMA_GAIN"]) == (1024 - d.dce_tcp_g) / 1024
    assert (int(cfg["RP_TIMER"]), int(cfg["ALPHA_RESUME_INTERVAL"]),
            int(cfg["RATE_DECREASE_INTERVAL"]), int(cfg["FAST_RECOVERY_TIMES"]),
            int(cfg["CLAMP_TARGET_RATE"])) == (
        d.rpg_time_reset, d.dce_tcp_rtt, d.rate_reduce_monitor_period, d.rpg_threshold,
        int(d.clamp_tgt_rate))
    assert cfg["CC_MODE"] == "1"
