"""Lowering of the congestion-control rows of a queued fabric: a ``flags`` column with
``TX_FLAG_CE`` becomes ``PACKET_DTYPE.ce`` (ECN CE on the wire), and ``PKT_CNP`` rows become
RoCEv2 CNPs from the marked packet's receiver to its sender with DestQP the QPN of the QP that
sent it (IBTA A17.9.3), DSCP/PCP/UDP port from ``fabric.np``. The QPNs are checked against the
frames lowering writes for the same messages; ``inspect`` counts the CE marks and CNPs per QP as
the rows say (scapy builds nothing here: the frames are ours, decoded by our reader, and the
per-flow counts are compared with the rows)."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.analysis.test_inspect import write
from tests.test_lower import cluster, lowered, messages
from tokenpcap.analysis.inspect import inspect_capture
from tokenpcap.config.cc_types import NpConfig
from tokenpcap.config.types import FabricProfile
from tokenpcap.errors import InputError
from tokenpcap.lower import Lowering, wire_context
from tokenpcap.records import KIND_CTS, KIND_DATA, PKT_CNP, PKT_DATA, TX_FLAG_CE
from tokenpcap.config.profiles import GenerationConfig
from tokenpcap.schedule.engine.port import TX_DTYPE
from tokenpcap.wire import rdma
from tokenpcap.wire.builder import FrameBuilder
from tokenpcap.wire.cnp import cnp_frame_bytes
from tokenpcap.wire.context import WireContext

TX_FLAGS = np.dtype(TX_DTYPE.descr + [("flags", "u1")])


def _run():  # type: ignore[no-untyped-def]
    """Three connections with clear-to-send, lowered as the engine sends them."""
    rows = messages((0, 1, 0, 20_000, 0), (2, 1, 1, 9_000, 0), (3, 0, 0, 5_000, 0))
    pk, msgs = lowered(rows, GenerationConfig(clear_to_send=True))
    return pk, msgs


def _tx(msgs, pick: np.ndarray, kind: int, flags: int = 0) -> np.ndarray:
    """TX rows for packet 0 of each message ``pick``: data/CTS rows as their sender sends them,
    CNP rows from their receiver."""
    m = msgs[pick]
    tx = np.zeros(pick.size, TX_FLAGS)
    tx["time_ns"] = np.arange(pick.size) * 1000
    cnp = kind == PKT_CNP
    tx["nic"] = m["dst_nic"] if cnp else m["src_nic"]
    tx["peer_nic"] = m["src_nic"] if cnp else m["dst_nic"]
    tx["msg"], tx["index"], tx["flags"] = pick, 0, flags
    tx["kind"] = kind if cnp else np.where(m["kind"] == KIND_CTS, 1, PKT_DATA)
    tx["frame_bytes"] = cnp_frame_bytes() if cnp else 0
    return tx


def test_cnp_rows_answer_the_qp_that_sent_the_marked_packet():
    pk, msgs = _run()
    lw = Lowering(cluster())
    ids = np.arange(len(msgs))
    data = lw(_tx(msgs, ids, PKT_DATA), msgs)
    cnp = lw(_tx(msgs, ids, PKT_CNP), msgs)
    # the data rows lowered here carry the QPNs of the engine run's frames of the same messages
    for i in ids.tolist():
        first = pk[(pk["msg"] == i) & (pk["opcode"] != rdma.ACKNOWLEDGE)][0]
        assert (data["src_qp"][i], data["dest_qp"][i]) == (first["src_qp"], first["dest_qp"])
    assert (cnp["opcode"] == rdma.CNP).all() and (cnp["psn"] == 0).all() and (cnp["becn"] == 1).all()
    assert (cnp["dest_qp"] == data["src_qp"]).all() and (cnp["src_qp"] == data["dest_qp"]).all()
    assert (cnp["nic"] == data["peer_nic"]).all() and (cnp["peer_nic"] == data["nic"]).all()
    assert (cnp["udp_sport"] == 0).all() and (cnp["payload_bytes"] == 0).all()
    assert (cnp["frame_bytes"] == 74).all() and (cnp["ce"] == 0).all()
    # a CNP for a marked clear-to-send write goes to the data receiver's QP
    cts = msgs["kind"] == KIND_CTS
    assert cts.any() and (msgs["kind"] == KIND_DATA).any()
    assert (cnp["dest_qp"][cts] == data["src_qp"][cts]).all()
    # and the builder makes them 74-byte frames
    frames = FrameBuilder(wire_context(cluster())).frames(cnp)
    assert {len(f) for f in frames} == {74}


def test_the_flags_column_marks_ce_and_only_there():
    _, msgs = _run()
    lw = Lowering(cluster())
    ids = np.arange(len(msgs))
    tx = _tx(msgs, ids, PKT_DATA)
    tx["flags"] = np.where(ids % 2 == 0, TX_FLAG_CE, 0)
    out = lw(tx, msgs)
    assert out["ce"].tolist() == (ids % 2 == 0).astype(int).tolist()
    plain = lw(tx[list(TX_DTYPE.names)].astype(TX_DTYPE), msgs)      # no flags column: no marks
    assert not plain["ce"].any()
    for k in ("src_qp", "dest_qp", "psn", "opcode", "frame_bytes"):
        assert (plain[k] == out[k]).all()


def test_a_cnp_not_from_the_receiver_and_a_cnp_under_infiniband_are_refused():
    _, msgs = _run()
    tx = _tx(msgs, np.array([0]), PKT_CNP)
    tx["nic"] = msgs["src_nic"][0]
    with pytest.raises(InputError, match=r"CNP tx row 0: nic: got 0, expected 1"):
        Lowering(cluster())(tx, msgs)
    with pytest.raises(InputError, match=r"got 1 CNP rows under transport 'infiniband'"):
        Lowering(cluster(transport="infiniband"))(_tx(msgs, np.array([0]), PKT_CNP), msgs)


def test_np_settings_reach_the_frames_and_the_defaults_change_nothing():
    base = cluster()
    assert (wire_context(base).cnp_dscp, wire_context(base).cnp_pcp) == (
        WireContext.cnp_dscp, WireContext.cnp_pcp) == (48, 6)
    np_ = NpConfig(cnp_dscp=40, cnp_802p_prio=5, cnp_udp_sport=0x1234)
    cl = replace(base, fabric=replace(FabricProfile(), np=np_))
    ctx = wire_context(cl)
    assert (ctx.cnp_dscp, ctx.cnp_pcp) == (40, 5)
    _, msgs = _run()
    cnp = Lowering(cl)(_tx(msgs, np.array([0, 1]), PKT_CNP), msgs)
    assert (cnp["udp_sport"] == 0x1234).all()
    f = FrameBuilder(ctx).frames(cnp)[0]
    assert f[15] >> 2 == 40 and f[15] & 3 == ctx.ecn          # TOS byte: DSCP 40, the ECT


def test_inspect_counts_ce_and_cnps_per_qp(tmp_path):
    """A receiver's capture: data of three connections with every other packet marked, and the
    CNPs the receiver sent back. ``inspect`` finds the totals and, per (source, destination,
    DestQP) flow, the CE marks on the data flows and the CNPs on the reverse ones."""
    pk, msgs = _run()
    lw = Lowering(cluster())
    data_ids = np.flatnonzero(msgs["kind"] == KIND_DATA)
    rng = np.random.default_rng(1)
    pick = rng.choice(data_ids, 60)
    tx = _tx(msgs, pick, PKT_DATA, 0)
    tx["flags"] = rng.integers(0, 2, pick.size) * TX_FLAG_CE
    cnp_pick = rng.choice(data_ids, 17)
    rows = np.concatenate([lw(tx, msgs), lw(_tx(msgs, cnp_pick, PKT_CNP), msgs)])
    rows["frame_bytes"] = FrameBuilder(wire_context(cluster())).frame_bytes(rows)
    frames = FrameBuilder(wire_context(cluster())).frames(rows)
    rep = inspect_capture(write(tmp_path / "rx.pcap", frames))
    assert rep.roce["cnp"] == 17 and rep.roce["becn"] == 17
    assert rep.roce["ecn"]["ce"] == int(rows["ce"].sum())
    assert rep.roce["icrc_bad"] == 0 and rep.roce["icrc_ok"] == rows.size
    by_qp = {}
    for fl in rep.flows:
        by_qp[fl["dest_qp"]] = (fl["cnp"], fl["ce"])
    for q in np.unique(rows["dest_qp"]).tolist():
        sel = rows["dest_qp"] == q
        assert by_qp[q] == (int((rows["opcode"][sel] == rdma.CNP).sum()), int(rows["ce"][sel].sum()))
