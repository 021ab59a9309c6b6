"""A scenario whose corpus is missing, empty, not UTF-8 or not a regular file is refused by
every command that takes a training scenario, as ``run`` and ``plan`` refuse it: ``generate``,
``export`` and ``plot`` do not need the corpus's tokens (a packet's token range is a position
in the sequence), but captures that name corpus tokens of a corpus that is not there are not
what a user asked for. One line naming the scenario, the key and the corpus, exit 1, nothing
written."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from tokenpcap.cli import main

ROOT = Path(__file__).resolve().parents[2]
DANTE = ROOT / "profiles" / "scenarios" / "dante.yaml"

# what the corpus is -> the words of read_corpus's refusal that follow "got"
CORPORA = {
    "missing": (None, "a path that does not exist, expected an existing UTF-8 text file"),
    "empty": (b"", "an empty file, expected UTF-8 text"),
    "latin-1": ("perch\xe9 ".encode("latin-1"), "byte 0xe9 at offset 5 that is not UTF-8, "
                "expected UTF-8 text"),
    "directory": ("dir", "a directory"),
}
COMMANDS = {
    "generate": ["generate", "SCEN", "-o", "OUT", "--nics", "0"],
    "export": ["export", "SCEN", "--to", "csv", "-o", "OUT/x.csv"],
    "plot": ["plot", "SCEN", "-o", "OUT"],
    "run": ["run", "SCEN", "-o", "OUT"],
}


def _scenario(tmp_path: Path, kind: str) -> tuple[Path, Path]:
    content, _ = CORPORA[kind]
    corpus = tmp_path / "corpus.txt"
    if content == "dir":
        corpus.mkdir()
    elif content is not None:
        corpus.write_bytes(content)
    d = yaml.safe_load(DANTE.read_text())
    base = DANTE.parent
    d.update(corpus=str(corpus), model=str(base / d["model"]), cluster=str(base / d["cluster"]))
    scen = tmp_path / "s.yaml"
    scen.write_text(yaml.safe_dump(d))
    return scen, corpus


@pytest.mark.parametrize("kind", sorted(CORPORA))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_bad_corpus_is_refused_by_every_command(tmp_path: Path, command: str, kind: str):
    scen, corpus = _scenario(tmp_path, kind)
    out = tmp_path / "out"
    args = [a.replace("SCEN", str(scen)).replace("OUT", str(out)) for a in COMMANDS[command]]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1, res.output
    [line] = res.stderr.strip().splitlines()
    assert line.startswith(f"error: {scen}: corpus: {corpus}: got {CORPORA[kind][1]}"), line
    assert not out.exists()
