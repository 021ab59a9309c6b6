"""`tokenpcap tokens` and `tokenpcap plan` through click's CliRunner: exit codes and output."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tokenpcap.cli import main

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "profiles"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    return tmp_path_factory.mktemp("tokenpcap-cache")


@pytest.fixture
def run(cache: Path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TOKENPCAP_CACHE_DIR", str(cache))

    def _run(*args: str):  # type: ignore[no-untyped-def]
        return CliRunner().invoke(main, list(args), catch_exceptions=False)

    return _run


def test_tokens_utf8_json(run, corpus_path: Path):  # type: ignore[no-untyped-def]
    res = run("tokens", str(corpus_path), "--tokenizer", "utf8", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["tokens"] == data["corpus_bytes"] == corpus_path.stat().st_size
    assert data["host_to_device_bytes"]["int64"] == 8 * data["tokens"]
    assert data["sequences"] == data["tokens"] // 1024


def test_tokens_bpe_table(run, corpus_path: Path):  # type: ignore[no-untyped-def]
    res = run("tokens", str(corpus_path), "--vocab-size", "2000", "--seq-length", "256")
    assert res.exit_code == 0, res.output
    assert "543,857" in res.stdout and "sequences of 256" in res.stdout
    assert "host→device as uint8" in res.stdout and "does not fit" in res.stdout


def test_plan_default_json(run):  # type: ignore[no-untyped-def]
    res = run("plan", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["scenario"] == "dante" and data["parameters"]["total"] == 124_439_808
    assert data["totals"]["nic_bytes"] == sum(p["nic_bytes"] for p in data["phases"])
    assert data["epoch"]["tokens"] == data["tokens"]["tokens"]
    # Megatron drops the incomplete last global batch: whole iterations of 16 sequences of 1024
    assert data["epoch"]["iterations"] == data["tokens"]["tokens"] // 1024 // 16
    assert data["epoch"]["iterations_exact"] == data["tokens"]["tokens"] / (16 * 1024)
    assert data["scale"] == 1
    for p in data["phases"]:
        assert set(p) >= {"name", "collective", "group_size", "message_bytes", "count",
                          "nic_bytes_per_rank", "nvlink_bytes_per_rank"}
        assert p["name"].endswith("/" + p["collective"])


def test_plan_human_tables(run):  # type: ignore[no-untyped-def]
    res = run("plan", str(PROFILES / "scenarios" / "gpt2-all-cross.yaml"))
    assert res.exit_code == 0, res.output
    for text in ("tp/forward/AllReduce", "dp/backward/AllReduce", "pp/backward/SendRecv",
                 "NIC bytes (all NICs)", "pcap bytes (estimate)", "1F1B bubble"):
        assert text in res.stdout
    res2 = run("plan", str(PROFILES / "scenarios" / "gpt2-all-cross.yaml"), "--no-tokens")
    assert res2.exit_code == 0 and "one epoch" in res2.stdout


def write(path: Path, data) -> Path:  # type: ignore[no-untyped-def]
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def bad_scenario(tmp_path: Path, model_over=None, **over) -> Path:  # type: ignore[no-untyped-def]
    m = yaml.safe_load((PROFILES / "models" / "gpt2-small.yaml").read_text())
    m.update(model_over or {})
    write(tmp_path / "m.yaml", m)
    d = {"corpus": str(ROOT / "samples" / "divina_commedia.txt"), "tokenizer": "utf8",
         "model": "m.yaml", "cluster": str(PROFILES / "clusters" / "h100-rocev2-400g.yaml"),
         "parallelism": {"dp": 4, "tp": 4, "pp": 2},
         "training": {"micro_batch_size": 1, "global_batch_size": 16}}
    d.update(over)
    return write(tmp_path / "s.yaml", d)


def one_line_error(res, *parts: str) -> None:  # type: ignore[no-untyped-def]
    assert res.exit_code == 1, res.output
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr
    for p in parts:
        assert p in lines[0], (p, lines[0])


def test_unknown_key(run, tmp_path: Path):  # type: ignore[no-untyped-def]
    f = bad_scenario(tmp_path, trainning={"x": 1})
    one_line_error(run("plan", str(f)), str(f), "trainning", "got 'trainning'",
                   "expected a known key")


def test_missing_key(run, tmp_path: Path):  # type: ignore[no-untyped-def]
    f = bad_scenario(tmp_path, training={"micro_batch_size": 1})
    one_line_error(run("plan", str(f)), str(f), "training.global_batch_size", "got missing",
                   "expected a value")


@pytest.mark.parametrize("value", [0, -2])
def test_zero_or_negative_size(run, tmp_path: Path, value: int):  # type: ignore[no-untyped-def]
    f = bad_scenario(tmp_path, model_over={"hidden_size": value})
    one_line_error(run("plan", str(f)), str(tmp_path / "m.yaml"), "hidden_size",
                   f"got {value}", "expected an integer in [1, 131,072]")


def test_heads_not_divisible_by_tp(run, tmp_path: Path):  # type: ignore[no-untyped-def]
    f = bad_scenario(tmp_path, parallelism={"dp": 2, "tp": 8, "pp": 2})
    one_line_error(run("plan", str(f)), str(f), "parallelism.tp",
                   "got 8 with model attention_heads 12", "expected a tp that divides")


def test_dp_tp_pp_not_the_gpu_count(run, tmp_path: Path):  # type: ignore[no-untyped-def]
    f = bad_scenario(tmp_path, parallelism={"dp": 2, "tp": 4, "pp": 2})
    one_line_error(run("plan", str(f)), str(f), "got dp*tp*pp = 2*4*2 = 16",
                   "expected the cluster's GPU count nodes*gpus_per_node = 4*8 = 32")


def test_pipeline_split_megatron_refuses(run, tmp_path: Path):  # type: ignore[no-untyped-def]
    """12 layers on pp 2 with 5 on the first stage and 5 on the last leave 2 layers and no
    middle stage: Megatron-core's 'Mismatch' (TransformerConfig.__post_init__)."""
    f = bad_scenario(tmp_path, parallelism={"dp": 4, "tp": 4, "pp": 2,
                                            "decoder_first_pipeline_num_layers": 5,
                                            "decoder_last_pipeline_num_layers": 5})
    one_line_error(run("plan", str(f)), str(f), "parallelism.pp",
                   "got 2 with 2 layers left for 0 middle stages",
                   "expected middle layers exactly when there are middle stages")


