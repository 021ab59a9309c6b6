"""Profiles: YAML files turned into frozen, typed objects. The only place units are converted.

Three kinds of profile (model, cluster, scenario; the keys are in docs/plan.md); a scenario names a
corpus, a tokenizer, a model, a cluster and the parallelism/training/collective settings, with paths
relative to the scenario file. Units are in key names (``link_gbps``, ``pmtu_bytes``, ``latency_ns``).

Every loader raises :class:`tokenpcap.errors.ProfileError` (file, dotted key, value got, value
expected) for unknown keys, missing keys, wrong types and out-of-range values, and
:class:`tokenpcap.errors.InfeasiblePlanError` for valid values that cannot be combined.
"""
from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

from tokenpcap.collectives.algorithms import selectable_algorithms
from tokenpcap.config import yamlcheck as yc
from tokenpcap.errors import ProfileError, TokenizerError
from tokenpcap.config.types import (DTYPE_BYTES, ClusterProfile, CollectivesConfig,
                                     GenerationConfig, GpuProfile, MlaProfile, ModelProfile,
                                     MoeProfile,
                                     NetworkProfile, Parallelism, Scenario, TokenizerSpec,
                                     Training)

__all__ = [
    "MoeProfile",
    "MlaProfile",
    "ModelProfile",
    "GpuProfile",
    "NetworkProfile",
    "ClusterProfile",
    "TokenizerSpec",
    "Parallelism",
    "Training",
    "CollectivesConfig",
    "GenerationConfig",
    "Scenario",
    "DTYPE_BYTES",
    "load_model",
    "load_cluster",
    "load_scenario",
    "default_scenario_path",
    "default_channels",
    "parse_tokenizer",
    "check_feasible",
]


_REPO_PROFILES = Path(__file__).resolve().parents[2] / "profiles"

# --------------------------------------------------------------------------------------------
# Upper bounds. Each is the largest published training setup times a margin, or a width of
# the message table (MESSAGE_DTYPE: iteration, layer and microbatch are int16), whichever is
# smaller; ``docs/plan.md`` lists them with their sources. They keep every accepted input
# within bounded plan time and memory (the plan grows with microbatches x layers and with the
# number of GPUs; measured figures in docs/plan.md).

#: Transformer layers: Megatron-LM's 1T model has 128 (Narayanan et al. 2021, Table 1),
#: Llama 3.1 405B 126, PaLM 540B 118; 8x margin.
MAX_LAYERS = 1024
#: Hidden size: 25,600 for the 1T model (ibid.), 16,384 for Llama 3.1 405B; ~5x margin.
MAX_HIDDEN_SIZE = 131_072
#: Attention heads: 160 for the 1T model (ibid.); 128 for Llama 3.1 405B.
MAX_ATTENTION_HEADS = 4096
#: FFN hidden size: 102,400 (4h of the 1T model), 53,248 for Llama 3.1 405B; 10x margin.
MAX_FFN_HIDDEN_SIZE = 1_048_576
#: Vocabulary: 256,000 (Gemma) is the largest published; 2**24 keeps ids far inside int32.
MAX_VOCAB_SIZE = 1 << 24
#: Sequence length: 131,072 in Llama 3.1's long-context stage (Llama 3 report, Sec. 3.4.2); 8x.
MAX_SEQ_LENGTH = 1 << 20
#: MoE experts: DeepSeek-V3 routes over 256 per layer; 16x.
MAX_EXPERTS = 4096
#: GPUs per node (one NVLink domain with its NICs): 72 in a GB200 NVL72 rack; NVL576 announced.
MAX_GPUS_PER_NODE = 1024
#: GPUs in the cluster: Llama 3.1 405B trained on 16,384 H100 (the largest published run with
#: its parallel layout); 2x margin. The plan's time and memory grow with this (docs/plan.md).
MAX_WORLD_SIZE = 32_768
#: Link rates (Gb/s): 1 GbE is the slowest link carrying RoCE; NVLink 5 is 14,400 Gb/s per GPU.
LINK_GBPS_RANGE = (1.0, 1_000_000.0)
#: GPU peak (TFLOP/s): B200 dense FP8 is ~4,500.
MAX_PEAK_TFLOPS = 1_000_000.0
#: One-way NIC-to-NIC latency (ns): one second.
MAX_LATENCY_NS = 1_000_000_000
#: Micro batch (sequences): published runs use 1-16.
MAX_MICRO_BATCH_SIZE = 65_536
#: Global batch (sequences): Llama 3.1 405B 16M tokens = 2,048 x 8,192; DeepSeek-V3 15,360.
MAX_GLOBAL_BATCH_SIZE = 1 << 24
#: NCCL channels: NCCL's ``MAXCHANNELS`` (``src/include/device.h``: 64; 32 in older releases).
MAX_CHANNELS = 64
#: Iterations of one capture: MESSAGE_DTYPE.iteration is int16.
MAX_ITERATIONS = 32_767
#: Seed: the range ``WireContext.payload_seed`` accepts (a non-negative int64).
MAX_SEED = (1 << 63) - 1


