"""yamlfile: what is refused before parsing (kind, size, bytes), and the node checks (duplicate
keys, alias expansion) against YAML 1.2 and PyYAML's own construction."""
from __future__ import annotations

import os

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tokenpcap.config.yamlfile import (PROFILE_MAX_VALUES, FileRefused, check_node, join_key,
                                       load_yaml, read_limited)
from tokenpcap.errors import ProfileError


def test_read_limited_refuses_special_and_large_files_without_reading(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    with pytest.raises(FileRefused) as err:
        read_limited(d, 10, "YAML")
    assert (err.value.got, err.value.expected) == ("a directory", "a regular YAML file")
    os.mkfifo(tmp_path / "fifo")                  # opening it would block: refused from stat
    with pytest.raises(FileRefused, match="got a FIFO"):
        read_limited(tmp_path / "fifo", 10, "YAML")
    big = tmp_path / "big"
    big.write_bytes(b"x" * 11)
    with pytest.raises(FileRefused, match="got a file of 11 bytes, expected a YAML file of at "
                                          "most 10 bytes"):
        read_limited(big, 10, "YAML")
    big.write_bytes(b"x" * 10)
    assert read_limited(big, 10, "YAML") == b"x" * 10
    with pytest.raises(FileNotFoundError):
        read_limited(tmp_path / "missing", 10, "YAML")


@pytest.mark.parametrize("data, got", [
    (b"a: 1\n\0", "a binary file (NUL byte at offset 5)"),
    (b"a: caf\xe9\n", "byte 0xe9 at offset 6 that is not UTF-8"),
    (b"a: \x07\n", "character #x0007 at offset 3"),
    (b"a: [1\n", "invalid YAML at line 2, column 1"),
])
def test_load_yaml_bad_bytes_are_one_profile_error(tmp_path, data, got):
    f = tmp_path / "p.yaml"
    f.write_bytes(data)
    with pytest.raises(ProfileError) as err:
        load_yaml(f)
    assert str(err.value).startswith(f"{f}: <file>: got {got}"), str(err.value)
    assert "\n" not in str(err.value)


def test_duplicate_keys_name_the_dotted_key_and_both_lines(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("a:\n  - b: 1\n    c: 2\n    b: 3\n")
    with pytest.raises(ProfileError, match=r"a\[0\]\.b: got the key twice, at line 2 and at "
                                           "line 4"):
        load_yaml(f)
    f.write_text("x: &m {k: 1}\ny:\n  <<: *m\n  k: 2\n")      # a merge key overridden: fine
    assert load_yaml(f) == {"x": {"k": 1}, "y": {"k": 2}}
    f.write_text("")
    assert load_yaml(f) is None


@given(st.integers(1, 9), st.integers(1, 9))
def test_alias_expansion_counts_each_use_like_pyyaml_builds_it(levels, fanout):
    """A document of ``levels`` anchors, each a list of ``fanout`` aliases of the previous one,
    stands for ``1 + sum(fanout^k)`` values: check_node refuses it exactly when that exceeds
    PROFILE_MAX_VALUES (PyYAML's own expansion of the accepted ones agrees)."""
    lines = ["l0: &l0 [" + ", ".join(["1"] * fanout) + "]"]
    lines += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * fanout) + "]"
              for i in range(1, levels)]
    text = "\n".join(lines) + "\n"
    # values: the root mapping, per level k its key, and the list of level k expanded
    per_level = [1 + fanout * 1 if k == 0 else 0 for k in range(levels)]
    for k in range(1, levels):
        per_level[k] = 1 + fanout * per_level[k - 1]
    total = 1 + sum(1 + n for n in per_level)
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    if total > PROFILE_MAX_VALUES:
        with pytest.raises(ProfileError, match="aliases expanded"):
            check_node(None, node)
    else:
        check_node(None, node)
        assert _values(yaml.safe_load(text)) == total


def _values(doc) -> int:
    """Values of a constructed document, every mapping key counted too (as nodes are)."""
    if isinstance(doc, dict):
        return 1 + sum(_values(k) + _values(v) for k, v in doc.items())
    if isinstance(doc, list):
        return 1 + sum(_values(v) for v in doc)
    return 1


def test_join_key():
    assert join_key("", "cluster") == "cluster"
    assert join_key("cluster", "nodes") == "cluster.nodes"
