"""Stage 1: corpus text → token ids and counts.

Tokenizers:

* ``utf8``: byte-level, one token per UTF-8 byte (id = byte value, vocabulary 256), so the token
  count equals the corpus size in bytes.
* ``bpe``: byte-level BPE trained on the corpus itself with the Hugging Face ``tokenizers``
  library (GPT-2-style byte-level pre-tokenizer, ``min_frequency`` 2, no special tokens). Training
  is deterministic; the trained tokenizer (JSON) is cached under :func:`cache_dir` keyed by the
  corpus SHA-256 and the settings, and written atomically (temp file + rename). Training on the
  544 KB Divine Comedy takes about a second; the vocabulary may end smaller than asked when the
  corpus has no more pairs to merge.
* ``tiktoken:NAME``: an OpenAI encoding, only if the ``tiktoken`` package and its encoding file are
  available locally (no download is attempted on purpose: ``TIKTOKEN_CACHE_DIR`` must hold it).
* ``hf:PATH``: a local Hugging Face ``tokenizer.json`` (a file, or a directory holding one).

The whole corpus is encoded as one text. Ids are kept as a numpy ``int32`` array so that later
stages can map tokens to samples and microbatches (sample ``k`` of length ``s`` holds tokens
``[k*s, (k+1)*s)``).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from tokenpcap.errors import InputError, CorpusError, TokenizerError
from tokenpcap.config.profiles import Scenario, TokenizerSpec

__all__ = ["TokenizedCorpus", "read_corpus", "tokenize", "tokenize_scenario",
           "check_scenario_corpus", "cache_dir",
           "token_bytes", "BPE_MIN_FREQUENCY", "CORPUS_MAX_BYTES"]

BPE_MIN_FREQUENCY = 2
_CACHE_FORMAT = 1


def cache_dir() -> Path:
    """``$TOKENPCAP_CACHE_DIR``, else ``$XDG_CACHE_HOME/tokenpcap``, else ``~/.cache/tokenpcap``."""
    env = os.environ.get("TOKENPCAP_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tokenpcap"


#: Largest corpus read (bytes). The whole corpus is held and tokenized in memory: its bytes, the
#: decoded text (1-4 bytes per character), int32 ids (4 bytes per token; utf8 makes one token
#: per byte) and the BPE trainer's word counts, about 10x its size at the peak; 256 MiB keeps
#: that within a few GB. The bundled Divine Comedy is 0.5 MiB. Larger corpora: tokenize a
#: representative sample (per-epoch totals scale with the token count).
CORPUS_MAX_BYTES = 256 << 20


def read_corpus(path: str | Path, limit: int = CORPUS_MAX_BYTES) -> tuple[bytes, str]:
    """Read a corpus file: its raw bytes and the decoded text.

    The file must be a regular file of at most ``limit`` bytes: devices (``/dev/zero``), FIFOs
    and directories are refused from their ``stat``, a larger file from its size, and the read
    stops at ``limit + 1`` bytes, so nothing is read until memory runs out.

    Raises:
        CorpusError: the file does not exist, cannot be read, is not a regular file, is larger
            than ``limit``, is empty, or is not valid UTF-8 (the message names the byte offset
            of the first invalid byte).
    """
    from tokenpcap.config.yamlfile import FileRefused, read_limited

    p = Path(path)
    try:
        data = read_limited(p, limit, "UTF-8 text corpus")
    except FileNotFoundError:
        raise CorpusError(f"{p}: corpus: got a path that does not exist, expected an existing "
                          "UTF-8 text file") from None
    except FileRefused as err:
        raise CorpusError(f"{p}: corpus: got {err.got}, expected {err.expected}") from None
    except OSError as err:
        raise CorpusError(f"{p}: corpus: got unreadable file ({err.strerror}), expected a "
                          "readable UTF-8 text file") from None
    if not data:
        raise CorpusError(f"{p}: corpus: got an empty file, expected UTF-8 text")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise CorpusError(f"{p}: corpus: got byte 0x{data[err.start]:02x} at offset {err.start} "
                          "that is not UTF-8, expected UTF-8 text") from None
    return data, text


@dataclass(frozen=True)
class TokenizedCorpus:
    """A tokenized corpus.

    Attributes:
        corpus: the corpus path.
        corpus_bytes: size of the corpus file in bytes.
        corpus_sha256: hex SHA-256 of the corpus bytes.
        tokenizer: label, e.g. ``"bpe"``, ``"utf8"``, ``"tiktoken:cl100k_base"``.
        vocab_size: size of the tokenizer's vocabulary actually in use (ids are below it).
        seq_length: the model's sequence length ``s`` used for :attr:`sequences`.
        ids: token ids, numpy ``int32`` of shape ``(tokens,)`` (read-only).
        vocab_size_asked: the BPE vocabulary size asked for (``None`` for the other kinds); BPE
            training stops early when no pair of tokens is left that occurs at least
            :data:`BPE_MIN_FREQUENCY` times, so :attr:`vocab_size` may be smaller.
    """

    corpus: Path
    corpus_bytes: int
    corpus_sha256: str
    tokenizer: str
    vocab_size: int
    seq_length: int
    ids: np.ndarray = field(repr=False)
    vocab_size_asked: int | None = None

    @property
    def tokens(self) -> int:
        return int(self.ids.shape[0])

    @property
    def bytes_per_token(self) -> float:
        """Corpus bytes per token (UTF-8 bytes of text, not bytes of ids)."""
        return self.corpus_bytes / self.tokens

    @property
    def sequences(self) -> int:
        """Whole sequences of ``seq_length`` tokens: ``tokens // seq_length``."""
        return self.tokens // self.seq_length

    @property
    def vocabulary_note(self) -> str | None:
        """One line when a BPE vocabulary ended smaller than asked, e.g. ``"vocabulary 10,310 of
        32,000 asked (the corpus has no more merges: no pair of tokens left occurs at least 2
        times)"``; ``None`` when it has the size asked or the tokenizer is not trained here."""
        if self.vocab_size_asked is None or self.vocab_size >= self.vocab_size_asked:
            return None
        return (f"vocabulary {self.vocab_size:,} of {self.vocab_size_asked:,} asked (the corpus "
                f"has no more merges: no pair of tokens left occurs at least "
                f"{BPE_MIN_FREQUENCY} times)")

    @property
    def id_dtype(self) -> str:
        """Smallest unsigned dtype that holds every id: ``uint8``, ``uint16`` or ``uint32``."""
        for name in ("uint8", "uint16"):
            if self.vocab_size <= np.iinfo(name).max + 1:
                return name
        return "uint32"

    def host_to_device_bytes(self) -> dict[str, int | None]:
        """Bytes of all token ids moved host→device as ``int64`` (PyTorch's default for indices),
        ``int32``, ``uint16`` and ``uint8``; ``None`` where the vocabulary does not fit."""
        n = self.tokens
        return {
            "int64": 8 * n,
            "int32": 4 * n,
            "uint16": 2 * n if self.vocab_size <= 1 << 16 else None,
            "uint8": n if self.vocab_size <= 1 << 8 else None,
        }

    def window(self, start: int, end: int) -> np.ndarray:
        """Token ids ``[start, end)`` of the corpus repeated endlessly (index ``i`` is token ``i %
        tokens``: epochs repeat). ``int32`` array of shape ``(end - start,)``."""
        if end < start:
            raise InputError(f"window end {end} < start {start}")
        idx = np.arange(start, end, dtype=np.int64) % self.tokens
        return self.ids[idx]

    def to_json(self) -> dict:
        return {
            "corpus": str(self.corpus),
            "corpus_bytes": self.corpus_bytes,
            "corpus_sha256": self.corpus_sha256,
            "tokenizer": self.tokenizer,
            "vocab_size": self.vocab_size,
            "vocab_size_asked": self.vocab_size_asked,
            "tokens": self.tokens,
            "bytes_per_token": self.bytes_per_token,
            "seq_length": self.seq_length,
            "sequences": self.sequences,
            "id_dtype": self.id_dtype,
            "host_to_device_bytes": self.host_to_device_bytes(),
        }


