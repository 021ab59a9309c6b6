"""generate's option parsing (tokenpcap/cli/generate_cmd.py) on the real scenarios."""
from __future__ import annotations

from pathlib import Path

import click
import pytest

from tokenpcap.cli.generate_cmd import build_options
from tokenpcap.config.profiles import load_scenario
from tests.conftest import needs_tshark, tshark_path

SCENARIOS = Path(__file__).resolve().parents[2] / "profiles" / "scenarios"


def _options(s, ranks):  # type: ignore[no-untyped-def]
    return build_options(s, "unused", ranks=ranks, nics=None, phases=None, iterations=None,
                         time_window=None, fmt="pcapng", split="nic", snaplen=262144, scale=1,
                         seed=None, jobs=1, force=False)


def test_ranks_span_the_context_parallel_world():
    # llama3-70b-64k-cp4: dp 1 x cp 4 x tp 8 x pp 4 = 128 ranks, one per GPU of its 16 x 8
    # cluster (Megatron's world size); dp * tp * pp alone is 32.
    s = load_scenario(SCENARIOS / "llama3-70b-64k-cp4.yaml")
    gpus = s.cluster.nodes * s.cluster.gpus_per_node
    assert gpus == 128 and s.parallelism.world == gpus
    assert sorted(_options(s, "32,127").selection.ranks) == [32, 127]
    with pytest.raises(click.BadParameter, match=r"0\.\.127"):
        _options(s, "128")


@pytest.mark.parametrize("text", ["", ",", " , "])
def test_phases_without_a_pattern_are_a_usage_error(tmp_path, text):
    # `--phases ''` (an empty shell variable) used to keep every phase and exit 0: exit 2 now,
    # naming the option, before anything is created.
    from click.testing import CliRunner

    from tokenpcap.cli import main

    out = tmp_path / "new"
    r = CliRunner().invoke(main, ["generate", str(SCENARIOS / "dante.yaml"), "-o", str(out),
                                  "--phases", text])
    assert r.exit_code == 2 and "'--phases'" in r.output, r.output
    assert not out.exists()


@pytest.mark.parametrize("option", ["--nics", "--ranks", "--iterations", "--time-window"])
def test_empty_selections_are_a_usage_error(tmp_path, option):
    # An empty value (`--nics "$NICS"` with the variable unset) selects nothing that was typed;
    # taken as "not given" it would keep every NIC of the cluster (512 files for llama3-70b-64n).
    from click.testing import CliRunner

    from tokenpcap.cli import main

    out = tmp_path / "new"
    r = CliRunner().invoke(main, ["generate", str(SCENARIOS / "dante.yaml"), "-o", str(out),
                                  option, ""])
    assert r.exit_code == 2 and f"'{option}'" in r.output, r.output
    assert not out.exists()


def test_phases_patterns_are_kept_in_order():
    s = load_scenario(SCENARIOS / "dante.yaml")
    opt = build_options(s, "unused", ranks=None, nics=None, phases=" pp/forward, ,dp ",
                        iterations=None, time_window=None, fmt="pcapng", split="nic",
                        snaplen=262144, scale=1, seed=None, jobs=1, force=False)
    assert opt.selection.phases == ("pp/forward", "dp")


def test_a_phase_pattern_that_names_no_phase_is_a_usage_error_before_planning(tmp_path):
    # `--phases nosuch` (a typo) used to plan and time the whole job before it was refused,
    # exit 1; no scenario has such a phase, so it is a usage error at once, naming each typo.
    from click.testing import CliRunner

    from tokenpcap.cli import main

    out = tmp_path / "new"
    r = CliRunner().invoke(main, ["generate", str(SCENARIOS / "gpt3-175b-megatron.yaml"), "-o",
                                  str(out), "--phases", "dp/,nosuch,pp/forwad,backward"])
    assert r.exit_code == 2, r.output
    assert "got 'nosuch', 'pp/forwad', expected a phase label DIM/PASS/COLLECTIVE" in r.output
    assert "collectives AllReduce ReduceScatter AllGather AllToAll SendRecv Broadcast" in r.output
    assert not out.exists()


@pytest.mark.parametrize("text", ["nic", "nic-txx", "switch", "switch:leaf0-3", "switch:leaf0-3:x",
                                  "switch::2", "switch:leaf0-3:-1", ""])
def test_a_bad_point_is_a_usage_error_naming_the_option(tmp_path, text):
    from click.testing import CliRunner

    from tokenpcap.cli import main

    out = tmp_path / "new"
    r = CliRunner().invoke(main, ["generate", str(SCENARIOS / "dante.yaml"), "-o", str(out),
                                  "--point", text])
    assert r.exit_code == 2 and "'--point'" in r.output and "switch:NAME:PORT" in r.output, r.output
    assert not out.exists()


