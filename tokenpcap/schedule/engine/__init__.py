"""The NIC engine: RDMA messages in, time-ordered transmitted frames out.

The compiled engine: :mod:`~tokenpcap.schedule.engine.kernel` (the numba event loop over programs,
calls, transfers and NIC ports), :mod:`~tokenpcap.schedule.engine.state` (its arrays, built from a
run's flat arrays), :mod:`~tokenpcap.schedule.engine.frames` (packets, frame lengths and layer-1
times of a message); with a queued fabric :mod:`~tokenpcap.schedule.engine.fabric` and its parts
(switches, queues, PFC), built by :mod:`~tokenpcap.schedule.engine.fabstate` from
:mod:`~tokenpcap.schedule.engine.topology`, read back by :mod:`~tokenpcap.schedule.engine.fablog`. The discrete-event Python engine it reproduces, used by
:mod:`tokenpcap.schedule.reference` and :mod:`tokenpcap.lower`'s independent-message driver:
:mod:`~tokenpcap.schedule.engine.nic` (:class:`Engine`, the event loop),
:mod:`~tokenpcap.schedule.engine.port` (one NIC's transmit arbiter and ``TX_DTYPE``),
:mod:`~tokenpcap.schedule.engine.table` (the message table).
"""
