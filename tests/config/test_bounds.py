"""The upper bounds admit the largest published training setups, and every bound is documented
(its ``#:`` source comment is what docs/profiles.md's table prints)."""
from __future__ import annotations

import dataclasses
import re

import pytest

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

    names = sorted(n for n in vars(bounds) if n.startswith(("MAX_", "MIN_")) or n.endswith("_RANGE"))
    documented = sorted(re.findall(r"^#: .*\n([A-Z][A-Z0-9_]*) = ", inspect.getsource(bounds), re.M))
    assert names == documented == sorted(bounds.__all__)


def test_extreme_numeric_values_are_refused_where_the_key_is_read(tmp_path):
    """Values that once crashed (overflow in the compute time), wrapped int64 or overflowed
    later are refused with the key named; the bounds are the ones bounds.py gives."""
    import pytest
    import yaml

    from tokenpcap.errors import ProfileError

    src = PROFILES / "scenarios" / "llama2-7b-a100-ib.yaml"
    d = yaml.safe_load(src.read_text())
    d["corpus"] = str((src.parent / d["corpus"]).resolve())
    d["model"] = str((src.parent / d["model"]).resolve())
    cluster = yaml.safe_load((src.parent / d["cluster"]).read_text())
    cases = [("training", "mfu", 1e-300, r"training.mfu: got 1e-300, expected a finite number "
                                         r">= 1e-09 and <= 1"),
             ("training", "mfu", 1.2e-17, r"training.mfu: got 1.2e-17"),
             ("collectives", "slice_bytes", 2**63, r"collectives.slice_bytes: got "
                                                   r"9223372036854775808, expected an integer "),
             ("collectives", "slice_bytes", 2, r"collectives.slice_bytes: got 2, expected"),
             ("generation", "ack_every_packets", 2**63, r"generation.ack_every_packets: got "
                                                        r"9223372036854775808"),
             ("training", "bucket_size", 2**63, r"training.bucket_size: got 9223372036854775808"),
             ("cluster.gpu", "peak_tflops", 1e-300, r"gpu.peak_tflops: got 1e-300, expected a "
                                                    r"finite number >= 1 and")]
    for section, key, value, message in cases:
        e = {k: (dict(v) if isinstance(v, dict) else v) for k, v in d.items()}
        c = {k: (dict(v) if isinstance(v, dict) else v) for k, v in cluster.items()}
        if section == "cluster.gpu":
            c["gpu"][key] = value
        else:
            e.setdefault(section, {})[key] = value
        (tmp_path / "c.yaml").write_text(yaml.safe_dump(c))
        e["cluster"] = str(tmp_path / "c.yaml")
        (tmp_path / "s.yaml").write_text(yaml.safe_dump(e))
        with pytest.raises(ProfileError, match=message):
            load_scenario(tmp_path / "s.yaml")


def test_a_p2p_chunk_below_a_page_is_refused_where_it_is_read(tmp_path):
    """``NCCL_P2P_NET_CHUNKSIZE: 1`` made one network message per byte: an 8-GPU plan --time on
    the queued fabric ran 170 s (found by the fuzz campaign's numeric surface). 0 (no chunks)
    and a page are accepted; the error names the key and the range."""
    from tests.fuzz_surfaces import _scenario_file
    from tokenpcap.config.profiles import load_scenario
    from tokenpcap.errors import ProfileError

    path = _scenario_file(tmp_path)
    key = "collectives.NCCL_P2P_NET_CHUNKSIZE"
    for ok in (0, 4096, 1 << 30):
        assert load_scenario(path, {key: ok}).collectives.NCCL_P2P_NET_CHUNKSIZE == ok
    for bad in (1, 4095, (1 << 30) + 1, True):
        with pytest.raises(ProfileError, match=r"NCCL_P2P_NET_CHUNKSIZE: got .*, expected 0 or "
                                               r"an integer in \[4,096, 1,073,741,824\]"):
            load_scenario(path, {key: bad})
