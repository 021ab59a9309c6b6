"""IEEE 802.1Qbb priority flow control frames, a batch at a time: build and decode.

A PFC frame is a MAC control frame (IEEE 802.3 clause 31, Annex 31D; IEEE 802.1Qbb-2011 36.1.3):

====== ===== ================================================================
bytes  field value
====== ===== ================================================================
0-5    dst   01:80:c2:00:00:01 (the MAC control group address, never forwarded)
6-11   src   the MAC of the port that sends it
12-13  type  0x8808 (MAC control)
14-15  op    0x0101 (priority-based flow control)
16-17  cev   class-enable vector: bit p set = time[p] is valid for priority p
18-33  time  eight 16-bit pause times in quanta of 512 bit times (0 = XON: resume at once)
34-59  pad   zeros up to the 60-byte minimum frame (64 with the FCS, which captures omit)
====== ===== ================================================================

The frame is never VLAN-tagged (802.1Qbb 36.1.3.1: MAC control frames are link-local) and
exists only on Ethernet: InfiniBand uses credit-based link-level flow control (IBTA vol.1 7.9)
and has no pause frame. The layout is the declaration of :data:`tokenpcap.wire.headers.ETHERNET`
and :data:`tokenpcap.wire.headers.PFC`; :func:`tokenpcap.wire.frame.build_pfc_frame` is the
scalar reference the batch builder is tested against.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tokenpcap.errors import DecodeError, EncodeError
from tokenpcap.wire import headers as H
from tokenpcap.wire.context import WireContext
from tokenpcap.wire.placement import copy_pieces
from tokenpcap.wire.rdma import ETH_MIN_FRAME_BYTES

__all__ = ["PFC_FRAME_BYTES", "PFC_PRIORITIES", "PfcFields", "build_pfc_frames", "decode_pfc_frames",
           "pause_times", "check_pfc_rows", "fill_pfc_rows"]

#: Bytes of a PFC frame without FCS (the Ethernet minimum, 64 with the FCS).
PFC_FRAME_BYTES = ETH_MIN_FRAME_BYTES
#: Priorities a class-enable vector names (802.1Q PCP 0..7).
PFC_PRIORITIES = 8
_BODY = H.ETHERNET.size                  # the PFC body starts after the 14-byte Ethernet header
_OPCODE = H.PFC.defaults()["Opcode"]


@dataclass(frozen=True, eq=False)
class PfcFields:
    """The fields of a batch of PFC frames.

    Attributes:
        src_mac: uint8 ``(n, 6)`` source MAC.
        class_enable: uint16 ``(n,)`` class-enable vector (0..255 for eight priorities).
        pause_quanta: uint16 ``(n, 8)``, time[p] of every frame (quanta of 512 bit times).
    """

    src_mac: np.ndarray
    class_enable: np.ndarray
    pause_quanta: np.ndarray


def pause_times(class_enable, quanta) -> np.ndarray:
    """The eight pause times of frames that pause (or resume) every enabled class alike: uint16
    ``(n, 8)``, ``time[p] = quanta`` where bit p of ``class_enable`` is set, else 0.

    Args:
        class_enable: int ``(n,)``, 0..255; quanta: int ``(n,)``, 0..65535.

    Raises:
        EncodeError: a value out of range (names the row).
    """
    cev = np.asarray(class_enable, dtype=np.int64).reshape(-1)
    q = np.asarray(quanta, dtype=np.int64).reshape(-1)
    if cev.shape != q.shape:
        raise EncodeError(f"pfc quanta: got shape {q.shape}, expected {cev.shape} like class_enable")
    _check_range("PFC.ClassEnableVector", cev, 0xFF, "eight priorities")
    _check_range("PFC.Time", q, 0xFFFF, "16 bits")
    enabled = (cev[:, None] >> np.arange(PFC_PRIORITIES)) & 1
    return (enabled * q[:, None]).astype(np.uint16)


def _check_range(name: str, v: np.ndarray, hi: int, what: str) -> None:
    bad = (v < 0) | (v > hi)
    if bad.any():
        i = int(np.flatnonzero(bad.reshape(len(v), -1).any(axis=1))[0])
        raise EncodeError(f"pfc[{i}] {name}: got {v[i].tolist()}, expected 0..{hi} ({what})")


def build_pfc_frames(src_mac: np.ndarray, class_enable, pause_quanta) -> np.ndarray:
    """PFC frames of a batch, one row each: uint8 ``(n, 60)`` (module docstring), no FCS.

    Args:
        src_mac: uint8 ``(n, 6)`` the sending ports' MACs.
        class_enable: int ``(n,)``, 0..255.
        pause_quanta: int ``(n, 8)`` pause time of each priority, or ``(n,)`` one time for every
            enabled priority (:func:`pause_times`), 0..65535.

    Raises:
        EncodeError: a MAC array not ``(n, 6)`` uint8, a vector or time out of range.
    """
    mac = np.asarray(src_mac)
    n = len(mac)
    if mac.dtype != np.uint8 or mac.shape != (n, 6):
        raise EncodeError(f"pfc src_mac: got {mac.dtype} {mac.shape}, expected uint8 (n, 6)")
    cev = np.asarray(class_enable, dtype=np.int64).reshape(-1)
    q = np.asarray(pause_quanta, dtype=np.int64)
    if cev.shape != (n,):
        raise EncodeError(f"pfc class_enable: got shape {cev.shape}, expected ({n},)")
    if q.ndim == 1:
        times = pause_times(cev, q)
    else:
        if q.shape != (n, PFC_PRIORITIES):
            raise EncodeError(f"pfc pause_quanta: got shape {q.shape}, expected ({n},) or ({n}, 8)")
        _check_range("PFC.ClassEnableVector", cev, 0xFF, "eight priorities")
        _check_range("PFC.Time", q, 0xFFFF, "16 bits")
        times = q
    out = np.zeros((n, PFC_FRAME_BYTES), np.uint8)
    out[:, :_BODY] = H.ETHERNET.template({"Destination": H.PFC_DST_MAC,
                                          "EtherType": H.ETHERTYPE_MAC_CONTROL})
    out[:, 6:12] = mac
    out[:, _BODY:_BODY + H.PFC.size] = H.PFC.template()
    H.PFC.put(out, _BODY, "ClassEnableVector", cev.astype(np.uint64))
    for p in range(PFC_PRIORITIES):
        H.PFC.put(out, _BODY, f"Time{p}", times[:, p].astype(np.uint64))
    return out


def decode_pfc_frames(frames: np.ndarray) -> PfcFields:
    """The fields of PFC frames given as rows: uint8 ``(n, >= 34)`` (the bytes of each frame).

    Raises:
        DecodeError: a row that is not a PFC frame (destination, EtherType or opcode), naming
            the row and the field.
    """
    f = np.asarray(frames)
    if f.dtype != np.uint8 or f.ndim != 2 or f.shape[1] < _BODY + H.PFC.size:
        raise DecodeError(f"pfc frames: got {f.dtype} {f.shape}, expected uint8 (n, >= {_BODY + H.PFC.size})")
    for hdr, col, name, want in ((H.ETHERNET, 0, "Destination", H.PFC_DST_MAC),
                                 (H.ETHERNET, 0, "EtherType", H.ETHERTYPE_MAC_CONTROL),
                                 (H.PFC, _BODY, "Opcode", _OPCODE)):
        v = hdr.get(f, col, name)
        bad = v != want
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise DecodeError(f"pfc frame {i}: {hdr.name}.{name}: got 0x{int(v[i]):x}, expected 0x{want:x}")
    times = np.stack([H.PFC.get(f, _BODY, f"Time{p}") for p in range(PFC_PRIORITIES)], axis=1)
    return PfcFields(src_mac=np.ascontiguousarray(f[:, 6:12]),
                     class_enable=H.PFC.get(f, _BODY, "ClassEnableVector").astype(np.uint16),
                     pause_quanta=times.astype(np.uint16))


def check_pfc_rows(ctx: WireContext, packets: np.ndarray, pfc: np.ndarray, first: int) -> None:
    """The PFC rows (mask ``pfc``) of a ``PACKET_DTYPE`` batch are buildable under ``ctx``
    (:data:`tokenpcap.records.PACKET_DTYPE`: ``nic = -1 - P``, ``msg`` quanta, ``imm`` vector).

    Raises:
        EncodeError: transport not RoCEv2 (InfiniBand has credit-based link flow control, IBTA
            vol.1 7.9, and no pause frame), no switch port MAC rule, or a field out of range
            (names the row, counted from ``first``).
    """
    rows = np.flatnonzero(pfc)
    if rows.size == 0:
        return
    i = first + int(rows[0])
    if ctx.transport != "rocev2":
        raise EncodeError(f"packets[{i}].opcode: got OPCODE_PFC under transport {ctx.transport!r}, "
                          f"expected 'rocev2' (InfiniBand has credit-based link flow control, IBTA "
                          f"vol.1 7.9, and no PFC frame)")
    if ctx.switch_port_macs is None:
        raise EncodeError(f"packets[{i}]: a PFC row, but WireContext.switch_port_macs is None "
                          f"(expected the switch port MAC rule)")
    ps = packets[rows]
    for name, bad, expected in (
            ("nic", ps["nic"] >= 0, "-1 - P for a PFC row (P the sending switch port)"),
            ("msg", (ps["msg"] < 0) | (ps["msg"] > 0xFFFF), "0..65535 (PFC pause quanta)"),
            ("imm", ps["imm"] > 0xFF, "0..255 (PFC class-enable vector)")):
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            raise EncodeError(f"packets[{first + int(rows[j])}].{name}: got {ps[name][j]}, expected {expected}")


def fill_pfc_rows(ctx: WireContext, packets: np.ndarray, out: np.ndarray, offsets: np.ndarray,
                  caplen: np.ndarray) -> None:
    """The first ``caplen[i]`` bytes of PFC row ``i``'s frame at ``out[offsets[i]:]``, as
    :meth:`tokenpcap.wire.builder.FrameBuilder.fill` does for the other rows (rows checked by
    :func:`check_pfc_rows`)."""
    mac = np.asarray(ctx.switch_port_macs(-1 - packets["nic"].astype(np.int64)), dtype=np.uint8)
    copy_pieces(out, offsets, caplen, None, None, build_pfc_frames(mac, packets["imm"], packets["msg"]))
