"""route at capture points other than nic-tx, with PFC frames among the RoCE frames: rows made by
hand from a real small scenario's transmitted frames (the engine does not model the fabric
here), routed, lowered and written as pcapng and pcap, then read back by our reader, inspect
(which counts PFC frames and checks every ICRC), the comment grammar and TShark."""
from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import tshark_path
from tests.schedule.test_schedule import tiny_scenario
from tokenpcap.analysis.inspect import inspect_captures
from tokenpcap.config.addresses import nic_addresses, switch_port_macs
from tokenpcap.config.profiles import load_scenario
from tokenpcap.errors import InputError
from tokenpcap.generate.options import EPOCH_NS, GenerateOptions, GenerateResult, provenance_comment
from tokenpcap.generate.output import Dispatcher, WriterConfig
from tokenpcap.generate.route import describe_nic, file_specs, route_chunk
from tokenpcap.generate.select import Selection
from tokenpcap.generate.size import predict_capture
from tokenpcap.lower import Lowering
from tokenpcap.pcap.outputset import OutputSet
from tokenpcap.pcap.reader import open_capture
from tokenpcap.pipeline import prepare
from tokenpcap.records import PKT_PFC
from tokenpcap.records.comments import parse_comment
from tokenpcap.records.points import NIC_RX, NIC_TX, parse_point
from tokenpcap.schedule.engine.nic import TX_DTYPE

WIRE_NS = 1_000          # a made-up fabric delay: arrival = departure + 1 us


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("points")
    s = load_scenario(tiny_scenario(tmp, "tiny", dp=2, tp=2, pp=2, gbs=8))
    _, _, sched = prepare(s, iterations=1)
    tx = np.concatenate(list(sched.run()))
    return s, sched, tx


def pfc_rows(tx: np.ndarray, n: int, to_switch: bool = False) -> np.ndarray:
    """``n`` PFC rows spread over the run: XOFF 65535 / XON alternating, priority 3 (and 3+4)."""
    rng = np.random.default_rng(5)
    p = np.zeros(n, TX_DTYPE)
    p["time_ns"] = np.sort(rng.integers(int(tx["time_ns"][0]), int(tx["time_ns"][-1]), n))
    p["nic"] = -1 - rng.integers(0, 16, n)                   # switch ports 0..15
    p["peer_nic"] = -1 - rng.integers(16, 32, n) if to_switch else rng.integers(0, 8, n)
    p["msg"] = np.where(np.arange(n) % 2 == 0, 0xFFFF, 0)
    p["index"] = np.where(np.arange(n) % 3 == 0, 0x18, 0x08)
    p["kind"] = PKT_PFC
    p["frame_bytes"] = 60
    return p


def merged(tx: np.ndarray, pfc: np.ndarray, delay: int = WIRE_NS) -> np.ndarray:
    rows = tx.copy()
    rows["time_ns"] += delay
    both = np.concatenate([rows, pfc])
    return both[np.argsort(both["time_ns"], kind="stable")]


def write(s, sched, rows: np.ndarray, out: Path, *, point=NIC_RX, fmt="pcapng", split="nic",
          sel: Selection = Selection(), chunk: int = 5_000) -> tuple[list[Path], GenerateResult]:
    """generate's inner loop over hand-made rows (tokenpcap.generate.run._generate)."""
    out.mkdir()
    opt = GenerateOptions(out_dir=out, fmt=fmt, split=split, point=point, selection=sel)
    n_nics = s.cluster.nodes * s.cluster.nics_per_node
    size = predict_capture(sched, sel, fmt, opt.snaplen, split, point)
    addr = nic_addresses(s.cluster)
    rx = point.receive
    names = {n: (f"node{n // s.cluster.nics_per_node}/nic{n % s.cluster.nics_per_node}"
                 + ("/rx" if rx else ""), describe_nic(addr, n, False)) for n in range(n_nics)}
    cfg = WriterConfig(s.cluster, fmt, opt.snaplen, s.generation.seed, names,
                       provenance_comment(s, opt, 1) if fmt == "pcapng" else None)
    res = GenerateResult(files=[], nic_payload=np.zeros(n_nics, np.int64))
    with OutputSet(out) as outset:
        specs, route = file_specs(s, opt, size.keys, n_nics, "pcapng" if fmt == "pcapng" else fmt,
                                  outset)
        disp = Dispatcher(specs, cfg, 1)
        lower = Lowering(s.cluster, s.generation.seed, s.generation.ack_every_packets)
        done = 0
        for a in range(0, len(rows), chunk):
            done += route_chunk(rows[a:a + chunk], sched, lower, sel, sel.labels(), opt, route,
                                disp, res)
        disp.close()
        outset.commit()
        paths = [outset.final(sp.path) for sp in specs]
    res.packets = done
    return paths, res