def default_channels(nics_per_node: int) -> int:
    """Channels NCCL runs a ring or tree collective on, on nodes of ``nics_per_node`` NICs
    (the default of ``collectives.channels``): ``min(64, 2 * nics_per_node)``.

    NCCL's graph search builds one ring channel per NIC, each entering and leaving the node on
    its own NIC (``src/graph/search.cc``: "NET n -> GPU a -> GPU b -> .. -> GPU x -> NET n"), and
    ``ncclTopoPostset`` doubles the channels (``src/graph/connect.cc``: "Duplication should be
    complete now", ``nChannels * 2``), at most ``MAXCHANNELS`` (:data:`MAX_CHANNELS`).

    Raises:
        ValueError: ``nics_per_node < 1``.
    """
    if nics_per_node < 1:
        raise ValueError(f"nics_per_node: got {nics_per_node}, expected an integer >= 1")
    return min(MAX_CHANNELS, 2 * nics_per_node)


def _channels(file: Path | None, key: str, value: Any) -> Any:
    """``collectives.channels``: ``auto`` (:func:`default_channels`) or an integer 1..64."""
    if value == "auto":
        return value
    try:
        return yc.integer(1, MAX_CHANNELS)(file, key, value)
    except ProfileError:
        raise ProfileError(file, key, value, f"'auto' or an integer in [1, {MAX_CHANNELS}]") from None


def default_scenario_path() -> Path:
    """The bundled default scenario: ``profiles/scenarios/dante.yaml`` of the repository."""
    return _REPO_PROFILES / "scenarios" / "dante.yaml"


# --------------------------------------------------------------------------------------------
# model

def _layer_freq(file: Path | None, key: str, value: Any) -> Any:
    """``moe.layer_freq``: an integer >= 1 or a list of 0/1 (one per layer; its length is
    checked against ``layers`` by the loader)."""
    if isinstance(value, list) and value and all(type(x) is int and x in (0, 1) for x in value):
        return tuple(value)
    try:
        return yc.integer(1, MAX_LAYERS)(file, key, value)
    except ProfileError:
        raise ProfileError(file, key, value, f"an integer in [1, {MAX_LAYERS}] or a list of 0/1, "
                           "one per layer (Megatron-core moe_layer_freq)") from None


_MOE_SPEC = {
    "experts": (yc.integer(1, MAX_EXPERTS), yc.REQUIRED),
    "top_k": (yc.integer(1, MAX_EXPERTS), yc.REQUIRED),
    "ffn_hidden_size": (yc.integer(1, MAX_FFN_HIDDEN_SIZE), None),
    "shared_expert_intermediate_size": (yc.integer(0, MAX_FFN_HIDDEN_SIZE), 0),
    "layer_freq": (_layer_freq, 1),
}

_MLA_SPEC = {
    "q_lora_rank": (yc.optional(yc.integer(1, MAX_HIDDEN_SIZE)), None),
    "kv_lora_rank": (yc.integer(1, MAX_HIDDEN_SIZE), yc.REQUIRED),
    "qk_head_dim": (yc.integer(1, MAX_HIDDEN_SIZE), yc.REQUIRED),
    "qk_pos_emb_head_dim": (yc.integer(1, MAX_HIDDEN_SIZE), yc.REQUIRED),
    "v_head_dim": (yc.integer(1, MAX_HIDDEN_SIZE), yc.REQUIRED),
}

