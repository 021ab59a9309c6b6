"""The frame decoder and pretty-printer: our frames decode back to their rows; errors name offsets."""
from __future__ import annotations

import numpy as np
import pytest

from tokenpcap.errors import DecodeError
from tokenpcap.wire import FrameBuilder, rdma
from tokenpcap.wire.decode import decode_frame, pretty_frame

from .test_builder import CONTEXTS, make_ctx, make_packets


@pytest.mark.parametrize("which", range(len(CONTEXTS)))
def test_decode_recovers_every_row(which):
    rng = np.random.default_rng(40 + which)
    ctx = make_ctx(rng, **CONTEXTS[which])
    p = make_packets(rng, 200)
    link = "infiniband" if ctx.transport == "infiniband" else "ethernet"
    for r, frame in zip(p, FrameBuilder(ctx).frames(p)):
        d = decode_frame(frame, link)
        bth = d["BTH"]
        assert (bth["OpCode"], bth["PSN"], bth["DestQP"], bth["PadCnt"], bth["AckReq"], bth["SE"]) == \
            (r["opcode"], r["psn"], r["dest_qp"], r["pad"], r["ack_req"], r["solicited"])
        assert d.payload_bytes == r["payload_bytes"] and d.icrc_ok
        assert d.vcrc_ok is (True if link == "infiniband" else None)
        if "RETH" in d:
            assert (d["RETH"]["VA"], d["RETH"]["R_Key"], d["RETH"]["DMALen"]) == \
                (r["reth_va"], r["reth_rkey"], r["reth_len"])
        if "AETH" in d:
            assert d["AETH"]["Syndrome"] << 24 | d["AETH"]["MSN"] == r["aeth"]
        if "ImmDt" in d:
            assert d["ImmDt"]["ImmDt"] == r["imm"]
        ext = [h.name for h in rdma.OPCODES[int(r["opcode"])].ext]
        if link == "infiniband":
            expected = ["LRH"] + (["GRH"] if ctx.grh else []) + ["BTH", *ext, "ICRC", "VCRC"]
        else:
            expected = ["Ethernet"] + (["802.1Q"] if ctx.vlan else []) + [f"IPv{ctx.ip_version}", "UDP",
                                                                           "BTH", *ext, "ICRC"]
        assert [h.name for h, _ in d.headers] == expected

def test_pretty_frame(scapy_vectors):
    vecs = {v["name"]: bytes.fromhex(v["hex"]) for v in scapy_vectors["vectors"]}
    text = pretty_frame(vecs["rc_write_first_psn_fffffe"])
    assert text.splitlines()[3].startswith("BTH: OpCode=0x06")
    assert "RETH: VA=0x00007f1234560000 R_Key=0x00abcdef DMALen=520" in text
    assert text.endswith("payload: 256 bytes at offset 70, pad 0\nICRC: 0x64d2dd95 ok")
    assert pretty_frame(vecs["rc_write_last_BAD_ICRC"]).endswith("ICRC: 0x78563412 BAD")
    assert "PFC: Opcode=0x0101 ClassEnableVector=0x0008 Time0=0 Time1=0 Time2=0 Time3=65535" \
        in pretty_frame(vecs["pfc_xoff_prio3"])
    gen = bytes.fromhex(scapy_vectors["native_ib_generated"]["hex"])
    assert pretty_frame(gen, "infiniband").endswith("ICRC: 0xf457a12d ok\nVCRC: 0xfd8d ok")


def test_decode_errors(scapy_vectors):
    frame = bytes.fromhex(scapy_vectors["vectors"][0]["hex"])
    with pytest.raises(DecodeError, match="frame ends at byte 100, its IP length says byte 330"):
        decode_frame(frame[:100])
    gen = bytes.fromhex(scapy_vectors["native_ib_generated"]["hex"])
    with pytest.raises(DecodeError, match=r"BTH at byte 8: need 12 bytes \(to byte 20\), got 7"):
        decode_frame(gen[:15], "infiniband")
    bad_op = bytearray(frame)
    bad_op[42] = 0x20
    with pytest.raises(DecodeError, match=r"BTH.OpCode at byte 42: got 0x20"):
        decode_frame(bytes(bad_op))
    with pytest.raises(DecodeError, match="link: got 'fddi'"):
        decode_frame(frame, "fddi")
    ack = bytes.fromhex(scapy_vectors["vectors"][3]["hex"])
    padded = bytearray(ack)
    padded[43] |= 0x30                    # PadCnt 3 on an ACK without payload
    with pytest.raises(DecodeError, match="more pad than payload"):
        decode_frame(bytes(padded))
