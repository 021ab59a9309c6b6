"""``tokenpcap tokens CORPUS``: token counts of a corpus under one tokenizer."""
from __future__ import annotations

import json

import click

from tokenpcap.cli import main
from tokenpcap.cli.common import library_errors
from tokenpcap.cli.plan_cmd import console
from tokenpcap.config.profiles import parse_tokenizer
from tokenpcap.errors import TokenizerError
from tokenpcap.tokens import tokenize


def _tokenizer_option(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A malformed ``--tokenizer`` is a usage error (exit 2), before the corpus is read; an
    ``hf:`` path or ``tiktoken`` encoding that is missing stays a library error (exit 1)."""
    try:
        parse_tokenizer(value)
    except TokenizerError as err:
        raise click.BadParameter(str(err).removeprefix("tokenizer: ")) from None
    return value


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
