"""tokenpcap: follow a token from words to bits on the wire.

Text corpus + LLM training setup → analytic per-phase traffic → RoCEv2/InfiniBand packets → pcap.
See DESIGN.md for the pipeline (stages 1–8).
"""
from __future__ import annotations

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
]
