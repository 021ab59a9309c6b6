"""``tokenpcap tokens CORPUS``: token counts of a corpus under one tokenizer."""
from __future__ import annotations

import json

import click

from tokenpcap.cli import main
from tokenpcap.cli.common import library_errors
from tokenpcap.cli.plan_cmd import console
from tokenpcap.config.profiles import parse_tokenizer
from tokenpcap.errors import InputError, ProfileError, TokenizerError
from tokenpcap.tokens import tokenize


def _tokenizer_option(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A malformed ``--tokenizer`` is a usage error (exit 2), before the corpus is read; an
    ``hf:`` path or ``tiktoken`` encoding that is missing stays a library error (exit 1)."""
    try:
        parse_tokenizer(value)
    except TokenizerError as err:
        raise click.BadParameter(str(err).removeprefix("tokenizer: ")) from None
    return value


def _refuse_a_profile(corpus: str) -> None:
    """A scenario, model or cluster profile given as CORPUS (``tokens profiles/scenarios/
    dante.yaml``) is named as such, with the scenario's corpus, instead of having its YAML text
    tokenized as if it were the corpus. A ``.yaml``/``.yml`` file that is not a profile (or not
    YAML) is a corpus like any other.

    Raises:
        InputError: CORPUS is a profile.
    """
    import os
    from pathlib import Path

    from tokenpcap.config.profilekind import profile_kind
    from tokenpcap.config.yamlfile import load_yaml

    path = Path(corpus)
    if path.suffix.lower() not in (".yaml", ".yml"):
        return
    try:
        data = load_yaml(path)
    except ProfileError:                    # not YAML, missing, ...: tokenize() says what
        return
    kind = profile_kind(data)
    if kind is None:
        return
    hint = ""
    if kind == "a scenario" and isinstance(data.get("corpus"), str):
        hint = (f" (this scenario's is {os.path.normpath(path.parent / data['corpus'])}; "
                f"`tokenpcap plan {corpus}` tokenizes it with the scenario's tokenizer)")
    elif kind == "a scenario":
        hint = " (a workload scenario has none)"
    raise InputError(f"{corpus}: CORPUS: got {kind}, expected a corpus text file{hint}")


@main.command("tokens")
@click.argument("corpus", type=click.Path(dir_okay=False, path_type=str))
@click.option("--tokenizer", "tokenizer", default="bpe", show_default=True,
              callback=_tokenizer_option, help="utf8 | bpe | tiktoken:NAME | hf:PATH")
@click.option("--vocab-size", type=click.IntRange(min=1), default=32000, show_default=True,
              help="BPE vocabulary size to train.")
@click.option("--seq-length", type=click.IntRange(min=1), default=1024, show_default=True,
              help="Tokens per training sequence.")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@library_errors
def tokens_cmd(corpus: str, tokenizer: str, vocab_size: int, seq_length: int,
               as_json: bool) -> None:
    """Tokenize CORPUS: tokens, bytes per token, sequences, host→device bytes of the ids."""
    _refuse_a_profile(corpus)
    result = tokenize(corpus, parse_tokenizer(tokenizer, vocab_size), seq_length)
    data = result.to_json()
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    from rich.table import Table

    table = Table(title=f"{data['corpus']} — {data['tokenizer']}", show_header=False)
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_row("corpus bytes", f"{data['corpus_bytes']:,}")
    table.add_row("tokens", f"{data['tokens']:,}")
    table.add_row("vocabulary", f"{data['vocab_size']:,}")
    table.add_row("bytes per token", f"{data['bytes_per_token']:.3f}")
    table.add_row(f"sequences of {seq_length}", f"{data['sequences']:,}")
    for dtype, nbytes in data["host_to_device_bytes"].items():
        table.add_row(f"host→device as {dtype}",
                      "does not fit" if nbytes is None else f"{nbytes:,} B")
    out = console()
    out.print(table)
    if result.vocabulary_note:
        out.print(result.vocabulary_note)
