"""The upper bounds admit the largest published training setups, and every bound is documented
(its ``#:`` source comment is what docs/profiles.md's table prints)."""
from __future__ import annotations

import dataclasses
import re

from tests.config.test_profiles import PROFILES
from tokenpcap.config import bounds
from tokenpcap.config.profiles import load_model, load_scenario


def test_the_limits_admit_the_largest_published_setups():
    """Llama 3.1 405B (Llama 3 report, Table 4): 16,384 GPUs, tp 8, pp 16, dp 128, seq 8,192
    and 131,072, global batch 16M tokens; GPT-3 175B as Narayanan et al. 2021 ran it."""
    from tokenpcap.config import feasibility as fe
    from tokenpcap.plan.feasibility import check_plan_size

    assert bounds.MAX_WORLD_SIZE >= 16_384 and bounds.MAX_SEQ_LENGTH >= 131_072
    assert bounds.MAX_GLOBAL_BATCH_SIZE * 8192 >= 16 * 2**20 and bounds.MAX_LAYERS >= 128
    s = load_scenario(PROFILES / "scenarios" / "gpt3-175b-megatron.yaml")
    big = dataclasses.replace(
        s, cluster=dataclasses.replace(s.cluster, nodes=2048),
        model=dataclasses.replace(load_model(PROFILES / "models" / "llama3.1-405b.yaml"),
                                  seq_length=8192, layers=128),   # 126 over 16 stages is uneven
        parallelism=dataclasses.replace(s.parallelism, dp=128, tp=8, pp=16),
        training=dataclasses.replace(s.training, global_batch_size=2048, precision="bf16"))
    fe.check_feasible(big)          # 16 microbatches x 128 layers
    check_plan_size(big)            # ~320 buckets x 128 groups


def test_every_bound_has_a_source_comment():
    """A bound without a ``#:`` comment would be missing from docs/profiles.md's table."""
    import inspect

    names = sorted(n for n in vars(bounds) if n.startswith("MAX_") or n.endswith("_RANGE"))
    documented = sorted(re.findall(r"^#: .*\n([A-Z_]+) = ", inspect.getsource(bounds), re.M))
    assert names == documented == sorted(bounds.__all__)
