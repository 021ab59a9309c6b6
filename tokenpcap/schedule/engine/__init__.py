"""The NIC engine: RDMA messages in, time-ordered transmitted frames out.

Modules: :mod:`~tokenpcap.schedule.engine.nic` (:class:`Engine`, the event loop),
:mod:`~tokenpcap.schedule.engine.port` (one NIC's transmit arbiter),
:mod:`~tokenpcap.schedule.engine.table` (the message table).
"""