_MODEL_SPEC = {
    "name": (yc.string, None),
    "source": (yc.string, yc.REQUIRED),
    "description": (yc.string, ""),
    "layers": (yc.integer(1, MAX_LAYERS), yc.REQUIRED),
    "hidden_size": (yc.integer(1, MAX_HIDDEN_SIZE), yc.REQUIRED),
    "attention_heads": (yc.integer(1, MAX_ATTENTION_HEADS), yc.REQUIRED),
    "kv_heads": (yc.integer(1, MAX_ATTENTION_HEADS), None),
    "ffn_hidden_size": (yc.integer(1, MAX_FFN_HIDDEN_SIZE), None),
    "vocab_size": (yc.integer(1, MAX_VOCAB_SIZE), yc.REQUIRED),
    "seq_length": (yc.integer(1, MAX_SEQ_LENGTH), yc.REQUIRED),
    "mlp": (yc.enum("gelu", "swiglu"), "gelu"),
    "norm": (yc.enum("layernorm", "rmsnorm"), "layernorm"),
    "tied_embeddings": (yc.boolean, True),
    "position_embedding": (yc.enum("learned", "rope"), "learned"),
    "bias": (yc.boolean, True),
    "moe": (yc.optional(yc.mapping), None),
    "multi_latent_attention": (yc.optional(yc.mapping), None),
    "mtp_num_layers": (yc.integer(0, MAX_LAYERS), 0),
    "make_vocab_size_divisible_by": (yc.integer(1, MAX_VOCAB_SIZE), 128),
}


def load_model(path: str | Path) -> ModelProfile:
    """Load a model profile (YAML; the keys are in docs/plan.md).

    ``kv_heads`` defaults to ``attention_heads`` (multi-head attention), ``ffn_hidden_size`` to
    ``4 * hidden_size`` (GPT), ``name`` to the file's stem.

    Raises:
        ProfileError: unknown or missing key, wrong type, value out of range, ``hidden_size`` not a
            multiple of ``attention_heads``, ``attention_heads`` not a multiple of ``kv_heads``,
            MoE ``top_k`` larger than ``experts``, a ``moe.layer_freq`` list not of one entry
            per layer, ``kv_heads`` given with ``multi_latent_attention``.
    """
    path = Path(path)
    return _model_from(path, "", yc.load_yaml(path), path)


def _model_from(file: Path, prefix: str, data: Any, model_path: Path | None) -> ModelProfile:
    v = yc.read_mapping(file, prefix, data, _MODEL_SPEC)
    key = (lambda k: f"{prefix}.{k}" if prefix else k)
    if v["hidden_size"] % v["attention_heads"]:
        raise ProfileError(file, key("attention_heads"), v["attention_heads"],
                           f"a divisor of hidden_size {v['hidden_size']}")
    kv = v["kv_heads"] if v["kv_heads"] is not None else v["attention_heads"]
    if v["attention_heads"] % kv:
        raise ProfileError(file, key("kv_heads"), kv,
                           f"a divisor of attention_heads {v['attention_heads']}")
    ffn = v["ffn_hidden_size"] if v["ffn_hidden_size"] is not None else 4 * v["hidden_size"]
    moe = None
    if v["moe"] is not None:
        m = yc.read_mapping(file, key("moe"), v["moe"], _MOE_SPEC)
        if m["top_k"] > m["experts"]:
            raise ProfileError(file, key("moe.top_k"), m["top_k"],
                               f"an integer <= moe.experts {m['experts']}")
        f = m["layer_freq"]
        if isinstance(f, tuple) and len(f) != v["layers"]:
            raise ProfileError(file, key("moe.layer_freq"), list(f),
                               f"a list of {v['layers']} entries, one per layer")
        moe = MoeProfile(experts=m["experts"], top_k=m["top_k"],
                         ffn_hidden_size=m["ffn_hidden_size"] or ffn,
                         shared_expert_intermediate_size=m["shared_expert_intermediate_size"],
                         layer_freq=f)
    mla = None
    if v["multi_latent_attention"] is not None:
        if v["kv_heads"] is not None:
            raise ProfileError(file, key("kv_heads"), v["kv_heads"],
                               "no kv_heads with multi_latent_attention (its keys and values "
                               "come from one latent)")
        mla = MlaProfile(**yc.read_mapping(file, key("multi_latent_attention"),
                                           v["multi_latent_attention"], _MLA_SPEC))
    name = v["name"] if v["name"] is not None else (model_path.stem if model_path else "model")
    return ModelProfile(
        name=name, source=v["source"], layers=v["layers"], hidden_size=v["hidden_size"],
        attention_heads=v["attention_heads"], kv_heads=kv, ffn_hidden_size=ffn,
        vocab_size=v["vocab_size"], seq_length=v["seq_length"], mlp=v["mlp"], norm=v["norm"],
        tied_embeddings=v["tied_embeddings"], position_embedding=v["position_embedding"],
        bias=v["bias"], moe=moe, path=model_path, description=v["description"],
        make_vocab_size_divisible_by=v["make_vocab_size_divisible_by"], mla=mla,
        mtp_num_layers=v["mtp_num_layers"],
    )


