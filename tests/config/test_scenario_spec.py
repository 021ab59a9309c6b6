"""The scenario keys' checks (:mod:`tokenpcap.config.scenario_spec`) against NCCL's rules and
the range of each key, value by value."""
from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenpcap.config import scenario_spec as ss
from tokenpcap.config.bounds import MAX_CHANNELS, P2P_NET_CHUNKSIZE_RANGE
from tokenpcap.errors import ProfileError


@given(st.integers(1, 64))
def test_default_channels_is_two_rings_per_nic_capped(nics):
    """NCCL's search builds one ring per NIC and ``ncclTopoPostset`` doubles them
    (``src/graph/connect.cc``), at most what the QP numbering holds."""
    assert ss.default_channels(nics) == min(2 * nics, MAX_CHANNELS)


def test_default_channels_refuses_no_nic():
    with pytest.raises(ValueError, match="got 0, expected an integer >= 1"):
        ss.default_channels(0)


@given(st.one_of(st.just(0), st.integers(*P2P_NET_CHUNKSIZE_RANGE)))
def test_p2p_chunksize_takes_zero_and_its_range(value):
    check = ss.COLLECTIVES_SPEC["NCCL_P2P_NET_CHUNKSIZE"][0]
    assert check(None, "collectives.NCCL_P2P_NET_CHUNKSIZE", value) == value


@pytest.mark.parametrize("value", [1, P2P_NET_CHUNKSIZE_RANGE[0] - 1, P2P_NET_CHUNKSIZE_RANGE[1] + 1,
                                   -1, "128K", 131072.0, True])
def test_p2p_chunksize_refuses_the_rest(value):
    check = ss.COLLECTIVES_SPEC["NCCL_P2P_NET_CHUNKSIZE"][0]
    with pytest.raises(ProfileError, match="expected 0 or an integer in"):
        check(None, "collectives.NCCL_P2P_NET_CHUNKSIZE", value)


@pytest.mark.parametrize("key,good,bad", [
    ("NCCL_PROTO", "^LL128", "LL256"),
    ("NCCL_ALGO", "Ring,Tree", "Butterfly"),
])
def test_nccl_lists_in_nccls_syntax(key, good, bad):
    """``NCCL_PROTO``/``NCCL_ALGO`` take NCCL's list syntax (a leading ``^`` excludes) and name
    only what NCCL names."""
    check = ss.COLLECTIVES_SPEC[key][0]
    assert check(None, f"collectives.{key}", "auto") == "auto"
    assert check(None, f"collectives.{key}", good) == good
    with pytest.raises(ProfileError, match=key):
        check(None, f"collectives.{key}", bad)
    with pytest.raises(ProfileError, match="'auto' or a list in NCCL's syntax"):
        check(None, f"collectives.{key}", "")


@pytest.mark.parametrize("value,expected", [("auto", "auto"), ("nccl", "nccl"), (4, 4),
                                            (MAX_CHANNELS, MAX_CHANNELS)])
def test_channels_auto_or_a_count(value, expected):
    check = ss.COLLECTIVES_SPEC["channels"][0]
    assert check(None, "collectives.channels", value) == expected


@pytest.mark.parametrize("value", [0, MAX_CHANNELS + 1, "many"])
def test_channels_refuses_the_rest(value):
    check = ss.COLLECTIVES_SPEC["channels"][0]
    with pytest.raises(ProfileError, match=f"'auto', 'nccl' or an integer in \\[1, {MAX_CHANNELS}\\]"):
        check(None, "collectives.channels", value)


def test_a_workload_scenario_has_none_of_the_training_keys():
    assert set(ss.TRAINING_ONLY) <= set(ss.SCENARIO_SPEC)
    assert not set(ss.TRAINING_ONLY) & set(ss.WORKLOAD_SCENARIO_SPEC)