def test_missing_corpus(run, tmp_path: Path):  # type: ignore[no-untyped-def]
    f = bad_scenario(tmp_path, corpus="nowhere.txt")
    one_line_error(run("plan", str(f)), f"{f}: corpus: {tmp_path / 'nowhere.txt'}: got a path",
                   "does not exist", "expected an existing UTF-8 text file")
    one_line_error(run("tokens", str(tmp_path / "nowhere.txt")), "does not exist")


def test_corpus_not_utf8(run, tmp_path: Path):  # type: ignore[no-untyped-def]
    bad = tmp_path / "cp1252.txt"
    bad.write_bytes("perch\xe9 ".encode("latin-1") * 3)
    f = bad_scenario(tmp_path, corpus=str(bad))
    one_line_error(run("plan", str(f)), f"{f}: corpus: {bad}", "got byte 0xe9 at offset 5",
                   "expected UTF-8 text")
    dev = bad_scenario(tmp_path, corpus="/dev/zero")        # was read until memory ran out
    one_line_error(run("run", str(dev), "-o", str(tmp_path / "out")),
                   f"{dev}: corpus: /dev/zero: got a character device")
    assert not (tmp_path / "out").exists()
    one_line_error(run("tokens", str(bad), "--tokenizer", "utf8"), "not UTF-8")


def test_missing_scenario_file_and_bad_tokenizer(run, tmp_path: Path, corpus_path: Path):  # type: ignore[no-untyped-def]
    one_line_error(run("plan", str(tmp_path / "none.yaml")), "none.yaml", "<file>",
                   "expected an existing YAML file")
    r = run("tokens", str(corpus_path), "--tokenizer", "sentencepiece")    # a usage error
    assert r.exit_code == 2 and "got 'sentencepiece'" in r.output and "expected one of" in r.output


def test_usage_errors_exit_2(run):  # type: ignore[no-untyped-def]
    assert run("plan", "--frobnicate").exit_code == 2
    assert run("tokens").exit_code == 2
    assert run("tokens", "x.txt", "--vocab-size", "0").exit_code == 2


