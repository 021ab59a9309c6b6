"""Fuzzing in CI, bounded to seconds: Hypothesis drives the mutations of tests/fuzzing.py over
captures the project writes and foreign ones, through the capture reader, readdress, plot's
capture series (its pictures for the seeds), inspect's report, the profile loaders and
readdress's mapping loader. Every input must give a result or one clean error line
(TokenpcapError); a successful readdress must write a readable capture of as many packets.
The long campaign is benchmarks/fuzz_campaign.py.
"""
from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzzing import (capture_seeds, mapping_seeds, mutate, mutate_text, profile_seeds,
                           run_target)


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    return capture_seeds(tmp_path_factory.mktemp("seeds"))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


def test_every_seed_is_accepted_or_refused_cleanly(seeds, work):
    """The unmutated seeds: read, inspected, plotted and drawn (a capture cut before its UDP
    header shows no RDMA to draw: one line); readdress takes the Ethernet ones and refuses
    native InfiniBand and Simple Packet Blocks with one line."""
    for name, data in seeds.items():
        assert run_target("read", data, work) == "ok", name
        assert run_target("inspect", data, work) == "ok", name
        assert run_target("plot", data, work) == "ok", name
        assert run_target("views", data, work) == "ok", name
        drawn = "error" if name == "cut.pcap" else "ok"     # cut before the UDP port: no RDMA
        assert run_target("draw", data, work) == drawn, name
        want = "error" if name.startswith(("ib.", "foreign-")) else "ok"
        assert run_target("readdress", data, work) == want, name
    for name, data in profile_seeds().items():
        assert run_target("profile", data, work) == "ok", name
    for name, data in mapping_seeds().items():
        assert run_target("mapping", data, work) == "ok", name


_SETTINGS = settings(max_examples=150, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("target", ["read", "readdress", "plot", "views", "inspect"])
@_SETTINGS
@given(pick=st.integers(0, 1 << 16), partner=st.integers(0, 1 << 16),
       rng_seed=st.integers(0, 1 << 62), rounds=st.integers(1, 6))
def test_mutated_captures_give_a_result_or_one_clean_error(seeds, work, target, pick, partner,
                                                           rng_seed, rounds):
    names = sorted(seeds)
    data = mutate(seeds[names[pick % len(names)]], random.Random(rng_seed),
                  seeds[names[partner % len(names)]], rounds=rounds)
    assert run_target(target, data, work) in ("ok", "error")


@_SETTINGS
@given(pick=st.integers(0, 1 << 16), rng_seed=st.integers(0, 1 << 62))
def test_mutated_profiles_load_or_give_one_clean_error(work, pick, rng_seed):
    seeds = profile_seeds()
    names = sorted(seeds)
    data = mutate_text(seeds[names[pick % len(names)]], random.Random(rng_seed))
    assert run_target("profile", data, work) in ("ok", "error")


@_SETTINGS
@given(pick=st.integers(0, 1 << 16), rng_seed=st.integers(0, 1 << 62))
def test_mutated_mappings_load_or_give_one_clean_error(work, pick, rng_seed):
    seeds = mapping_seeds()
    names = sorted(seeds)
    data = mutate_text(seeds[names[pick % len(names)]], random.Random(rng_seed))
    assert run_target("mapping", data, work) in ("ok", "error")


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(blob=st.binary(max_size=600))
def test_arbitrary_bytes_after_a_capture_magic(work, blob):
    """Random bodies behind each magic (pcap both orders and resolutions, pcapng SHB, ERF)."""
    for magic in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\x4d\x3c\xb2\xa1",
                  b"\x0a\x0d\x0d\x0a", b""):
        for target in ("read", "plot", "readdress", "inspect"):
            assert run_target(target, magic + blob, work) in ("ok", "error")