def tokenize(corpus: str | Path, spec: TokenizerSpec, seq_length: int,
             cache: Path | None = None) -> TokenizedCorpus:
    """Tokenize a corpus file with the tokenizer ``spec`` (module docstring for the kinds).

    Args:
        corpus: path of a UTF-8 text file.
        spec: tokenizer kind and settings.
        seq_length: the model's sequence length (tokens per sample), >= 1.
        cache: directory of trained BPE tokenizers (default :func:`cache_dir`).

    Raises:
        CorpusError: as :func:`read_corpus`.
        TokenizerError: an unknown kind, ``tiktoken``/``hf`` not available offline, an invalid
            tokenizer file, or a BPE vocabulary smaller than 256.
        InputError: ``seq_length < 1``.
    """
    if seq_length < 1:
        raise InputError(f"seq_length {seq_length} < 1")
    data, text = read_corpus(corpus)
    sha = hashlib.sha256(data).hexdigest()
    if spec.kind == "utf8":
        ids = np.frombuffer(data, dtype=np.uint8).astype(np.int32)
        label, vocab = "utf8", 256
    elif spec.kind == "bpe":
        tok = _bpe(text, sha, spec.vocab_size, cache if cache is not None else cache_dir())
        ids = np.asarray(tok.encode(text).ids, dtype=np.int32)
        label, vocab = "bpe", tok.get_vocab_size()
    elif spec.kind == "tiktoken":
        enc = _tiktoken(spec.name or "")
        ids = np.asarray(enc.encode_ordinary(text), dtype=np.int32)
        label, vocab = f"tiktoken:{spec.name}", int(enc.n_vocab)
    elif spec.kind == "hf":
        tok = _hf(spec.name or "")
        ids = np.asarray(tok.encode(text, add_special_tokens=False).ids, dtype=np.int32)
        label, vocab = f"hf:{spec.name}", tok.get_vocab_size()
    else:
        raise TokenizerError(f"tokenizer: got {spec.kind!r}, expected utf8, bpe, tiktoken or hf")
    ids.setflags(write=False)
    return TokenizedCorpus(corpus=Path(corpus), corpus_bytes=len(data), corpus_sha256=sha,
                           tokenizer=label, vocab_size=int(vocab), seq_length=seq_length, ids=ids,
                           vocab_size_asked=spec.vocab_size if spec.kind == "bpe" else None)


