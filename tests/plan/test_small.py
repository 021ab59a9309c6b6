"""The small collectives of every iteration (plan/small.py), as Megatron-LM makes them."""
from __future__ import annotations

from collections import Counter

from tokenpcap.plan.build import build_plan
from tokenpcap.config.profiles import load_scenario
from tests.plan.test_plan import PROFILES, vary

def test_the_small_collectives_of_every_iteration():
    """Megatron-LM, per iteration: get_batch_on_this_tp_rank (megatron/core/utils.py) broadcasts
    from TP rank 0 per microbatch tokens and position_ids (int64) on the first stage, labels
    (int64) and loss_mask (fp32) on the last, the bool [b, 1, s, s] attention mask on both;
    with fp16 the found-inf flag (optimizer.py) and the squared grad norm (clip_grads.py), one
    fp32 each, AllReduced over the model-parallel group (every rank with the distributed
    optimizer); the loss and token count (two fp32) over DP on the last stage (training.py)."""
    g = load_scenario(PROFILES / "scenarios" / "gpt3-175b-megatron.yaml")
    plan = build_plan(vary(g, global_batch_size=16, recompute="none"))
    calls = list(plan.calls())
    first = Counter((c.op, c.message_bytes, c.collective, len(c.group)) for c in calls
                    if c.op.startswith("batch_") and c.group[0] == 0)
    mb = plan.microbatches
    assert first == {("batch_tokens", 2048 * 8, "Broadcast", 8): mb,
                     ("batch_position_ids", 2048 * 8, "Broadcast", 8): mb,
                     ("batch_attention_mask", 2048 * 2048, "Broadcast", 8): mb}
    last0 = plan.layout.rank(7, 0, 0)
    last = Counter((c.op, c.message_bytes) for c in calls
                   if c.op.startswith("batch_") and c.group[0] == last0)
    assert last == {("batch_labels", 2048 * 8): mb, ("batch_loss_mask", 2048 * 4): mb,
                    ("batch_attention_mask", 2048 * 2048): mb}
    stats = [c for c in calls if c.op in ("found_inf", "grad_norm")]
    assert Counter(c.op for c in stats) == {"found_inf": 16, "grad_norm": 16}   # fp16, dp 16
    assert {(c.collective, c.message_bytes, c.phase, len(c.group)) for c in stats} == \
        {("AllReduce", 4, "optimizer", 64)}                                     # tp 8 x pp 8
    loss = [c for c in calls if c.op == "loss"]
    assert len(loss) == 8 and {(c.message_bytes, len(c.group), c.stage) for c in loss} == \
        {(8, 16, 7)}
    z1 = build_plan(load_scenario(PROFILES / "scenarios" / "llama2-7b-a100-ib.yaml"))
    stats = [c for c in z1.calls() if c.dim == "mp" and c.op == "grad_norm"]   # bf16: no found_inf
    assert [(c.op, len(c.group)) for c in stats] == [("grad_norm", 32)]   # the whole world


def test_train_step_reductions_over_the_model_parallel_group():
    """Megatron-LM training.py train_step, after optimizer.step(): update_successful (int32,
    MIN, logical_and_across_model_parallel_group) and grad_norm (fp32, MAX,
    reduce_max_stat_across_model_parallel_group) over pg_collection.mp (TP x PP), whatever the
    optimizer; training_log reduces the learning rate (fp32, MAX) over it every iteration.
    llama2-7b-a100-ib: tp 8 x pp 2 = 16 ranks per group, dp 2 groups."""
    plan = build_plan(load_scenario(PROFILES / "scenarios" / "llama2-7b-a100-ib.yaml"))
    got = Counter((c.op, c.collective, c.message_bytes, len(c.group), c.phase)
                  for c in plan.calls() if c.op in ("update_successful", "grad_norm_max",
                                                    "learning_rate_max"))
    assert got == {(op, "AllReduce", 4, 16, "optimizer"): 2
                   for op in ("update_successful", "grad_norm_max", "learning_rate_max")}
    assert {c.group for c in plan.calls() if c.op == "update_successful"} == \
        {tuple(plan.layout.groups("mp")[0]), tuple(plan.layout.groups("mp")[1])}
