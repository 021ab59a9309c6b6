"""``tokenpcap tokens``: a malformed --tokenizer is a usage error (exit 2), as other bad option
values; what the environment lacks (an hf: path that is not there) stays a library error."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tokenpcap.cli import main


@pytest.mark.parametrize("value", ["bpx", "hf:", "tiktoken:", "utf8:x"])
def test_a_malformed_tokenizer_is_a_usage_error(tmp_path, value):
    corpus = tmp_path / "c.txt"
    corpus.write_text("nel mezzo del cammin di nostra vita\n")
    r = CliRunner().invoke(main, ["tokens", str(corpus), "--tokenizer", value])
    assert r.exit_code == 2, r.output
    assert f"Invalid value for '--tokenizer': got {value!r}, expected one of 'utf8', 'bpe', " \
           "'tiktoken:NAME', 'hf:PATH'" in r.output


def test_an_hf_path_that_is_not_there_is_a_library_error(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("nel mezzo del cammin di nostra vita\n")
    r = CliRunner().invoke(main, ["tokens", str(corpus), "--tokenizer",
                                  f"hf:{tmp_path / 'none'}"])
    assert r.exit_code == 1 and r.output.startswith("error: tokenizer: got"), r.output


def test_utf8_counts_the_bytes(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("nel mezzo\n")
    r = CliRunner().invoke(main, ["tokens", str(corpus), "--tokenizer", "utf8", "--json"])
    assert r.exit_code == 0, r.output
    assert '"tokens": 10' in r.output


PROFILES = Path(__file__).resolve().parents[2] / "profiles"


@pytest.mark.parametrize("path", sorted(PROFILES.glob("*/*.yaml")), ids=lambda p: p.stem)
def test_a_profile_given_as_the_corpus_is_named_not_tokenized(path):
    """``tokens profiles/scenarios/dante.yaml`` tokenized the YAML text as if it were the
    corpus (exit 0, a wrong answer); every bundled profile is now named as what it is."""
    r = CliRunner().invoke(main, ["tokens", str(path), "--tokenizer", "utf8"])
    assert r.exit_code == 1, r.output
    [line] = r.stderr.strip().splitlines()
    kind = {"scenarios": "a scenario", "models": "a model profile",
            "clusters": "a cluster profile"}[path.parent.name]
    assert line.startswith(f"error: {path}: CORPUS: got {kind}, expected a corpus text file")
    if "corpus:" in path.read_text():
        assert f"this scenario's is {PROFILES.parent / 'samples' / 'divina_commedia.txt'}" in line


def test_a_yaml_text_that_is_no_profile_is_a_corpus(tmp_path):
    corpus = tmp_path / "verses.yaml"
    corpus.write_text("- nel mezzo del cammin di nostra vita\n- mi ritrovai per una selva oscura\n")
    r = CliRunner().invoke(main, ["tokens", str(corpus), "--tokenizer", "utf8", "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["tokens"] == corpus.stat().st_size
