"""Profile loading: every bundled profile loads; every kind of bad input names file, key, got,
expected; combinations that cannot run are InfeasiblePlanError; key order does not matter."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.errors import InfeasiblePlanError, ProfileError
from tokenpcap.config.profiles import (
    NetworkProfile,
    default_scenario_path,
    load_cluster,
    load_model,
    load_scenario,
    parse_tokenizer,
)

ROOT = Path(__file__).resolve().parents[2]
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


@pytest.mark.parametrize("path", sorted((PROFILES / "scenarios").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_scenario_loads(path: Path):
    s = load_scenario(path)
    if s.workload is not None:              # a microbenchmark: a cluster and a workload
        assert s.corpus is None and s.model is None and s.cluster.path.is_file()
        return
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
    ({"parallelism": {"dp": 4, "tp": 4, "pp": 2, "zero": 1}}, "parallelism.zero", "'zero'",
     "a known key"),
    ({"parallelism": {"dp": -4, "tp": 4, "pp": 2}}, "parallelism.dp", "-4", "an integer >= 1"),
    ({"training": {"micro_batch_size": 1}}, "training.global_batch_size", "missing", "required"),
    ({"training": {"micro_batch_size": 1, "global_batch_size": 16, "precision": "fp64"}},
     "training.precision", "'fp64'", "one of 'bf16', 'fp16', 'fp32'"),
    ({"training": {"micro_batch_size": 1, "global_batch_size": 16, "mfu": 1.5}},
     "training.mfu", "1.5", "a finite number >= 1e-09 and <= 1"),
    ({"collectives": {"algorithm": "butterfly"}}, "collectives.algorithm", "'butterfly'",
     "one of 'ring', 'tree', 'hierarchical'"),
    ({"tokenizer": "sentencepiece"}, "tokenizer", "'sentencepiece'", "'utf8', 'bpe'"),
    ({"tokenizer": {"kind": "tiktoken"}}, "tokenizer.name", "missing", "an encoding name"),
    ({"model": 12}, "model", "12", "a path to a YAML profile or an inline mapping"),
    # the name becomes output file names: '../escape' would write outside -o
    ({"name": "../escape"}, "name", "'../escape'", "starting with a letter or digit"),
    ({"name": "a/b"}, "name", "'a/b'", "letters, digits, '.', '_', '+' or '-'"),
    ({"name": "my run"}, "name", "'my run'", "(it names output files)"),
    ({"name": ".hidden"}, "name", "'.hidden'", "starting with a letter or digit"),
    ({"name": "x" * 101}, "name", "'" + "x" * 101 + "'", "1-100"),
])
def test_scenario_errors(tmp_path: Path, over, key, got, expected):  # type: ignore[no-untyped-def]
    f = write(tmp_path / "s.yaml", scenario_dict(tmp_path, **over))
    expect_profile_error(lambda: load_scenario(f), f, key, got, expected)


def test_errors_inside_referenced_files_name_that_file(tmp_path: Path):
    d = scenario_dict(tmp_path)
    f = write(tmp_path / "s.yaml", d)
    write(tmp_path / "m.yaml", model_dict(layers=0))
    expect_profile_error(lambda: load_scenario(f), tmp_path / "m.yaml", "layers", "0",
                         "in [1, 1024]")
    (tmp_path / "m.yaml").unlink()      # the scenario's reference is wrong: its file and key
    expect_profile_error(lambda: load_scenario(f), f, "model",
                         f"'m.yaml', whose file {tmp_path / 'm.yaml'}: missing",
                         "an existing YAML file")


@pytest.mark.parametrize("over,match", [
    ({"parallelism": {"dp": 8, "tp": 4, "pp": 2}},
     r"parallelism: got dp\*tp\*pp = 8\*4\*2 = 64, expected the cluster's GPU count .* = 32"),
    ({"parallelism": {"dp": 2, "tp": 8, "pp": 2}},
     r"parallelism.tp: got 8 with model attention_heads 12, expected a tp that divides"),
    ({"parallelism": {"dp": 2, "tp": 2, "pp": 8}},
     r"parallelism.pp: got 8 with 12 layers, expected a pp that divides them"),
    ({"parallelism": {"dp": 2, "tp": 2, "pp": 8, "decoder_first_pipeline_num_layers": 4}},
     r"parallelism.pp: got 8: 8 middle layers on 7 middle stages, expected middle stages "
     r"that divide the middle layers"),
    ({"parallelism": {"dp": 4, "tp": 4, "pp": 2, "decoder_last_pipeline_num_layers": 12}},
     r"parallelism.pp: got 2 with 0 layers left for 1 middle stages, expected middle layers "
     r"exactly when there are middle stages"),
    ({"parallelism": {"dp": 4, "tp": 4, "pp": 2, "decoder_last_pipeline_num_layers": 5,
                      "account_for_loss_in_pipeline_split": True}},
     r"parallelism.decoder_last_pipeline_num_layers: got 5, expected unset with account_for"),
    ({"training": {"micro_batch_size": 3, "global_batch_size": 16}},
     r"training.global_batch_size: got 16, expected a multiple of micro_batch_size\*dp = 3\*4"),
    ({"parallelism": {"dp": 4, "tp": 4, "pp": 2, "ep": 2}},
     r"parallelism.ep: got 2, expected ep 1 for a model without moe"),
    ({"tokenizer": {"kind": "bpe", "vocab_size": 60000}},
     r"tokenizer.vocab_size: got 60000, expected at most the model's vocab_size 50257"),
])
def test_infeasible_combinations(tmp_path: Path, over, match):  # type: ignore[no-untyped-def]
    expect_infeasible(tmp_path, over, match)


def expect_infeasible(tmp_path: Path, over: dict, match: str) -> None:
    """Loading the scenario with ``over`` raises InfeasiblePlanError matching ``match``, naming
    the scenario file first."""
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


def test_deepseek_features_a_scenario_cannot_use(tmp_path: Path):
    """Multi-latent attention plans only at tp 1 (its TP collectives on the latents are not
    modelled); multi-token prediction not at all (its parameters are counted)."""
    mla = {"kv_lora_rank": 64, "qk_head_dim": 64, "qk_pos_emb_head_dim": 32, "v_head_dim": 64}
    write(tmp_path / "mla.yaml", model_dict(multi_latent_attention=mla))
    expect_infeasible(tmp_path, {"model": "mla.yaml"},
                      r"parallelism.tp: got 4 with multi_latent_attention, expected tp 1")
    write(tmp_path / "mtp.yaml", model_dict(mtp_num_layers=1))
    expect_infeasible(tmp_path, {"model": "mtp.yaml"},
                      r"model.mtp_num_layers: got 1, expected 0 \(multi-token prediction")
    write(tmp_path / "shared.yaml", model_dict(moe={"experts": 4, "top_k": 2,
                                                     "shared_expert_intermediate_size": 512}))
    expect_infeasible(tmp_path, {"model": "shared.yaml"},
                      r"parallelism.tp: got 4 with moe.shared_expert_intermediate_size 512, "
                      r"expected tp 1")
    ok = scenario_dict(tmp_path, model="mla.yaml", parallelism={"dp": 16, "tp": 1, "pp": 2})
    s = load_scenario(write(tmp_path / "ok.yaml", ok))
    assert s.model.mla is not None and s.model.mla.q_lora_rank is None


def test_combinations_of_pipeline_features_not_modelled_together(tmp_path: Path):
    """Interleaving needs model chunks Megatron-core builds (get_transformer_layer_offset with
    vp_stage: each stage's layers divisible by the chunks) of one layer kind here, so a split
    the chunks do not divide or a model of dense and MoE layers is refused with it; ring
    attention is modelled over MHA/GQA K,V only, so multi-latent attention is refused with
    context parallelism."""
    vpp = {"dp": 4, "tp": 4, "pp": 2, "virtual_pipeline_model_parallel_size": 2}
    load_scenario(write(tmp_path / "ok.yaml", scenario_dict(tmp_path, parallelism=vpp)))
    load_scenario(write(tmp_path / "uneven.yaml", scenario_dict(
        tmp_path, parallelism={**vpp, "decoder_first_pipeline_num_layers": 4})))   # 2 + 2, 2 + 2
    expect_infeasible(tmp_path, {"parallelism": {**vpp, "decoder_first_pipeline_num_layers": 3}},
                      r"parallelism.virtual_pipeline_model_parallel_size: got 2 with 3 layers on "
                      r"the first stage 0, expected a chunk count that divides every stage's "
                      r"layers")
    write(tmp_path / "mixed.yaml", model_dict(moe={"experts": 4, "top_k": 2, "layer_freq": 2}))
    expect_infeasible(tmp_path, {"model": "mixed.yaml", "parallelism": vpp},
                      r"parallelism.virtual_pipeline_model_parallel_size: got 2 with a model of "
                      r"dense and MoE layers")
    mla = {"kv_lora_rank": 64, "qk_head_dim": 64, "qk_pos_emb_head_dim": 32, "v_head_dim": 64}
    write(tmp_path / "mla.yaml", model_dict(multi_latent_attention=mla))
    expect_infeasible(tmp_path, {"model": "mla.yaml",
                                 "parallelism": {"dp": 8, "tp": 1, "pp": 2,
                                                 "context_parallel_size": 2}},
                      r"parallelism.context_parallel_size: got 2 with multi_latent_attention, "
                      r"expected 1")


def test_moe_with_tensor_parallelism_needs_sequence_parallelism(tmp_path: Path):
    """Megatron-core's MoELayer.forward (megatron/core/transformer/moe/moe_layer.py) raises
    ValueError in training when the tensor-parallel group is larger than 1 and
    sequence_parallel is off; at tp 1, or for a model whose layers are all dense, it never
    runs."""
    moe = {"experts": 8, "top_k": 2}
    write(tmp_path / "moe.yaml", model_dict(moe=moe))
    expect_infeasible(tmp_path, {"model": "moe.yaml",
                                 "parallelism": {"dp": 4, "tp": 4, "pp": 2}},
                      r"parallelism.sequence_parallel: got false with tp 4 and a model with MoE "
                      r"layers, expected true")
    write(tmp_path / "some.yaml", model_dict(moe={**moe, "layer_freq": [0] * 11 + [1]}))
    expect_infeasible(tmp_path, {"model": "some.yaml",
                                 "parallelism": {"dp": 8, "tp": 2, "pp": 2,
                                                 "sequence_parallel": False}},
                      r"parallelism.sequence_parallel: got false with tp 2")
    for name, model, par in [
            ("sp", "moe.yaml", {"dp": 4, "tp": 4, "pp": 2, "sequence_parallel": True}),
            ("tp1", "moe.yaml", {"dp": 16, "tp": 1, "pp": 2}),
            ("dense", "m.yaml", {"dp": 4, "tp": 4, "pp": 2})]:
        s = load_scenario(write(tmp_path / f"{name}.yaml",
                                scenario_dict(tmp_path, model=model, parallelism=par)))
        assert s.parallelism.tp * s.parallelism.dp * s.parallelism.pp == 32


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


# ------------------------------------------------------------------ upper bounds, files that are not profiles


@pytest.mark.parametrize("text", [".inf", "-.inf", ".nan", ".NaN", ".Inf"])
def test_non_finite_numbers_are_profile_errors(tmp_path: Path, text: str):
    """``link_gbps: .inf`` used to pass (inf > 0) and crash later in Fraction('inf')."""
    base = (PROFILES / "clusters" / "h100-rocev2-400g.yaml").read_text()
    f = tmp_path / "c.yaml"
    f.write_text(base.replace("link_gbps: 400", f"link_gbps: {text}"), encoding="utf-8")
    assert f.read_text() != base
    with pytest.raises(ProfileError, match=r"link_gbps: got -?(inf|nan), expected a finite number"):
        load_cluster(f)
    g = write(tmp_path / "g.yaml", cluster_dict(gpu={"name": "x", "peak_tflops": float("inf")}))
    expect_profile_error(lambda: load_cluster(g), g, "gpu.peak_tflops", "inf", "a finite number")
    d = scenario_dict(tmp_path, training={"micro_batch_size": 1, "global_batch_size": 16,
                                          "mfu": float("nan")})
    s = write(tmp_path / "s.yaml", d)
    expect_profile_error(lambda: load_scenario(s), s, "training.mfu", "nan", "a finite number")


def test_seed_is_checked_against_the_int64_range_at_load(tmp_path: Path):
    """A seed above 2**63-1 failed only in the writer (WireContext.payload_seed)."""
    top = (1 << 63) - 1
    ok = load_scenario(write(tmp_path / "ok.yaml", scenario_dict(tmp_path,
                                                                 generation={"seed": top})))
    assert ok.generation.seed == top
    f = write(tmp_path / "s.yaml", scenario_dict(tmp_path, generation={"seed": top + 1}))
    expect_profile_error(lambda: load_scenario(f), f, "generation.seed", str(top + 1),
                         f"an integer in [0, {top:,}]")
    from tokenpcap.errors import EncodeError
    from tokenpcap.wire.context import WireContext  # the range the writer accepts is the same

    ib = {"transport": "infiniband", "lid": np.array([1, 2], np.uint16)}
    assert WireContext(payload_seed=top, **ib).payload_seed == top
    with pytest.raises(EncodeError, match="payload_seed"):
        WireContext(payload_seed=top + 1, **ib)


def test_network_errors_of_an_inline_cluster_name_the_scenario_and_full_key(tmp_path: Path):
    """``ipv4_base: 10.0.0.5`` in a scenario's inline cluster said ``<profile>: network...``."""
    c = cluster_dict(network={"ipv4_base": "10.0.0.5"})
    f = write(tmp_path / "s.yaml", scenario_dict(tmp_path, cluster=c))
    expect_profile_error(lambda: load_scenario(f), f, "cluster.network.ipv4_base", "'10.0.0.5'",
                         "last octet is 0")
    c = cluster_dict(network={"mac_prefix": "01:00:5e"})
    f = write(tmp_path / "s2.yaml", scenario_dict(tmp_path, cluster=c))
    expect_profile_error(lambda: load_scenario(f), f, "cluster.network.mac_prefix", "'01:00:5e'",
                         "a unicast prefix")
    # in a cluster file: that file and its own key path
    g = write(tmp_path / "c2.yaml", cluster_dict(network={"ipv4_base": "10.0.0.5"}))
    expect_profile_error(lambda: load_cluster(g), g, "network.ipv4_base", "'10.0.0.5'",
                         "last octet is 0")
    f = write(tmp_path / "s3.yaml", scenario_dict(tmp_path, cluster="c2.yaml"))
    expect_profile_error(lambda: load_scenario(f), g, "network.ipv4_base", "'10.0.0.5'",
                         "last octet is 0")
    # later stages name the same place through ClusterProfile.where
    s = load_scenario(write(tmp_path / "ok.yaml", scenario_dict(tmp_path, cluster=cluster_dict())))
    assert s.cluster.where("network.ipv4_base") == (str(tmp_path / "ok.yaml"),
                                                     "cluster.network.ipv4_base")
    assert load_cluster(tmp_path / "c.yaml").where("nodes") == (str(tmp_path / "c.yaml"), "nodes")


def test_duplicate_keys_name_the_file_the_key_and_both_lines(tmp_path: Path):
    """PyYAML's safe_load keeps the second ``name:`` silently."""
    f = tmp_path / "m.yaml"
    f.write_text(yaml.safe_dump(model_dict(), sort_keys=False) + "name: other\n", encoding="utf-8")
    lines = f.read_text().splitlines()
    first = next(i for i, x in enumerate(lines) if x.startswith("name:")) + 1
    expect_profile_error(lambda: load_model(f), f, "name",
                         f"the key twice, at line {first} and at line {len(lines)}",
                         "each key once per mapping")
    s = tmp_path / "s.yaml"
    write(s, scenario_dict(tmp_path))
    text = s.read_text().replace("  micro_batch_size: 1\n",
                                 "  micro_batch_size: 1\n  micro_batch_size: 2\n")
    s.write_text(text, encoding="utf-8")
    n = text.splitlines().index("  micro_batch_size: 2") + 1
    expect_profile_error(lambda: load_scenario(s), s, "training.micro_batch_size",
                         f"the key twice, at line {n - 1} and at line {n}", "each key once")
    # a merge key (<<) overridden by an explicit key is not a duplicate
    from tokenpcap.config.yamlfile import load_yaml

    ok = tmp_path / "merge.yaml"
    ok.write_text("a: &b {x: 1, y: 2}\nc:\n  <<: *b\n  x: 3\n", encoding="utf-8")
    assert load_yaml(ok) == {"a": {"x": 1, "y": 2}, "c": {"x": 3, "y": 2}}


def test_huge_binary_and_special_files_are_refused_before_parsing(tmp_path: Path):
    import os

    from tokenpcap.config.yamlfile import PROFILE_MAX_BYTES

    big = tmp_path / "big.yaml"
    with open(big, "wb") as fh:                  # sparse: 2 GB that cost nothing to make
        fh.truncate(2_000_000_000)
    expect_profile_error(lambda: load_model(big), big, "<file>", "a file of 2,000,000,000 bytes",
                         f"at most {PROFILE_MAX_BYTES:,} bytes")
    pcap = tmp_path / "x.pcap"
    pcap.write_bytes(bytes.fromhex("4d3cb2a1020004000000000000000000ffff000001000000"))
    expect_profile_error(lambda: load_scenario(pcap), pcap, "<file>",
                         "a binary file (NUL byte at offset 5)", "a YAML text file")
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"name: caf\xe9\n")
    expect_profile_error(lambda: load_model(latin), latin, "<file>",
                         "byte 0xe9 at offset 9 that is not UTF-8", "a UTF-8 YAML file")
    expect_profile_error(lambda: load_model(Path("/dev/zero")), Path("/dev/zero"), "<file>",
                         "a character device", "a regular YAML profile file")
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)                              # no writer: opening it would block forever
    expect_profile_error(lambda: load_cluster(fifo), fifo, "<file>", "a FIFO (named pipe)",
                         "a regular YAML profile file")
    expect_profile_error(lambda: load_cluster(tmp_path), tmp_path, "<file>", "a directory",
                         "a regular")
    d = scenario_dict(tmp_path, model="/dev/zero")
    f = write(tmp_path / "s.yaml", d)
    expect_profile_error(lambda: load_scenario(f), f, "model",
                         "'/dev/zero', whose file /dev/zero: a character device", "a regular")


