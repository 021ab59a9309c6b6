"""The inspect report: PSN verdicts of selections, the interface list, ERF port indices and
InfiniBand-only captures, files read together.

Oracles: the capture's own provenance comment (written by :mod:`tokenpcap.records.provenance`), the
frames' construction (scapy, hardware IB frames of the cases), capinfos' interface count.
"""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from tests.analysis.test_inspect import T0, _fill, _scapy_frame, write
from tokenpcap.analysis.inspect import inspect_capture, inspect_captures
from tokenpcap.analysis.report import render_text
from tokenpcap.pcap import ErfWriter, Interface, PcapngWriter
from tokenpcap.records.provenance import provenance_comment

pytest.importorskip("scapy.all")


def _pcapng(path, frames, comment=None, interfaces=1):
    with PcapngWriter(path, [Interface(name=f"node0/nic{i}") for i in range(interfaces)],
                      section_comment=comment) as w:
        w.write_batch(T0 + np.arange(len(frames), dtype=np.int64) * 1000,
                      np.array([len(f) for f in frames], np.int64), _fill(frames))
    return path


def _prov(**kw):
    base = dict(scenario="dante", scale=1, iterations=(0, 1), split="none", snaplen=262144,
                seed=0, clear_to_send=True)
    return provenance_comment(**{**base, **kw})


@pytest.mark.parametrize("selection", [dict(phases=("pp",)), dict(ranks=(0, 1)),
                                       dict(time_window=(0, 5000)), dict(iterations=(1, 3))])
def test_psn_gaps_in_a_selection_are_expected(tmp_path, selection):
    """The same gap fails without provenance or with a provenance of everything, and
    is expected (reported, not failed) when the provenance says the capture is a selection;
    a late packet still fails."""
    gap = [_scapy_frame(0xC001, 5, p, 0x04, b"x" * 8) for p in (10, 11, 15, 16)]
    for name, comment in (("none", None), ("all", _prov())):
        rep = inspect_capture(_pcapng(tmp_path / f"{name}.pcapng", gap, comment))
        psn = [c for c in rep.checks() if c["name"] == "psn"][0]
        assert not psn["ok"] and rep.selection is None
    rep = inspect_capture(_pcapng(tmp_path / "sel.pcapng", gap, _prov(**selection)))
    psn = [c for c in rep.checks() if c["name"] == "psn"][0]
    assert psn["ok"] and rep.roce["psn_gaps"] == 1 and rep.roce["psn_missing"] == 3
    assert "gaps expected in a selection" in psn["detail"] and rep.ok
    assert rep.to_json()["files"][0]["provenance"]["selection"] is True
    late = [_scapy_frame(0xC001, 5, p, 0x04, b"x" * 8) for p in (10, 12, 11)]
    rep = inspect_capture(_pcapng(tmp_path / "late.pcapng", late, _prov(**selection)))
    assert not [c for c in rep.checks() if c["name"] == "psn"][0]["ok"]


def test_flows_spread_over_files_are_not_followed(tmp_path):
    """A QP whose packets are in two files (read one after the other) is left out of the PSN
    check and counted as unchecked, rather than reported as reordered."""
    pk = [_scapy_frame(0xC001, 5, p, 0x04, b"x" * 8) for p in range(6)]
    a = write(tmp_path / "a.pcap", pk[1::2])
    b = write(tmp_path / "b.pcap", pk[0::2])
    rep = inspect_captures([a, b])
    assert rep.roce["psn_flows_unchecked"] == 1 and rep.roce["psn_reordered"] == 0
    assert rep.ok


def test_every_interface_is_listed_or_counted(tmp_path):
    frames = [_scapy_frame(0xC001, 5, 1, 0x04, b"x" * 8)]
    path = _pcapng(tmp_path / "many.pcapng", frames, interfaces=20)
    rep = inspect_capture(path)
    text = render_text(rep)
    assert "Interfaces:          20" in text and "#15 linktype 1 node0/nic15" in text
    assert "#16" not in text and "  ... 4 more (--json lists all)" in text
    assert [i["index"] for i in rep.to_json()["interfaces"]] == list(range(20))
    if shutil.which("capinfos"):
        out = subprocess.run(["capinfos", "-I", str(path)], capture_output=True, text=True,
                             check=True).stdout
        assert out.count("Interface #") == 20


