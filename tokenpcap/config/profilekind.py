"""Which kind of profile a file is, where a command takes a scenario: a model or cluster
profile handed to ``plan``, ``generate`` and the others is named as such instead of having its
first key called unknown."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenpcap.errors import ProfileError

__all__ = ["refuse_other_profile_kind", "profile_kind"]

# The other kinds of profile a user may hand to a command that takes a scenario, each known by
# required keys of its own that a scenario never has at its top level (model_profile._MODEL_SPEC,
# cluster_profile._CLUSTER_SPEC).
_OTHER_PROFILE_KINDS = (
    ("a model profile", "model", frozenset({"layers", "hidden_size", "attention_heads"})),
    ("a cluster profile", "cluster", frozenset({"nodes", "gpus_per_node", "nics_per_node"})),
)


def refuse_other_profile_kind(path: Path, data: Any) -> None:
    """Name a model or cluster profile given where a scenario is expected, instead of calling
    its first key unknown.

    Raises:
        ProfileError: ``data`` holds a model's or a cluster's required keys and none of a
            scenario's (``model``, ``cluster``).
    """
    if not isinstance(data, dict) or "model" in data or "cluster" in data:
        return
    for kind, key, marks in _OTHER_PROFILE_KINDS:
        if marks <= data.keys():
            raise ProfileError(
                path, "<document>", kind,
                f"a scenario (corpus, model, cluster, parallelism, training: see "
                f"profiles/scenarios/); a scenario names this file under its {key!r} key")


def profile_kind(data: Any) -> str | None:
    """Which kind of profile a parsed YAML document is: ``"a scenario"`` (its required
    ``corpus`` or ``workload`` beside ``cluster``), ``"a model profile"``, ``"a cluster
    profile"`` (their own required keys, as :func:`refuse_other_profile_kind` knows them), or
    None for anything else (a text that happens to parse as YAML)."""
    if not isinstance(data, dict):
        return None
    if "cluster" in data and ("corpus" in data or "workload" in data):
        return "a scenario"
    for kind, _, marks in _OTHER_PROFILE_KINDS:
        if marks <= data.keys():
            return kind
    return None
