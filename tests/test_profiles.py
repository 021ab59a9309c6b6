"""Profile loading: every bundled profile loads; every kind of bad input names file, key, got,
expected; combinations that cannot run are InfeasiblePlanError; key order does not matter."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.errors import InfeasiblePlanError, ProfileError
from tokenpcap.profiles import (
    NetworkProfile,
    default_scenario_path,
    load_cluster,
    load_model,
    load_scenario,
    parse_tokenizer,
)

ROOT = Path(__file__).resolve().parent.parent
PROFILES = ROOT / "profiles"


def write(path: Path, data) -> Path:  # type: ignore[no-untyped-def]
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def model_dict(**over):  # type: ignore[no-untyped-def]
    d = yaml.safe_load((PROFILES / "models" / "gpt2-small.yaml").read_text())
    d.update(over)
    return d


def cluster_dict(**over):  # type: ignore[no-untyped-def]
    d = yaml.safe_load((PROFILES / "clusters" / "h100-rocev2-400g.yaml").read_text())
    d.update(over)
    return d


def scenario_dict(tmp_path: Path, **over):  # type: ignore[no-untyped-def]
    write(tmp_path / "m.yaml", model_dict())
    write(tmp_path / "c.yaml", cluster_dict())
    (tmp_path / "corpus.txt").write_text("nel mezzo del cammin", encoding="utf-8")
    d = {"corpus": "corpus.txt", "tokenizer": {"kind": "utf8"}, "model": "m.yaml",
         "cluster": "c.yaml", "parallelism": {"dp": 4, "tp": 4, "pp": 2},
         "training": {"micro_batch_size": 1, "global_batch_size": 16}}
    d.update(over)
    return d


@pytest.mark.parametrize("path", sorted((PROFILES / "models").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_model_loads_and_cites_a_source(path: Path):
    m = load_model(path)
    assert m.name == path.stem and len(m.source) > 20 and m.path == path


@pytest.mark.parametrize("path", sorted((PROFILES / "clusters").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_cluster_loads(path: Path):
    c = load_cluster(path)
    assert c.name == path.stem and c.nodes * c.gpus_per_node >= 8


@pytest.mark.parametrize("path", sorted((PROFILES / "scenarios").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_scenario_loads(path: Path):
    s = load_scenario(path)
    assert s.corpus.is_file() and s.model.path.is_file() and s.cluster.path.is_file()


def test_defaults_and_the_default_scenario():
    s = load_scenario(default_scenario_path())
    assert default_scenario_path() == PROFILES / "scenarios" / "dante.yaml"
    assert s.corpus.resolve() == (ROOT / "samples" / "divina_commedia.txt").resolve()
    assert s.tokenizer.kind == "bpe" and s.model.name == "gpt2-small"
    assert s.cluster.network == NetworkProfile()        # network: keys equal to the defaults
    m = load_model(PROFILES / "models" / "gpt3-175b.yaml")
    assert m.kv_heads == 96 and m.ffn_hidden_size == 4 * 12288
    llama = load_model(PROFILES / "models" / "llama3-8b.yaml")
    assert (llama.kv_heads, llama.mlp, llama.norm, llama.bias) == (8, "swiglu", "rmsnorm", False)


def test_network_and_generation_sections(tmp_path: Path):
    net = {"ip_version": 6, "dscp": 46, "ecn": 1, "vlan_id": 100, "pcp": 5,
           "mac_prefix": "02:AA:bb", "ipv4_base": "198.19.0.0", "latency_ns": 500}
    c = load_cluster(write(tmp_path / "c.yaml", cluster_dict(network=net)))
    assert c.network.ip_version == 6 and c.network.vlan_id == 100
    assert c.network.mac_prefix == "02:aa:bb" and c.network.latency_ns == 500
    d = scenario_dict(tmp_path, generation={"seed": 7, "iterations": 3, "ack_every_packets": 16,
                                            "clear_to_send": False})
    s = load_scenario(write(tmp_path / "s.yaml", d))
    assert (s.generation.seed, s.generation.iterations, s.generation.clear_to_send) == (7, 3, False)


def test_inline_profiles_and_tokenizer_strings(tmp_path: Path):
    d = scenario_dict(tmp_path, model=model_dict(), tokenizer="hf:tok/tokenizer.json")
    s = load_scenario(write(tmp_path / "s.yaml", d))
    assert s.model.path is None and s.model.layers == 12
    assert s.tokenizer.kind == "hf" and s.tokenizer.name == str(tmp_path / "tok/tokenizer.json")
    assert parse_tokenizer("tiktoken:cl100k_base").name == "cl100k_base"


def expect_profile_error(fn, file: Path, key: str, got: str, expected: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProfileError) as info:
        fn()
    msg = str(info.value)
    assert msg.startswith(f"{file}: {key}: got {got}"), msg
    assert expected in msg and "\n" not in msg


@pytest.mark.parametrize("over,key,got,expected", [
    ({"layerz": 3}, "layerz", "'layerz'", "a known key"),
    ({"layers": 0}, "layers", "0", "an integer >= 1"),
    ({"hidden_size": -768}, "hidden_size", "-768", "an integer >= 1"),
    ({"layers": "12"}, "layers", "'12'", "an integer >= 1"),
    ({"layers": True}, "layers", "True", "an integer >= 1"),
    ({"mlp": "relu"}, "mlp", "'relu'", "one of 'gelu', 'swiglu'"),
    ({"tied_embeddings": "yes"}, "tied_embeddings", "'yes'", "true or false"),
    ({"attention_heads": 7}, "attention_heads", "7", "a divisor of hidden_size 768"),
    ({"kv_heads": 5}, "kv_heads", "5", "a divisor of attention_heads 12"),
    ({"moe": {"experts": 2, "top_k": 3}}, "moe.top_k", "3", "<= moe.experts 2"),
    ({"moe": {"experts": 2}}, "moe.top_k", "missing", "required key"),
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
    expect_profile_error(lambda: load_model(h), h, "<file>", "'invalid YAML", "valid YAML")
    k = write(tmp_path / "list.yaml", [1, 2])
    expect_profile_error(lambda: load_model(k), k, "<document>", "[1, 2]", "a mapping")


@pytest.mark.parametrize("over,key,got,expected", [
    ({"nodes": 0}, "nodes", "0", "an integer >= 1"),
    ({"link_gbps": 0}, "link_gbps", "0", "a number > 0"),
    ({"link_gbps": -400}, "link_gbps", "-400", "a number > 0"),
    ({"transport": "iwarp"}, "transport", "'iwarp'", "one of 'rocev2', 'infiniband'"),
    ({"pmtu_bytes": 9000}, "pmtu_bytes", "9000", "one of 256, 512, 1024, 2048, 4096"),
    ({"nics_per_node": 16}, "nics_per_node", "16", "<= gpus_per_node 8"),
    ({"gpu": {"name": "H100"}}, "gpu.peak_tflops", "missing", "required key"),
    ({"network": {"dscp": 64}}, "network.dscp", "64", "an integer in [0, 63]"),
    ({"network": {"ipv4_base": "1.2.3"}}, "network.ipv4_base", "'1.2.3'", "an IPv4 address"),
    ({"network": {"mac_prefix": "02:00"}}, "network.mac_prefix", "'02:00'", "three hex octets"),
    ({"network": {"ip_version": 5}}, "network.ip_version", "5", "one of 4, 6"),
    ({"network": {"qos": 1}}, "network.qos", "'qos'", "a known key"),
])
def test_cluster_errors(tmp_path: Path, over, key, got, expected):  # type: ignore[no-untyped-def]
    f = write(tmp_path / "c.yaml", cluster_dict(**over))
    expect_profile_error(lambda: load_cluster(f), f, key, got, expected)


@pytest.mark.parametrize("over,key,got,expected", [
    ({"parallelism": {"dp": 4, "tp": 4, "pp": 2, "zero": 1}}, "parallelism.zero", "'zero'",
     "a known key"),
    ({"parallelism": {"dp": -4, "tp": 4, "pp": 2}}, "parallelism.dp", "-4", "an integer >= 1"),
    ({"training": {"micro_batch_size": 1}}, "training.global_batch_size", "missing", "required"),
    ({"training": {"micro_batch_size": 1, "global_batch_size": 16, "precision": "fp64"}},
     "training.precision", "'fp64'", "one of 'bf16', 'fp16', 'fp32'"),
    ({"training": {"micro_batch_size": 1, "global_batch_size": 16, "mfu": 1.5}},
     "training.mfu", "1.5", "a number > 0 and <= 1"),
    ({"collectives": {"algorithm": "butterfly"}}, "collectives.algorithm", "'butterfly'",
     "one of 'ring', 'tree', 'hierarchical'"),
    ({"tokenizer": "sentencepiece"}, "tokenizer", "'sentencepiece'", "'utf8', 'bpe'"),
    ({"tokenizer": {"kind": "tiktoken"}}, "tokenizer.name", "missing", "an encoding name"),
    ({"model": 12}, "model", "12", "a path to a YAML profile or an inline mapping"),
])
def test_scenario_errors(tmp_path: Path, over, key, got, expected):  # type: ignore[no-untyped-def]
    f = write(tmp_path / "s.yaml", scenario_dict(tmp_path, **over))
    expect_profile_error(lambda: load_scenario(f), f, key, got, expected)


def test_errors_inside_referenced_files_name_that_file(tmp_path: Path):
    d = scenario_dict(tmp_path)
    f = write(tmp_path / "s.yaml", d)
    write(tmp_path / "m.yaml", model_dict(layers=0))
    expect_profile_error(lambda: load_scenario(f), tmp_path / "m.yaml", "layers", "0", ">= 1")
    (tmp_path / "m.yaml").unlink()
    expect_profile_error(lambda: load_scenario(f), tmp_path / "m.yaml", "<file>", "missing",
                         "an existing YAML file")


@pytest.mark.parametrize("over,match", [
    ({"parallelism": {"dp": 8, "tp": 4, "pp": 2}},
     r"parallelism: got dp\*tp\*pp = 8\*4\*2 = 64, expected the cluster's GPU count .* = 32"),
    ({"parallelism": {"dp": 2, "tp": 8, "pp": 2}},
     r"parallelism.tp: got 8 with model attention_heads 12, expected a tp that divides"),
    ({"parallelism": {"dp": 2, "tp": 2, "pp": 8}},
     r"parallelism.pp: got 8 with model layers 12, expected a pp that divides layers"),
    ({"training": {"micro_batch_size": 3, "global_batch_size": 16}},
     r"training.global_batch_size: got 16, expected a multiple of micro_batch_size\*dp = 3\*4"),
    ({"parallelism": {"dp": 4, "tp": 4, "pp": 2, "ep": 2}},
     r"parallelism.ep: got 2, expected ep 1 for a model without moe"),
    ({"tokenizer": {"kind": "bpe", "vocab_size": 60000}},
     r"tokenizer.vocab_size: got 60000, expected at most the model's vocab_size 50257"),
])
def test_infeasible_combinations(tmp_path: Path, over, match):  # type: ignore[no-untyped-def]
    f = write(tmp_path / "s.yaml", scenario_dict(tmp_path, **over))
    with pytest.raises(InfeasiblePlanError, match=match) as info:
        load_scenario(f)
    assert str(info.value).startswith(f"{f}: ")


def test_kv_heads_rules(tmp_path: Path):
    # kv_heads % tp when kv_heads >= tp; tp % kv_heads when tp > kv_heads (heads replicated).
    write(tmp_path / "gqa.yaml", model_dict(attention_heads=12, kv_heads=6))
    ok = scenario_dict(tmp_path, model="gqa.yaml", parallelism={"dp": 8, "tp": 2, "pp": 2})
    load_scenario(write(tmp_path / "ok.yaml", ok))
    write(tmp_path / "gqa4.yaml", model_dict(attention_heads=12, kv_heads=4))
    bad = scenario_dict(tmp_path, model="gqa4.yaml",
                        parallelism={"dp": 8, "tp": 2, "pp": 2})
    load_scenario(write(tmp_path / "ok2.yaml", bad))
    write(tmp_path / "gqa3.yaml", model_dict(attention_heads=12, kv_heads=3))
    bad = scenario_dict(tmp_path, model="gqa3.yaml", parallelism={"dp": 4, "tp": 4, "pp": 2})
    with pytest.raises(InfeasiblePlanError, match="a multiple of kv_heads when tp > kv_heads"):
        load_scenario(write(tmp_path / "bad.yaml", bad))
    write(tmp_path / "gqa6.yaml", model_dict(attention_heads=12, kv_heads=6))
    bad = scenario_dict(tmp_path, model="gqa6.yaml", parallelism={"dp": 4, "tp": 4, "pp": 2})
    with pytest.raises(InfeasiblePlanError, match="a tp that divides kv_heads"):
        load_scenario(write(tmp_path / "bad2.yaml", bad))


def test_moe_ep_rules(tmp_path: Path):
    write(tmp_path / "moe.yaml", model_dict(moe={"experts": 6, "top_k": 2}))
    bad = scenario_dict(tmp_path, model="moe.yaml", parallelism={"dp": 4, "tp": 4, "pp": 2,
                                                                 "ep": 4})
    with pytest.raises(InfeasiblePlanError, match="an ep that divides the number of experts"):
        load_scenario(write(tmp_path / "bad.yaml", bad))
    m = load_model(tmp_path / "moe.yaml")
    assert m.moe is not None and m.moe.ffn_hidden_size == m.ffn_hidden_size


def shuffled(data, rnd):  # type: ignore[no-untyped-def]
    if isinstance(data, dict):
        keys = list(data)
        rnd.shuffle(keys)
        return {k: shuffled(data[k], rnd) for k in keys}
    return data


@settings(max_examples=25, deadline=None)
@given(st.randoms(use_true_random=False))
def test_results_do_not_depend_on_key_order(tmp_path_factory, rnd):  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("order")
    base = yaml.safe_load(default_scenario_path().read_text())
    ref = load_scenario(default_scenario_path())
    model = shuffled(yaml.safe_load((PROFILES / "models" / "gpt2-small.yaml").read_text()), rnd)
    cluster = shuffled(yaml.safe_load(
        (PROFILES / "clusters" / "h100-rocev2-400g.yaml").read_text()), rnd)
    d = shuffled(base, rnd)
    d["corpus"] = str(ROOT / "samples" / "divina_commedia.txt")
    d["model"], d["cluster"] = model, cluster
    s = load_scenario(write(tmp / "s.yaml", d))
    assert dataclasses.replace(s.model, path=None) == dataclasses.replace(ref.model, path=None)
    assert dataclasses.replace(s.cluster, path=None) == dataclasses.replace(ref.cluster, path=None)
    for f in ("tokenizer", "parallelism", "training", "collectives", "generation", "name"):
        assert getattr(s, f) == getattr(ref, f)
