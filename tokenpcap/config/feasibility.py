"""Feasibility of a scenario: valid profiles that cannot be combined (Megatron-LM's rules).

Kept apart from :mod:`tokenpcap.config.profiles` (whose :func:`load_scenario` calls
:func:`check_feasible`; the rules that need the model's sizes are the plan's,
:mod:`tokenpcap.plan.feasibility`): malformed
values are :class:`~tokenpcap.errors.ProfileError`, valid values that cannot run together are
:class:`~tokenpcap.errors.InfeasiblePlanError` (Calculon's distinction).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tokenpcap.config.pipeline import PipelineSplitError
from tokenpcap.errors import InfeasiblePlanError

if TYPE_CHECKING:
    from tokenpcap.config.profiles import Scenario

__all__ = ["check_feasible", "microbatch_multiple", "MAX_MICROBATCHES", "MAX_MICROBATCH_LAYERS"]

#: Microbatches per iteration: ``MESSAGE_DTYPE.microbatch`` is int16. Published runs use up to
#: 512 (Megatron-LM 1T: batch 3,072 over dp 6, Narayanan et al. 2021 Table 1).
MAX_MICROBATCHES = 32_767
#: Microbatches x layers: the plan holds one call instance per layer, microbatch and operation,
#: ~1.5 KB each (measured: 2**17 pairs of the Dante scenario ~ 4 s and ~250 MB). Megatron-LM's
#: 1T run has 512 x 128 = 65,536; 2x margin.
MAX_MICROBATCH_LAYERS = 1 << 17


def check_feasible(s: Scenario) -> None:
    """Check that a scenario's model, cluster and parallelism can be combined (Megatron-LM rules).

    Rules: ``dp*cp*tp*pp == nodes*gpus_per_node`` (``cp``: ``context_parallel_size``);
    ``attention_heads % tp == 0``; ``kv_heads % tp == 0`` when ``kv_heads >= tp`` else ``tp %
    kv_heads == 0`` (KV heads replicated); the pipeline split of ``layers`` over ``pp``
    (:mod:`tokenpcap.config.pipeline`, Megatron-core's rule); multi-latent attention and shared
    experts only at ``tp == 1``; ``mtp_num_layers == 0``; ``global_batch_size %
    (micro_batch_size*dp) == 0``; with sequence parallelism ``seq_length % tp == 0``; a model
    with MoE layers at ``tp > 1`` only with sequence parallelism (Megatron-core
    ``megatron/core/transformer/moe/moe_layer.py``, ``MoELayer.forward``: in training, a
    tensor-parallel group larger than 1 without ``config.sequence_parallel`` raises
    ValueError); the
    interleaving rules of :func:`_check_interleaving` (not combined with an uneven pipeline
    split); multi-latent attention only without context parallelism; with context parallelism
    ``seq_length % (2*cp) == 0`` (Megatron-LM ``arguments.py``:
    two chunks per CP rank for load balancing of causal attention) and with SP also
    ``(seq_length/cp) % tp == 0``; ``ep > 1`` needs an MoE model, ``experts % ep == 0`` and
    ``(dp*cp) % ep == 0`` (expert-parallel groups are carved out of the dp-cp dimension); a ``bpe``
    tokenizer vocabulary no larger than the model's.

    Size limits (``docs/plan.md``), so that every plan accepted here is built in bounded time
    and memory: microbatches per iteration ``global_batch_size / (micro_batch_size*dp)`` at most
    :data:`MAX_MICROBATCHES` (``MESSAGE_DTYPE.microbatch`` is int16), microbatches x layers at
    most :data:`MAX_MICROBATCH_LAYERS` (the plan holds one call instance per layer and
    microbatch). The DP bucket count needs the model's shard sizes: it is checked by the plan
    (:func:`tokenpcap.plan.feasibility.check_plan_size`).

    A workload scenario has none of these (no model, no training): nothing is checked here.

    Raises:
        InfeasiblePlanError: the first rule broken, naming the file, keys, value got and expected.
    """
    if s.workload is not None:
        return            # no model: the workload's loader checked its ranks and sizes
    p, m, c, t = s.parallelism, s.model, s.cluster, s.training
    where = str(s.path) if s.path is not None else "<scenario>"

    def fail(key: str, got: str, expected: str) -> None:
        raise InfeasiblePlanError(f"{where}: {key}: got {got}, expected {expected}")

    gpus = c.nodes * c.gpus_per_node
    if p.cp == 1 and p.dp * p.tp * p.pp != gpus:
        fail("parallelism", f"dp*tp*pp = {p.dp}*{p.tp}*{p.pp} = {p.dp * p.tp * p.pp}",
             f"the cluster's GPU count nodes*gpus_per_node = {c.nodes}*{c.gpus_per_node} = {gpus}")
    if p.cp > 1 and p.dp * p.cp * p.tp * p.pp != gpus:
        fail("parallelism", f"dp*context_parallel_size*tp*pp = {p.dp}*{p.cp}*{p.tp}*{p.pp} = "
             f"{p.dp * p.cp * p.tp * p.pp}",
             f"the cluster's GPU count nodes*gpus_per_node = {c.nodes}*{c.gpus_per_node} = {gpus}")
    if p.cp > 1 and m.seq_length % (2 * p.cp):
        fail("parallelism.context_parallel_size", f"{p.cp} with model seq_length {m.seq_length}",
             f"a seq_length divisible by 2*context_parallel_size = {2 * p.cp}")
    if p.cp > 1 and p.sequence_parallel and (m.seq_length // p.cp) % p.tp:
        fail("parallelism.context_parallel_size",
             f"{p.cp} with seq_length {m.seq_length} and tp {p.tp} (sequence parallel)",
             "seq_length/context_parallel_size divisible by tp")
    if m.attention_heads % p.tp:
        fail("parallelism.tp", f"{p.tp} with model attention_heads {m.attention_heads}",
             "a tp that divides attention_heads")
    if m.kv_heads >= p.tp and m.kv_heads % p.tp:
        fail("parallelism.tp", f"{p.tp} with model kv_heads {m.kv_heads}",
             "a tp that divides kv_heads")
    if m.kv_heads < p.tp and p.tp % m.kv_heads:
        fail("parallelism.tp", f"{p.tp} with model kv_heads {m.kv_heads}",
             "a multiple of kv_heads when tp > kv_heads")
    try:
        p.stage_layer_counts(m.layers)
    except PipelineSplitError as err:
        fail(f"parallelism.{err.key}", err.got, err.expected)
    if m.mla is not None and p.tp > 1:
        fail("parallelism.tp", f"{p.tp} with multi_latent_attention",
             "tp 1 (the TP collectives of MLA's latents are not modelled)")
    if m.moe is not None and m.moe.shared_expert_intermediate_size and p.tp > 1:
        fail("parallelism.tp", f"{p.tp} with moe.shared_expert_intermediate_size "
             f"{m.moe.shared_expert_intermediate_size}",
             "tp 1 (the shared experts' TP collectives are not modelled)")
    if m.mla is not None and p.cp > 1:
        fail("parallelism.context_parallel_size", f"{p.cp} with multi_latent_attention",
             "1 (ring attention over MLA's latents is not modelled)")
    if m.mtp_num_layers:
        fail("model.mtp_num_layers", str(m.mtp_num_layers),
             "0 (multi-token prediction is not modelled; its parameters are counted)")
    if t.global_batch_size % (t.micro_batch_size * p.dp):
        fail("training.global_batch_size", str(t.global_batch_size),
             f"a multiple of micro_batch_size*dp = {t.micro_batch_size}*{p.dp}")
    if p.sequence_parallel and m.seq_length % p.tp:
        fail("parallelism.sequence_parallel", f"seq_length {m.seq_length} with tp {p.tp}",
             "a seq_length divisible by tp")
    if p.ep > 1:
        if m.moe is None:
            fail("parallelism.ep", str(p.ep), "ep 1 for a model without moe")
        elif m.moe.experts % p.ep:
            fail("parallelism.ep", f"{p.ep} with moe.experts {m.moe.experts}",
                 "an ep that divides the number of experts")
        if (p.dp * p.cp) % p.ep:
            fail("parallelism.ep", f"{p.ep} with dp*context_parallel_size {p.dp * p.cp}",
                 "an ep that divides dp*context_parallel_size")
    if p.vpp > 1:
        _check_interleaving(s, fail)
    if m.moe is not None and m.moe.token_dispatcher == "deepep" and p.ep > 1:
        _check_deepep(s, fail)
    if p.tp > 1 and not p.sequence_parallel and any(m.moe_layers):
        fail("parallelism.sequence_parallel", f"false with tp {p.tp} and a model with MoE layers",
             "true: Megatron-core's MoE layer refuses to train with tensor parallelism without "
             "sequence parallelism")
    _check_overlap(s, fail)
    if s.tokenizer.kind == "bpe" and s.tokenizer.vocab_size > m.vocab_size:
        fail("tokenizer.vocab_size", str(s.tokenizer.vocab_size),
             f"at most the model's vocab_size {m.vocab_size}")
    mb = t.global_batch_size // (t.micro_batch_size * p.dp)
    if mb > MAX_MICROBATCHES:
        fail("training.global_batch_size",
             f"{t.global_batch_size} = {mb:,} microbatches of micro_batch_size*dp = "
             f"{t.micro_batch_size}*{p.dp}",
             f"at most {MAX_MICROBATCHES:,} microbatches per iteration (Megatron-LM's 1T run "
             "used 512)")
    if mb * m.layers > MAX_MICROBATCH_LAYERS:
        fail("training.global_batch_size",
             f"{t.global_batch_size} = {mb:,} microbatches x {m.layers} layers = "
             f"{mb * m.layers:,}",
             f"microbatches x layers <= {MAX_MICROBATCH_LAYERS:,} (Megatron-LM's 1T run: 512 x "
             "128 = 65,536)")


def microbatch_multiple(p) -> int:  # type: ignore[no-untyped-def]
    """What an iteration's microbatches must be a multiple of under the parallelism ``p``
    (:class:`~tokenpcap.config.types.Parallelism`): ``pp`` with the interleaved schedule
    (:func:`_check_interleaving`), else 1."""
    return p.pp if p.vpp > 1 else 1


def _check_interleaving(s: Scenario, fail) -> None:  # type: ignore[no-untyped-def]
    """Megatron-LM's rules for the interleaved 1F1B schedule with ``v =
    virtual_pipeline_model_parallel_size > 1``: ``pp > 1`` (``arguments.py``, with the default
    ``--overlap-p2p-communication``), model chunks Megatron-core builds
    (``get_transformer_layer_offset``: equal chunks, ``layers % (pp*v) == 0``, or an uneven
    split per virtual stage: :func:`tokenpcap.config.pipeline.chunk_layer_counts`), and with
    the default ``microbatch_group_size_per_vp_stage = pp`` the microbatches a multiple of pp
    (``forward_backward_pipelining_with_interleaving``: the last group of microbatches must not
    be smaller than pp). Not modelled with chunks, so refused:
    ZeRO-3 (per-layer parameter gathers), a model of dense and MoE layers."""
    p, m, t = s.parallelism, s.model, s.training
    key = "parallelism.virtual_pipeline_model_parallel_size"
    if p.pp == 1:
        fail(key, f"{p.vpp} with pp 1", "null or 1 without pipeline parallelism")
    try:
        p.chunk_layer_counts(m.layers)
    except PipelineSplitError as err:
        fail(f"parallelism.{err.key}", err.got, err.expected)
    mb = t.global_batch_size // (t.micro_batch_size * p.dp)
    if mb % microbatch_multiple(p):
        fail(key, f"{p.vpp} with {mb} microbatches",
             f"microbatches (global_batch_size/(micro_batch_size*dp)) a multiple of pp {p.pp}")
    if p.zero_stage == 3:
        fail(key, f"{p.vpp} with zero_stage 3", "zero_stage 0, 1 or 2 with interleaving")
    if len(set(m.moe_layers)) > 1:
        fail(key, f"{p.vpp} with a model of dense and MoE layers (moe.layer_freq)",
             "null or 1: interleaving a model of mixed layers is not modelled")


def _check_deepep(s: Scenario, fail) -> None:  # type: ignore[no-untyped-def]
    """``moe.token_dispatcher: deepep`` (:mod:`tokenpcap.plan.moe_nodelimited`): tp 1 (the
    dispatcher's TP collectives are not modelled), EP groups that fill whole nodes (or lie in
    one) with the same number of their ranks on each, and one routing group per node of an EP
    group (``router_num_groups == ep / gpus_per_node``, DeepSeek-V3 Sec. 2.1.2: 8 groups on the
    8 nodes of its EP 64)."""
    p, m, gpn = s.parallelism, s.model, s.cluster.gpus_per_node
    if p.tp > 1:
        fail("parallelism.tp", f"{p.tp} with moe.token_dispatcher deepep",
             "tp 1 (DeepEP's dispatch is modelled without tensor parallelism)")
    aligned = ((p.ep % gpn == 0 and (p.dp * p.cp) % gpn == 0) if p.ep >= gpn
               else gpn % p.ep == 0)
    if not aligned:
        fail("parallelism.ep", f"{p.ep} on nodes of {gpn} GPUs with dp*context_parallel_size "
             f"{p.dp * p.cp}",
             "EP groups of whole nodes (ep and dp*context_parallel_size multiples of "
             "gpus_per_node) or within one node, for moe.token_dispatcher deepep")
    nodes = max(1, p.ep // gpn)
    if m.moe.router_num_groups != nodes:
        fail("model.moe.router_num_groups", f"{m.moe.router_num_groups} with ep {p.ep} on nodes "
             f"of {gpn} GPUs", f"{nodes}, one group per node of an EP group (moe.token_dispatcher "
             "deepep)")


def _check_overlap(s: Scenario, fail) -> None:  # type: ignore[no-untyped-def]
    """Megatron-LM's rules for the overlap options: ``overlap_param_gather`` only with the
    distributed optimizer (``zero_stage`` 1 or 2) and ``overlap_grad_reduce``
    (``megatron/training/arguments.py``: "--overlap-param-gather only supported with
    distributed optimizer", "Must use --overlap-param-gather with --overlap-grad-reduce");
    ``overlap_moe_expert_parallel_comm`` only with expert parallelism and without full
    recomputation (``megatron/core/transformer/transformer_config.py``,
    ``TransformerConfig.__post_init__``). Megatron-core also asks for interleaving when pp > 1;
    tokenpcap runs the same combined steps on plain 1F1B (:mod:`tokenpcap.schedule.epoverlap`)."""
    p, t = s.parallelism, s.training
    if t.overlap_param_gather and p.zero_stage not in (1, 2):
        fail("training.overlap_param_gather", f"true with zero_stage {p.zero_stage}",
             "zero_stage 1 or 2 (Megatron's distributed optimizer)")
    if t.overlap_param_gather and not t.overlap_grad_reduce:
        fail("training.overlap_param_gather", "true with overlap_grad_reduce false",
             "overlap_grad_reduce true (Megatron-LM arguments.py)")
    if t.overlap_moe_expert_parallel_comm and p.ep == 1:
        fail("training.overlap_moe_expert_parallel_comm", "true with ep 1",
             "ep > 1 (the overlap hides expert-parallel AllToAlls)")
    if t.overlap_moe_expert_parallel_comm and t.recompute == "full":
        fail("training.overlap_moe_expert_parallel_comm", "true with recompute full",
             "recompute none or selective (Megatron-core refuses full recomputation with it)")
