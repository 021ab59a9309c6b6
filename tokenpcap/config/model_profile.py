"""Model profiles: a YAML mapping (a file, or a scenario's inline ``model:``) turned into a
:class:`~tokenpcap.config.types.ModelProfile`, with its ``moe:`` and ``multi_latent_attention:``
mappings.

The keys, defaults and ranges are the specs below (``docs/profiles.md`` is generated from them).
Rules that need two keys of the model (heads divide the hidden size, ``top_k <= experts``, one
``moe.layer_freq`` entry per layer) are checked here; rules that need the parallel layout are in
:mod:`tokenpcap.config.feasibility`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenpcap.config import yamlcheck as yc
from tokenpcap.config.bounds import (MAX_ATTENTION_HEADS, MAX_EXPERTS, MAX_FFN_HIDDEN_SIZE,
                                     MAX_HIDDEN_SIZE, MAX_LAYERS, MAX_SEQ_LENGTH, MAX_VOCAB_SIZE)
from tokenpcap.config.types import TOKEN_DISPATCHERS, MlaProfile, ModelProfile, MoeProfile
from tokenpcap.errors import ProfileError

__all__ = ["load_model", "model_from"]


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
    "aux_loss_coeff": (yc.number(ge=0.0), 0.0),
    "router_enable_expert_bias": (yc.boolean, False),
    "dispatch_dtype": (yc.optional(yc.enum("fp8", "bf16", "fp16", "fp32")), None),
    "router_num_groups": (yc.optional(yc.integer(1, MAX_EXPERTS)), None),
    "router_group_topk": (yc.optional(yc.integer(1, MAX_EXPERTS)), None),
    "token_dispatcher": (yc.enum(*TOKEN_DISPATCHERS), "alltoall"),
}

def _check_router_groups(file: Path, key, m: dict) -> None:  # type: ignore[no-untyped-def]
    """Megatron-core's checks of group-limited routing (``TransformerConfig.__post_init__`` and
    ``moe_utils.group_limited_topk``): ``router_num_groups`` and ``router_group_topk`` come
    together, the groups divide the experts, at most ``router_num_groups`` groups are chosen and
    the chosen groups hold at least ``top_k`` experts; the ``deepep`` dispatcher sends a token
    once per chosen group, so it needs them.

    Raises:
        ProfileError: naming the first key that breaks a rule.
    """
    g, k = m["router_num_groups"], m["router_group_topk"]
    if (g is None) != (k is None):
        name = "router_group_topk" if k is None else "router_num_groups"
        raise ProfileError(file, key(f"moe.{name}"), None, "an integer: router_num_groups and "
                           "router_group_topk are given together")
    if g is not None:
        if m["experts"] % g:
            raise ProfileError(file, key("moe.router_num_groups"), g,
                               f"a divisor of moe.experts {m['experts']}")
        if k > g:
            raise ProfileError(file, key("moe.router_group_topk"), k,
                               f"an integer <= moe.router_num_groups {g}")
        if k * (m["experts"] // g) < m["top_k"]:
            raise ProfileError(file, key("moe.router_group_topk"), k,
                               f"enough groups to hold moe.top_k {m['top_k']} experts "
                               f"({m['experts'] // g} per group)")
    if m["token_dispatcher"] == "deepep" and g is None:
        raise ProfileError(file, key("moe.token_dispatcher"), "deepep",
                           "'alltoall' without moe.router_num_groups and router_group_topk "
                           "(DeepEP's dispatch is modelled for group-limited routing)")


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
    """Load a model profile (YAML; the keys are in docs/profiles.md).

    ``kv_heads`` defaults to ``attention_heads`` (multi-head attention), ``ffn_hidden_size`` to
    ``4 * hidden_size`` (GPT), ``name`` to the file's stem.

    Raises:
        ProfileError: unknown or missing key, wrong type, value out of range, ``hidden_size`` not a
            multiple of ``attention_heads``, ``attention_heads`` not a multiple of ``kv_heads``,
            MoE ``top_k`` larger than ``experts``, a ``moe.layer_freq`` list not of one entry
            per layer, ``kv_heads`` given with ``multi_latent_attention``.
    """
    path = Path(path)
    return model_from(path, "", yc.load_yaml(path), path)


def model_from(file: Path, prefix: str, data: Any, model_path: Path | None) -> ModelProfile:
    """The model of mapping ``data`` read from ``file`` at dotted key ``prefix`` ("" for a model
    file; "model" for a scenario's inline model, whose ``model_path`` is None).

    Raises:
        ProfileError: as :func:`load_model`, naming ``file`` and ``prefix.key``.
    """
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
        _check_router_groups(file, key, m)
        moe = MoeProfile(experts=m["experts"], top_k=m["top_k"],
                         ffn_hidden_size=m["ffn_hidden_size"] or ffn,
                         shared_expert_intermediate_size=m["shared_expert_intermediate_size"],
                         layer_freq=f, aux_loss_coeff=m["aux_loss_coeff"],
                         router_enable_expert_bias=m["router_enable_expert_bias"],
                         dispatch_dtype=m["dispatch_dtype"],
                         router_num_groups=m["router_num_groups"],
                         router_group_topk=m["router_group_topk"],
                         token_dispatcher=m["token_dispatcher"])
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