@pytest.mark.parametrize("where,over,key,got,expected", [
    ("s", {"training": {"micro_batch_size": 1, "global_batch_size": 2_000_000_000}},
     "training.global_batch_size", "2000000000", "an integer in [1, 16,777,216]"),
    ("s", {"training": {"micro_batch_size": 1, "global_batch_size": 10**26}},
     "training.global_batch_size", str(10**26), "an integer in [1, 16,777,216]"),
    ("s", {"training": {"micro_batch_size": 10**6, "global_batch_size": 16}},
     "training.micro_batch_size", "1000000", "an integer in [1, 65,536]"),
    ("s", {"collectives": {"channels": 1000}}, "collectives.channels", "1000",
     "an integer in [1, 32]"),
    # 52..64 were accepted, then every run failed on a QP index over 255 (5 x 64 = 320)
    ("s", {"collectives": {"channels": 52}}, "collectives.channels", "52",
     "an integer in [1, 32]"),
    ("s", {"generation": {"iterations": 40000}}, "generation.iterations", "40000",
     "an integer in [1, 32,767]"),
    ("m", {"layers": 5000}, "layers", "5000", "an integer in [1, 1024]"),
    ("m", {"seq_length": 2**21}, "seq_length", str(2**21), "an integer in [1, 1,048,576]"),
    ("m", {"vocab_size": 2**25}, "vocab_size", str(2**25), "an integer in [1, 16,777,216]"),
    ("c", {"nodes": 100_000}, "nodes", "100000", "an integer in [1, 32,768]"),
    ("c", {"nodes": 8192}, "nodes", "8192", "nodes*gpus_per_node <= 32,768 GPUs"),
    ("c", {"link_gbps": 1e7}, "link_gbps", "10000000.0", "<= 1,000,000"),
    ("c", {"network": {"latency_ns": 10**12}}, "network.latency_ns", str(10**12),
     "an integer in [0, 1,000,000,000]"),
])
def test_upper_bounds_name_file_key_value_and_limit(tmp_path: Path, where, over, key, got,
                                                    expected):  # type: ignore[no-untyped-def]
    """Values beyond the upper bounds (a global batch of 2e9 would take >15 GB in `plan`) are
    refused at load, naming file, key, value and limit."""
    if where == "m":
        f = write(tmp_path / "m.yaml", model_dict(**over))
        run = lambda: load_model(f)  # noqa: E731
    elif where == "c":
        f = write(tmp_path / "c.yaml", cluster_dict(**over))
        run = lambda: load_cluster(f)  # noqa: E731
    else:
        f = write(tmp_path / "s.yaml", scenario_dict(tmp_path, **over))
        run = lambda: load_scenario(f)  # noqa: E731
    expect_profile_error(run, f, key, got, expected)


