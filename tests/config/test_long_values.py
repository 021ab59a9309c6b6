"""A value or key of an input file quoted in an error is cut to a readable length: a text file
handed over as a scenario (``/etc/passwd``: every line folds into one YAML scalar) or an
800-character unknown key gives one short line, not the whole document."""
from __future__ import annotations

from pathlib import Path

import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from tokenpcap.cli import main
from tokenpcap.errors import CLIP_CHARS, ProfileError, clip, clip_repr

PASSWD_LIKE = "".join(f"user{i}:x:{1000 + i}:{1000 + i}:User {i}:/home/user{i}:/bin/bash\n"
                      for i in range(60))


def _one_error_line(args: list[str]) -> str:
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1, res.output
    [line] = res.stderr.strip().splitlines()
    return line


def test_a_text_file_given_as_a_scenario_is_quoted_in_part(tmp_path: Path):
    f = tmp_path / "passwd"
    f.write_text(PASSWD_LIKE)
    whole = yaml.safe_load(PASSWD_LIKE)             # PyYAML folds the lines into one scalar
    assert len(whole) > 2000
    line = _one_error_line(["plan", str(f)])
    assert line == (f"error: {f}: <document>: got {whole[:CLIP_CHARS]!r}… ({len(whole):,} "
                    "characters), expected a mapping (key: value)")


def test_a_long_unknown_key_is_quoted_in_part(tmp_path: Path):
    key = "k" * 800
    f = tmp_path / "s.yaml"
    f.write_text(f"corpus: c.txt\n{key}: 1\n")
    line = _one_error_line(["plan", str(f)])
    assert line.startswith(f"error: {f}: {key[:CLIP_CHARS]}… (800 characters): got "
                           f"{key[:CLIP_CHARS]!r}… (800 characters), expected a known key")
    assert len(line) < 600


def test_short_values_and_descriptions_are_whole():
    assert str(ProfileError("f.yaml", "training.mfu", 1.5, "<= 1")) == \
        "f.yaml: training.mfu: got 1.5, expected <= 1"
    assert str(ProfileError("f.yaml", "corpus", "missing", "a path")) == \
        "f.yaml: corpus: got missing, expected a path"

    class Described(str):
        def __repr__(self) -> str:
            return str(self)

    text = Described("d" * 300)                 # tokenpcap's own wording: never cut
    assert str(ProfileError("f.yaml", "k", text, "e")) == f"f.yaml: k: got {text}, expected e"


@given(st.text(max_size=400), st.integers(min_value=1, max_value=200))
def test_clip_keeps_a_prefix_and_says_the_length(text, limit):
    out = clip(text, limit)
    if len(text) <= limit:
        assert out == text
    else:
        assert out == f"{text[:limit]}… ({len(text):,} characters)"
        assert out.startswith(text[:limit]) and len(out) <= limit + 30


@given(st.one_of(st.text(max_size=400), st.lists(st.integers(), max_size=100)),
       st.integers(min_value=1, max_value=200))
def test_clip_repr_quotes_a_prefix_of_the_value(value, limit):
    out = clip_repr(value, limit)
    if isinstance(value, str):
        assert out == (repr(value) if len(value) <= limit else
                       f"{value[:limit]!r}… ({len(value):,} characters)")
    elif len(repr(value)) <= limit:
        assert out == repr(value)
    else:
        assert out == f"{repr(value)[:limit]}… ({len(repr(value)):,} characters)"