def test_infiniband_erf_report(tmp_path, hw_frames, scapy_vectors):
    """ERF ports show their own index; a native IB capture shows no Ethernet-only
    lines (replay MTU, FCS/preamble/IFG, IP ECN)."""
    ib = [bytes.fromhex(x["hex"]) for x in hw_frames["native_ib"]]
    a = write(tmp_path / "a.erf", ib, writer=ErfWriter)
    b = write(tmp_path / "b.erf", ib, writer=ErfWriter)
    rep = inspect_captures([a, b])
    text = render_text(rep)
    j = rep.to_json()
    assert [(i["index"], i["port"]) for i in j["interfaces"]] == \
        [(k, k % 4) for k in range(8)]
    assert "#1 linktype 197 Port B (ERF port 1)" in text
    assert "#5 linktype 197 Port B (ERF port 1)" in text
    for ethernet_only in ("MTU", "FCS", "IFG", "ECN:"):
        assert ethernet_only not in text
    assert rep.roce["vcrc_ok"] == 2 * len(ib)
    roce = render_text(inspect_capture(write(tmp_path / "r.pcap", [
        _scapy_frame(0xC001, 5, 1, 0x04, b"x" * 8)])))
    assert "replay needs MTU >= 52" in roce and "ECN:" in roce and "IFG" in roce


def test_an_against_note_holding_a_semicolon_stays_one_line():
    """The time-slice note lists its reasons with '; ' (a window in the provenance; flows cut at
    the edges): the report prints each note whole, one line, not split at its semicolons."""
    from tokenpcap.analysis.report import _against
    note = ("a time slice (its provenance names a time window; 8 flows have messages cut at "
            "its edges): compared as upper bounds")
    a = {"scenario": "s.yaml", "scale": 1, "iterations": 1, "source": None, "mismatch": None,
         "mode": "nic_phase", "bound": True, "compared": 8, "control_bytes": 0,
         "differences": [], "not_compared": ["28 NICs not covered by the capture: 4-31"],
         "notes": [note], "note": "; ".join([note, "28 NICs not covered by the capture: 4-31"])}
    lines = _against(a)
    assert f"  note:          {note}" in lines
    assert sum(x.startswith("  note:") for x in lines) == 1


def test_a_provenance_naming_huge_ranges_is_reported_as_ranges(tmp_path):
    """A comment of a few hundred bytes naming ranks and NICs 0-1048576 (a million indices
    each): the JSON and text reports give them as the comment's ranges, with a note, and stay
    a few KB (they listed every index: 37.6 MB of JSON); a short list is still listed."""
    import io
    import json

    from tokenpcap.cli.inspect_cmd import write_json
    from tokenpcap.records.provenance import MAX_INDEX

    gap = [_scapy_frame(0xC001, 5, p, 0x04, b"x" * 8) for p in (10, 11, 15)]
    huge = _prov().replace("nics=all", f"nics=0-{MAX_INDEX}").replace(
        "ranks=all", f"ranks=0-{MAX_INDEX},{MAX_INDEX - 1}")
    path = _pcapng(tmp_path / "huge.pcapng", gap, huge)
    rep = inspect_capture(path)
    assert len(rep.files[0]["provenance"]["ranks"]) == MAX_INDEX + 1     # --against's view
    out = io.StringIO()
    write_json(rep.to_json(lazy_flows=True), out)
    doc = json.loads(out.getvalue())
    prov = doc["files"][0]["provenance"]
    assert prov["nics"] == prov["ranks"] == f"0-{MAX_INDEX}"
    assert sum(f"provenance {k}: {MAX_INDEX + 1:,} indices, given as ranges" in n
               for n in doc["notes"] for k in ("nics", "ranks")) == 2
    text = render_text(rep)
    assert f"ranks=0-{MAX_INDEX}" in text and "gaps expected in a selection" in text
    assert len(out.getvalue()) < 4 * len(path.read_bytes()) + 4096 and len(text) < 4096
    small = list(range(0, 2048, 2))       # 1,024 indices (MAX_LISTED_INDICES): listed, as before
    rep = inspect_capture(_pcapng(tmp_path / "small.pcapng", gap, _prov(ranks=small)))
    assert rep.to_json()["files"][0]["provenance"]["ranks"] == small and not rep.notes
    assert f"ranks={','.join(map(str, small))}" in render_text(rep)
