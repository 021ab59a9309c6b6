"""The typed profile objects :mod:`tokenpcap.config.profiles` builds from YAML (frozen dataclasses).

Every quantity carries its unit in its name (``link_gbps``, ``pmtu_bytes``, ``latency_ns``); the
values are checked by the loaders in :mod:`tokenpcap.config.profiles`, which also re-exports these names
(import them from there).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tokenpcap.config.fabric_types import (EcmpConfig, FabricProfile, PfcConfig, SwitchConfig,
                                           TopologyConfig)
from tokenpcap.config.pipeline import chunk_layer_counts, stage_layer_counts
from tokenpcap.errors import InputError

if TYPE_CHECKING:
    from tokenpcap.config.workload import Workload

__all__ = ["MoeProfile", "MlaProfile", "ModelProfile", "GpuProfile", "NetworkProfile", "ClusterProfile",
           "TopologyConfig", "SwitchConfig", "PfcConfig", "EcmpConfig", "FabricProfile",
           "TokenizerSpec", "Parallelism", "Training", "CollectivesConfig", "GenerationConfig",
           "Scenario", "Published", "DTYPE_BYTES", "TOKEN_DISPATCHERS"]


#: The values of ``moe.token_dispatcher`` (:class:`MoeProfile`); the plan registers one family
#: builder per name (:data:`tokenpcap.plan.moe.TOKEN_DISPATCHER_FAMILIES`).
TOKEN_DISPATCHERS: tuple[str, ...] = ("alltoall", "deepep")


@dataclass(frozen=True)
class MoeProfile:
    """Mixture-of-experts feed-forward: ``experts`` routed experts of ``ffn_hidden_size``,
    ``top_k`` active per token, plus shared experts (always active) of
    ``shared_expert_intermediate_size`` together (Megatron-core
    ``moe_shared_expert_intermediate_size``; 0: none). ``layer_freq`` says which layers are MoE
    (Megatron-core ``moe_layer_freq``, ``gpt_layer_specs.get_gpt_decoder_block_spec``): an
    integer ``N`` makes layer ``i`` an MoE layer when ``i % N == 0``, a tuple of 0/1 (one per
    layer) names them; the other layers have the dense MLP of the model's ``ffn_hidden_size``.

    ``aux_loss_coeff``: Megatron-core ``moe_aux_loss_coeff`` with ``moe_router_load_balancing_type
    aux_loss`` (default 0, Megatron's: no load-balancing loss); > 0 makes each router AllReduce its
    tokens per expert over the TP x CP group. ``router_enable_expert_bias``: Megatron-core
    ``moe_router_enable_expert_bias`` (DeepSeek-V3's auxiliary-loss-free balancing, Sec. 2.1.2):
    the tokens per expert of every router are AllReduced over TP x DP x CP once per iteration.

    ``dispatch_dtype``: the element type of the routed tokens the EP AllToAlls carry from their
    owner to the experts (the forward dispatch and the backward's combine gradient), ``None``:
    the training precision. ``"fp8"`` adds one fp32 scale per 128 elements of each token
    (DeepSeek-V3 Sec. 3.3; :func:`tokenpcap.plan.moe.ep_row_bytes`). The combine and the
    dispatch's gradient stay at the training precision.

    ``router_num_groups`` / ``router_group_topk``: Megatron-core ``moe_router_num_groups`` /
    ``moe_router_group_topk`` (DeepSeek-V3's node-limited routing, Sec. 2.1.2: ``n_group`` 8,
    ``topk_group`` 4): the experts form ``router_num_groups`` groups of consecutive experts and a
    token's ``top_k`` experts come from its ``router_group_topk`` best groups
    (``moe_utils.group_limited_topk``); None: no group limit. ``token_dispatcher``: how the
    routed tokens travel (a key of :data:`TOKEN_DISPATCHERS`): ``"alltoall"``, Megatron-core's
    ``MoEAlltoAllTokenDispatcher`` (one row per token and expert, an AllToAll over the EP
    group); ``"deepep"``, its ``MoEFlexTokenDispatcher`` on DeepEP (DeepSeek-V3 Sec. 3.2.2: a
    token crosses IB once per chosen node, to the GPU of the same local index, and is forwarded
    over NVLink to its experts' GPUs there; :mod:`tokenpcap.plan.moe_nodelimited`).
    """

    experts: int
    top_k: int
    ffn_hidden_size: int
    shared_expert_intermediate_size: int = 0
    layer_freq: int | tuple[int, ...] = 1
    aux_loss_coeff: float = 0.0
    router_enable_expert_bias: bool = False
    dispatch_dtype: str | None = None
    router_num_groups: int | None = None
    router_group_topk: int | None = None
    token_dispatcher: str = "alltoall"


@dataclass(frozen=True)
class MlaProfile:
    """Multi-latent attention (DeepSeek-V2/V3; Megatron-core ``MLATransformerConfig``): queries
    through a ``q_lora_rank`` bottleneck (None: a plain query projection), keys and values
    through a shared ``kv_lora_rank`` latent plus one ``qk_pos_emb_head_dim`` rotary key shared
    by all heads; per head ``qk_head_dim + qk_pos_emb_head_dim`` query/key dims and
    ``v_head_dim`` value dims."""

    q_lora_rank: int | None
    kv_lora_rank: int
    qk_head_dim: int
    qk_pos_emb_head_dim: int
    v_head_dim: int


@dataclass(frozen=True)
class ModelProfile:
    """A decoder-only transformer (GPT-style or modern). Sizes are element counts, not bytes."""

    name: str
    source: str
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    ffn_hidden_size: int
    vocab_size: int
    seq_length: int
    mlp: str = "gelu"                      # gelu | swiglu
    norm: str = "layernorm"                # layernorm | rmsnorm
    tied_embeddings: bool = True
    position_embedding: str = "learned"    # learned | rope
    bias: bool = True                      # linear layers carry biases (GPT) or not (Llama)
    moe: MoeProfile | None = None
    path: Path | None = None
    description: str = ""
    #: Megatron-LM pads the vocabulary to a multiple of this times tp (``--make-vocab-size-
    #: divisible-by``, default 128).
    make_vocab_size_divisible_by: int = 128
    #: Multi-latent attention instead of MHA/GQA (None: MHA/GQA of ``kv_heads``).
    mla: MlaProfile | None = None
    #: Multi-token prediction modules (Megatron-core ``mtp_num_layers``); 0: off.
    mtp_num_layers: int = 0

    @property
    def moe_layers(self) -> tuple[bool, ...]:
        """Per transformer layer, whether it is an MoE layer (:class:`MoeProfile`
        ``layer_freq``); all False for a dense model."""
        if self.moe is None:
            return (False,) * self.layers
        f = self.moe.layer_freq
        if isinstance(f, int):
            return tuple(i % f == 0 for i in range(self.layers))
        return tuple(bool(x) for x in f)


@dataclass(frozen=True)
class GpuProfile:
    name: str
    peak_tflops: float                     # dense peak at the training precision, 1e12 FLOP/s
    #: Share of the peak a kernel kind reaches (tokenpcap.schedule.compute.kernel_efficiency):
    #: matrix multiplies (GEMMs) and the attention kernel; None: the scenario's ``mfu`` or its
    #: default.
    gemm_efficiency: float | None = None
    attention_efficiency: float | None = None


@dataclass(frozen=True)
class Published:
    """The MFU a published run of the scenario's recipe reports (a fraction of the dense peak,
    Megatron-LM's formula: no recomputation counted), and where it is published; ``plan
    --time`` prints it beside the MFU the schedule implies."""

    mfu: float
    source: str


@dataclass(frozen=True)
class NetworkProfile:
    """How frames are addressed and marked on the wire (defaults: RFC 2544 range, RoCE class).

    ``ecn`` is the 2-bit ECN codepoint (0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE): ECT(0) is ``2``.
    ``latency_ns`` is the one-way latency from the last bit leaving a NIC to it reaching the peer
    NIC (propagation plus switching), added to every transfer's arrival.
    """

    ip_version: int = 4
    dscp: int = 26
    ecn: int = 2
    ttl: int = 64
    vlan_id: int | None = None
    pcp: int = 3
    mac_prefix: str = "02:00:00"           # locally administered; node and NIC fill the rest
    ipv4_base: str = "198.18.0.0"          # RFC 2544 benchmarking range 198.18.0.0/15
    ipv6_base: str = "2001:2::"            # RFC 5180 benchmarking range 2001:2::/48
    pkey: int = 0xFFFF
    latency_ns: int = 1000
    ib_sl: int = 0
    ib_vl: int = 0


@dataclass(frozen=True)
class ClusterProfile:
    name: str
    nodes: int
    gpus_per_node: int
    nics_per_node: int
    link_gbps: float
    nvlink_gbps: float
    gpu: GpuProfile
    transport: str = "rocev2"              # rocev2 | infiniband
    pmtu_bytes: int = 4096                 # 256 | 512 | 1024 | 2048 | 4096
    network: NetworkProfile = field(default_factory=NetworkProfile)
    path: Path | None = None
    description: str = ""
    #: The file that holds this profile (its own file, or the scenario of an inline cluster) and
    #: the dotted key of the profile inside it (``""`` or ``"cluster"``): see :meth:`where`.
    source: Path | None = field(default=None, compare=False)
    source_key: str = field(default="", compare=False)
    #: The fabric between the NICs; the default is the ideal one (no switch).
    fabric: FabricProfile = field(default_factory=FabricProfile)

    def where(self, key: str) -> tuple[str, str]:
        """``(file, dotted key)`` naming this profile's ``key`` (e.g. ``"network.ipv4_base"``) in
        the file that holds it, for errors raised after loading: ``("s.yaml",
        "cluster.network.ipv4_base")`` for a scenario's inline cluster."""
        file = self.source if self.source is not None else self.path
        return (str(file) if file is not None else f"<cluster {self.name!r}>",
                f"{self.source_key}.{key}" if self.source_key else key)


@dataclass(frozen=True)
class TokenizerSpec:
    kind: str = "bpe"                      # utf8 | bpe | tiktoken | hf
    vocab_size: int = 32000                # bpe only
    name: str | None = None                # tiktoken encoding name or hf path


@dataclass(frozen=True)
class Parallelism:
    """Megatron-LM's parallel sizes. ``dp`` is the data-parallel size without context
    parallelism (samples are split over it); the world is ``dp * cp * tp * pp`` ranks."""

    dp: int = 1
    tp: int = 1
    pp: int = 1
    sequence_parallel: bool = False
    zero_stage: int = 0                    # 0 | 1 | 2 | 3
    ep: int = 1
    #: Megatron-LM ``--context-parallel-size`` (ring attention, ``cp_comm_type p2p``).
    context_parallel_size: int = 1
    #: Megatron-LM ``virtual_pipeline_model_parallel_size`` (``--num-virtual-stages-per-pipeline-
    #: rank``): model chunks per pipeline stage of the interleaved 1F1B schedule; None (Megatron's
    #: default) or 1: no interleaving.
    virtual_pipeline_model_parallel_size: int | None = None

    #: Megatron-LM's uneven pipeline split (``--decoder-first-pipeline-num-layers``,
    #: ``--decoder-last-pipeline-num-layers``; None: even) and the embedding/loss counted as a
    #: layer (``--account-for-embedding-in-pipeline-split``, ``--account-for-loss-...``):
    #: :mod:`tokenpcap.config.pipeline`.
    decoder_first_pipeline_num_layers: int | None = None
    decoder_last_pipeline_num_layers: int | None = None
    account_for_embedding_in_pipeline_split: bool = False
    account_for_loss_in_pipeline_split: bool = False

    @property
    def cp(self) -> int:
        """``context_parallel_size``."""
        return self.context_parallel_size

    @property
    def vpp(self) -> int:
        """Model chunks per pipeline stage: ``virtual_pipeline_model_parallel_size`` or 1."""
        return self.virtual_pipeline_model_parallel_size or 1

    @property
    def world(self) -> int:
        """Ranks of the job: ``dp * cp * tp * pp`` (Megatron-LM's world size)."""
        return self.dp * self.cp * self.tp * self.pp

    def stage_layer_counts(self, layers: int) -> tuple[int, ...]:
        """Transformer layers per stage of a model of ``layers`` layers
        (:func:`tokenpcap.config.pipeline.stage_layer_counts`). Raises: PipelineSplitError."""
        return stage_layer_counts(layers, self.pp, self.decoder_first_pipeline_num_layers,
                                  self.decoder_last_pipeline_num_layers,
                                  self.account_for_embedding_in_pipeline_split,
                                  self.account_for_loss_in_pipeline_split)

    def chunk_layer_counts(self, layers: int) -> tuple[tuple[int, ...], ...]:
        """Transformer layers per model chunk of each stage, ``[stage][chunk]``
        (:func:`tokenpcap.config.pipeline.chunk_layer_counts`). Raises: PipelineSplitError."""
        return chunk_layer_counts(layers, self.pp, self.vpp,
                                  self.decoder_first_pipeline_num_layers,
                                  self.decoder_last_pipeline_num_layers,
                                  self.account_for_embedding_in_pipeline_split,
                                  self.account_for_loss_in_pipeline_split)


@dataclass(frozen=True)
class Training:
    micro_batch_size: int = 1
    global_batch_size: int = 1
    precision: str = "bf16"                # bf16 | fp16 | fp32 (activations, parameters)
    grad_reduce_dtype: str = "fp32"        # dtype of the DP gradient reduction
    recompute: str = "none"                # none | selective | full
    #: One share of the GPU peak for every kernel (None: the GPU profile's per-kernel
    #: efficiencies, else tokenpcap.schedule.compute.DEFAULT_MFU).
    mfu: float | None = None
    #: Megatron-core ``DistributedDataParallelConfig``: with ``overlap_grad_reduce`` the DP
    #: gradients go in buckets of ``bucket_size`` *parameters* (None: max(40,000,000,
    #: 1,000,000 * dp)) as backward produces them; without it one collective per buffer after
    #: backward.
    overlap_grad_reduce: bool = False
    bucket_size: int | None = None
    #: Megatron ``--overlap-param-gather`` (``DistributedDataParallelConfig``): with the
    #: distributed optimizer the AllGather of each bucket's updated parameters runs during the
    #: next iteration's first forward, waited for by the forward pre-hook of the first module
    #: that uses it (:mod:`tokenpcap.schedule.paramgather`); needs ``overlap_grad_reduce`` and
    #: ``zero_stage`` 1 or 2 (Megatron-LM ``arguments.py``).
    overlap_param_gather: bool = False
    #: Megatron ``--overlap-moe-expert-parallel-comm`` (``ModelParallelConfig``): each 1F1B
    #: step runs one microbatch's forward and another's backward layer by layer, the EP
    #: AllToAlls of one hidden behind the other's computation (``combined_1f1b.py``;
    #: :mod:`tokenpcap.schedule.epoverlap`).
    overlap_moe_expert_parallel_comm: bool = False
    #: Megatron-LM ``--clip-grad`` (gradient-norm clipping; 0 turns the norm AllReduce off) and
    #: ``--no-create-attention-mask-in-dataloader`` (the mask is broadcast within TP with the batch).
    clip_grad: float = 1.0
    create_attention_mask_in_dataloader: bool = True


@dataclass(frozen=True)
class CollectivesConfig:
    algorithm: str = "ring"                # ring | tree | hierarchical
    #: NCCL channels (one QP each per peer). The loader's ``auto`` (its default) sets the
    #: communicator's count NCCL finds, 2 x nics_per_node (``default_channels``), and
    #: ``channels_by_size``: each collective then runs on the channels NCCL's
    #: ``topoGetAlgoInfo`` keeps for its size, at most ``channels``; an integer is used as is.
    channels: int = 2
    channels_by_size: bool = True
    slice_bytes: int = 1 << 20             # largest RDMA message of one transfer
    #: NCCL's protocol and algorithm environment, with NCCL's names, list syntax
    #: (:func:`tokenpcap.collectives.tuning.parse_list`) and defaults: ``"auto"`` enables every
    #: protocol and its tuner chooses (``src/graph/tuning.cc``); ``"Simple"`` keeps every
    #: collective on Simple. ``NCCL_P2P_LL_THRESHOLD``: bytes per channel up to which p2p goes
    #: LL (NCCL's default 16384, ``src/enqueue.cc``; 0 keeps p2p Simple).
    NCCL_PROTO: str = "auto"
    NCCL_ALGO: str = "auto"
    NCCL_P2P_LL_THRESHOLD: int = 16384
    #: NCCL's p2p network environment (defaults NCCL's): ``NCCL_PXN_DISABLE`` (0: PXN on),
    #: ``NCCL_P2P_PXN_LEVEL`` (0 never, 1 if needed, 2 as much as possible),
    #: ``NCCL_CROSS_NIC`` (0, 1, 2), ``NCCL_P2P_NET_CHUNKSIZE`` (bytes of one network p2p
    #: step); :mod:`tokenpcap.collectives.pxn`, :mod:`tokenpcap.collectives.p2p_chunks`.
    NCCL_PXN_DISABLE: int = 0
    NCCL_P2P_PXN_LEVEL: int = 2
    NCCL_CROSS_NIC: int = 2
    NCCL_P2P_NET_CHUNKSIZE: int = 1 << 17
    #: A ring AllReduce's empty steps (a rank whose chunk holds no element) as NCCL sends them:
    #: one RDMA WRITE with immediate of 0 bytes each (:mod:`tokenpcap.collectives.empty_steps`).
    #: False keeps them out (the bundled scenarios' counts and simulator fixtures are without).
    empty_ring_steps: bool = False


@dataclass(frozen=True)
class GenerationConfig:
    seed: int = 0
    iterations: int = 1
    ack_every_packets: int = 0             # 0: one coalesced ACK per message
    clear_to_send: bool = True             # NCCL-like CTS write before each data message


@dataclass(frozen=True)
class Scenario:
    """A training scenario (corpus, tokenizer, model, parallelism, training), or a
    microbenchmark: ``workload`` set (:class:`tokenpcap.config.workload.Workload`), ``corpus``
    and ``model`` None, ``parallelism`` the trivial layout ``dp`` = every GPU (rank = GPU) and
    ``training`` the defaults (read by nothing of a workload's plan and schedule)."""

    name: str
    corpus: Path | None
    tokenizer: TokenizerSpec
    model: ModelProfile | None
    cluster: ClusterProfile
    parallelism: Parallelism
    training: Training
    collectives: CollectivesConfig = field(default_factory=CollectivesConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    path: Path | None = None
    description: str = ""
    workload: Workload | None = None
    published: Published | None = None

    @property
    def token_layout(self) -> tuple[int, int]:
        """``(samples, seq_length)`` of the per-token buffers (``training.micro_batch_size``,
        the model's ``seq_length``) that token ranges and packet comments are read with;
        ``(1, 1)`` for a workload scenario, whose messages carry no tokens (ranges -1)."""
        if self.model is None:
            return 1, 1
        return self.training.micro_batch_size, self.model.seq_length

    def require_model(self, what: str) -> ModelProfile:
        """The model, or :class:`~tokenpcap.errors.InputError` in one line for a workload
        scenario: ``what`` names what needs it (``"trace"``, ``"the simai export"``)."""
        if self.model is None:
            raise InputError(f"{self.path or self.name}: a workload scenario has no model: "
                             f"{what} needs a training scenario (model, parallelism, training)")
        return self.model


#: Bytes per element of the dtypes a profile may name (``training.precision``, ``grad_reduce_dtype``).
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
