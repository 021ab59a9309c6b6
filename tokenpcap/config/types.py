"""The typed profile objects :mod:`tokenpcap.config.profiles` builds from YAML (frozen dataclasses).

Every quantity carries its unit in its name (``link_gbps``, ``pmtu_bytes``, ``latency_ns``); the
values are checked by the loaders in :mod:`tokenpcap.config.profiles`, which also re-exports these names
(import them from there).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["MoeProfile", "ModelProfile", "GpuProfile", "NetworkProfile", "ClusterProfile",
           "TokenizerSpec", "Parallelism", "Training", "CollectivesConfig", "GenerationConfig",
           "Scenario", "DTYPE_BYTES"]


@dataclass(frozen=True)
class MoeProfile:
    """Mixture-of-experts feed-forward: ``experts`` experts of ``ffn_hidden_size``, ``top_k`` active."""

    experts: int
    top_k: int
    ffn_hidden_size: int


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


@dataclass(frozen=True)
class GpuProfile:
    name: str
    peak_tflops: float                     # dense peak at the training precision, 1e12 FLOP/s


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


@dataclass(frozen=True)
class Training:
    micro_batch_size: int = 1
    global_batch_size: int = 1
    precision: str = "bf16"                # bf16 | fp16 | fp32 (activations, parameters)
    grad_reduce_dtype: str = "fp32"        # dtype of the DP gradient reduction
    recompute: str = "none"                # none | selective | full
    mfu: float = 0.45
    #: Megatron-core ``DistributedDataParallelConfig``: with ``overlap_grad_reduce`` the DP
    #: gradients go in buckets of ``bucket_size`` *parameters* (None: max(40,000,000,
    #: 1,000,000 * dp)) as backward produces them; without it one collective per buffer after
    #: backward.
    overlap_grad_reduce: bool = False
    bucket_size: int | None = None
    #: Megatron-LM ``--clip-grad`` (gradient-norm clipping; 0 turns the norm AllReduce off) and
    #: ``--no-create-attention-mask-in-dataloader`` (the mask is broadcast within TP with the batch).
    clip_grad: float = 1.0
    create_attention_mask_in_dataloader: bool = True


@dataclass(frozen=True)
class CollectivesConfig:
    algorithm: str = "ring"                # ring | tree | hierarchical
    channels: int = 2                      # NCCL-like channels (one QP each per peer); the
                                           # loader's default is NCCL's: 2 * nics_per_node
    slice_bytes: int = 1 << 20             # largest RDMA message of one transfer


@dataclass(frozen=True)
class GenerationConfig:
    seed: int = 0
    iterations: int = 1
    ack_every_packets: int = 0             # 0: one coalesced ACK per message
    clear_to_send: bool = True             # NCCL-like CTS write before each data message


@dataclass(frozen=True)
class Scenario:
    name: str
    corpus: Path
    tokenizer: TokenizerSpec
    model: ModelProfile
    cluster: ClusterProfile
    parallelism: Parallelism
    training: Training
    collectives: CollectivesConfig = field(default_factory=CollectivesConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    path: Path | None = None
    description: str = ""


#: Bytes per element of the dtypes a profile may name (``training.precision``, ``grad_reduce_dtype``).
DTYPE_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
