"""plot --fabric DIR --qp N: one QP's rate line, its receiver port's queue and its CNP markers,
checked on the matplotlib artists against a hand-made log (not pixels), and the command on the
side files of a DCQCN generate run."""
from __future__ import annotations

import numpy as np
import pytest
import yaml
from click.testing import CliRunner
from matplotlib.collections import LineCollection
from matplotlib.lines import Line2D
from matplotlib.patches import StepPatch

from tests.analysis.fabric_toy import incast
from tokenpcap.analysis.plot_fabric import queue_steps
from tokenpcap.analysis.plot_qp import qp_figure, rate_steps
from tokenpcap.cli import main
from tokenpcap.errors import InputError
from tokenpcap.generate.ccfiles import read_cc_files
from tokenpcap.generate.fabricfiles import read_fabric_files
from tokenpcap.records.cc import CC_TABLES

PNG = b"\x89PNG\r\n\x1a\n"


def cc_log() -> dict:
    """QP 7 (nic 1 -> nic 3, the toy incast's receiver): a cut at 500 ns, an increase at 2,000;
    CNPs at 480 and 900. QP 8 (nic 0 -> nic 3): one cut, one CNP, which QP 7's figure leaves out."""
    g = 10**9
    return {"cnps": np.array([(480, 3, 1, 7), (600, 3, 0, 8), (900, 3, 1, 7)], CC_TABLES["cnps"]),
            "rates": np.array([(500, 7, 100 * g, 50 * g, 0.5, 1), (610, 8, 100 * g, 60 * g, 0.4, 1),
                               (2000, 7, 50 * g, 75 * g, 0.25, 2)], CC_TABLES["rates"]),
            "ce_ports": np.array([(0, 3, 5)], CC_TABLES["ce_ports"]),
            "ce_qps": np.array([(7, 1, 3, 3, 2), (8, 0, 3, 2, 1)], CC_TABLES["ce_qps"])}


def _artists(fig):
    ax_r, ax_q = fig.axes
    lines = {ln.get_label(): ln for ln in ax_r.get_lines()}
    steps = [p for p in ax_q.patches if isinstance(p, StepPatch)]
    ticks = [c for c in ax_q.collections if isinstance(c, LineCollection)]
    return lines, steps, ticks


def test_rate_line_queue_line_and_cnp_markers():
    log, s = incast(senders=3, frames_each=60, gbps=100.0)
    fig = qp_figure(log, s, cc_log(), 7)
    try:
        lines, steps, ticks = _artists(fig)
        rate = lines["rate"]
        assert isinstance(rate, Line2D) and rate.get_drawstyle() == "steps-post"
        end = int(log["queues"]["time_ns"].max()) + s.qlen_sample_ns
        assert fig.axes[1].get_xlabel().startswith("time since the start of the run (µs)")
        # µs axis: the line rate from 0, 50 Gb/s from the cut, 75 from the increase
        assert np.allclose(rate.get_xdata(), np.array([0, 500, 2000, end]) / 1000)
        assert np.allclose(rate.get_ydata(), [100, 50, 75, 75])
        cnp = lines["CNP (2)"]
        assert cnp.get_marker() == "v" and cnp.get_linestyle() == "None"
        assert np.allclose(cnp.get_xdata(), [0.48, 0.9])
        assert np.allclose(cnp.get_ydata(), [100, 50])       # the rate each CNP met
        # the queue: the toy's port 3 (to nic 3), its samples as steps, in KiB
        (q,) = steps
        assert q.get_label() == "queue, priority 3"
        edges, values = queue_steps(log["queues"]["time_ns"], log["queues"]["max_bytes"],
                                    s.qlen_sample_ns)
        assert np.allclose(q.get_data().edges, edges / 1000)
        assert np.allclose(q.get_data().values, values / 1024)
        (tick,) = ticks
        assert tick.get_label() == "CNP"
        assert [seg[0][0] for seg in tick.get_segments()] == pytest.approx([0.48, 0.9])
        assert fig.axes[0].get_title(loc="left").startswith("qp 7: nic 1 → nic 3")
        assert fig.axes[1].get_title(loc="left").startswith("tor0 port 3 → nic 3")
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)


