"""Stage 3 (part): the ring-attention traffic of context parallelism, per layer and microbatch.

Megatron-LM ``--context-parallel-size cp`` with ``--cp-comm-type p2p`` runs every attention
layer through Transformer Engine's ``AttnFuncWithCPAndKVP2P``
(``transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py``; in older
releases ``transformer_engine/pytorch/attention.py``). Each CP rank holds ``s/cp`` tokens of
every sample (two chunks of ``s/(2*cp)``, for load balancing of causal attention), and with them
its K and V: ``[b, s/cp, kv_heads/tp, head_dim]`` each in the activation dtype (``kv_heads/tp``
at least one head: KV heads are replicated when ``tp > kv_heads``). Per rank, layer and
microbatch::

    KV = 2 * b * (s/cp) * max(1, kv_heads/tp) * head_dim * B        (K and V, B bytes/element)

The rank sends one concatenated buffer per step to one neighbour of the CP ring (its position in
the CP group, ``cp_global_ranks``) and receives the same amount from the other:

* **forward** (``forward``: ``for i in range(cp_size + 1)``, a send while ``i < cp_size - 1``):
  ``cp - 1`` steps; step ``i`` sends to ring position ``rank + 1`` the K,V buffer it received at
  step ``i - 1`` (step 0: its own, ``p2p_comm_buffers[0] = cat(k, v)``), ``KV`` bytes each:
  ``(cp - 1) * KV`` per rank.
* **backward** (``backward``: ``for i in range(cp_size)``, every step sends; ``send_dst`` is
  ring position ``rank - 1``): the buffers are ``(2, *kv.shape)`` — K,V and dK,dV; step 0 sends
  ``p2p_comm_buffers[0][0]`` (K,V: ``KV`` bytes), steps ``1 .. cp-2`` the whole buffer (K,V plus
  the partial dK,dV accumulated so far: ``2*KV``), step ``cp-1`` only ``[1]`` (dK,dV: ``KV``):
  ``KV + 2*(cp-2)*KV + KV = 2*(cp-1)*KV`` per rank (with ``cp = 2``: K,V then dK,dV).
* with ``recompute: full`` the recomputed forward of every layer makes its forward sends again
  (``recompute=True``, phase forward).

(The FP8 path of the backward replaces the last step by an AllToAll of dK,dV; not modelled: the
activation dtype here is ``training.precision``.)

Every step is one :class:`~tokenpcap.plan.calls.CollectiveCall` ``SendRecv`` per ring edge
``(src, dst)`` with ``dim`` ``cp``, ``op`` ``cp_kv_<i>`` (forward step ``i``) or
``cp_kv_grad_<i>`` (backward step ``i``). The schedule runs a rank's steps of one layer
double-buffered around the layer's partial attentions, step ``i + 1``'s transfer started when
step ``i``'s compute starts and waited for when it ends: :mod:`tokenpcap.schedule.program`.
"""
from __future__ import annotations

from collections.abc import Callable

from tokenpcap.collectives.layout import RankLayout
from tokenpcap.config.profiles import DTYPE_BYTES, Scenario

__all__ = ["kv_bytes", "ring_steps", "cp_families", "FORWARD_OP", "BACKWARD_OP"]

#: ``op`` of forward step ``i`` / backward step ``i`` (``.format(i)``).
FORWARD_OP = "cp_kv_{}"
BACKWARD_OP = "cp_kv_grad_{}"


def kv_bytes(s: Scenario) -> int:
    """Bytes of one CP rank's K and V of one layer and microbatch: ``2 * b * (s/cp) *
    max(1, kv_heads/tp) * head_dim * B`` (module docstring); 0 without context parallelism."""
    p, m, t = s.parallelism, s.model, s.training
    if p.cp == 1:
        return 0
    head_dim = m.hidden_size // m.attention_heads
    heads = max(1, m.kv_heads // p.tp)
    return 2 * t.micro_batch_size * (m.seq_length // p.cp) * heads * head_dim * \
        DTYPE_BYTES[t.precision]


def ring_steps(cp: int, kv: int) -> tuple[list[int], list[int]]:
    """Bytes one rank sends at each step of one layer's ring attention: ``(forward, backward)``,
    lists of ``cp - 1`` and ``cp`` sizes (module docstring); empty lists for ``cp == 1``.

    >>> ring_steps(4, 10)
    ([10, 10, 10], [10, 20, 20, 10])
    """
    if cp <= 1:
        return [], []
    return [kv] * (cp - 1), [kv] + [2 * kv] * (cp - 2) + [kv]


def cp_families(s: Scenario, layout: RankLayout, stage: int, layers: range, n_mb: int,
                fam: Callable, inst: Callable) -> None:
    """Add the ring-attention call families of pipeline ``stage`` through ``fam`` (the
    :func:`tokenpcap.plan.calls.build_families` family builder; ``inst(layer, microbatch,
    recompute, op)`` makes one instance). Forward steps go to ring position ``+1``, backward
    steps to ``-1``; steps of equal size share one family per direction and phase."""
    p, t = s.parallelism, s.training
    fwd_sizes, bwd_sizes = ring_steps(p.cp, kv_bytes(s))
    if not fwd_sizes:
        return
    e = DTYPE_BYTES[t.precision]
    groups = layout.stage_groups("cp", stage)
    ahead = [(g[k], g[(k + 1) % p.cp]) for g in groups for k in range(p.cp)]
    back = [(g[k], g[(k - 1) % p.cp]) for g in groups for k in range(p.cp)]
    full = t.recompute == "full"
    fwd = [inst(L, j, False, FORWARD_OP.format(i)) for j in range(n_mb) for L in layers
           for i in range(len(fwd_sizes))]
    if full:
        fwd += [inst(L, j, True, FORWARD_OP.format(i)) for j in range(n_mb)
                for L in reversed(layers) for i in range(len(fwd_sizes))]
    fam("cp", "forward", "SendRecv", fwd_sizes[0], e, stage, ahead, fwd)
    for size in sorted(set(bwd_sizes)):
        steps = [i for i, x in enumerate(bwd_sizes) if x == size]
        fam("cp", "backward", "SendRecv", size, e, stage, back,
            [inst(L, j, False, BACKWARD_OP.format(i)) for j in range(n_mb)
             for L in reversed(layers) for i in steps])
