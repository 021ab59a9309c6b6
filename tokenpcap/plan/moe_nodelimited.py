"""Stage 3 (part): DeepEP's node-limited expert dispatch (``moe.token_dispatcher: deepep``).

DeepSeek-V3 (arXiv 2412.19437) routes each token to at most ``router_group_topk`` = 4 nodes
(Sec. 2.1.2, *node-limited routing*: the experts form ``router_num_groups`` groups, one per
node, and a token's ``top_k`` experts come from its best 4 groups; Megatron-core
``moe_utils.group_limited_topk``) and sends it (Sec. 3.2.2) "to the GPU with the same in-node
index on [each] target node" over IB, once per node, after which it is "forwarded via NVLink to
the specific GPUs that host [its] target experts"; the combine is the reverse (NVLink inside the
node, then once per node back over IB). DeepEP's ``Buffer.dispatch`` / ``Buffer.combine``
(internode kernels) implement it, and Megatron-core's ``MoEFlexTokenDispatcher`` calls them.

**What is modelled.** Per MoE layer and microbatch, an EP rank with ``T`` tokens (``rows /
top_k`` of :func:`tokenpcap.plan.calls.build_families`) on an EP group spanning ``N`` nodes of
``G`` EP ranks each (``N = router_num_groups``, checked by
:func:`tokenpcap.config.feasibility.check_feasible`):

* **IB, once per node**: a token goes to ``M' = min(router_group_topk, N)`` nodes; the rank
  sends ``T * M' / N`` rows to each of the ``N`` ranks of its *rail* (the EP ranks of its local
  index on every node of the group; the row for its own node stays), an AllToAll over the rail
  of ``S = T * M' * row_bytes``: per rank ``T * M' * (N - 1) / N * row_bytes`` on the NIC,
  NIC ``i`` to NIC ``i`` (same rail: NCCL's PXN routes it from the sender's own NIC,
  :mod:`tokenpcap.collectives.pxn`, with no NVLink copy).
* **NVLink, to the experts' GPUs**: a rank holds ``T * M'`` tokens bound for its node (``T * M'
  / N`` from each rail peer, itself included: its own tokens that chose its node). A token
  brings ``c`` of its experts to a chosen node, and the rank forwards it once to every other GPU
  of the node that hosts one of them (DeepEP forwards per GPU, not per expert): with ``X``
  experts per node and ``x`` per GPU, GPU ``d`` hosts one of ``c`` experts with probability
  ``q(c) = 1 - C(X - x, c) / C(X, c)`` (the ``c`` experts a uniform choice among the node's
  ``X``). Per ordered pair of GPUs of a node: ``R = round(T * M' * q)`` rows (half up), an
  AllToAll over the node's EP ranks of ``S = G * R * row_bytes``; per rank ``(G - 1) * R *
  row_bytes`` on NVLink.
* The combine sends the experts' outputs back the same two ways in reverse order, one row per
  (token, GPU) and per (token, node) (DeepEP reduces on the forwarding GPU before IB);
  backward the gradients mirror them: the combine's gradient goes as the dispatch, the
  dispatch's as the combine.
* Row bytes as :func:`tokenpcap.plan.moe.ep_row_bytes`: the dispatch and the combine's gradient
  in ``moe.dispatch_dtype`` (FP8 with 1x128 fp32 scales), the combine and the dispatch's
  gradient in the training precision; the routing weights (DeepEP's ``topk_weights``, fp32
  ``[tokens, top_k]``) travel with each (token, node) and (token, GPU) row the same ways, as
  calls of their own (``dispatch_probs`` forward, ``dispatch_probs_grad`` backward).

**Assumptions** (stated, not measured): the router's choice is balanced: a token's ``M'``
nodes are uniform among the ``N`` (so ``(N - 1) / N`` of them are remote), each chosen group
receives at least one of its experts (``M' = min(router_group_topk, N)`` distinct nodes: an
upper bound that DeepSeek-V3's group score, the sum of a group's two best affinities, makes
the common case; DeepEP's buffers are sized for it), ``top_k`` experts split over the ``M'``
nodes as evenly as possible (``q`` is the mean of ``q(c)`` over them: DeepSeek-V3 ``c = 2``,
``X = 32``, ``x = 4``: ``q = 59/248``), and the ``c`` experts on a node uniform among its
``X``. Not modelled: DeepEP's token indices and per-token metadata, its count exchange (the
``moe_counts`` AllGather stays), the overlap of IB and NVLink (the IB call completes before
the forwarding call starts), SM partitioning.
"""
from __future__ import annotations

from fractions import Fraction
from math import comb
from typing import Sequence

from tokenpcap.collectives.hops import CallShape, nodes_in_order
from tokenpcap.collectives.traffic import per_rank_bytes
from tokenpcap.config.types import DTYPE_BYTES
from tokenpcap.plan.moe import ep_row_bytes, moe_insts, register_token_dispatcher

__all__ = ["nodes_per_token", "forward_probability", "forwarded_rows", "rail_and_node_groups",
           "moe_deepep_families", "deepep_bytes_per_layer", "ROUTING_WEIGHT_BYTES"]

#: Bytes of one routing weight: DeepEP's ``topk_weights`` are fp32 (``deep_ep.Buffer.dispatch``).
ROUTING_WEIGHT_BYTES = 4
#: Suffixes of a node-limited operation's two calls: across nodes (IB), inside a node (NVLink).
IB, NVL = "_ib", "_nvl"


def nodes_per_token(group_topk: int, nodes: int) -> int:
    """``M'``: the nodes a token's experts are on, ``min(group_topk, nodes)`` (module
    docstring: every chosen group receives one of its experts)."""
    return min(group_topk, nodes)


