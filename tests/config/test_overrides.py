"""``--set`` parsing and application on raw mappings: values read as YAML reads them, dotted
keys reaching nested mappings (created when absent) and the profile files a scenario names."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenpcap.config import overrides as ov
from tokenpcap.errors import ProfileError


@pytest.mark.parametrize("text, want", [
    ("parallelism.dp=2", ("parallelism.dp", 2)), ("training.mfu=0.4", ("training.mfu", 0.4)),
    ("generation.clear_to_send=false", ("generation.clear_to_send", False)),
    ("cluster.fabric.model=queued", ("cluster.fabric.model", "queued")),
    ("model.moe.layer_freq=[0, 1]", ("model.moe.layer_freq", [0, 1])),
    ("name=a=b", ("name", "a=b")), ("training.bucket_size=", ("training.bucket_size", None)),
])
def test_values_are_read_as_yaml(text, want):
    assert ov.parse_set(text) == want


@pytest.mark.parametrize("text", ["dp", "=1", ".dp=1", "a..b=1", "a=[1,"])
def test_malformed_settings_are_refused(text):
    with pytest.raises(ValueError, match="got"):
        ov.parse_set(text)


def test_apply_sets_nested_keys_on_a_copy():
    data = {"parallelism": {"dp": 4}, "generation": None}
    out = ov.apply(data, {"parallelism.dp": 8, "generation.seed": 3, "collectives.channels": 4})
    assert out == {"parallelism": {"dp": 8}, "generation": {"seed": 3},
                   "collectives": {"channels": 4}}
    assert data == {"parallelism": {"dp": 4}, "generation": None}
    with pytest.raises(ProfileError, match=r"^--set: parallelism.dp.x: got 1, expected a key of "
                                           r"a mapping \(parallelism.dp is 4"):
        ov.apply(data, {"parallelism.dp.x": 1})


def test_profile_keys_go_to_the_file_the_scenario_names():
    data = {"model": "../models/m.yaml", "cluster": {"nodes": 4}}
    own, sub = ov.split_profile({"model.layers": 2, "cluster.nodes": 8, "training.mfu": 0.5},
                                data)
    assert own == {"cluster.nodes": 8, "training.mfu": 0.5}
    assert sub == {"model": {"layers": 2}, "cluster": {}}


def test_using_is_scoped():
    assert ov.active() == {}
    with ov.using({"a.b": 1}):
        assert ov.active() == {"a.b": 1}
    assert ov.active() == {}


def test_an_error_of_another_key_checked_against_an_override_names_the_override(tmp_path):
    """``--set model.hidden_size=100`` makes the model file's ``attention_heads: 12`` wrong:
    the error names the file and its key (the 12 is the file's), and the ``--set`` whose value
    the check saw, since the file says 768; an error about the overridden key itself names
    ``--set`` in place of the file."""
    from tokenpcap.config.profiles import load_scenario
    from tests.plan.test_plan import PROFILES

    with pytest.raises(ProfileError) as e:
        load_scenario(PROFILES / "scenarios" / "dante.yaml", {"model.hidden_size": 100})
    assert str(e.value).endswith("gpt2-small.yaml: attention_heads: got 12, expected a divisor "
                                 "of hidden_size 100 (with --set model.hidden_size=100)")
    with pytest.raises(ProfileError, match=r"^--set: model.hidden_size: got -1, expected"):
        load_scenario(PROFILES / "scenarios" / "dante.yaml", {"model.hidden_size": -1})


_YAML_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=30),
              st.floats(allow_nan=False)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=10)


@given(_YAML_VALUES)
def test_a_value_written_back_reads_as_itself_on_one_line(value):
    text = ov.value_text(value)
    assert "\n" not in text
    assert ov.parse_set(f"k={text}") == ("k", value)


@pytest.mark.parametrize("value, text", [(True, "true"), (None, "null"), ("ring", "ring"),
                                         ({"dp": 4}, "{dp: 4}"), ("true", "'true'")])
def test_a_value_is_written_as_yaml_not_python(value, text):
    assert ov.value_text(value) == text


def test_an_error_with_a_set_quotes_it_as_typed():
    """The error of another key checked against a ``--set`` names the ``--set`` as the user
    typed it (YAML ``true``), not as Python prints the parsed value (``True``)."""
    from click.testing import CliRunner

    from tokenpcap.cli import main
    from tests.plan.test_plan import PROFILES

    res = CliRunner().invoke(main, ["plan", str(PROFILES / "scenarios" / "dante.yaml"),
                                    "--no-tokens", "--set", "cluster.fabric.np.cnp_in_ack=true"])
    assert res.exit_code == 1
    assert res.stderr.strip().endswith("(with --set cluster.fabric.np.cnp_in_ack=true)")
