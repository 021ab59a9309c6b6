"""Shard plans: every selected NIC in exactly one shard, balanced within Graham's LPT bound."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenpcap.errors import InputError
from tokenpcap.generate.shards import describe_nics, plan_shards


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 10**12), min_size=1, max_size=300), st.data(),
       st.integers(1, 70))
def test_every_selected_nic_is_in_exactly_one_shard_and_the_largest_is_bounded(sizes, data, m):
    n = len(sizes)
    nics = np.asarray(sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1))), np.int64)
    plan = plan_shards(nics, np.asarray(sizes, np.int64), m)
    got = [nic for sh in plan for nic in sh.nics]
    assert sorted(got) == nics.tolist() and len(got) == len(set(got))
    assert len(plan) == min(m, nics.size) and all(sh.nics for sh in plan)
    assert [sh.index for sh in plan] == list(range(len(plan)))
    assert all(sh.predicted_bytes == sum(sizes[i] for i in sh.nics) for sh in plan)
    # list scheduling (Graham 1969): the largest shard exceeds the mean by at most one NIC
    loads = [sh.predicted_bytes for sh in plan]
    total, biggest = sum(sizes[i] for i in nics), max(sizes[i] for i in nics)
    assert max(loads) <= total / len(plan) + biggest
    assert plan == plan_shards(nics[::-1], np.asarray(sizes, np.int64), m)   # deterministic


def test_equal_nics_split_evenly_and_bad_counts_are_refused():
    plan = plan_shards(np.arange(32), np.full(32, 1000), 4)
    assert [len(sh.nics) for sh in plan] == [8, 8, 8, 8]
    with pytest.raises(InputError, match="shards: got 0"):
        plan_shards(np.arange(4), np.ones(4), 0)


def test_describe_nics_uses_the_nics_syntax():
    assert describe_nics((8, 0, 1, 2, 3, 12, 13)) == "0-3,8,12-13"
    assert plan_shards(np.asarray([5]), np.ones(8), 3)[0].name() == "shard 0 (NICs 5)"


def test_the_package_imports_dask_only_when_a_cluster_is_used():
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, tokenpcap.cli, tokenpcap.cli.dask_run, tokenpcap.generate.distributed; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[2]).stdout
    assert out.strip() == "[]"
