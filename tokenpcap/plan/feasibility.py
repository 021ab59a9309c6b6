"""Feasibility rules that need the model's sizes: checked when the plan is built.

The rules that need only the profiles are :func:`tokenpcap.config.feasibility.check_feasible`
(run when a scenario is loaded); this one counts what the plan would hold.
"""
from __future__ import annotations

from tokenpcap.config.types import Scenario
from tokenpcap.errors import InfeasiblePlanError
from tokenpcap.model import scenario_shards

__all__ = ["check_plan_size", "MAX_DP_BUCKET_GROUPS"]

#: DP gradient buckets per rank x DP groups (tp*pp): each bucket is one call family that the
#: plan walks group by group (measured: 2**20 pairs ~ 40 s). GPT-3 175B with Megatron's t8 p8
#: and 40 MB fp32 buckets has ~270 x 64 = 17,500; Llama 3.1 405B on 16,384 GPUs (t8 p16)
#: ~320 x 128 = 41,000; 6x margin.
MAX_DP_BUCKET_GROUPS = 1 << 18


def check_plan_size(s: Scenario) -> None:
    """With ``dp > 1`` and ``overlap_grad_reduce``: gradient buckets per rank (at most
    ``ceil(gradient elements of the largest stage shard / bucket_size)``, Megatron-core's
    buckets of ``bucket_size`` parameters) times DP groups ``tp*pp`` at most
    :data:`MAX_DP_BUCKET_GROUPS` (one call family per bucket, walked per group).

    Raises:
        InfeasiblePlanError: too many buckets, naming the file, the key, the value got and the
            smallest ``bucket_size`` that fits.
    """
    p, t = s.parallelism, s.training
    if p.dp <= 1 or not t.overlap_grad_reduce or t.bucket_size is None:
        return                     # one bucket per buffer, or Megatron's default (>= 40M)
    where = str(s.path) if s.path is not None else "<scenario>"
    most = max(sh.total for sh in scenario_shards(s))
    buckets = -(-most // t.bucket_size)
    groups = p.tp * p.pp
    if buckets * groups > MAX_DP_BUCKET_GROUPS:
        raise InfeasiblePlanError(
            f"{where}: training.bucket_size: got {t.bucket_size} = {buckets:,} buckets "
            f"per rank (the largest stage shard has {most:,} parameters) x {groups} DP "
            f"groups = {buckets * groups:,}, expected buckets x DP groups <= "
            f"{MAX_DP_BUCKET_GROUPS:,}, i.e. bucket_size >= "
            f"{-(-most // (MAX_DP_BUCKET_GROUPS // groups)):,} parameters (Megatron-LM's default "
            "is max(40,000,000, 1,000,000 x dp))")