# --------------------------------------------------------------------------------------------
# cluster

_GPU_SPEC = {"name": (yc.string, yc.REQUIRED),
             "peak_tflops": (yc.number(gt=0, le=MAX_PEAK_TFLOPS), yc.REQUIRED)}

_NETWORK_SPEC = {
    "ip_version": (yc.enum(4, 6), 4),
    "dscp": (yc.integer(0, 63), 26),
    "ecn": (yc.integer(0, 3), 2),
    "ttl": (yc.integer(1, 255), 64),
    "vlan_id": (yc.optional(yc.integer(1, 4094)), None),
    "pcp": (yc.integer(0, 7), 3),
    "mac_prefix": (yc.mac_prefix, "02:00:00"),
    "ipv4_base": (yc.ipv4, "198.18.0.0"),
    "ipv6_base": (yc.ipv6, "2001:2::"),
    "pkey": (yc.integer(0, 0xFFFF), 0xFFFF),
    "latency_ns": (yc.integer(0, MAX_LATENCY_NS), 1000),
    "ib_sl": (yc.integer(0, 15), 0),
    "ib_vl": (yc.integer(0, 14), 0),
}

_CLUSTER_SPEC = {
    "name": (yc.string, None),
    "description": (yc.string, ""),
    "nodes": (yc.integer(1, MAX_WORLD_SIZE), yc.REQUIRED),
    "gpus_per_node": (yc.integer(1, MAX_GPUS_PER_NODE), yc.REQUIRED),
    "nics_per_node": (yc.integer(1, MAX_GPUS_PER_NODE), yc.REQUIRED),
    "link_gbps": (yc.number(ge=LINK_GBPS_RANGE[0], le=LINK_GBPS_RANGE[1]), yc.REQUIRED),
    "nvlink_gbps": (yc.number(ge=LINK_GBPS_RANGE[0], le=LINK_GBPS_RANGE[1]), yc.REQUIRED),
    "gpu": (yc.mapping, yc.REQUIRED),
    "transport": (yc.enum("rocev2", "infiniband"), "rocev2"),
    "pmtu_bytes": (yc.enum(256, 512, 1024, 2048, 4096), 4096),
    "network": (yc.optional(yc.mapping), None),
}


def load_cluster(path: str | Path) -> ClusterProfile:
    """Load a cluster profile (YAML): nodes, GPUs and NICs per node, link rates, transport, PMTU.

    The optional ``network:`` mapping fills :class:`NetworkProfile` (addressing and marking);
    absent keys take its defaults.

    Raises:
        ProfileError: unknown or missing key, wrong type, value out of range, or more NICs than
            GPUs per node (NIC of local GPU g is ``g * nics_per_node // gpus_per_node``).
    """
    path = Path(path)
    return _cluster_from(path, "", yc.load_yaml(path), path)