@pytest.mark.parametrize("over,match", [
    ({"training": {"micro_batch_size": 1, "global_batch_size": 4 * 40000}},
     r"training.global_batch_size: got 160000 = 40,000 microbatches of micro_batch_size\*dp = "
     r"1\*4, expected at most 32,767 microbatches"),
    ({"training": {"micro_batch_size": 1, "global_batch_size": 4 * 11000}},
     r"training.global_batch_size: got 44000 = 11,000 microbatches x 12 layers = 132,000, "
     r"expected microbatches x layers <= 131,072"),
])
def test_plans_too_large_to_build_are_infeasible(tmp_path: Path, over, match):  # type: ignore[no-untyped-def]
    expect_infeasible(tmp_path, over, match)


def test_too_many_dp_buckets_are_refused_when_the_plan_is_built(tmp_path: Path):
    """The bucket count needs the model's shard sizes: the plan refuses it, naming the file."""
    from tokenpcap.plan.build import build_plan

    over = {"training": {"micro_batch_size": 1, "global_batch_size": 16, "bucket_size": 50,
                         "overlap_grad_reduce": True}}
    f = write(tmp_path / "s.yaml", scenario_dict(tmp_path, **over))
    with pytest.raises(InfeasiblePlanError,
                       match=r"training.bucket_size: got 50 = .* buckets per rank .* x 8 DP "
                             r"groups = .*, expected buckets x DP groups <= 262,144, i.e. "
                             r"bucket_size >= ") as info:
        build_plan(load_scenario(f))
    assert str(info.value).startswith(f"{f}: ")


