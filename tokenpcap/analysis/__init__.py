"""Stage 8, analysis: read any capture back and say what is in it and whether it is right.

``inspect`` (:mod:`~tokenpcap.analysis.inspect` and its parts), ``plot``
(:mod:`~tokenpcap.analysis.plot`) and ``readdress`` (:mod:`~tokenpcap.analysis.readdress`).
"""
