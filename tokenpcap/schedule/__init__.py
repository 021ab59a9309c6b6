"""Stage 5, the schedule: the programs every rank runs, their compute time, and the NIC engine that times them.

Modules: :mod:`~tokenpcap.schedule.compute` (FLOPs → ns), :mod:`~tokenpcap.schedule.program`
(1F1B, blocking TP, DP buckets), :mod:`~tokenpcap.schedule.flat` (a run's calls, programs and
transfers as arrays, built with :mod:`~tokenpcap.schedule.flatbuild`),
:mod:`~tokenpcap.schedule.runner` (:class:`Schedule`, on the compiled engine; the rows it holds:
:mod:`~tokenpcap.schedule.results`), :mod:`~tokenpcap.schedule.reference` (the same schedule on the discrete-event Python
engine, kept to check the compiled one), :mod:`~tokenpcap.schedule.limits` (the work of a run,
checked before simulating), and :mod:`tokenpcap.schedule.engine` (the NICs).
"""