def test_a_scenario_file_stem_that_is_no_safe_name_is_refused(tmp_path: Path):
    f = write(tmp_path / "my scenario.yaml", scenario_dict(tmp_path))
    expect_profile_error(lambda: load_scenario(f), f, "name", "'my scenario'", "it names output files")
    ok = write(tmp_path / "my-scenario_2.1.yaml", scenario_dict(tmp_path))
    assert load_scenario(ok).name == "my-scenario_2.1"


def _alias_bomb(levels: int, fan: int) -> str:
    """A YAML document of a few hundred bytes whose aliases expand to ``fan ** levels`` values."""
    names = [chr(ord("a") + i) for i in range(levels)]
    lines = [f"{names[0]}: &{names[0]} [{', '.join(['x'] * fan)}]"]
    for prev, cur in zip(names, names[1:]):
        lines.append(f"{cur}: &{cur} [{', '.join(['*' + prev] * fan)}]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("where", ["top", "scenario key"])
def test_an_alias_bomb_is_refused_at_once_with_work_linear_in_the_file(tmp_path: Path, where):
    """9 levels of 10 aliases (430 bytes) stand for 10^9 values: refused, in well under the
    suite's patience (the duplicate-key walk visits each node once); a moderate use of aliases
    (an anchor reused a few times) still loads."""
    import time

    from tokenpcap.config.yamlfile import PROFILE_MAX_VALUES, load_yaml

    f = tmp_path / "bomb.yaml"
    bomb = _alias_bomb(9, 10)
    assert len(bomb) < 500
    if where == "top":
        f.write_text(bomb, encoding="utf-8")
        load = lambda: load_yaml(f)  # noqa: E731
    else:
        body = yaml.safe_dump(scenario_dict(tmp_path), sort_keys=False)
        f.write_text(bomb + body.replace("tokenizer:", "description: *i\ntokenizer:", 1),
                     encoding="utf-8")
        load = lambda: load_scenario(f)  # noqa: E731
    t0 = time.process_time()
    expect_profile_error(load, f, "<file>",
                         f"more than {PROFILE_MAX_VALUES:,} values with its aliases expanded",
                         "a profile of at most that many values")
    assert time.process_time() - t0 < 5
    ok = tmp_path / "ok.yaml"
    ok.write_text(_alias_bomb(3, 10), encoding="utf-8")         # 1,000 values: fine
    assert len(load_yaml(ok)["c"]) == 10
    rec = tmp_path / "recursive.yaml"
    rec.write_text("a: &a [1, *a]\n", encoding="utf-8")
    with pytest.raises(ProfileError, match="aliases expanded"):
        load_yaml(rec)


@pytest.mark.parametrize("key,value", [
    ("corpus", "a\0b"), ("model", "m\0.yaml"), ("cluster", "c\0.yaml"),
    ("tokenizer", {"kind": "hf", "name": "tok\0.json"}), ("tokenizer", "hf:tok\0.json")])
def test_a_nul_character_in_a_path_value_is_one_profile_error(tmp_path: Path, key, value):
    """No OS path holds NUL (Python raises ValueError): any path value with one is a
    ProfileError naming the file and the key."""
    s = write(tmp_path / "s.yaml", scenario_dict(tmp_path, **{key: value}))
    with pytest.raises(ProfileError) as err:
        load_scenario(s)
    assert str(err.value).startswith(f"{s}: {key}") or "tokenizer" in str(err.value)
    assert "NUL" in str(err.value)
    from tokenpcap.config.yamlfile import load_yaml

    with pytest.raises(ProfileError, match="NUL"):
        load_yaml(tmp_path / "a\0b.yaml")


def test_a_control_character_is_one_profile_error_not_a_reader_traceback(tmp_path: Path):
    """PyYAML's reader refuses control characters as the loader is made (found by the fuzz
    campaign: ReaderError escaped the YAML error handling)."""
    f = tmp_path / "m.yaml"
    f.write_bytes(b"name: a\x07b\n")
    expect_profile_error(lambda: load_model(f), f, "<file>", "character #x0007 at offset 7",
                         "YAML text")


def test_a_key_spanning_lines_is_named_on_one_line(tmp_path: Path):
    """A plain YAML key in a flow mapping may run over several lines (found by the fuzz
    campaign: the message had three lines); the key is written with escapes, and the CLI
    prints any library error on one line."""
    from click.testing import CliRunner

    from tokenpcap.cli import main

    s = write(tmp_path / "s.yaml", scenario_dict(tmp_path, cluster="c.yaml"))
    f = tmp_path / "c.yaml"                       # after scenario_dict, which writes its own
    d = cluster_dict()
    d.pop("gpu")
    f.write_text(yaml.safe_dump(d, sort_keys=False) + "gpu: {name: H100, peak_tfl\n\n 989}\n")
    with pytest.raises(ProfileError) as err:
        load_cluster(f)
    assert "\n" not in str(err.value) and "gpu.peak_tfl\\n989: got" in str(err.value)
    r = CliRunner().invoke(main, ["plan", str(s)])
    assert r.exit_code == 1 and r.output.count("\n") == 1 and r.output.startswith("error: ")
