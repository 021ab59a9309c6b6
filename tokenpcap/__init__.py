"""tokenpcap: follow a token from words to bits on the wire.

Text corpus + LLM training setup → analytic per-phase traffic → RoCEv2/InfiniBand packets → pcap.
The pipeline's stages, in order (each module imports only earlier ones):

1. :func:`tokenize` (``tokens``)       corpus → token ids
2. ``model``                         parameter counts, activation and gradient sizes
3. :func:`build_plan` (``plan``)       every collective call of an iteration, bytes per rank
4. ``collectives``                   calls → point-to-point transfers (channels, slices)
5. :class:`Schedule` (``schedule``)    compute + 1F1B on the NIC :class:`Engine` (``nic``), integer ns
6. ``lower``                         packets: opcodes, PSNs, QPNs, ports
7. :func:`generate` (``generate``)     frames (``wire``) streamed into pcap/pcapng/ERF (``pcap``)
8. :func:`inspect_captures` (``analysis``), ``plot``, ``readdress``, ``export``

The public names below are imported lazily (PEP 562), so ``import tokenpcap`` stays cheap.
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"

from tokenpcap.errors import (  # noqa: E402
    BadMagic,
    CaptureError,
    CorpusError,
    DecodeError,
    EncodeError,
    InfeasiblePlanError,
    InputError,
    OutputError,
    ProfileError,
    TokenizerError,
    TokenpcapError,
    TruncatedFile,
)

#: public name → module that defines it (loaded on first access)
_LAZY = {
    "load_model": "tokenpcap.config.profiles",
    "load_cluster": "tokenpcap.config.profiles",
    "load_scenario": "tokenpcap.config.profiles",
    "default_scenario_path": "tokenpcap.config.profiles",
    "Scenario": "tokenpcap.config.profiles",
    "tokenize": "tokenpcap.tokens",
    "TokenizedCorpus": "tokenpcap.tokens",
    "parameter_count": "tokenpcap.model",
    "RankLayout": "tokenpcap.collectives.layout",
    "build_plan": "tokenpcap.plan.build",
    "Plan": "tokenpcap.plan.build",
    "CollectiveCall": "tokenpcap.plan.build",
    "Schedule": "tokenpcap.schedule.runner",
    "Engine": "tokenpcap.schedule.engine.nic",
    "lower_messages": "tokenpcap.lower",
    "generate": "tokenpcap.generate.run",
    "GenerateOptions": "tokenpcap.generate.run",
    "Selection": "tokenpcap.generate.run",
    "FrameBuilder": "tokenpcap.wire",
    "WireContext": "tokenpcap.wire",
    "build_frame": "tokenpcap.wire",
    "PcapWriter": "tokenpcap.pcap",
    "PcapngWriter": "tokenpcap.pcap",
    "ErfWriter": "tokenpcap.pcap",
    "open_capture": "tokenpcap.pcap",
    "inspect_capture": "tokenpcap.analysis.inspect",
    "inspect_captures": "tokenpcap.analysis.inspect",
    "readdress": "tokenpcap.analysis.readdress",
    "export_scenario": "tokenpcap.export.core",
}

__all__ = [
    "__version__",
    "TokenpcapError",
    "InputError",
    "ProfileError",
    "CorpusError",
    "TokenizerError",
    "InfeasiblePlanError",
    "EncodeError",
    "DecodeError",
    "CaptureError",
    "BadMagic",
    "TruncatedFile",
    "OutputError",
    *_LAZY,
]


def __getattr__(name: str):
    """Load a public name from its stage module on first access.

    Raises:
        AttributeError: ``name`` is not part of the public surface.
    """
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tokenpcap' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
