"""The collective algorithms and the rank layout they run on.

The plan (stage 3) reads each algorithm's closed-form bytes per rank; the schedule (stage 5) reads its
hops (which rank sends what to whom, after which step). Modules: :mod:`~tokenpcap.collectives.layout`
(which GPU holds which parallel coordinate, its node and NIC), :mod:`~tokenpcap.collectives.traffic`
(hops and closed forms per algorithm), :mod:`~tokenpcap.collectives.transfers` (a call → its
point-to-point transfers in NCCL-like channels and slices), NCCL's p2p path:
:mod:`~tokenpcap.collectives.pxn` (the PXN proxy and NICs), :mod:`~tokenpcap.collectives.p2p_chunks`
(network chunks, channels per peer), :mod:`~tokenpcap.collectives.window` (``NCCL_STEPS``).
"""