def test_a_qp_without_rate_change_stays_at_its_line_rate():
    log, s = incast(senders=3, gbps=100.0)
    cc = cc_log()
    cc["ce_qps"] = np.append(cc["ce_qps"], np.array([(9, 2, 3, 1, 0)], CC_TABLES["ce_qps"]))
    fig = qp_figure(log, s, cc, 9)
    try:
        lines, _, ticks = _artists(fig)
        assert np.allclose(lines["rate"].get_ydata(), [100, 100])
        assert lines["CNP (0)"].get_xdata().size == 0 and ticks == []
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)


def test_rate_steps_by_hand():
    rates = cc_log()["rates"]
    t, v = rate_steps(rates[rates["qp"] == 7], 1, 1500)       # end before the last change
    assert t.tolist() == [0, 500, 2000, 2000] and v.tolist() == [100e9, 50e9, 75e9, 75e9]
    t, v = rate_steps(rates[:0], 400 * 10**9, 10)
    assert t.tolist() == [0, 10] and v.tolist() == [400e9, 400e9]


def test_an_unknown_qp_is_named():
    log, s = incast(senders=3)
    with pytest.raises(InputError, match=r"plot --qp: got 5, expected a QP of the ce_qps table "
                                         r"\(2 QPs: 7, 8\)"):
        qp_figure(log, s, cc_log(), 5)


def _dcqcn_scenario(tmp_path):
    """4 -> 1 x 256 KiB at 100 Gb/s through one switch, hpcc-ns3 DCQCN with CNP frames; each
    flow one message, as the simulator validation runs them (``NCCL_P2P_NET_CHUNKSIZE: 0``:
    NCCL's 128 KiB chunks and 8-slot window would keep the queue below K_min)."""
    fab = {"model": "queued", "preset": "hpcc-ns3", "topology": {"kind": "single-switch"},
           "cc": "dcqcn", "np": {"cnp_in_ack": False, "min_time_between_cnps": 0}}
    path = tmp_path / "qp.yaml"
    path.write_text(yaml.safe_dump({
        "name": "qp", "cluster": {"name": "c", "nodes": 5, "gpus_per_node": 1,
                                  "nics_per_node": 1, "link_gbps": 100, "nvlink_gbps": 3600,
                                  "gpu": {"name": "H100-SXM", "peak_tflops": 989},
                                  "fabric": fab},
        "workload": {"kind": "incast", "senders": 4, "receiver": 0, "bytes": 1 << 18},
        "collectives": {"algorithm": "ring", "channels": 1, "NCCL_P2P_NET_CHUNKSIZE": 0,
                        "NCCL_PXN_DISABLE": 1},
        "generation": {"seed": 0, "iterations": 1, "clear_to_send": False,
                       "ack_every_packets": 1}}))
    return path


def test_the_command_draws_a_generated_runs_qp(tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(main, ["generate", str(_dcqcn_scenario(tmp_path)), "-o", str(out),
                                  "--nics", "0"])
    assert r.exit_code == 0, r.output
    cc = read_cc_files(out, "qp")
    qp = int(cc["cnps"]["qp"][0])
    pics = tmp_path / "pics"
    r = CliRunner().invoke(main, ["plot", "--fabric", str(out), "--qp", str(qp), "-o", str(pics)])
    assert r.exit_code == 0, r.output
    png = pics / f"qp-qp{qp}.png"
    assert r.output.strip() == str(png) and png.read_bytes()[:8] == PNG
    log, s = read_fabric_files(out, "qp")
    fig = qp_figure(log, s, cc, qp)
    try:
        lines, steps, _ = _artists(fig)
        mine = cc["rates"][cc["rates"]["qp"] == qp]
        assert mine.size and lines["rate"].get_ydata()[1:-1].tolist() == \
            (mine["new_bps"] / 1e9).tolist()
        n = int((cc["cnps"]["qp"] == qp).sum())
        assert lines[f"CNP ({n:,})"].get_xdata().size == n and steps
    finally:
        import matplotlib.pyplot as plt
        plt.close(fig)
    r = CliRunner().invoke(main, ["plot", "--qp", "1", "-o", str(pics)])
    assert r.exit_code == 2 and "got a QP without --fabric" in r.output
    r = CliRunner().invoke(main, ["plot", "--fabric", str(out), "--qp", "123456789",
                                  "-o", str(pics)])
    assert r.exit_code == 1 and "plot --qp: got 123456789, expected a QP" in r.output