def test_plan_of_a_corpus_shorter_than_one_batch_says_so(run, tmp_path: Path):  # type: ignore[no-untyped-def]
    """A 6-token corpus makes no whole iteration: an epoch is whole iterations (Megatron drops
    incomplete global batches), so 0 and 0 bytes per epoch, not a fraction of an iteration's
    bytes, with a note that says why."""
    corpus = tmp_path / "six.txt"
    corpus.write_text("abcdef", encoding="utf-8")
    text = (PROFILES / "scenarios" / "dante.yaml").read_text(encoding="utf-8")
    text = text.replace("../", f"{PROFILES}/")
    lines = [f"corpus: {corpus}" if ln.startswith("corpus:") else
             "tokenizer: utf8" if ln.startswith("tokenizer:") else ln for ln in text.splitlines()]
    scen = tmp_path / "six.yaml"
    scen.write_text("\n".join(lines) + "\n", encoding="utf-8")
    res = run("plan", str(scen), "--json")
    assert res.exit_code == 0, res.output
    ep = json.loads(res.stdout)["epoch"]
    assert ep == {"tokens": 6, "sequences": 0, "iterations": 0, "iterations_exact": 6 / 16384,
                  "fills_batch": False, "reads_per_iteration": 16384 / 6,
                  "dropped_sequences": 0, "dropped_tokens": 6, "nic_bytes": 0,
                  "nvlink_bytes": 0, "pcap_bytes": 0}
    res = run("plan", str(scen))
    assert "does not fill one global batch" in res.stdout and "Megatron drops" in res.stdout


