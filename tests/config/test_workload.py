"""A scenario's ``workload:`` (tokenpcap.config.workload): each kind normalized to its ranks and
pairs, the start offsets per rank, and every bad value refused in one line naming the file, the
key, the value got and the value expected."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from tokenpcap.config.profiles import load_scenario
from tokenpcap.config.workload import WORKLOAD_KINDS
from tokenpcap.errors import ProfileError
from tokenpcap.plan.workload import WORKLOAD_PLANNERS

ROOT = Path(__file__).resolve().parents[2]
#: 8 nodes x 1 GPU x 1 NIC: ranks 0..7
CLUSTER = str(ROOT / "profiles" / "clusters" / "h100-rocev2-8x1.yaml")


def scenario(tmp_path: Path, workload, **over) -> Path:  # type: ignore[no-untyped-def]
    d = {"cluster": CLUSTER, "workload": workload,
         "collectives": {"algorithm": "ring", "channels": 1}}
    d.update(over)
    path = tmp_path / "wl.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


def test_the_two_registries_name_the_same_kinds():
    assert set(WORKLOAD_KINDS) == set(WORKLOAD_PLANNERS) == {
        "incast", "alltoall", "allreduce", "allgather", "reducescatter", "sendrecv", "flows"}


def test_incast_senders_as_a_count_or_a_list(tmp_path):
    w = load_scenario(scenario(tmp_path, {"kind": "incast", "senders": 7, "bytes": 4096})).workload
    assert w.receiver == 0 and w.ranks == tuple(range(8))
    assert w.pairs == tuple((s, 0) for s in range(1, 8))
    w = load_scenario(scenario(tmp_path, {"kind": "incast", "senders": 3, "receiver": 2,
                                          "bytes": 4096})).workload
    assert w.pairs == ((0, 2), (1, 2), (3, 2))          # the first 3 ranks other than 2
    w = load_scenario(scenario(tmp_path, {"kind": "incast", "senders": [5, 6], "receiver": 4,
                                          "bytes": 8, "start_offsets_ns": [100, 0]})).workload
    assert w.pairs == ((5, 4), (6, 4)) and w.ranks == (4, 5, 6)
    assert w.start_offsets_ns == (0, 0, 0, 0, 0, 100, 0, 0)


def test_a_workload_scenario_has_no_model_and_every_rank_is_a_gpu(tmp_path):
    s = load_scenario(scenario(tmp_path, {"kind": "alltoall", "bytes": 1024, "repeat": 3}))
    assert s.model is None and s.corpus is None and s.parallelism.world == 8
    assert s.workload.ranks == tuple(range(8)) and s.workload.repeat == 3
    assert s.token_layout == (1, 1) and s.name == "wl"


def test_sendrecv_pairs_and_offsets_of_their_senders(tmp_path):
    w = load_scenario(scenario(tmp_path, {"kind": "sendrecv", "pairs": [[0, 1], [1, 0], [0, 7]],
                                          "bytes": 64, "start_offsets_ns": [5, 9, 5]})).workload
    assert w.pairs == ((0, 1), (1, 0), (0, 7)) and w.ranks == (0, 1, 7)
    assert w.start_offsets_ns[:2] == (5, 9)
    w = load_scenario(scenario(tmp_path, {"kind": "allreduce", "ranks": [3, 1, 2], "bytes": 64,
                                          "start_offsets_ns": {2: 40}})).workload
    assert w.ranks == (3, 1, 2) and w.start_offsets_ns[2] == 40 and sum(w.start_offsets_ns) == 40


BAD = [
    ({"kind": "broadcast", "bytes": 8}, "workload.kind", "'broadcast'",
     "one of: allgather, allreduce, alltoall, flows, incast, reducescatter, sendrecv"),
    ({"bytes": 8}, "workload.kind", "missing", "required key 'kind'"),
    ({"kind": "incast", "senders": 7, "receiver": 8, "bytes": 8}, "workload.receiver", "8",
     "an integer in [0, 7]"),
    ({"kind": "incast", "senders": 7, "bytes": 0}, "workload.bytes", "0", "an integer in [1, "),
    ({"kind": "incast", "senders": 8, "bytes": 8}, "workload.senders", "8",
     "an integer in [1, 7]"),
    ({"kind": "incast", "senders": [1, 0], "bytes": 8}, "workload.senders[1]", "0",
     "a rank other than the receiver 0"),
    ({"kind": "incast", "senders": [1, 1], "bytes": 8}, "workload.senders[1]", "1",
     "a rank not already in the list"),
    ({"kind": "incast", "bytes": 8}, "workload.senders", "missing", "required key"),
    ({"kind": "sendrecv", "pairs": [[0, 1], [2, 2]], "bytes": 8}, "workload.pairs[1]", "[2, 2]",
     "two different ranks"),
    ({"kind": "sendrecv", "pairs": [[0, 1, 2]], "bytes": 8}, "workload.pairs[0]", "[0, 1, 2]",
     "a pair [src, dst]"),
    ({"kind": "sendrecv", "pairs": [[0, 9]], "bytes": 8}, "workload.pairs[0][1]", "9",
     "an integer in [0, 7]"),
    ({"kind": "sendrecv", "pairs": [], "bytes": 8}, "workload.pairs", "[]", "a non-empty list"),
    ({"kind": "sendrecv", "pairs": [[0, 1], [0, 2]], "bytes": 8, "start_offsets_ns": [1, 2]},
     "workload.start_offsets_ns[1]", "2", "1, the offset given before for rank 0"),
    ({"kind": "allreduce", "ranks": [0], "bytes": 8}, "workload.ranks", "[0]",
     "at least 2 ranks"),
    ({"kind": "allreduce", "bytes": 6}, "workload.bytes", "6", "a multiple of 4 (whole fp32"),
    ({"kind": "allreduce", "bytes": 8, "repeat": 0}, "workload.repeat", "0", "an integer in [1,"),
    ({"kind": "alltoall", "bytes": 8, "senders": 3}, "workload.senders", "'senders'",
     "a known key"),
    ({"kind": "alltoall", "bytes": 8, "start_offsets_ns": [1, 2]}, "workload.start_offsets_ns",
     "[1, 2]", "a list of 8 offsets"),
    ({"kind": "alltoall", "bytes": 8, "start_offsets_ns": [-1] * 8},
     "workload.start_offsets_ns[0]", "-1", "an integer in [0, "),
    ({"kind": "allgather", "ranks": [0, 1], "bytes": 8, "start_offsets_ns": {5: 3}},
     "workload.start_offsets_ns.5", "5", "a rank of the workload"),
    ("incast", "workload", "'incast'", "a mapping"),
]


@pytest.mark.parametrize("workload,key,got,expected", BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_bad_workloads_are_one_line(tmp_path, workload, key, got, expected):
    path = scenario(tmp_path, workload)
    with pytest.raises(ProfileError) as e:
        load_scenario(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path}: {key}: got {got}, expected ")
    assert expected in msg


@pytest.mark.parametrize("key", ["model", "parallelism", "training", "corpus", "tokenizer"])
def test_a_training_key_in_a_workload_scenario_is_refused(tmp_path, key):
    path = scenario(tmp_path, {"kind": "alltoall", "bytes": 8}, **{key: "x"})
    with pytest.raises(ProfileError, match=rf"^{path}: {key}: got 'x', expected no corpus, "
                       "tokenizer, model, parallelism or training in a workload scenario"):
        load_scenario(path)


def test_unknown_scenario_keys_and_a_missing_cluster(tmp_path):
    with pytest.raises(ProfileError, match=r"wl.yaml: iterations: got 'iterations', expected a "
                       "known key"):
        load_scenario(scenario(tmp_path, {"kind": "alltoall", "bytes": 8}, iterations=2))
    path = tmp_path / "wl.yaml"
    path.write_text("workload: {kind: alltoall, bytes: 8}\n")
    with pytest.raises(ProfileError, match=r"wl.yaml: cluster: got missing"):
        load_scenario(path)


_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 12), st.text(max_size=4),
                    st.lists(st.integers(-1, 9), max_size=4),
                    st.lists(st.lists(st.integers(-1, 9), max_size=3), max_size=3),
                    st.dictionaries(st.integers(-1, 9), st.integers(-5, 50), max_size=3))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(sorted(WORKLOAD_KINDS) + ["bogus"]),
       values=st.dictionaries(st.sampled_from(["bytes", "senders", "receiver", "ranks", "pairs",
                                               "repeat", "dtype", "start_offsets_ns", "other"]),
                              _VALUES, max_size=5))
def test_any_workload_mapping_loads_or_is_one_profile_error(tmp_path, kind, values):
    path = scenario(tmp_path, {"kind": kind, **values})
    try:
        w = load_scenario(path).workload
    except ProfileError as err:
        assert "\n" not in str(err) and str(err).startswith(f"{path}: workload")
        return
    assert w.kind == kind and w.bytes >= 1 and len(w.start_offsets_ns) == 8
    assert all(0 <= r < 8 for r in w.ranks) and all(a != b for a, b in w.pairs)
