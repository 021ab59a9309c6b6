"""Stage 3, the plan: every collective call of one training iteration and the bytes it moves.

Modules: :mod:`~tokenpcap.plan.feasibility` (Megatron-LM's rules for combining profiles),
:mod:`~tokenpcap.plan.calls` (the calls, per group instance), :mod:`~tokenpcap.plan.calltable`
(the calls as columns, and the call objects made from them), :mod:`~tokenpcap.plan.build`
(:func:`build_plan`), :mod:`~tokenpcap.plan.rows` (the per-phase rows),
:mod:`~tokenpcap.plan.report` (the plan's JSON report), :mod:`~tokenpcap.plan.sizing` (the expected size of
a capture, from the plan alone).
"""
