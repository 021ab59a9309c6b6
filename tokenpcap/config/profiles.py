"""Profiles: YAML files turned into frozen, typed objects. The only place units are converted.

Three kinds of profile (model, cluster, scenario; every key is in docs/profiles.md); a scenario
names a corpus, a tokenizer, a model, a cluster and the parallelism/training/collective settings,
with paths relative to the scenario file, or a cluster and a microbenchmark ``workload:``
(:mod:`tokenpcap.config.workload`). Units are in key names (``link_gbps``, ``pmtu_bytes``,
``latency_ns``).

This module loads scenarios (their tokenizer, parallelism, training, collectives and generation
mappings, whose keys :mod:`tokenpcap.config.scenario_spec` lists) and is the one import the
other stages use: it re-exports the model loader (:mod:`tokenpcap.config.model_profile`), the
cluster loader (:mod:`tokenpcap.config.cluster_profile`), the upper bounds
(:mod:`tokenpcap.config.bounds`), the types (:mod:`tokenpcap.config.types`) and
:func:`check_feasible` (:mod:`tokenpcap.config.feasibility`).

Every loader raises :class:`tokenpcap.errors.ProfileError` (file, dotted key, value got, value
expected) for unknown keys, missing keys, wrong types and out-of-range values, and
:class:`tokenpcap.errors.InfeasiblePlanError` for valid values that cannot be combined.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from tokenpcap.config import overrides as ov
from tokenpcap.config import yamlcheck as yc
from tokenpcap.config.bounds import MAX_ITERATIONS, MAX_SEED
from tokenpcap.config.cluster_profile import cluster_from, load_cluster
from tokenpcap.config.model_profile import load_model, model_from
from tokenpcap.config.profilekind import refuse_other_profile_kind
from tokenpcap.config.scenario_spec import (COLLECTIVES_SPEC, GENERATION_SPEC,
                                            PARALLELISM_SPEC, PUBLISHED_SPEC, SCENARIO_SPEC,
                                            TOKENIZER_SPEC, TRAINING_ONLY, TRAINING_SPEC,
                                            WORKLOAD_SCENARIO_SPEC, default_channels)
from tokenpcap.config.types import (DTYPE_BYTES, ClusterProfile, CollectivesConfig,
                                     EcmpConfig, FabricProfile, GenerationConfig, GpuProfile,
                                     MlaProfile, ModelProfile, MoeProfile, NetworkProfile,
                                     Parallelism, PfcConfig, Published, Scenario, SwitchConfig,
                                     TokenizerSpec, TopologyConfig, Training)
from tokenpcap.config.workload import Workload, workload_from
from tokenpcap.errors import ProfileError, TokenizerError

__all__ = [
    "MoeProfile",
    "MlaProfile",
    "ModelProfile",
    "GpuProfile",
    "NetworkProfile",
    "ClusterProfile",
    "FabricProfile",
    "TopologyConfig",
    "SwitchConfig",
    "PfcConfig",
    "EcmpConfig",
    "TokenizerSpec",
    "Parallelism",
    "Training",
    "CollectivesConfig",
    "GenerationConfig",
    "Scenario",
    "Workload",
    "DTYPE_BYTES",
    "MAX_ITERATIONS",
    "MAX_SEED",
    "load_model",
    "load_cluster",
    "load_scenario",
    "default_scenario_path",
    "default_channels",
    "parse_tokenizer",
    "check_feasible",
]


#: The bundled profiles: in an installed wheel under ``tokenpcap/_bundled/`` (setup.py copies
#: the repository's ``profiles/`` and ``samples/`` there), in a checkout or an editable install
#: the repository's own ``profiles/``.
_BUNDLED_PROFILES = Path(__file__).resolve().parents[1] / "_bundled" / "profiles"
_PROFILES = _BUNDLED_PROFILES if _BUNDLED_PROFILES.is_dir() else \
    Path(__file__).resolve().parents[2] / "profiles"

def default_scenario_path() -> Path:
    """The bundled default scenario: ``profiles/scenarios/dante.yaml`` of the repository (of
    ``tokenpcap/_bundled/`` in a non-editable install)."""
    return _PROFILES / "scenarios" / "dante.yaml"


def parse_tokenizer(text: str, vocab_size: int = 32000, base_dir: Path | None = None) -> TokenizerSpec:
    """Parse ``utf8``, ``bpe``, ``tiktoken:NAME`` or ``hf:PATH`` into a :class:`TokenizerSpec`.

    A relative ``hf:`` path is taken relative to ``base_dir`` when given.

    Raises:
        TokenizerError: an unknown kind, or ``tiktoken:``/``hf:`` without a name.
    """
    kind, _, name = text.partition(":")
    if "\0" in text:
        raise TokenizerError(f"tokenizer: got {text!r}, expected a name without NUL characters")
    if kind in ("utf8", "bpe") and not name:
        return TokenizerSpec(kind=kind, vocab_size=vocab_size)
    if kind in ("tiktoken", "hf") and name:
        if kind == "hf" and base_dir is not None and not Path(name).is_absolute():
            name = str(base_dir / name)
        return TokenizerSpec(kind=kind, vocab_size=vocab_size, name=name)
    raise TokenizerError(
        f"tokenizer: got {text!r}, expected one of 'utf8', 'bpe', 'tiktoken:NAME', 'hf:PATH'"
    )


def load_scenario(path: str | Path, overrides: Mapping[str, Any] | None = None) -> Scenario:
    """Load a scenario: corpus, tokenizer, model, cluster, parallelism, training, collectives.

    ``overrides``: ``{dotted key: value}`` set in the raw mappings before they are checked
    (``--set``, :mod:`tokenpcap.config.overrides`; keys under ``model.``/``cluster.`` change the
    profile file the scenario names); None: those of the running command
    (:func:`tokenpcap.config.overrides.active`). An error about an overridden key names
    ``--set`` in place of the file.

    ``corpus``, ``model`` and ``cluster`` are paths relative to the scenario file (``model`` and
    ``cluster`` may also be inline mappings). ``tokenizer`` is a mapping ``{kind, vocab_size,
    name}`` or a string as :func:`parse_tokenizer` reads it. The corpus file is not opened here
    (stage 1 reads it). After loading, :func:`check_feasible` checks the combination. A file
    with a ``workload:`` key is a microbenchmark (:mod:`tokenpcap.config.workload`): a cluster,
    a workload, collectives and generation, and none of the training keys.

    Raises:
        ProfileError: any key of the scenario or of the files it names is unknown, missing, of
            the wrong type or out of range (the error names the file that holds it).
        InfeasiblePlanError: the values cannot be combined (see :func:`check_feasible`).
    """
    path = Path(path)
    data = yc.load_yaml(path)
    ovr = ov.active() if overrides is None else dict(overrides)
    if not ovr or not isinstance(data, dict):     # a file that is no mapping: its own error
        return _load_scenario(path, data, {k: {} for k in ov.PROFILE_KEYS})
    data = ov.apply(data, {k: v for k, v in ovr.items() if k in ov.PROFILE_KEYS})
    own, sub = ov.split_profile(ovr, data)
    data = ov.apply(data, own)
    try:
        return _load_scenario(path, data, sub)
    except ProfileError as err:
        if err.file == _error_file(path):
            raise ov.relabel(err, own) from None
        raise


def _error_file(path: Path) -> str:
    """The file name a :class:`ProfileError` about ``path`` carries."""
    return ProfileError(path, "", None, "").file


def _load_scenario(path: Path, data: Any, sub: dict[str, dict[str, Any]]) -> Scenario:
    """:func:`load_scenario` of the raw (overridden) ``data``; ``sub``: the overrides of the
    model and cluster files."""
    if isinstance(data, dict) and "workload" in data:
        return _load_workload_scenario(path, data, sub)
    refuse_other_profile_kind(path, data)
    v = yc.read_mapping(path, "", data, SCENARIO_SPEC)
    base = path.resolve().parent
    model = _sub_profile(path, base, "model", v["model"], model_from, sub["model"])
    cluster = _sub_profile(path, base, "cluster", v["cluster"], cluster_from, sub["cluster"])
    tok = v["tokenizer"]
    if isinstance(tok, str):
        yc.path_text(path, "tokenizer", tok)        # hf:PATH names a file
        try:
            tokenizer = parse_tokenizer(tok, base_dir=base)
        except TokenizerError:
            raise ProfileError(path, "tokenizer", tok,
                               "'utf8', 'bpe', 'tiktoken:NAME', 'hf:PATH' or a mapping") from None
    else:
        t = yc.read_mapping(path, "tokenizer", tok, TOKENIZER_SPEC)
        if t["kind"] in ("tiktoken", "hf") and t["name"] is None:
            raise ProfileError(path, "tokenizer.name", "missing",
                               f"an encoding name or path for kind {t['kind']!r}")
        if t["name"] is not None:
            yc.path_text(path, "tokenizer.name", t["name"])
        if t["kind"] == "hf" and not Path(t["name"]).is_absolute():
            t["name"] = str(base / t["name"])
        tokenizer = TokenizerSpec(**t)
    if v["name"] is None:                   # the file's stem names the outputs: same rule
        yc.file_name(path, "name", path.stem)
    scenario = Scenario(
        name=v["name"] if v["name"] is not None else path.stem,
        corpus=(base / v["corpus"]).resolve(),
        tokenizer=tokenizer,
        model=model,
        cluster=cluster,
        parallelism=Parallelism(**yc.read_mapping(path, "parallelism", v["parallelism"],
                                                  PARALLELISM_SPEC)),
        training=Training(**yc.read_mapping(path, "training", v["training"], TRAINING_SPEC)),
        collectives=_collectives(path, v["collectives"], cluster),
        generation=GenerationConfig(**yc.read_mapping(path, "generation", v["generation"],
                                                      GENERATION_SPEC)),
        path=path,
        description=v["description"],
        published=(None if v["published"] is None else
                   Published(**yc.read_mapping(path, "published", v["published"],
                                               PUBLISHED_SPEC))),
    )
    check_feasible(scenario)
    return scenario


def _load_workload_scenario(path: Path, data: dict, sub: dict[str, dict[str, Any]]) -> Scenario:
    """A scenario with a ``workload:`` mapping (:mod:`tokenpcap.config.workload`): cluster,
    workload, collectives, generation; a key of a training scenario is refused in one line."""
    for k in TRAINING_ONLY:
        if k in data:
            raise ProfileError(path, k, data[k], "no corpus, tokenizer, model, parallelism or "
                               "training in a workload scenario (it has `workload:` instead)")
    v = yc.read_mapping(path, "", data, WORKLOAD_SCENARIO_SPEC)
    cluster = _sub_profile(path, path.resolve().parent, "cluster", v["cluster"], cluster_from,
                           sub["cluster"])
    world = cluster.nodes * cluster.gpus_per_node
    if v["name"] is None:
        yc.file_name(path, "name", path.stem)
    return Scenario(
        name=v["name"] if v["name"] is not None else path.stem, corpus=None,
        tokenizer=TokenizerSpec(), model=None, cluster=cluster,
        parallelism=Parallelism(dp=world), training=Training(),
        collectives=_collectives(path, v["collectives"], cluster),
        generation=GenerationConfig(**yc.read_mapping(path, "generation", v["generation"],
                                                      GENERATION_SPEC)),
        path=path, description=v["description"],
        workload=workload_from(path, "workload", v["workload"], world))


def _collectives(path: Path, data: Any, cluster: ClusterProfile) -> CollectivesConfig:
    c = yc.read_mapping(path, "collectives", data, COLLECTIVES_SPEC)
    c["channels_by_size"] = c["channels"] in ("auto", "nccl")
    if c["channels_by_size"]:
        c["channels"] = default_channels(cluster.nics_per_node)
    return CollectivesConfig(**c)


def _sub_profile(file: Path, base: Path, key: str, value: Any, build,  # type: ignore[no-untyped-def]
                 overrides: Mapping[str, Any] | None = None):
    """A model or cluster given by path (loaded from its file: errors in it name that file and
    its own keys) or inline (errors name the scenario file and ``key.<...>``). A referenced file
    that cannot be read as YAML is reported at the scenario's key, naming both files.
    ``overrides``: keys of the file (relative to it) set before it is checked; an error about
    one names ``--set key.<...>``."""
    if isinstance(value, str):
        sub = base / yc.path_text(file, key, value)
        try:
            data = yc.load_yaml(sub)
        except ProfileError as err:
            if err.key != "<file>":
                raise
            got = err.got if isinstance(err.got, str) and err.got == "missing" else repr(err.got)
            raise ProfileError(file, key, yc.Raw(f"{value!r}, whose file {sub}: {got}"),
                               err.expected) from None
        if not overrides or not isinstance(data, dict):
            return build(sub, "", data, sub)
        data = ov.apply(data, overrides, key)
        try:
            return build(sub, "", data, sub)
        except ProfileError as e:
            if e.file == _error_file(sub):
                raise ov.relabel(e, overrides, key) from None
            raise
    if isinstance(value, dict):
        return build(file, key, value, None)
    raise ProfileError(file, key, value, "a path to a YAML profile or an inline mapping")


from tokenpcap.config.feasibility import check_feasible  # noqa: E402  (re-exported; needs the types above)