def _cluster_from(file: Path, prefix: str, data: Any, cluster_path: Path | None) -> ClusterProfile:
    v = yc.read_mapping(file, prefix, data, _CLUSTER_SPEC)
    key = (lambda k: f"{prefix}.{k}" if prefix else k)
    if v["nics_per_node"] > v["gpus_per_node"]:
        raise ProfileError(file, key("nics_per_node"), v["nics_per_node"],
                           f"an integer <= gpus_per_node {v['gpus_per_node']}")
    gpus = v["nodes"] * v["gpus_per_node"]
    if gpus > MAX_WORLD_SIZE:
        raise ProfileError(file, key("nodes"), v["nodes"],
                           f"nodes*gpus_per_node <= {MAX_WORLD_SIZE:,} GPUs (got {v['nodes']}*"
                           f"{v['gpus_per_node']} = {gpus:,}; the largest published training run "
                           "used 16,384)")
    g = yc.read_mapping(file, key("gpu"), v["gpu"], _GPU_SPEC)
    net = NetworkProfile(**yc.read_mapping(file, key("network"), v["network"] or {},
                                           _NETWORK_SPEC))
    if int(ipaddress.IPv4Address(net.ipv4_base)) & 0xFF:
        raise ProfileError(file, key("network.ipv4_base"), net.ipv4_base,
                           "an IPv4 address whose last octet is 0, e.g. '198.18.0.0' (NIC i of "
                           "node n gets base + 256*n + i + 1)")
    name = v["name"] if v["name"] is not None else (cluster_path.stem if cluster_path else "cluster")
    return ClusterProfile(
        name=name, nodes=v["nodes"], gpus_per_node=v["gpus_per_node"],
        nics_per_node=v["nics_per_node"], link_gbps=v["link_gbps"], nvlink_gbps=v["nvlink_gbps"],
        gpu=GpuProfile(**g), transport=v["transport"], pmtu_bytes=v["pmtu_bytes"], network=net,
        path=cluster_path, description=v["description"], source=file, source_key=prefix,
    )


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
    "mfu": (yc.number(gt=0, le=1), 0.45),
    "overlap_grad_reduce": (yc.boolean, False),
    "bucket_size": (yc.optional(yc.integer(1)), None),
    "clip_grad": (yc.number(ge=0, le=1e30), 1.0),
    "create_attention_mask_in_dataloader": (yc.boolean, True),
}
_COLLECTIVES_SPEC = {
    "algorithm": (yc.enum(*selectable_algorithms()), "ring"),
    "channels": (_channels, "auto"),
    "slice_bytes": (yc.integer(1), 1 << 20),
}
_GENERATION_SPEC = {
    "seed": (yc.integer(0, MAX_SEED), 0),
    "iterations": (yc.integer(1, MAX_ITERATIONS), 1),
    "ack_every_packets": (yc.integer(0), 0),
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
}


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


def load_scenario(path: str | Path) -> Scenario:
    """Load a scenario: corpus, tokenizer, model, cluster, parallelism, training, collectives.

    ``corpus``, ``model`` and ``cluster`` are paths relative to the scenario file (``model`` and
    ``cluster`` may also be inline mappings). ``tokenizer`` is a mapping ``{kind, vocab_size,
    name}`` or a string as :func:`parse_tokenizer` reads it. The corpus file is not opened here
    (stage 1 reads it). After loading, :func:`check_feasible` checks the combination.

    Raises:
        ProfileError: any key of the scenario or of the files it names is unknown, missing, of
            the wrong type or out of range (the error names the file that holds it).
        InfeasiblePlanError: the values cannot be combined (see :func:`check_feasible`).
    """
    path = Path(path)
    v = yc.read_mapping(path, "", yc.load_yaml(path), _SCENARIO_SPEC)
    base = path.resolve().parent
    model = _sub_profile(path, base, "model", v["model"], _model_from)
    cluster = _sub_profile(path, base, "cluster", v["cluster"], _cluster_from)
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
    )
    check_feasible(scenario)
    return scenario


def _collectives(path: Path, data: Any, cluster: ClusterProfile) -> CollectivesConfig:
    c = yc.read_mapping(path, "collectives", data, _COLLECTIVES_SPEC)
    if c["channels"] == "auto":
        c["channels"] = default_channels(cluster.nics_per_node)
    return CollectivesConfig(**c)


def _sub_profile(file: Path, base: Path, key: str, value: Any, build):  # type: ignore[no-untyped-def]
    """A model or cluster given by path (loaded from its file: errors in it name that file and
    its own keys) or inline (errors name the scenario file and ``key.<...>``). A referenced file
    that cannot be read as YAML is reported at the scenario's key, naming both files."""
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
        return build(sub, "", data, sub)
    if isinstance(value, dict):
        return build(file, key, value, None)
    raise ProfileError(file, key, value, "a path to a YAML profile or an inline mapping")


from tokenpcap.config.feasibility import check_feasible  # noqa: E402  (re-exported; needs the types above)