def tokenize_scenario(scenario: Scenario, cache: Path | None = None) -> TokenizedCorpus:
    """:func:`tokenize` the corpus of ``scenario`` with its tokenizer and the model's sequence
    length; a corpus error also names the scenario file and its key ``corpus``.

    Raises:
        CorpusError: ``<scenario file>: corpus: <corpus path>: got ..., expected ...``.
        TokenizerError: as :func:`tokenize`.
        InputError: a workload scenario (no corpus, no model).
    """
    model = scenario.require_model("tokenizing a corpus")
    with _named_by(scenario):
        return tokenize(scenario.corpus, scenario.tokenizer, model.seq_length, cache)


def check_scenario_corpus(scenario: Scenario) -> None:
    """:func:`read_corpus`'s checks of ``scenario``'s corpus (an existing, readable, regular,
    non-empty UTF-8 file), for the commands that do not need its tokens (``generate``,
    ``export``, ``plot``: a packet's token range is a position in the sequence, whatever the
    text): a scenario is refused by them as by ``run`` and ``plan``. Nothing for a workload
    scenario (no corpus).

    Raises:
        CorpusError: ``<scenario file>: corpus: <corpus path>: got ..., expected ...``.
    """
    if scenario.workload is None:
        with _named_by(scenario):
            read_corpus(scenario.corpus)


@contextlib.contextmanager
def _named_by(scenario: Scenario) -> Iterator[None]:
    """A :class:`CorpusError` raised in the block, raised again naming the scenario file and
    its key ``corpus`` before the corpus path."""
    try:
        yield
    except CorpusError as err:
        where = str(scenario.path) if scenario.path is not None else f"<scenario {scenario.name!r}>"
        text = str(err)
        prefix = f"{scenario.corpus}: corpus: "
        if text.startswith(prefix):
            text = f"{scenario.corpus}: " + text[len(prefix):]
        raise CorpusError(f"{where}: corpus: {text}") from None


