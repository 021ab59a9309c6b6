"""Profiles: YAML files turned into frozen, typed objects. The only place units are converted.

Three kinds of profile (model, cluster, scenario; every key is in docs/profiles.md); a scenario
names a corpus, a tokenizer, a model, a cluster and the parallelism/training/collective settings,
with paths relative to the scenario file, or a cluster and a microbenchmark ``workload:``
(:mod:`tokenpcap.config.workload`). Units are in key names (``link_gbps``, ``pmtu_bytes``,
``latency_ns``).

This module loads scenarios (their tokenizer, parallelism, training, collectives and generation
mappings) and is the one import the other stages use: it re-exports the model loader
(:mod:`tokenpcap.config.model_profile`), the cluster loader
(:mod:`tokenpcap.config.cluster_profile`), the upper bounds (:mod:`tokenpcap.config.bounds`),
the types (:mod:`tokenpcap.config.types`) and :func:`check_feasible`
(:mod:`tokenpcap.config.feasibility`).

Every loader raises :class:`tokenpcap.errors.ProfileError` (file, dotted key, value got, value
expected) for unknown keys, missing keys, wrong types and out-of-range values, and
:class:`tokenpcap.errors.InfeasiblePlanError` for valid values that cannot be combined.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from tokenpcap.collectives.algorithms import selectable_algorithms
from tokenpcap.collectives.protocols import PROTOCOL_IDS
from tokenpcap.collectives.tuning import ALGOS, parse_list
from tokenpcap.config import overrides as ov
from tokenpcap.config import yamlcheck as yc
from tokenpcap.config.bounds import (MAX_ACK_EVERY_PACKETS, MAX_BUCKET_SIZE, MAX_CHANNELS,
                                     MAX_GLOBAL_BATCH_SIZE, MAX_ITERATIONS, MFU_RANGE,
                                     SLICE_BYTES_RANGE, P2P_NET_CHUNKSIZE_RANGE,
                                     MAX_LAYERS, MAX_MICRO_BATCH_SIZE, MAX_SEED, MAX_VOCAB_SIZE)
from tokenpcap.config.cluster_profile import cluster_from, load_cluster
from tokenpcap.config.model_profile import load_model, model_from
from tokenpcap.config.profilekind import refuse_other_profile_kind
from tokenpcap.config.types import (DTYPE_BYTES, ClusterProfile, CollectivesConfig,
                                     EcmpConfig, FabricProfile, GenerationConfig, GpuProfile,
                                     MlaProfile, ModelProfile, MoeProfile, NetworkProfile,
                                     Parallelism, PfcConfig, Published, Scenario, SwitchConfig,
                                     TokenizerSpec, TopologyConfig, Training)
from tokenpcap.config.workload import Workload, workload_from
from tokenpcap.errors import InputError, ProfileError, TokenizerError

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

def default_channels(nics_per_node: int) -> int:
    """Channels NCCL runs a ring or tree collective on, on nodes of ``nics_per_node`` NICs
    (the default of ``collectives.channels``): ``min(64, 2 * nics_per_node)``, and at most
    :data:`~tokenpcap.config.bounds.MAX_CHANNELS` (32: what the QP numbering holds).

    NCCL's graph search builds one ring channel per NIC, each entering and leaving the node on
    its own NIC (``src/graph/search.cc``: "NET n -> GPU a -> GPU b -> .. -> GPU x -> NET n"), and
    ``ncclTopoPostset`` doubles the channels (``src/graph/connect.cc``: "Duplication should be
    complete now", ``nChannels * 2``), at most ``MAXCHANNELS`` (64).

    Raises:
        ValueError: ``nics_per_node < 1``.
    """
    if nics_per_node < 1:
        raise ValueError(f"nics_per_node: got {nics_per_node}, expected an integer >= 1")
    return min(MAX_CHANNELS, 2 * nics_per_node)


def _channels(file: Path | None, key: str, value: Any) -> Any:
    """``collectives.channels``: ``auto`` (NCCL's choice: the communicator's
    :func:`default_channels`, fewer for small collectives as NCCL's ``topoGetAlgoInfo`` trims
    them; ``nccl`` is the same), or an integer 1..MAX_CHANNELS used for every call."""
    if value in ("auto", "nccl"):
        return value
    try:
        return yc.integer(1, MAX_CHANNELS)(file, key, value)
    except ProfileError:
        raise ProfileError(file, key, value,
                           f"'auto', 'nccl' or an integer in [1, {MAX_CHANNELS}]") from None


def _p2p_chunksize(file: Path | None, key: str, value: Any) -> int:
    """``collectives.NCCL_P2P_NET_CHUNKSIZE``: 0 (p2p cut like a collective) or an integer in
    :data:`~tokenpcap.config.bounds.P2P_NET_CHUNKSIZE_RANGE`."""
    lo, hi = P2P_NET_CHUNKSIZE_RANGE
    if type(value) is int and value == 0:
        return 0
    try:
        return yc.integer(lo, hi)(file, key, value)
    except ProfileError:
        raise ProfileError(file, key, value, f"0 or an integer in [{lo:,}, {hi:,}]") from None


def _nccl_list(name: str):  # type: ignore[no-untyped-def]
    """``collectives.NCCL_PROTO`` / ``NCCL_ALGO``: ``auto`` or a list in NCCL's syntax
    (:func:`tokenpcap.collectives.tuning.parse_list`), checked here."""
    elems = PROTOCOL_IDS if name == "NCCL_PROTO" else ALGOS

    def check(file: Path | None, key: str, value: Any) -> Any:
        if not isinstance(value, str) or not value.strip():
            raise ProfileError(file, key, value, "'auto' or a list in NCCL's syntax")
        if value != "auto":
            try:
                parse_list(value, elems, name)
            except InputError as err:
                raise ProfileError(file, key, value, str(err).split(": ", 1)[-1]) from None
        return value
    return check


def default_scenario_path() -> Path:
    """The bundled default scenario: ``profiles/scenarios/dante.yaml`` of the repository (of
    ``tokenpcap/_bundled/`` in a non-editable install)."""
    return _PROFILES / "scenarios" / "dante.yaml"


# --------------------------------------------------------------------------------------------
# scenario

_TOKENIZER_SPEC = {
    "kind": (yc.enum("utf8", "bpe", "tiktoken", "hf"), yc.REQUIRED),
    "vocab_size": (yc.integer(1, MAX_VOCAB_SIZE), 32000),
    "name": (yc.string, None),
}
_PARALLELISM_SPEC = {
    "dp": (yc.integer(1), 1),
    "tp": (yc.integer(1), 1),
    "pp": (yc.integer(1), 1),
    "sequence_parallel": (yc.boolean, False),
    "zero_stage": (yc.enum(0, 1, 2, 3), 0),
    "ep": (yc.integer(1), 1),
    "context_parallel_size": (yc.integer(1), 1),
    "virtual_pipeline_model_parallel_size": (yc.optional(yc.integer(1)), None),
    "decoder_first_pipeline_num_layers": (yc.optional(yc.integer(1, MAX_LAYERS)), None),
    "decoder_last_pipeline_num_layers": (yc.optional(yc.integer(1, MAX_LAYERS)), None),
    "account_for_embedding_in_pipeline_split": (yc.boolean, False),
    "account_for_loss_in_pipeline_split": (yc.boolean, False),
}
_DTYPES = tuple(DTYPE_BYTES)
_TRAINING_SPEC = {
    "micro_batch_size": (yc.integer(1, MAX_MICRO_BATCH_SIZE), yc.REQUIRED),
    "global_batch_size": (yc.integer(1, MAX_GLOBAL_BATCH_SIZE), yc.REQUIRED),
    "precision": (yc.enum("bf16", "fp16", "fp32"), "bf16"),
    "grad_reduce_dtype": (yc.enum(*_DTYPES), "fp32"),
    "recompute": (yc.enum("none", "selective", "full"), "none"),
    "mfu": (yc.optional(yc.number(ge=MFU_RANGE[0], le=MFU_RANGE[1])), None),
    "overlap_grad_reduce": (yc.boolean, False),
    "bucket_size": (yc.optional(yc.integer(1, MAX_BUCKET_SIZE)), None),
    "overlap_param_gather": (yc.boolean, False),
    "overlap_moe_expert_parallel_comm": (yc.boolean, False),
    "clip_grad": (yc.number(ge=0, le=1e30), 1.0),
    "create_attention_mask_in_dataloader": (yc.boolean, True),
}
_NCCL = CollectivesConfig()     # the defaults, written once (config/types.py)
_COLLECTIVES_SPEC = {
    "algorithm": (yc.enum(*selectable_algorithms()), "ring"),
    "channels": (_channels, "auto"),
    "slice_bytes": (yc.integer(*SLICE_BYTES_RANGE), _NCCL.slice_bytes),
    "NCCL_PROTO": (_nccl_list("NCCL_PROTO"), _NCCL.NCCL_PROTO),
    "NCCL_ALGO": (_nccl_list("NCCL_ALGO"), _NCCL.NCCL_ALGO),
    "NCCL_P2P_LL_THRESHOLD": (yc.integer(0, 1 << 30), _NCCL.NCCL_P2P_LL_THRESHOLD),
    "NCCL_PXN_DISABLE": (yc.integer(0, 1), _NCCL.NCCL_PXN_DISABLE),
    "NCCL_P2P_PXN_LEVEL": (yc.integer(0, 2), _NCCL.NCCL_P2P_PXN_LEVEL),
    "NCCL_CROSS_NIC": (yc.integer(0, 2), _NCCL.NCCL_CROSS_NIC),
    "NCCL_P2P_NET_CHUNKSIZE": (_p2p_chunksize, _NCCL.NCCL_P2P_NET_CHUNKSIZE),
    "empty_ring_steps": (yc.boolean, _NCCL.empty_ring_steps),
}
_GENERATION_SPEC = {
    "seed": (yc.integer(0, MAX_SEED), 0),
    "iterations": (yc.integer(1, MAX_ITERATIONS), 1),
    "ack_every_packets": (yc.integer(0, MAX_ACK_EVERY_PACKETS), 0),
    "clear_to_send": (yc.boolean, True),
}
_SCENARIO_SPEC = {
    "name": (yc.file_name, None),
    "description": (yc.string, ""),
    "corpus": (yc.path_text, yc.REQUIRED),
    "tokenizer": (lambda f, k, v: v, {"kind": "bpe"}),
    "model": (lambda f, k, v: v, yc.REQUIRED),
    "cluster": (lambda f, k, v: v, yc.REQUIRED),
    "parallelism": (yc.mapping, yc.REQUIRED),
    "training": (yc.mapping, yc.REQUIRED),
    "collectives": (yc.mapping, {}),
    "generation": (yc.mapping, {}),
    "published": (yc.optional(yc.mapping), None),
}
_PUBLISHED_SPEC = {
    "mfu": (yc.number(ge=MFU_RANGE[0], le=MFU_RANGE[1]), yc.REQUIRED),
    "source": (yc.string, yc.REQUIRED),
}

#: A workload scenario (:mod:`tokenpcap.config.workload`): a cluster and a workload, no model.
_WORKLOAD_SCENARIO_SPEC = {
    "name": (yc.file_name, None),
    "description": (yc.string, ""),
    "cluster": (lambda f, k, v: v, yc.REQUIRED),
    "workload": (yc.mapping, yc.REQUIRED),
    "collectives": (yc.mapping, {}),
    "generation": (yc.mapping, {}),
}
#: The keys of a training scenario a workload scenario has none of.
_TRAINING_ONLY = ("corpus", "tokenizer", "model", "parallelism", "training")


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
    v = yc.read_mapping(path, "", data, _SCENARIO_SPEC)
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
        t = yc.read_mapping(path, "tokenizer", tok, _TOKENIZER_SPEC)
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
                                                  _PARALLELISM_SPEC)),
        training=Training(**yc.read_mapping(path, "training", v["training"], _TRAINING_SPEC)),
        collectives=_collectives(path, v["collectives"], cluster),
        generation=GenerationConfig(**yc.read_mapping(path, "generation", v["generation"],
                                                      _GENERATION_SPEC)),
        path=path,
        description=v["description"],
        published=(None if v["published"] is None else
                   Published(**yc.read_mapping(path, "published", v["published"],
                                               _PUBLISHED_SPEC))),
    )
    check_feasible(scenario)
    return scenario


def _load_workload_scenario(path: Path, data: dict, sub: dict[str, dict[str, Any]]) -> Scenario:
    """A scenario with a ``workload:`` mapping (:mod:`tokenpcap.config.workload`): cluster,
    workload, collectives, generation; a key of a training scenario is refused in one line."""
    for k in _TRAINING_ONLY:
        if k in data:
            raise ProfileError(path, k, data[k], "no corpus, tokenizer, model, parallelism or "
                               "training in a workload scenario (it has `workload:` instead)")
    v = yc.read_mapping(path, "", data, _WORKLOAD_SCENARIO_SPEC)
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
                                                      _GENERATION_SPEC)),
        path=path, description=v["description"],
        workload=workload_from(path, "workload", v["workload"], world))


def _collectives(path: Path, data: Any, cluster: ClusterProfile) -> CollectivesConfig:
    c = yc.read_mapping(path, "collectives", data, _COLLECTIVES_SPEC)
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