@pytest.mark.parametrize("text", ["nic-tx", "nic-rx", "switch:leaf0-3:2", " switch:spine1-0:0 "])
def test_points_are_parsed_into_the_options(text):
    from tokenpcap.records.points import parse_point

    s = load_scenario(SCENARIOS / "dante.yaml")
    opt = build_options(s, "unused", ranks=None, nics=None, phases=None, iterations=None,
                        time_window=None, fmt="pcapng", split="nic", snaplen=262144, scale=1,
                        seed=None, jobs=1, force=False, point=text)
    assert opt.point == parse_point(text) and str(opt.point) == text.strip()
    assert _options(s, None).point == parse_point("nic-tx")        # the default


def test_a_point_past_the_nic_on_an_ideal_fabric_is_refused_with_exit_1(tmp_path):
    """An ideal fabric has no switch and no receive side to capture at: the schedule refuses
    the point (one line, exit 1) and the output directory is removed again; a queued fabric
    refuses a switch or port it does not have the same way."""
    from click.testing import CliRunner

    from tokenpcap.cli import main

    out = tmp_path / "new"
    r = CliRunner().invoke(main, ["generate", str(SCENARIOS / "dante.yaml"), "-o", str(out),
                                  "--point", "nic-rx", "--scale", "64"])
    assert r.exit_code == 1 and "--point" in r.output and "nic-rx" in r.output, r.output
    assert "Traceback" not in r.output and not out.exists()
    for point, says in (("switch:leaf9-9:0", "leaf9-9"), ("switch:switch0:64", "0 .. 63")):
        r = CliRunner().invoke(main, ["generate", str(SCENARIOS / "incast-63x16m.yaml"), "-o",
                                      str(out), "--point", point, "--scale", "1024"])
        assert r.exit_code == 1 and "--point" in r.output and says in r.output, r.output
        assert "Traceback" not in r.output and not out.exists()
    r = CliRunner().invoke(main, ["generate", str(SCENARIOS / "dante.yaml"), "-o", str(out),
                                  "--point", "nic-rx", "--dask", "local:1"])
    assert r.exit_code == 2 and "'--dask'" in r.output and "nic-tx" in r.output, r.output


def test_a_queued_fabric_run_says_what_the_fabric_did_and_warns_of_a_headroom_too_small(tmp_path):
    """PFC headroom of 4,096 B on 400G links with 500 ns of propagation (25 KB in flight after an
    XOFF): the lossless packets beyond it are kept and counted, and the run says so on stderr."""
    import yaml
    from click.testing import CliRunner

    from tokenpcap.cli import main

    fab = {"model": "queued", "preset": "hpcc-ns3", "topology": {"kind": "single-switch"},
           "switch": {"buffer_bytes": 2_000_000}, "pfc": {"headroom_bytes": 4096}}
    cl = {"name": "c", "nodes": 9, "gpus_per_node": 1, "nics_per_node": 1, "link_gbps": 400,
          "nvlink_gbps": 3600, "gpu": {"name": "H100-SXM", "peak_tflops": 989}, "fabric": fab}
    path = tmp_path / "tight.yaml"
    path.write_text(yaml.safe_dump({"name": "tight", "cluster": cl,
                                    "workload": {"kind": "incast", "senders": 8, "bytes": 1 << 20},
                                    "collectives": {"algorithm": "ring", "channels": 1},
                                    "generation": {"clear_to_send": False}}))
    out = tmp_path / "o"
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(out), "--nics", "0"])
    assert r.exit_code == 0, r.output
    assert "fabric (single-switch, preset hpcc-ns3)" in r.output and "tight_fabric.json" in r.output
    assert "found its PFC headroom full" in r.output
    assert (out / "tight_fabric-pfc.csv").exists()