def _byte_level_alphabet() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2's ``bytes_to_unicode``, which ``tokenizers``'
    ``ByteLevel`` pre-tokenizer uses): the character standing for each byte value, inverted.
    Printable Latin-1 bytes stand for themselves; the others, in byte order, for U+0100 on."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


def token_bytes(spec: TokenizerSpec, corpus: TokenizedCorpus,
                cache: Path | None = None) -> list[bytes]:
    """The bytes of text each id of ``corpus.ids`` stands for, by the tokenizer ``spec`` that
    made it (the BPE tokenizer is read back from :func:`cache_dir`, or trained again). For the
    byte-level tokenizers (``utf8``, ``bpe``, ``tiktoken``) they concatenate to the corpus bytes;
    a token may hold part of a multi-byte character. ``hf`` tokenizers: each id decoded alone.

    Raises:
        CorpusError, TokenizerError: as :func:`tokenize`.
    """
    ids = corpus.ids.tolist()
    if spec.kind == "utf8":
        return [bytes((i,)) for i in ids]
    if spec.kind == "tiktoken":
        enc = _tiktoken(spec.name or "")
        return [enc.decode_single_token_bytes(i) for i in ids]
    if spec.kind == "bpe":
        data, text = read_corpus(corpus.corpus)
        tok = _bpe(text, hashlib.sha256(data).hexdigest(), spec.vocab_size,
                   cache if cache is not None else cache_dir())
        inv = _byte_level_alphabet()
        vocab = {i: bytes(inv[c] for c in tok.id_to_token(i)) for i in set(ids)}
        return [vocab[i] for i in ids]
    tok = _hf(spec.name or "")
    vocab = {i: tok.decode([i]).encode() for i in set(ids)}
    return [vocab[i] for i in ids]


def _bpe(text: str, sha: str, vocab_size: int, cache: Path):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    import tokenizers

    if vocab_size < 256:
        raise TokenizerError(f"tokenizer.vocab_size: got {vocab_size}, expected >= 256 for "
                             "byte-level BPE (256 byte symbols)")
    settings = {"format": _CACHE_FORMAT, "kind": "bpe", "vocab_size": vocab_size,
                "min_frequency": BPE_MIN_FREQUENCY, "tokenizers": tokenizers.__version__}
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    path = cache / f"bpe-{sha[:24]}-{key}.json"
    if path.exists():
        try:
            return Tokenizer.from_file(str(path))
        except Exception:   # a corrupt cache entry: retrain and overwrite it
            pass
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=BPE_MIN_FREQUENCY,
                                  show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text], trainer=trainer)
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".bpe-", suffix=".json", dir=cache)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(tok.to_str())
        os.replace(tmp, path)
    except OSError:
        pass   # an unwritable cache only costs the next run a retraining
    return tok


def _tiktoken(name: str):  # type: ignore[no-untyped-def]
    try:
        import tiktoken
    except ImportError:
        raise TokenizerError(f"tokenizer: got 'tiktoken:{name}', but the tiktoken package is not "
                             "installed; expected it installed with its encoding cached "
                             "(pip install tiktoken; TIKTOKEN_CACHE_DIR)") from None
    try:
        return tiktoken.get_encoding(name)
    except Exception as err:  # unknown name, or the encoding file is not available offline
        raise TokenizerError(f"tokenizer: got 'tiktoken:{name}' that cannot be loaded offline "
                             f"({type(err).__name__}), expected an encoding in "
                             "TIKTOKEN_CACHE_DIR") from None


def _hf(name: str):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer

    p = Path(name)
    if p.is_dir():
        p = p / "tokenizer.json"
    if not p.is_file():
        raise TokenizerError(f"tokenizer: got 'hf:{name}' that is not a local file, expected a "
                             "tokenizer.json file or a directory holding one (hub downloads are "
                             "not attempted)")
    try:
        return Tokenizer.from_file(str(p))
    except Exception as err:
        raise TokenizerError(f"tokenizer: got 'hf:{name}' that is not a valid tokenizer.json "
                             f"({type(err).__name__}), expected a Hugging Face tokenizer file") \
            from None