@pytest.mark.parametrize("fmt", ["pcapng", "pcap"])
def test_nic_rx_files_hold_the_received_frames_and_the_pfc_frames(run, tmp_path, fmt):
    s, sched, tx = run
    pfc = pfc_rows(tx, 40)
    rows = merged(tx, pfc)
    paths, res = write(s, sched, rows, tmp_path / "rx", fmt=fmt)
    assert sorted(p.name for p in paths) == [f"tiny_node{k:02d}_nic0_rx.{fmt}" for k in range(8)]
    assert res.pfc_packets == 40 and res.packets == len(rows)
    rep = inspect_captures([str(p) for p in paths])
    assert rep.pfc["frames"] == 40 and rep.pfc["xoff"] == 20 and rep.pfc["xon"] == 20
    assert rep.pfc["priorities"] == {"3": 40, "4": 14}
    assert rep.roce["malformed"] == 0 and rep.roce["icrc_bad"] == 0
    assert rep.roce["icrc_ok"] == len(tx) and rep.roce["packets"] == len(tx)
    assert rep.kinds == {"RoCEv2": len(tx), "PFC": 40}
    one = inspect_captures([str(sorted(paths)[0])])      # a NIC's rx file: it sends none of it
    assert not [e for e in one.idle_nics if e["reason"] == "no_packet"]
    for k, p in enumerate(sorted(paths)):
        cap = open_capture(p)
        rec = cap.read()
        assert (np.diff(rec["time_ns"]) >= 0).all()               # time order, PFC in place
        mine = rows[rows["peer_nic"] == k]
        assert rec["time_ns"].tolist() == (mine["time_ns"] + EPOCH_NS).tolist()
        is_pfc = mine["kind"] == PKT_PFC
        for rr, row in zip(rec[is_pfc], mine[is_pfc]):
            f = cap.frame(rr)
            assert f[:6] == bytes.fromhex("0180c2000001") and f[12:16] == bytes.fromhex("88080101")
            assert f[6:12] == switch_port_macs([-1 - int(row["nic"])])[0].tobytes()
            assert rr["caplen"] == rr["orig_len"] == 60
        if fmt == "pcap":
            cap.close()
            continue
        assert [i.name for i in cap.interfaces] == [f"node{k}/nic0/rx"]
        texts = [cap.comments[c] for c in rec["comment"]]
        for t, r in zip(np.asarray(texts, object)[is_pfc], mine[is_pfc]):
            d = parse_comment(t)
            assert d == {"kind": PKT_PFC, "xoff": bool(r["msg"]), "quanta": int(r["msg"]),
                         "priorities": [p for p in range(8) if int(r["index"]) >> p & 1]}
            assert t in ("pfc xoff prio 3 quanta 65535", "pfc xon prio 3",
                         "pfc xoff prio 3,4 quanta 65535", "pfc xon prio 3,4")
        assert all(parse_comment(t)["kind"] != PKT_PFC for t in np.asarray(texts, object)[~is_pfc])
        cap.close()


