"""Stage 5, the schedule: the programs every rank runs, their compute time, and the NIC engine that times them.

Modules: :mod:`~tokenpcap.schedule.compute` (FLOPs → ns), :mod:`~tokenpcap.schedule.program`
(1F1B, blocking TP, DP buckets), :mod:`~tokenpcap.schedule.runner` (:class:`Schedule`),
:mod:`~tokenpcap.schedule.limits` (the work of a run, checked before simulating), and
:mod:`tokenpcap.schedule.engine` (the NICs).
"""