def forward_probability(experts_per_node: int, experts_per_gpu: int, top_k: int,
                        nodes: int) -> Fraction:
    """``q``: the probability that a given GPU of a chosen node hosts one of the token's
    experts there, exact; the ``top_k`` experts split over ``nodes`` chosen nodes as evenly
    as possible (``top_k % nodes`` of them one more), on each uniform among its
    ``experts_per_node`` experts in GPUs of ``experts_per_gpu``: the mean over the nodes of
    ``1 - C(X - x, c) / C(X, c)`` (hypergeometric: none of the ``c`` among the GPU's ``x``)."""
    base, extra = divmod(top_k, nodes)
    total = Fraction(0)
    for i in range(nodes):
        c = base + (1 if i < extra else 0)
        total += 1 - Fraction(comb(experts_per_node - experts_per_gpu, c),
                              comb(experts_per_node, c))
    return total / nodes


def forwarded_rows(tokens: int, nodes_token: int, q: Fraction) -> int:
    """``R = round(T * M' * q)``, half up: the rows one GPU forwards to each other GPU of its
    node."""
    x = tokens * nodes_token * q
    return (2 * x.numerator + x.denominator) // (2 * x.denominator)


def rail_and_node_groups(epg: Sequence[tuple[int, ...]], layout
                         ) -> tuple[list[tuple[int, ...]], list[tuple[int, ...]]]:  # type: ignore[no-untyped-def]
    """The rails (one rank per node, the same position among the group's ranks of each node:
    the same local GPU index) and the nodes (the group's ranks on one node) of the EP groups
    ``epg``, each in group order; groups of one rank are left out (they send nothing)."""
    rails, nodes = [], []
    for g in epg:
        per_node = nodes_in_order(tuple(g), layout)
        nodes += [tuple(n) for n in per_node if len(n) > 1]
        rails += [tuple(r) for r in zip(*per_node) if len(r) > 1]
    return rails, nodes


@register_token_dispatcher("deepep")
def moe_deepep_families(fam, moe, st: int, epg, layout, layers: Sequence[int],  # type: ignore[no-untyped-def]
                        n_mb: int, full: bool, rows: int, h: int, e_act: int,
                        precision: str) -> None:
    """The calls of DeepEP's dispatch and combine (module docstring) per MoE layer and
    microbatch of stage ``st``: for each operation its IB call over the rails (op
    ``<name>_ib``) and its NVLink call over the nodes (``<name>_nvl``) of the EP groups ``epg``
    (same arguments as :func:`tokenpcap.plan.moe.moe_ep_families`)."""
    if not epg:
        return
    tokens = rows // moe.top_k
    per_node = nodes_in_order(tuple(epg[0]), layout)
    n_nodes, g = len(per_node), len(per_node[0])
    ep = len(epg[0])
    m = nodes_per_token(moe.router_group_topk, n_nodes)
    q = forward_probability(moe.experts // n_nodes, moe.experts // ep, moe.top_k, m)
    r = forwarded_rows(tokens, m, q)
    rails, nodes = rail_and_node_groups(epg, layout)
    out_dtype = moe.dispatch_dtype or precision
    out = (ep_row_bytes(h, out_dtype), DTYPE_BYTES[out_dtype])
    back = (ep_row_bytes(h, precision), e_act)
    weights = (moe.top_k * ROUTING_WEIGHT_BYTES, ROUTING_WEIGHT_BYTES)
    # (phase, op, (row bytes, element bytes), towards the experts)
    ops = (("forward", "dispatch", out, True), ("forward", "dispatch_probs", weights, True),
           ("forward", "combine", back, False),
           ("backward", "combine_grad", out, True), ("backward", "dispatch_grad", back, False),
           ("backward", "dispatch_probs_grad", weights, False))
    for phase, op, (row, e), towards in ops:
        legs = ((IB, rails, tokens * m * row), (NVL, nodes, g * r * row))
        for suffix, groups, size in (legs if towards else legs[::-1]):
            name = (op + suffix,)
            fwd, bwd = (name, ()) if phase == "forward" else ((), name)
            fam("ep", phase, "AllToAll", size, e, st, groups,
                moe_insts(layers, n_mb, full and phase == "forward", fwd, bwd))


def deepep_bytes_per_layer(families, algorithm: str, layout) -> dict[str, dict[str, int]]:  # type: ignore[no-untyped-def]
    """Per operation of :func:`moe_deepep_families` (``dispatch``, ``combine``, ...), the bytes
    the busiest rank sends for it in one MoE layer and microbatch, on its NIC (the IB call) and
    on NVLink (the forwarding call), summed from the plan's ``families`` (their scaled sizes) by
    :func:`tokenpcap.collectives.traffic.per_rank_bytes`: ``{op: {"nic_bytes_per_rank": ...,
    "nvlink_bytes_per_rank": ...}}``; ``{}`` without node-limited calls."""
    out: dict[str, dict[str, int]] = {}
    for f in families:
        if f.dim != "ep" or not f.insts:
            continue
        op = f.insts[0].op
        base = op[:-len(IB)] if op.endswith(IB) else op[:-len(NVL)] if op.endswith(NVL) else None
        if base is None:
            continue
        rb = per_rank_bytes(CallShape(f.collective, f.groups[0], f.message_bytes, f.elem_bytes),
                            algorithm, layout)
        d = out.setdefault(base, {"nic_bytes_per_rank": 0, "nvlink_bytes_per_rank": 0})
        d["nic_bytes_per_rank"] = max(d["nic_bytes_per_rank"], int(rb.nic_bytes.max()))
        d["nvlink_bytes_per_rank"] = max(d["nvlink_bytes_per_rank"], int(rb.nvlink_bytes.max()))
    return out