def test_plan_scale_option(run):  # type: ignore[no-untyped-def]
    def dp_bytes(*scale: str) -> tuple[int, int]:
        data = json.loads(run("plan", "--json", "--no-tokens", *scale).stdout)
        dp = [p for p in data["phases"] if p["name"] == "dp/backward/AllReduce"][0]
        return data["scale"], dp["message_bytes"]
    full = dp_bytes()[1]
    # every size / 16 in whole bf16 elements (plan.calls.scaled_bytes)
    assert dp_bytes("--scale", "16") == (16, full // 16 // 2 * 2)
    assert run("plan", "--scale", "0").exit_code == 2


@pytest.mark.parametrize("text,where", [
    ("model: [1, 2\ncluster: x\n", "line 2, column 8 (expected ',' or ']', but got ':')"),
    ("a: b: c\n", "line 1, column 5 (mapping values are not allowed here)"),
])
def test_broken_scenario_yaml_names_line_column_and_reason(run, tmp_path: Path, text, where):  # type: ignore[no-untyped-def]
    """A scenario the YAML parser rejects is one line on stderr with the parser's line, column
    (1-based, as editors count) and reason, exit 1."""
    scen = tmp_path / "broken.yaml"
    scen.write_text(text, encoding="utf-8")
    res = run("plan", str(scen))
    assert res.exit_code == 1
    assert res.stderr == f"error: {scen}: <file>: got invalid YAML at {where}, expected valid YAML\n"


def test_plan_and_tokens_say_once_that_the_bpe_vocabulary_is_smaller_than_asked(run, corpus_path: Path):  # type: ignore[no-untyped-def]
    """Dante's BPE learns fewer entries than the scenario's 32,000: plan and tokens say it in one
    line each; plan's epoch note counts one dropped sequence in the singular."""
    vocab = json.loads(run("tokens", str(corpus_path), "--json").stdout)["vocab_size"]
    note = (f"vocabulary {vocab:,} of 32,000 asked (the corpus has no more merges: no pair of "
            "tokens left occurs at least 2 times)")
    res = run("tokens", str(corpus_path))
    assert res.exit_code == 0 and res.stdout.splitlines().count(note) == 1, res.stdout
    res = run("plan")
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    assert lines.count(note) == 1 and sum("asked" in ln for ln in lines) == 1
    ep = json.loads(run("plan", "--json").stdout)["epoch"]
    assert ep["dropped_sequences"] == 1
    assert lines[-1] == (f"one epoch = {ep['iterations']} whole iterations "
                         f"({ep['iterations_exact']:,.3f} by tokens; the last incomplete global "
                         f"batch, 1 sequence / {ep['dropped_tokens']:,} tokens, is dropped as "
                         "Megatron does)")


def test_plan_names_context_parallelism_and_model_chunks(run, tmp_path: Path):  # type: ignore[no-untyped-def]
    res = run("plan", str(PROFILES / "scenarios" / "llama3-70b-64k-cp4.yaml"), "--no-tokens")
    assert res.exit_code == 0, res.output
    assert "pp 4 ep 1 cp 4," in " ".join(res.output.split())
    assert "cp/forward/SendRecv" in res.output and "cp/backward/SendRecv" in res.output
    src = (PROFILES / "scenarios" / "gpt2-all-cross.yaml").read_text()
    src = src.replace("../../", str(ROOT) + "/").replace("../", str(PROFILES) + "/")
    src = src.replace("parallelism: {dp: 2, tp: 2, pp: 2,",
                      "parallelism: {dp: 2, tp: 2, pp: 2, virtual_pipeline_model_parallel_size: 2,")
    f = tmp_path / "vpp.yaml"
    f.write_text(src)
    res = run("plan", str(f), "--no-tokens", "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["parallelism"]["virtual_pipeline_model_parallel_size"] == 2
    assert data["bubble_fraction"] == pytest.approx((2 - 1) / (2 * data["microbatches"]))
    assert [s["chunks"] for s in data["parameters"]["per_stage"]] == [[[0, 2], [6, 8]],
                                                                      [[3, 5], [9, 11]]]


# ------------------------------------------------------------------ workload scenarios

def test_plan_of_a_workload_scenario_has_no_model_section(run):  # type: ignore[no-untyped-def]
    path = str(PROFILES / "scenarios" / "incast-63x16m.yaml")
    res = run("plan", path)
    assert res.exit_code == 0, res.output
    assert res.stdout.startswith("incast-63x16m: workload incast (63 senders -> rank 0, "
                                 "16,777,216 B, x1) on h100-rocev2-64x1 (64 GPUs, 64 nodes)")
    assert "the receiver's NIC takes 1,056,964,608 B: at least 21,139.3 µs" in res.stdout
    assert "wl/run/SendRecv" in res.stdout and "microbatches" not in res.stdout
    data = json.loads(run("plan", path, "--json", "--scale", "16").stdout)
    assert data["model"] is None and data["epoch"] is None and "parameters" not in data
    assert data["workload"]["kind"] == "incast" and data["scale"] == 16
    assert data["totals"]["nic_bytes"] == 63 * (16 << 20) // 16 and data["totals"]["tokens"] == 0
    res = run("plan", str(PROFILES / "scenarios" / "alltoall-64.yaml"))
    assert res.exit_code == 0 and "1,048,576 B per pair" in res.stdout


def test_plan_of_a_flows_workload():
    r = CliRunner().invoke(main, ["plan", str(ROOT / "tests/cases/hpcc/incast8x1m-flows.yaml")])
    assert r.exit_code == 0, r.output
    # tests/cases/hpcc/incast8x1m-flows.txt: 8 flows of 1 MiB, senders 1..8 and receiver 0
    assert "workload flows (8 flows of incast8x1m-flows.txt over 9 ranks, open loop, 8,388,608 B" \
        in " ".join(r.output.split())


def test_plan_protocol_lines_count_every_call_of_the_phase(run):  # type: ignore[no-untyped-def]
    """A phase whose calls mix protocols (dante's TP Broadcasts: LL up to NCCL's LL threshold,
    Simple above) names the Simple calls beside the LL ones: the counts of a line add up to the
    phase's calls in ``--json``, and each other protocol's count is the JSON's."""
    dante = str(PROFILES / "scenarios" / "dante.yaml")
    phases = {r["name"]: r for r in json.loads(run("plan", dante, "--no-tokens", "--json").stdout)[
        "phases"]}
    lines = [ln for ln in run("plan", dante, "--no-tokens").stdout.splitlines()
             if ": NCCL protocol " in ln]
    assert lines
    mixed = 0
    for ln in lines:
        name, rest = ln.split(": NCCL protocol ", 1)
        counts = {}
        for part in rest.split(";", 1)[0].split(", "):
            proto, n, _ = part.split(" ")
            counts[proto] = int(n.replace(",", ""))
        row = phases[name]
        assert sum(counts.values()) == row["calls"], ln
        assert {k: v for k, v in counts.items() if k != "Simple"} == row["protocols"], ln
        mixed += "Simple" in counts
    assert mixed >= 1
