"""The collective algorithms, one module each, registered by name in :data:`ALGORITHMS`.

Adding one: a module here with an ``@register`` subclass of :class:`Algorithm`, and one import
line below. The profile check, the plan, the transfers and the tests read the registry.
"""
from __future__ import annotations

from tokenpcap.collectives.algorithms.base import (ALGORITHMS, Algorithm, effective_algorithm,
                                                   register, selectable_algorithms)

# One import line per algorithm module (registration order = the order names are listed in).
from tokenpcap.collectives.algorithms import ring  # noqa: E402,F401
from tokenpcap.collectives.algorithms import tree  # noqa: E402,F401
from tokenpcap.collectives.algorithms import hierarchical  # noqa: E402,F401
from tokenpcap.collectives.algorithms import direct  # noqa: E402,F401
from tokenpcap.collectives.algorithms import p2p  # noqa: E402,F401

__all__ = ["ALGORITHMS", "Algorithm", "effective_algorithm", "register", "selectable_algorithms"]
