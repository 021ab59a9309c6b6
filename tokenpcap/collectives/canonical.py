"""A call's group up to a shift of its ranks: the *canonical* group whose transfers, moved by the
shift, are the call's own, so that what is computed from a call's transfers (the schedule's
templates, :mod:`tokenpcap.schedule.flatbuild`; the plan's bytes on the wire,
:mod:`tokenpcap.plan.wirebytes`) is computed once per canonical group.

The transfers of a call depend on its collective, its group (ring order), ``message_bytes`` and
``elem_bytes`` (:func:`tokenpcap.collectives.transfers.transfers`). The algorithms see the ranks
only through their positions in the group and their nodes (``rank // gpus_per_node``, compared
and kept in order of appearance: :func:`tokenpcap.collectives.hops.nodes_in_order`), and a
rank's NIC is ``node · nics_per_node + local · nics_per_node // gpus_per_node``
(:meth:`tokenpcap.collectives.layout.RankLayout.nic_array`); NCCL's rails
(:mod:`tokenpcap.collectives.rails`) and its PXN proxies (:mod:`tokenpcap.collectives.pxn`)
choose among the NICs of the group's own GPUs and of their local indices. So:

* moving every rank of the group by ``k · gpus_per_node`` (whole nodes) moves every transfer's
  ranks by the same amount and its NICs by ``k · nics_per_node``, and changes nothing else;
* when every rank of the group has the same local index ``l`` and ``nics_per_node ==
  gpus_per_node`` (a rank's NIC is then ``node · nics_per_node + local``, a translation of its
  local index), moving every rank by ``-l`` keeps each on its node, and the NIC of every rank
  and of every GPU a transfer touches (the group's own GPUs, one per node) moves by ``-l`` too:
  the data-parallel groups of the ``tp`` ranks of one node are one canonical group. Where the
  NICs do not translate (``nics_per_node != gpus_per_node``: two GPUs share a NIC, or a GPU has
  two) or the group mixes local indices, only the shift by whole nodes is taken.

``tests/schedule/test_flatbuild.py`` checks both against the transfers of the moved group
itself, column by column, on layouts where the second rule applies and where it must not.
"""
from __future__ import annotations

__all__ = ["canonical_shape", "nic_shift"]


def canonical_shape(collective: str, group: tuple[int, ...], message_bytes: int, elem_bytes: int,
                    gpus_per_node: int, nics_per_node: int) -> tuple[tuple, int]:
    """``((collective, canonical group, message_bytes, elem_bytes), shift)``: the group moved
    down by ``shift`` ranks, the multiple of ``gpus_per_node`` that puts its lowest rank on node
    0, plus, when every rank of the group has the same local index and ``nics_per_node ==
    gpus_per_node``, that local index (module docstring). A call's NICs lie
    :func:`nic_shift` of ``shift`` above its canonical group's."""
    shift = min(group) // gpus_per_node * gpus_per_node
    if nics_per_node == gpus_per_node:
        local = group[0] % gpus_per_node
        if local and all(r % gpus_per_node == local for r in group):
            shift += local
    canon = tuple(r - shift for r in group) if shift else group
    return (collective, canon, message_bytes, elem_bytes), shift


def nic_shift(shift, gpus_per_node: int, nics_per_node: int):
    """NICs a call's transfers lie above its canonical group's when its ranks lie ``shift``
    above (:func:`canonical_shape`; an int or an int64 array, the result alike): ``shift //
    gpus_per_node`` whole nodes of NICs plus the local part ``shift % gpus_per_node``, which is
    non-zero only when ``nics_per_node == gpus_per_node`` (a rank's NIC is then ``node ·
    nics_per_node + local``)."""
    return shift // gpus_per_node * nics_per_node + shift % gpus_per_node