def test_a_nic_receives_the_frames_its_peers_sent_byte_for_byte(run, tmp_path):
    """The lossless fabric changes no byte of a RoCE frame: the rx files hold the tx files'
    frames (regrouped by receiver), at later times."""
    s, sched, tx = run
    rx_paths, _ = write(s, sched, merged(tx, pfc_rows(tx, 10)), tmp_path / "rx", fmt="pcap")
    tx_paths, _ = write(s, sched, tx, tmp_path / "tx", point=NIC_TX, fmt="pcap")
    assert sorted(p.name for p in tx_paths) == [f"tiny_node{k:02d}_nic0.pcap" for k in range(8)]

    def frames(paths):
        out = []
        for p in paths:
            cap = open_capture(p)
            out += [cap.frame(r) for r in cap.read()]
            cap.close()
        return out
    got = [f for f in frames(rx_paths) if f[12:14] != b"\x88\x08"]
    assert sorted(got) == sorted(frames(tx_paths))
    rep = inspect_captures([str(p) for p in rx_paths])
    assert rep.pfc["frames"] == 10 and rep.roce["icrc_bad"] == 0 and rep.roce["malformed"] == 0


def test_a_switch_port_mirror_is_one_file_with_one_interface(run, tmp_path):
    s, sched, tx = run
    point = parse_point("switch:leaf0-3:2")
    port_rows = tx[np.isin(tx["nic"], [0, 1])]            # what crosses the port, by hand
    rows = merged(port_rows, pfc_rows(tx, 12, to_switch=True), delay=300)
    paths, res = write(s, sched, rows, tmp_path / "sw", point=point)
    assert [p.name for p in paths] == ["tiny_leaf0-3_port2.pcapng"]
    cap = open_capture(paths[0])
    rec = cap.read()
    assert [(i.name, i.description) for i in cap.interfaces] == [
        ("leaf0-3/port2", "egress of port 2 of switch leaf0-3 (port mirror)")]
    assert len(rec) == len(rows) and (np.diff(rec["time_ns"]) >= 0).all()
    shb = cap.sections[0]["options"]["opt_comment"]
    assert shb.endswith(" point=switch:leaf0-3:2")
    cap.close()
    rep = inspect_captures([str(paths[0])])
    assert rep.pfc["frames"] == 12 and rep.roce["icrc_bad"] == 0 and rep.roce["malformed"] == 0
    assert "point=switch:leaf0-3:2" in (rep.selection or "")
    assert rep.idle_nics == []            # the port's interface is no NIC egress left silent


def test_split_phase_puts_pfc_frames_in_their_own_file(run, tmp_path):
    s, sched, tx = run
    paths, _ = write(s, sched, merged(tx, pfc_rows(tx, 8)), tmp_path / "ph", split="phase")
    names = sorted(p.name for p in paths)
    assert "tiny_pfc_rx.pcapng" in names and all(n.endswith("_rx.pcapng") for n in names)
    rep = inspect_captures([str(tmp_path / "ph" / "tiny_pfc_rx.pcapng")])
    assert rep.packets == 8 and rep.pfc["frames"] == 8


def test_selections_and_pfc_frames(run, tmp_path):
    """--nics at nic-rx names receivers (PFC sent to them kept); --time-window keeps the PFC
    frames inside it; message selections (--phases) keep none."""
    s, sched, tx = run
    pfc = pfc_rows(tx, 30)
    rows = merged(tx, pfc)
    paths, res = write(s, sched, rows, tmp_path / "n", sel=Selection(nics=frozenset({2})))
    assert [p.name for p in paths] == ["tiny_node02_nic0_rx.pcapng"]
    assert res.pfc_packets == int((pfc["peer_nic"] == 2).sum())
    assert res.packets == int((rows["peer_nic"] == 2).sum())
    t0, t1 = int(pfc["time_ns"][5]), int(pfc["time_ns"][20])
    _, res = write(s, sched, rows, tmp_path / "w", sel=Selection(window_ns=(t0, t1)))
    assert res.pfc_packets == 15
    _, res = write(s, sched, rows, tmp_path / "p", sel=Selection(phases=("dp",)))
    assert res.pfc_packets == 0 and res.packets > 0


