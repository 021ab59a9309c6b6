"""What a frame builder needs besides the packet rows: transport, QoS marking, addresses, payload.

The lowering (``tokenpcap/config/addresses.py``) builds the per-NIC address arrays from the cluster
profile; everything else has defaults that real RoCE NICs use (DSCP 26 ECT(0) for data, DSCP 48
and PCP 6 for CNPs as mlx5 does, TTL 64, the default partition P_Key 0xFFFF, MigReq set).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from tokenpcap.errors import EncodeError

__all__ = ["WireContext", "PAYLOAD_PATTERN_BYTES"]

#: Length of the payload pattern: the largest payload a packet can carry (PMTU 4096).
PAYLOAD_PATTERN_BYTES = 4096


def _check_int(name: str, value: object, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= int(value) <= hi:
        raise EncodeError(f"WireContext.{name}: got {value!r}, expected an integer {lo}..{hi}")
    return int(value)


def _check_array(name: str, value: object, width: int | None, dtype: type) -> np.ndarray | None:
    if value is None:
        return None
    arr = np.asarray(value)
    shape_ok = arr.ndim == 2 and arr.shape[1] == width if width else arr.ndim == 1
    if not shape_ok or arr.dtype != dtype:
        want = f"(n, {width})" if width else "(n,)"
        raise EncodeError(f"WireContext.{name}: got {arr.dtype} array of shape {arr.shape}, "
                          f"expected {np.dtype(dtype).name} {want}")
    arr = np.ascontiguousarray(arr)
    arr.flags.writeable = False
    return arr


@dataclass(frozen=True, eq=False)
class WireContext:
    """Everything about a frame that is not in a ``PACKET_DTYPE`` row.

    Attributes:
        transport: ``"rocev2"`` (Ethernet/IP/UDP 4791) or ``"infiniband"`` (LRH..VCRC).
        ip_version: 4 or 6 (RoCEv2).
        vlan_id: 802.1Q VID 0..4095, or ``None`` for untagged frames (RoCEv2).
        pcp, dei: 802.1Q priority (default 3, the usual lossless RoCE class) and drop eligibility.
        dscp, ecn: IP DSCP/ECN of data and ACK packets (default 26 and ECT(0) = 2).
        cnp_dscp, cnp_pcp: DSCP and PCP of CNPs (mlx5 defaults 48 and 6).
        ttl: IPv4 TTL, IPv6 hop limit, GRH HopLmt.
        flow_label: IPv6/GRH flow label, or ``None`` to derive it per QP pair as Linux does
            (:func:`tokenpcap.wire.rdma.rocev2_flow_label` of ``src_qp`` and ``dest_qp``).
        p_key: BTH P_Key (default partition, full member: 0xFFFF).
        mig_req: BTH MigReq bit (NICs send 1).
        ib_grh: native IB packets carry a GRH (LNH=3) instead of being local (LNH=2).
        sl, vl: IB service level and virtual lane in the LRH.
        q_key: DETH Q_Key for UD opcodes.
        mac: uint8 ``(n_nics, 6)`` MAC of each NIC (RoCEv2).
        ipv4: uint8 ``(n_nics, 4)`` IPv4 address of each NIC (RoCEv2, ip_version 4).
        ipv6: uint8 ``(n_nics, 16)`` IPv6 address (RoCEv2 v6) or GID (IB with GRH) of each NIC.
        lid: uint16 ``(n_nics,)`` LID of each NIC (IB).
        payload_seed: seed of the payload pattern (bytes depend only on their position in the
            packet's payload, so that the ICRC of a template can be reused).
        payload_pattern: uint8 ``(>= 4096,)`` explicit pattern, overriding the seed.
        ipv6_udp_checksum: compute the UDP checksum over IPv6 (RFC 8200 8.1; NICs do); else 0.
        switch_port_macs: the MAC of each switch port, for the PFC rows a switch port sends
            (``PACKET_DTYPE.nic = -1 - P``): a picklable function of int64 ``(n,)`` global port
            ids returning uint8 ``(n, 6)`` (the lowering passes
            :func:`tokenpcap.config.addresses.switch_port_macs`); ``None``: PFC rows are refused.

    Raises:
        EncodeError: a value out of range or an address array of the wrong dtype/shape.
    """

    transport: str = "rocev2"
    ip_version: int = 4
    vlan_id: int | None = None
    pcp: int = 3
    dei: int = 0
    dscp: int = 26
    ecn: int = 2
    cnp_dscp: int = 48
    cnp_pcp: int = 6
    ttl: int = 64
    flow_label: int | None = None
    p_key: int = 0xFFFF
    mig_req: int = 1
    ib_grh: bool = False
    sl: int = 0
    vl: int = 0
    q_key: int = 0
    mac: np.ndarray | None = None
    ipv4: np.ndarray | None = None
    ipv6: np.ndarray | None = None
    lid: np.ndarray | None = None
    payload_seed: int = 0
    payload_pattern: np.ndarray | None = None
    ipv6_udp_checksum: bool = True
    switch_port_macs: Callable[[np.ndarray], np.ndarray] | None = None
    pattern: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.transport not in ("rocev2", "infiniband"):
            raise EncodeError(f"WireContext.transport: got {self.transport!r}, expected 'rocev2' or 'infiniband'")
        if self.ip_version not in (4, 6):
            raise EncodeError(f"WireContext.ip_version: got {self.ip_version!r}, expected 4 or 6")
        if self.vlan_id is not None:
            _check_int("vlan_id", self.vlan_id, 0, 4095)
        for name, hi in (("pcp", 7), ("dei", 1), ("dscp", 63), ("ecn", 3), ("cnp_dscp", 63),
                         ("cnp_pcp", 7), ("ttl", 255), ("p_key", 0xFFFF), ("mig_req", 1), ("sl", 15),
                         ("vl", 15), ("q_key", 0xFFFFFFFF), ("payload_seed", 2**63 - 1)):
            _check_int(name, getattr(self, name), 0, hi)
        if self.flow_label is not None:
            _check_int("flow_label", self.flow_label, 0, 0xFFFFF)
        for name, width, dtype in (("mac", 6, np.uint8), ("ipv4", 4, np.uint8), ("ipv6", 16, np.uint8),
                                   ("lid", None, np.uint16)):
            object.__setattr__(self, name, _check_array(name, getattr(self, name), width, dtype))
        if self.payload_pattern is not None:
            pat = np.asarray(self.payload_pattern)
            if pat.dtype != np.uint8 or pat.ndim != 1 or pat.size < PAYLOAD_PATTERN_BYTES:
                raise EncodeError(f"WireContext.payload_pattern: got {pat.dtype} {pat.shape}, "
                                  f"expected uint8 ({PAYLOAD_PATTERN_BYTES},) or longer")
            pat = pat.copy()
        else:
            pat = np.random.default_rng(self.payload_seed).integers(
                0, 256, PAYLOAD_PATTERN_BYTES, dtype=np.uint8)
        pat.flags.writeable = False
        object.__setattr__(self, "pattern", pat)
        needed = (("mac", "ipv4" if self.ip_version == 4 else "ipv6") if self.transport == "rocev2"
                  else ("lid", "ipv6") if self.ib_grh else ("lid",))
        for name in needed:
            if getattr(self, name) is None:
                raise EncodeError(f"WireContext.{name}: got None, expected a per-NIC array for "
                                  f"transport {self.transport!r}" + (" with IPv6/GRH" if name == "ipv6" else ""))

    @property
    def vlan(self) -> bool:
        """Frames carry an 802.1Q tag."""
        return self.vlan_id is not None and self.transport == "rocev2"

    @property
    def grh(self) -> bool:
        """Native IB frames carry a GRH."""
        return self.ib_grh and self.transport == "infiniband"

    @property
    def traffic_class(self) -> int:
        """IPv6 traffic class / GRH TClass of data packets: ``dscp << 2 | ecn``."""
        return (self.dscp << 2) | self.ecn

    @property
    def n_nics(self) -> int:
        """Number of NICs the address arrays describe."""
        arrays = [a for a in (self.mac, self.ipv4, self.ipv6, self.lid) if a is not None]
        return min(len(a) for a in arrays)
