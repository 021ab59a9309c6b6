"""Stage 1: token counts; BPE training deterministic and cached; offline-only tokenizers."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.errors import CorpusError, TokenizerError
from tokenpcap.config.profiles import TokenizerSpec, parse_tokenizer
from tokenpcap.tokens import cache_dir, tokenize

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bpe_cache(tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    return tmp_path_factory.mktemp("bpe-cache")


@pytest.fixture(scope="module")
def dante_bpe(corpus_path: Path, bpe_cache: Path):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    tok = tokenize(corpus_path, TokenizerSpec("bpe", 32000), 1024, cache=bpe_cache)
    return tok, time.perf_counter() - t0


def test_utf8_count_is_the_corpus_size(corpus_path: Path):
    # One token per UTF-8 byte: the count equals the bundled corpus's size in bytes.
    tok = tokenize(corpus_path, TokenizerSpec("utf8"), 1024)
    assert tok.tokens == corpus_path.stat().st_size == 543_857
    assert tok.bytes_per_token == 1.0 and tok.vocab_size == 256 and tok.id_dtype == "uint8"
    assert tok.ids.dtype == np.int32 and bytes(tok.ids.astype(np.uint8)) == corpus_path.read_bytes()
    assert tok.sequences == 543_857 // 1024
    assert tok.host_to_device_bytes() == {"int64": 8 * 543_857, "int32": 4 * 543_857,
                                          "uint16": 2 * 543_857, "uint8": 543_857}


@settings(max_examples=50, deadline=None)
@given(st.text(min_size=1))
def test_utf8_tokens_are_the_encoded_bytes(tmp_path_factory, text: str):  # type: ignore[no-untyped-def]
    f = tmp_path_factory.mktemp("u") / "c.txt"
    f.write_bytes(text.encode("utf-8"))
    tok = tokenize(f, TokenizerSpec("utf8"), 7)
    assert tok.tokens == len(text.encode("utf-8"))
    assert tok.sequences == tok.tokens // 7


def test_bpe_on_dante_is_fast_and_decodes_back(dante_bpe, corpus_path: Path, bpe_cache: Path):  # type: ignore[no-untyped-def]
    tok, seconds = dante_bpe
    text = corpus_path.read_text(encoding="utf-8")
    assert seconds < 30, f"BPE training + encoding took {seconds:.1f} s"
    assert 256 < tok.vocab_size <= 32000 and tok.ids.max() < tok.vocab_size
    assert 2.0 < tok.bytes_per_token < 6.0          # byte-level BPE on its own training text
    assert tok.id_dtype == "uint16" and tok.host_to_device_bytes()["uint8"] is None
    from tokenizers import Tokenizer

    cached = list(bpe_cache.glob("bpe-*.json"))
    assert len(cached) == 1
    assert Tokenizer.from_file(str(cached[0])).decode(tok.ids.tolist()) == text


def test_bpe_is_deterministic_across_processes(dante_bpe, corpus_path: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    tok, _ = dante_bpe
    code = ("import sys, hashlib; from tokenpcap.tokens import tokenize; "
            "from tokenpcap.config.profiles import TokenizerSpec; "
            f"t = tokenize({str(corpus_path)!r}, TokenizerSpec('bpe', 32000), 1024, "
            f"cache=__import__('pathlib').Path({str(tmp_path)!r})); "
            "print(hashlib.sha256(t.ids.tobytes()).hexdigest())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.strip()
    import hashlib

    assert out == hashlib.sha256(tok.ids.tobytes()).hexdigest()


def test_bpe_cache_is_reused_and_keyed_by_settings(dante_bpe, corpus_path: Path, bpe_cache: Path):  # type: ignore[no-untyped-def]
    tok, _ = dante_bpe
    again = tokenize(corpus_path, TokenizerSpec("bpe", 32000), 512, cache=bpe_cache)
    assert np.array_equal(again.ids, tok.ids) and again.sequences == tok.tokens // 512
    small = tokenize(corpus_path, TokenizerSpec("bpe", 1000), 1024, cache=bpe_cache)
    assert small.vocab_size == 1000 and small.tokens > tok.tokens
    assert len(list(bpe_cache.glob("bpe-*.json"))) == 2


def test_a_bpe_vocabulary_smaller_than_asked_says_so(dante_bpe, corpus_path: Path, tmp_path: Path):  # type: ignore[no-untyped-def]
    """Dante learns fewer BPE entries than the 32,000 asked; asking for twice as many learns the
    same number, which shows the corpus has no more merges. The note says so once; a
    vocabulary of the size asked, and the utf8 tokenizer, give no note."""
    tok, _ = dante_bpe
    more = tokenize(corpus_path, TokenizerSpec("bpe", 64000), 1024, cache=tmp_path)
    assert more.vocab_size == tok.vocab_size < 32000
    assert (tok.vocab_size_asked, more.vocab_size_asked) == (32000, 64000)
    assert tok.vocabulary_note == (f"vocabulary {tok.vocab_size:,} of 32,000 asked (the corpus "
                                   "has no more merges: no pair of tokens left occurs at least 2 "
                                   "times)")
    assert tok.to_json()["vocab_size_asked"] == 32000
    assert tokenize(corpus_path, TokenizerSpec("bpe", 1000), 64, cache=tmp_path).vocabulary_note is None
    utf8 = tokenize(corpus_path, TokenizerSpec("utf8"), 64)
    assert utf8.vocabulary_note is None and utf8.vocab_size_asked is None


def test_cache_dir_environment(monkeypatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("TOKENPCAP_CACHE_DIR", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x"
    monkeypatch.delenv("TOKENPCAP_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "tokenpcap"


def test_hf_tokenizer_file_gives_the_same_ids(dante_bpe, corpus_path: Path, bpe_cache: Path):  # type: ignore[no-untyped-def]
    tok, _ = dante_bpe
    from tokenizers import Tokenizer

    path = next(p for p in bpe_cache.glob("bpe-*.json")
                if Tokenizer.from_file(str(p)).get_vocab_size() == tok.vocab_size)
    hf = tokenize(corpus_path, parse_tokenizer(f"hf:{path}"), 1024)
    assert np.array_equal(hf.ids, tok.ids) and hf.tokenizer == f"hf:{path}"


def test_corpus_errors(tmp_path: Path):
    with pytest.raises(CorpusError, match=r"nope.txt: corpus: got a path that does not exist"):
        tokenize(tmp_path / "nope.txt", TokenizerSpec("utf8"), 8)
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("città".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"got byte 0xe0 at offset 4 that is not UTF-8, "
                                          r"expected UTF-8 text"):
        tokenize(bad, TokenizerSpec("utf8"), 8)
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    with pytest.raises(CorpusError, match="empty"):
        tokenize(empty, TokenizerSpec("bpe"), 8)


def test_tokenizer_errors(corpus_path: Path, tmp_path: Path):
    with pytest.raises(TokenizerError, match="expected one of 'utf8', 'bpe', 'tiktoken:NAME'"):
        parse_tokenizer("wordpiece")
    with pytest.raises(TokenizerError, match="not a local file"):
        tokenize(corpus_path, parse_tokenizer(f"hf:{tmp_path / 'none'}"), 8)
    junk = tmp_path / "tokenizer.json"
    junk.write_text("{}", encoding="utf-8")
    with pytest.raises(TokenizerError, match="not a valid tokenizer.json"):
        tokenize(corpus_path, parse_tokenizer(f"hf:{tmp_path}"), 8)
    with pytest.raises(TokenizerError, match=">= 256"):
        tokenize(corpus_path, TokenizerSpec("bpe", 100), 8, cache=tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("tiktoken") is not None,
                    reason="tiktoken is installed here")
def test_tiktoken_missing_is_a_clear_error(corpus_path: Path):
    with pytest.raises(TokenizerError, match="tiktoken package is not installed"):
        tokenize(corpus_path, parse_tokenizer("tiktoken:cl100k_base"), 8)


def test_window_wraps_around_the_corpus(corpus_path: Path):
    tok = tokenize(corpus_path, TokenizerSpec("utf8"), 16)
    n = tok.tokens
    w = tok.window(n - 2, n + 3)
    assert w.tolist() == tok.ids[[n - 2, n - 1, 0, 1, 2]].tolist()


def test_devices_fifos_and_huge_corpora_are_refused_without_reading_them(tmp_path: Path):
    """``corpus: /dev/zero``, a FIFO or a corpus over the size limit is refused from its file
    type and size, before a byte is read (reading /dev/zero would never end)."""
    import os

    from tokenpcap.tokens import CORPUS_MAX_BYTES, read_corpus

    with pytest.raises(CorpusError, match=r"^/dev/zero: corpus: got a character device, expected "
                                          r"a regular UTF-8 text corpus file$"):
        tokenize("/dev/zero", TokenizerSpec("utf8"), 8)
    fifo = tmp_path / "fifo.txt"
    os.mkfifo(fifo)                      # no writer: opening it would block
    with pytest.raises(CorpusError, match="got a FIFO"):
        read_corpus(fifo)
    with pytest.raises(CorpusError, match="got a directory"):
        read_corpus(tmp_path)
    big = tmp_path / "big.txt"
    with open(big, "wb") as fh:          # sparse: costs nothing to make
        fh.truncate(CORPUS_MAX_BYTES + 1)
    with pytest.raises(CorpusError, match=rf"got a file of {CORPUS_MAX_BYTES + 1:,} bytes, "
                                          rf"expected a UTF-8 text corpus file of at most "
                                          rf"{CORPUS_MAX_BYTES:,} bytes"):
        tokenize(big, TokenizerSpec("utf8"), 8)
    small = tmp_path / "small.txt"
    small.write_text("nel mezzo", encoding="utf-8")
    assert read_corpus(small, limit=9) == (b"nel mezzo", "nel mezzo")
    with pytest.raises(CorpusError, match="got a file of 9 bytes, expected .* at most 8 bytes"):
        read_corpus(small, limit=8)


def test_corpus_errors_of_a_scenario_name_the_scenario_file_and_key(tmp_path: Path):
    import dataclasses

    from tokenpcap.config.profiles import default_scenario_path, load_scenario
    from tokenpcap.tokens import tokenize_scenario

    s = load_scenario(default_scenario_path())
    missing = dataclasses.replace(s, corpus=tmp_path / "gone.txt",
                                  tokenizer=TokenizerSpec("utf8"))
    with pytest.raises(CorpusError) as info:
        tokenize_scenario(missing)
    assert str(info.value) == (f"{s.path}: corpus: {tmp_path / 'gone.txt'}: got a path that does "
                               "not exist, expected an existing UTF-8 text file")
    dev = dataclasses.replace(missing, corpus=Path("/dev/zero"))
    with pytest.raises(CorpusError, match=rf"^{s.path}: corpus: /dev/zero: got a character"):
        tokenize_scenario(dev)
    ok = tokenize_scenario(dataclasses.replace(s, tokenizer=TokenizerSpec("utf8")))
    assert ok.tokens == s.corpus.stat().st_size


def test_a_workload_scenario_has_no_corpus_to_tokenize():
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.errors import InputError
    from tokenpcap.tokens import tokenize_scenario

    path = ROOT / "profiles" / "scenarios" / "alltoall-64.yaml"
    with pytest.raises(InputError, match=r"^\S+alltoall-64.yaml: a workload scenario has no model: "
                       r"tokenizing a corpus needs a training scenario \(model, parallelism, "
                       r"training\)$"):
        tokenize_scenario(load_scenario(path))
