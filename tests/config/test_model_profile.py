"""Model profiles: every bundled model loads and cites its source; every kind of bad value names
the file, the key, the value and what was expected; ``moe.layer_freq`` names the MoE layers as
Megatron-core's ``moe_layer_freq`` does."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.config.test_profiles import PROFILES, expect_profile_error, model_dict, write
from tokenpcap.config.profiles import load_model


@pytest.mark.parametrize("path", sorted((PROFILES / "models").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_model_loads_and_cites_a_source(path: Path):
    m = load_model(path)
    assert m.name == path.stem and len(m.source) > 20 and m.path == path


@pytest.mark.parametrize("over,key,got,expected", [
    ({"layerz": 3}, "layerz", "'layerz'", "a known key"),
    ({"layers": 0}, "layers", "0", "an integer in [1, 1024]"),
    ({"hidden_size": -768}, "hidden_size", "-768", "an integer in [1, 131,072]"),
    ({"layers": "12"}, "layers", "'12'", "an integer in [1, 1024]"),
    ({"layers": True}, "layers", "True", "an integer in [1, 1024]"),
    ({"mlp": "relu"}, "mlp", "'relu'", "one of 'gelu', 'swiglu'"),
    ({"tied_embeddings": "yes"}, "tied_embeddings", "'yes'", "true or false"),
    ({"attention_heads": 7}, "attention_heads", "7", "a divisor of hidden_size 768"),
    ({"kv_heads": 5}, "kv_heads", "5", "a divisor of attention_heads 12"),
    ({"moe": {"experts": 2, "top_k": 3}}, "moe.top_k", "3", "<= moe.experts 2"),
    ({"moe": {"experts": 2}}, "moe.top_k", "missing", "required key"),
    ({"moe": {"experts": 2, "top_k": 1, "layer_freq": [0, 1]}}, "moe.layer_freq", "[0, 1]",
     "a list of 12 entries, one per layer"),
    ({"moe": {"experts": 2, "top_k": 1, "layer_freq": [2] * 12}}, "moe.layer_freq",
     str([2] * 12), "or a list of 0/1"),
    ({"kv_heads": 4, "multi_latent_attention": {"kv_lora_rank": 64, "qk_head_dim": 64,
                                                "qk_pos_emb_head_dim": 32, "v_head_dim": 64}},
     "kv_heads", "4", "no kv_heads with multi_latent_attention"),
    ({"multi_latent_attention": {"kv_lora_rank": 64}}, "multi_latent_attention.qk_head_dim",
     "missing", "required key"),
])
def test_model_errors(tmp_path: Path, over, key, got, expected):  # type: ignore[no-untyped-def]
    f = write(tmp_path / "m.yaml", model_dict(**over))
    expect_profile_error(lambda: load_model(f), f, key, got, expected)


def test_missing_key_and_bad_files(tmp_path: Path):
    d = model_dict()
    del d["vocab_size"]
    f = write(tmp_path / "m.yaml", d)
    expect_profile_error(lambda: load_model(f), f, "vocab_size", "missing", "required key")
    g = tmp_path / "nope.yaml"
    expect_profile_error(lambda: load_model(g), g, "<file>", "missing", "an existing YAML file")
    h = tmp_path / "bad.yaml"
    h.write_text("layers: [1,\n", encoding="utf-8")
    expect_profile_error(lambda: load_model(h), h, "<file>", "invalid YAML at line 2, column 1", "valid YAML")
    k = write(tmp_path / "list.yaml", [1, 2])
    expect_profile_error(lambda: load_model(k), k, "<document>", "[1, 2]", "a mapping")


def test_moe_layer_freq_names_the_moe_layers(tmp_path: Path):
    """Megatron-core moe_layer_freq (gpt_layer_specs.py): N -> layer i is MoE when i % N == 0;
    a list names each layer."""
    write(tmp_path / "f2.yaml", model_dict(moe={"experts": 4, "top_k": 2, "layer_freq": 2}))
    assert load_model(tmp_path / "f2.yaml").moe_layers == (True, False) * 6
    write(tmp_path / "l.yaml", model_dict(moe={"experts": 4, "top_k": 2,
                                                "layer_freq": [0] * 3 + [1] * 9}))
    assert load_model(tmp_path / "l.yaml").moe_layers == (False,) * 3 + (True,) * 9
    assert load_model(PROFILES / "models" / "gpt2-small.yaml").moe_layers == (False,) * 12