def test_nic_tx_drops_switch_pfc_rows_and_transport_ib_refuses_them(run, tmp_path):
    s, sched, tx = run
    paths, res = write(s, sched, merged(tx, pfc_rows(tx, 5), delay=0), tmp_path / "tx",
                       point=NIC_TX, fmt="pcap")
    assert res.pfc_packets == 0 and res.packets == len(tx)
    from dataclasses import replace

    ib = replace(s.cluster, transport="infiniband")
    with pytest.raises(InputError, match="InfiniBand has credit-based link flow control"):
        Lowering(ib, 0)(pfc_rows(tx, 3), sched.message_index)
    bad = pfc_rows(tx, 3)
    bad["index"][1] = 256
    with pytest.raises(InputError, match="PFC tx row 1: index: got 256, expected a class-enable"):
        Lowering(s.cluster, 0)(bad, sched.message_index)


@pytest.mark.skipif(tshark_path() is None, reason="tshark is not installed")
def test_tshark_decodes_every_pfc_frame_we_write(run, tmp_path):
    s, sched, tx = run
    pfc = pfc_rows(tx, 24)
    paths, _ = write(s, sched, merged(tx, pfc), tmp_path / "rx")
    n = 0
    for p in paths:
        out = subprocess.run([tshark_path(), "-r", str(p), "-Y", "macc", "-T", "fields", "-E",
                              "separator=\t", "-e", "macc.opcode", "-e", "macc.cbfc.enbv", "-e",
                              "macc.cbfc.pause_time.c3", "-e", "macc.cbfc.pause_time.c4"],
                             capture_output=True, text=True, check=True, timeout=120).stdout
        k = int(p.name.split("_node")[1][:2])
        want = pfc[pfc["peer_nic"] == k]
        got = [tuple(int(x, 0) for x in line.split("\t")) for line in out.splitlines()]
        assert got == [(0x0101, int(r["index"]), int(r["msg"]),
                        int(r["msg"]) if int(r["index"]) & 0x10 else 0) for r in want]
        n += len(got)
        bad = subprocess.run([tshark_path(), "-r", str(p), "--disable-heuristic",
                              "rpcrdma_infiniband", "-Y", "_ws.malformed || _ws.expert.severity >= warning"],
                             capture_output=True, text=True, check=True, timeout=120).stdout
        assert bad.strip() == ""
    assert n == 24


@pytest.mark.parametrize("point", ["nic-rx", "switch:leaf0-3:2"])
def test_the_size_prediction_at_a_point_counts_its_roce_frames(run, tmp_path, point):
    """At nic-rx, the prediction keyed by receiver equals the written files' records exactly when
    no PFC frame is added (the PFC frames are what it leaves out); at a switch port it counts
    every RoCE frame into one file (key 0)."""
    from tokenpcap.generate.route import file_header_bytes

    s, sched, tx = run
    pt = parse_point(point)
    size = predict_capture(sched, Selection(), "pcapng", 262144, "nic", pt)
    tx_size = predict_capture(sched, Selection(), "pcapng", 262144, "nic")
    assert size.packets == tx_size.packets == len(tx) and size.record_bytes == tx_size.record_bytes
    if pt.at_switch:
        assert size.keys.tolist() == [0]
        return
    assert size.keys.tolist() == sorted(set(tx["peer_nic"].tolist()))
    paths, _ = write(s, sched, merged(tx, pfc_rows(tx, 0)), tmp_path / "rx")
    opt = GenerateOptions(out_dir=tmp_path, point=pt)
    n_nics = s.cluster.nodes * s.cluster.nics_per_node
    addr = nic_addresses(s.cluster)
    names = {n: (f"node{n}/nic0/rx", describe_nic(addr, n, False)) for n in range(n_nics)}
    cfg = WriterConfig(s.cluster, "pcapng", 262144, s.generation.seed, names,
                       provenance_comment(s, opt, 1))
    from tokenpcap.generate.output import FileSpec
    for k, p in enumerate(sorted(paths)):
        header = file_header_bytes(opt, cfg, FileSpec(p, (k,), pt))
        assert p.stat().st_size - header == size.nic_record_bytes[k]
    rx_by_sender = predict_capture(sched, Selection(nics=frozenset({3})), "pcapng", 262144, "nic", pt)
    assert rx_by_sender.packets == int((tx["peer_nic"] == 3).sum())
