"""The switches of a queued fabric as flat arrays: ports, links, routes and ECMP seeds.

:func:`build_topology` cables the cluster's NICs as ``cluster.fabric.topology`` says (sizes from
:func:`tokenpcap.config.fabric.fabric_shape`); the queued-fabric kernel reads only the int and
float arrays of :class:`Topology`. Numpy only: built once per run, in Python.

Order (the same as ``tokenpcap export --to hpcc`` writes, ``export/hpcc.py`` ``_topology``, so
both simulators read one description): switches are the leaves (unit-major, then rail; pod-major
for ``clos3``), then the spines (pod-major), then the cores. Links are the NIC links in NIC order
(NIC ``g = node * nics_per_node + i``), then every leaf to every spine of its pod (leaf-major),
then every spine to every core (spine-major). A switch's ports are numbered in the order its
links appear (as ns-3 numbers a node's devices in the order ``third.cc`` installs the links:
our port ``k`` is ns-3 interface ``k + 1``, interface 0 being the loopback), and the ports of a
switch are contiguous in the global port ids.

With ``planes > 1`` the whole of it is copied per plane (:mod:`tokenpcap.schedule.engine.
topology_planes`): plane ``k``'s switches ``p<k>-<name>`` after plane ``k - 1``'s, its links after
plane ``k - 1``'s in the same order, every NIC link at the NIC's rate / ``planes``.

Routes are up-down (valley-free) shortest paths: at switch ``s``, towards the leaf ``L`` of the
destination NIC, the candidates are the down ports whose peer has ``L`` below it when ``L`` is
below ``s``, else every up port; at ``L`` itself the egress is the destination's ``nic_port``.
Candidates are in port order, i.e. in the order of the peer switches (ns-3 ``third.cc``
``CalculateRoute`` lists next hops in its breadth-first order over each node's neighbours).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tokenpcap.config.fabric import FabricShape, fabric_shape
from tokenpcap.config.profiles import ClusterProfile
from tokenpcap.schedule.engine.topology_planes import nic_plane_ports, replicate

__all__ = ["Topology", "build_topology", "hpcc_topology_lines", "switch_seeds", "splitmix32"]

_I64 = np.int64


@dataclass(frozen=True)
class Topology:
    """Switches, ports and routes (module docstring). ``S`` switches, ``P`` switch ports, ``N``
    NICs, ``R`` route candidates; all arrays int64 unless said otherwise.

    Attributes:
        switch_names: ``(S,)`` ``"switch0"`` | ``"leaf<u>-<r>"`` (unit u, rail r; r 0 for
            leaf-spine) | ``"spine<p>-<i>"`` (pod p) | ``"core<i>"``.
        switch_tier: ``(S,)`` 1 leaf/ToR, 2 spine, 3 core.
        port_switch, port_number: ``(P,)`` owner switch, and the port's number on it (0..).
        port_peer_nic: ``(P,)`` NIC at the other end of the port's link, or -1.
        port_peer_port: ``(P,)`` switch port at the other end, or -1.
        port_gbps: float64 ``(P,)`` link rate (Gb/s); port_prop_ns: ``(P,)`` its propagation (ns).
        nic_port: ``(N,)`` the switch port each NIC's link enters.
        route_ptr: ``(S*S + 1,)``: the candidate egress ports at switch s towards leaf L are
            ``route_port[route_ptr[s*S+L] : route_ptr[s*S+L+1]]``; empty when s is L.
        route_port: ``(R,)``.
        switch_seed: uint32 ``(S,)`` per-switch ECMP seed (:func:`switch_seeds`).
        link_ends: ``(links, 2)`` the ns-3 node ids of every link in file order (hosts 0..N-1,
            switches N..N+S-1), for :func:`hpcc_topology_lines`.
        switch_plane: ``(S,)`` the plane of each switch (0 with one plane).
        plane_nic_port: ``(planes, N)`` the switch port NIC ``g``'s port in plane ``k`` enters
            (row 0 is ``nic_port``; :mod:`tokenpcap.schedule.engine.topology_planes`).
    """

    switch_names: tuple[str, ...]
    switch_tier: np.ndarray
    port_switch: np.ndarray
    port_number: np.ndarray
    port_peer_nic: np.ndarray
    port_peer_port: np.ndarray
    port_gbps: np.ndarray
    port_prop_ns: np.ndarray
    nic_port: np.ndarray
    route_ptr: np.ndarray
    route_port: np.ndarray
    switch_seed: np.ndarray
    link_ends: np.ndarray
    link_gbps: np.ndarray
    link_prop_ns: np.ndarray
    switch_plane: np.ndarray
    plane_nic_port: np.ndarray

    @property
    def switches(self) -> int:
        """``S``."""
        return len(self.switch_names)

    @property
    def planes(self) -> int:
        """Planes (1: none)."""
        return int(self.plane_nic_port.shape[0])

    def leaf_of(self, nic) -> np.ndarray:  # type: ignore[no-untyped-def]
        """The leaf switch of NIC(s) ``nic``: ``port_switch[nic_port[nic]]`` (int64)."""
        return self.port_switch[self.nic_port[np.asarray(nic, _I64)]]

    def candidates(self, s: int, leaf: int) -> np.ndarray:
        """Egress ports of switch ``s`` towards leaf ``leaf`` (empty at the leaf itself)."""
        k = int(s) * self.switches + int(leaf)
        return self.route_port[self.route_ptr[k]:self.route_ptr[k + 1]]


def splitmix32(x: np.ndarray) -> np.ndarray:
    """The low 32 bits of the SplitMix64 finalizer (Steele, Lea, Flood 2014) of uint64 ``x``."""
    x = np.asarray(x, np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    x = x ^ (x >> np.uint64(31))
    return (x & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def switch_seeds(hash_name: str, seed: int, nics: int, switches: int) -> np.ndarray:
    """Per-switch ECMP seeds (uint32 ``(switches,)``). ``hpcc-murmur3``: the switch's ns-3 node
    id plus ``seed`` (HPCC ns-3 ``SwitchNode::SwitchNode``: ``m_ecmpSeed = m_id``; hosts are
    nodes 0..nics-1, then the switches in our order), so seed 0 is ns-3's. Otherwise
    :func:`splitmix32` of ``seed << 32 | switch index``."""
    s = np.arange(switches, dtype=np.uint64)
    if hash_name == "hpcc-murmur3":
        return ((s + np.uint64(nics) + np.uint64(seed)) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    return splitmix32((np.uint64(seed) << np.uint64(32)) | s)


def _switches(sh: FabricShape, nics: int) -> tuple[list[str], list[int], list[int]]:
    """Names, tiers and pods of the switches, in order."""
    if sh.kind == "single-switch":
        return ["switch0"], [1], [0]
    per_unit = nics if sh.kind in ("rail-optimized", "clos3") else 1
    names, tiers, pods = [], [], []
    for p in range(sh.pods):
        for j in range(sh.leaves):
            u = p * (sh.leaves // per_unit) + j // per_unit
            names.append(f"leaf{u}-{j % per_unit}")
            tiers.append(1)
            pods.append(p)
    for p in range(sh.pods):
        for i in range(sh.spines):
            names.append(f"spine{p}-{i}")
            tiers.append(2)
            pods.append(p)
    for i in range(sh.cores):
        names.append(f"core{i}")
        tiers.append(3)
        pods.append(-1)
    return names, tiers, pods


def build_topology(cluster: ClusterProfile) -> Topology:
    """The topology of ``cluster.fabric.topology`` for the cluster's NICs (module docstring).

    Raises:
        ProfileError: the cluster cannot be built with it (``fabric.topology.<key>`` named, see
            :func:`tokenpcap.config.fabric.fabric_shape`).
    """
    f, nics = cluster.fabric, int(cluster.nics_per_node)
    t = f.topology
    sh = fabric_shape(int(cluster.nodes), nics, float(cluster.link_gbps), t,
                      where=lambda k: cluster.where(f"fabric.topology.{k}"))
    n_nic = int(cluster.nodes) * nics
    names, tiers, _ = _switches(sh, nics)
    leaves_total = sh.pods * sh.leaves if sh.kind != "single-switch" else 1
    spine0, core0 = leaves_total, leaves_total + sh.pods * sh.spines
    g = np.arange(n_nic, dtype=_I64)
    node, rail = g // nics, g % nics
    if sh.kind == "single-switch":
        leaf = np.zeros(n_nic, _I64)
    elif sh.kind == "leaf-spine":
        leaf = node // sh.nodes_per_leaf
    else:                                               # rail-optimized, clos3: unit-major
        leaf = (node // sh.nodes_per_leaf) * nics + rail
    prop = t.propagation_ns
    # links as (a, b) with a = -1 - nic for a NIC end, else a switch index
    a_end = [-1 - g]
    b_end = [leaf]
    rate = [np.full(n_nic, sh.nic_gbps)]
    delay = [np.full(n_nic, prop[0], _I64)]
    if sh.kind != "single-switch":
        lf = np.arange(leaves_total, dtype=_I64)
        sp = spine0 + (lf // sh.leaves)[:, None] * sh.spines + np.arange(sh.spines, dtype=_I64)
        a_end.append(np.repeat(lf, sh.spines))
        b_end.append(sp.reshape(-1))
        rate.append(np.full(leaves_total * sh.spines, sh.uplink_gbps))
        delay.append(np.full(leaves_total * sh.spines, prop[1], _I64))
        if sh.cores:
            spn = spine0 + np.arange(sh.pods * sh.spines, dtype=_I64)
            a_end.append(np.repeat(spn, sh.cores))
            b_end.append(np.tile(core0 + np.arange(sh.cores, dtype=_I64), spn.size))
            rate.append(np.full(spn.size * sh.cores, sh.core_gbps))
            delay.append(np.full(spn.size * sh.cores, prop[2], _I64))
    a, b = np.concatenate(a_end), np.concatenate(b_end)
    l_rate, l_delay = np.concatenate(rate).astype(np.float64), np.concatenate(delay)
    names, tiers, a, b, l_rate, l_delay, plane = replicate(names, tiers, a, b, l_rate, l_delay,
                                                           int(t.planes))
    return _assemble(cluster, names, tiers, a, b, l_rate, l_delay, n_nic, plane)


def _assemble(cluster: ClusterProfile, names: list[str], tiers: list[int], a: np.ndarray,
              b: np.ndarray, l_rate: np.ndarray, l_delay: np.ndarray, n_nic: int,
              switch_plane: np.ndarray) -> Topology:
    """Ports from the link list (a switch's ports in link order), then the routes."""
    n_sw, n_link = len(names), a.size
    # endpoints in link order: (link, side) -> switch (or -1 for a NIC end)
    ends = np.stack([a, b], axis=1).reshape(-1)                 # (2L,) link-major
    is_sw = ends >= 0
    ep = np.flatnonzero(is_sw)                                  # switch endpoints, link order
    owner = ends[ep]
    order = np.argsort(owner, kind="stable")                    # contiguous per switch
    n_port = ep.size
    port_of_ep = np.empty(n_port, _I64)
    port_of_ep[order] = np.arange(n_port, dtype=_I64)
    port_switch = owner[order]
    first = np.searchsorted(port_switch, np.arange(n_sw, dtype=_I64))
    port_number = np.arange(n_port, dtype=_I64) - first[port_switch]
    glob = np.full(2 * n_link, -1, _I64)                        # endpoint -> global port id
    glob[ep] = port_of_ep
    other = np.arange(2 * n_link, dtype=_I64) ^ 1               # the other end of the link
    link = np.arange(2 * n_link, dtype=_I64) // 2
    peer_port = np.full(n_port, -1, _I64)
    peer_nic = np.full(n_port, -1, _I64)
    peer_port[glob[ep]] = glob[other[ep]]
    o = ends[other[ep]]
    peer_nic[glob[ep]] = np.where(o < 0, -1 - o, -1)
    gbps = np.empty(n_port, np.float64)
    prop = np.empty(n_port, _I64)
    gbps[glob[ep]] = l_rate[link[ep]]
    prop[glob[ep]] = l_delay[link[ep]]
    plane_nic_port = nic_plane_ports(port_switch, peer_nic, switch_plane, n_nic)
    tier = np.asarray(tiers, _I64)
    ptr, rp = _routes(tier, port_switch, peer_port)
    f = cluster.fabric.ecmp
    node_id = np.where(np.stack([a, b], 1) < 0, -1 - np.stack([a, b], 1),
                       n_nic + np.stack([a, b], 1))
    return Topology(tuple(names), tier, port_switch, port_number, peer_nic, peer_port, gbps,
                    prop, plane_nic_port[0].copy(), ptr, rp,
                    switch_seeds(f.hash, f.seed, n_nic, n_sw), node_id.astype(_I64), l_rate,
                    l_delay, switch_plane, plane_nic_port)


def _routes(tier: np.ndarray, port_switch: np.ndarray, peer_port: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """Up-down candidates per (switch, leaf): ``(route_ptr (S*S+1,), route_port (R,))``."""
    n_sw = tier.size
    peer_sw = np.where(peer_port >= 0, port_switch[np.maximum(peer_port, 0)], -1)
    below = np.zeros((n_sw, n_sw), bool)                        # below[s, L]: leaf L under s
    leaves = np.flatnonzero(tier == 1)
    below[leaves, leaves] = True
    for level in (2, 3):
        for s in np.flatnonzero(tier == level):
            ps = np.flatnonzero((port_switch == s) & (peer_sw >= 0))
            down = peer_sw[ps][tier[peer_sw[ps]] < level]
            if down.size:
                below[s] = below[down].any(axis=0)
    counts = np.zeros(n_sw * n_sw, _I64)
    chunks: list[np.ndarray] = []
    is_leaf = tier == 1
    for s in range(n_sw):
        ps = np.flatnonzero((port_switch == s) & (peer_sw >= 0))
        if ps.size == 0:
            continue
        q = peer_sw[ps]
        up = tier[q] > tier[s]
        # cand[p, L]: port p of s is a candidate towards leaf L
        cand = np.where(up[:, None], ~below[s][None, :], below[q])
        cand &= is_leaf[None, :]
        lp = np.nonzero(cand.T)                                 # (leaf, port) sorted by leaf
        counts[s * n_sw: (s + 1) * n_sw] = np.bincount(lp[0], minlength=n_sw)
        chunks.append(ps[lp[1]])
    ptr = np.zeros(n_sw * n_sw + 1, _I64)
    np.cumsum(counts, out=ptr[1:])
    rp = np.concatenate(chunks) if chunks else np.zeros(0, _I64)
    return ptr, rp.astype(_I64)


def _rate_text(gbps: float) -> str:
    """ns-3 ``DataRate`` text as ``export/hpcc.py`` writes it: ``400Gbps``, else ``Mbps``."""
    return f"{int(gbps)}Gbps" if float(gbps).is_integer() else f"{int(round(gbps * 1000))}Mbps"


def hpcc_topology_lines(topology: Topology) -> list[str]:
    """HPCC ns-3's topology file (``third.cc`` reads ``node_num switch_num link_num``, the
    switch node ids, then ``src dst rate delay error_rate`` per link), one ``\\n``-ended string
    per line: hosts are ns-3 nodes 0..N-1 (our NIC index), switches N..N+S-1 in our order."""
    n_nic, n_sw = topology.nic_port.size, topology.switches
    lines = [f"{n_nic + n_sw} {n_sw} {topology.link_ends.shape[0]}\n",
             " ".join(str(n_nic + s) for s in range(n_sw)) + "\n"]
    for (x, y), r, d in zip(topology.link_ends.tolist(), topology.link_gbps.tolist(),
                            topology.link_prop_ns.tolist()):
        lines.append(f"{x} {y} {_rate_text(r)} {d}ns 0\n")
    return lines