@needs_tshark
def test_a_switch_port_capture_does_not_call_the_runs_bytes_its_expected_size(tmp_path):
    """At --point switch:NAME:PORT the prediction counts every RoCE frame of the run before
    routing (tokenpcap/generate/size.py): the port to a sender (switch0 port 1 of an 8 -> 1
    incast) carries that sender's ACKs and the PAUSE frames sent to it, far less. The summary
    must not call the run's bytes the file's expected size, and the PFC frames it counts are
    the 802.1Qbb frames (MAC control opcode 0x0101) TShark finds in the file."""
    import re
    import subprocess

    import yaml
    from click.testing import CliRunner

    from tokenpcap.cli import main

    cl = {"name": "c", "nodes": 9, "gpus_per_node": 1, "nics_per_node": 1, "link_gbps": 400,
          "nvlink_gbps": 3600, "gpu": {"name": "H100-SXM", "peak_tflops": 989},
          "fabric": {"model": "queued", "topology": {"kind": "single-switch"},
                     "switch": {"buffer_bytes": 8_000_000}}}   # 8 MiB in: the senders get paused
    path = tmp_path / "port.yaml"
    path.write_text(yaml.safe_dump({"name": "port", "cluster": cl,
                                    "workload": {"kind": "incast", "senders": 8, "bytes": 1 << 20},
                                    "collectives": {"algorithm": "ring", "channels": 1},
                                    "generation": {"clear_to_send": False}}))
    out = tmp_path / "o"
    r = CliRunner().invoke(main, ["generate", str(path), "-o", str(out),
                                  "--point", "switch:switch0:1", "--snaplen", "74"])
    assert r.exit_code == 0, r.output
    assert "predicted before routing" in r.output, r.output
    m = re.search(r"packets ([\d,]+), file bytes ([\d,]+) \(the run's RoCE frames, before "
                  r"routing, ([\d,]+): not this port's size\).*?([\d,]+) ACKs?, "
                  r"([\d,]+) PFC frames?",
                  r.output, re.S)
    assert m, r.output
    packets, file_bytes, run_bytes, acks, pfc = (int(g.replace(",", "")) for g in m.groups())
    assert file_bytes < run_bytes and packets == acks + pfc and pfc > 0
    pcap = out / "port_switch0_port1.pcapng"
    assert pcap.stat().st_size == file_bytes
    shown = subprocess.run([tshark_path(), "-r", str(pcap), "-Y", "macc.opcode == 0x0101"],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(shown) == pfc


@pytest.mark.parametrize("text, want", [
    ("busiest:0", "expected busiest:K with K in 1..32"),
    ("busiest:two", "expected busiest:K with K in 1..32"),
    ("carrying:ep", "expected a family some NIC sends bytes of: pp, dp, emb, mp"),
    ("carrying:xx", "expected carrying:FAMILY with FAMILY one of tp, pp, dp, ep"),
    ("busy", "expected busiest, busiest:K, carrying:FAMILY or indices"),
])
def test_a_bad_nic_pick_is_one_usage_line_before_anything_is_created(tmp_path, text, want):
    from click.testing import CliRunner

    from tokenpcap.cli import main

    out = tmp_path / "new"
    r = CliRunner().invoke(main, ["generate", str(SCENARIOS / "dante.yaml"), "-o", str(out),
                                  "--nics", text])
    assert r.exit_code == 2, r.output
    line, = [x for x in r.output.splitlines() if x.startswith("Error:")]
    assert "'--nics'" in line and f"got {text!r}" in line and want in line, r.output
    assert "Traceback" not in r.output and not out.exists()


def test_busiest_writes_the_capture_of_the_nic_it_names(tmp_path):
    """`--nics busiest` is `--nics 0` on dante (0,4,8,12 send 4 B more than the others; the
    tie goes to the lowest): the same file byte for byte, and stderr says which NIC."""
    from click.testing import CliRunner

    from tokenpcap.cli import main

    runs = {}
    for sel in ("busiest", "0"):
        out = tmp_path / sel
        r = CliRunner().invoke(main, ["generate", str(SCENARIOS / "dante.yaml"), "-o", str(out),
                                      "--scale", "64", "--nics", sel, "--jobs", "1"])
        assert r.exit_code == 0, r.output
        runs[sel] = (r, {p.name: p.read_bytes() for p in out.iterdir()})
    (r, got), (_, want) = runs["busiest"], runs["0"]
    assert got == want and list(got) == ["dante_node00_nic0.pcapng"]
    assert "--nics busiest: NICs 0 (the 1 sending the most bytes" in r.stderr


def test_the_selection_note_is_printed_only_when_the_kept_payload_differs_from_the_plan(tmp_path):
    """The note under the payload table explains why the payload column is below the plan's:
    a selection that keeps every NIC (`--nics 0-31` on dante, as `--nics carrying:ep` does on
    mixtral-8x7b-ep) keeps every byte, each row equals the plan, and the note would be false.
    One NIC keeps part of it: the rows differ and the note stays."""
    import re

    from click.testing import CliRunner

    from tokenpcap.cli import main

    for nics, want in (("0-31", False), ("0", True)):
        r = CliRunner().invoke(main, ["generate", str(SCENARIOS / "dante.yaml"), "-o",
                                      str(tmp_path / nics), "--scale", "64", "--nics", nics,
                                      "--jobs", "1", "--quiet"])
        assert r.exit_code == 0, r.output
        rows = re.findall(r"│ (\S+/\S+) +│ +[\d,]+ │ +([\d,]+) │ +([\d,]+) │", r.stdout)
        assert rows and (any(a != b for _, a, b in rows)) == want, r.stdout
        assert ("note: a selection" in r.stdout) == want, r.stdout
