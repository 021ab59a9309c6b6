"""Upper bounds of profile values: the largest published training setup times a margin, or a
width of the message table (``MESSAGE_DTYPE``: iteration, layer and microbatch are int16),
whichever is smaller.

They keep every accepted input within bounded plan time and memory (the plan grows with
microbatches x layers and with the number of GPUs; measured figures in ``docs/plan.md``).
Each bound's ``#:`` comment gives its source; the "Upper bounds" table of
``docs/profiles.md`` is generated from these comments
(:func:`tokenpcap.config.spectable.bounds_table`), so a bound is named here with the ``MAX_``
prefix or the ``_RANGE`` suffix and has a ``#:`` comment.
"""
from __future__ import annotations

__all__ = [
    "MAX_LAYERS", "MAX_HIDDEN_SIZE", "MAX_ATTENTION_HEADS", "MAX_FFN_HIDDEN_SIZE",
    "MAX_VOCAB_SIZE", "MAX_SEQ_LENGTH", "MAX_EXPERTS", "MAX_GPUS_PER_NODE", "MAX_WORLD_SIZE",
    "LINK_GBPS_RANGE", "MAX_PEAK_TFLOPS", "MAX_LATENCY_NS", "MAX_MICRO_BATCH_SIZE",
    "MAX_GLOBAL_BATCH_SIZE", "MAX_CHANNELS", "MAX_ITERATIONS", "MAX_SEED",
    "MAX_SWITCH_PORTS", "MAX_SWITCH_BUFFER_BYTES", "MAX_ECMP_SEED", "MAX_FABRIC_PLANES",
    "MAX_WORKLOAD_BYTES", "MAX_REPEAT", "MAX_START_OFFSET_NS",
]

#: Transformer layers: Megatron-LM's 1T model has 128 (Narayanan et al. 2021, Table 1),
#: Llama 3.1 405B 126, PaLM 540B 118; 8x margin.
MAX_LAYERS = 1024
#: Hidden size: 25,600 for the 1T model (ibid.), 16,384 for Llama 3.1 405B; ~5x margin.
MAX_HIDDEN_SIZE = 131_072
#: Attention heads: 160 for the 1T model (ibid.); 128 for Llama 3.1 405B.
MAX_ATTENTION_HEADS = 4096
#: FFN hidden size: 102,400 (4h of the 1T model), 53,248 for Llama 3.1 405B; 10x margin.
MAX_FFN_HIDDEN_SIZE = 1_048_576
#: Vocabulary: 256,000 (Gemma) is the largest published; 2**24 keeps ids far inside int32.
MAX_VOCAB_SIZE = 1 << 24
#: Sequence length: 131,072 in Llama 3.1's long-context stage (Llama 3 report, Sec. 3.4.2); 8x.
MAX_SEQ_LENGTH = 1 << 20
#: MoE experts: DeepSeek-V3 routes over 256 per layer; 16x.
MAX_EXPERTS = 4096
#: GPUs per node (one NVLink domain with its NICs): 72 in a GB200 NVL72 rack; NVL576 announced.
MAX_GPUS_PER_NODE = 1024
#: GPUs in the cluster: Llama 3.1 405B trained on 16,384 H100 (the largest published run with
#: its parallel layout); 2x margin. The plan's time and memory grow with this (docs/plan.md).
MAX_WORLD_SIZE = 32_768
#: Link rates (Gb/s): 1 GbE is the slowest link carrying RoCE; NVLink 5 is 14,400 Gb/s per GPU.
LINK_GBPS_RANGE = (1.0, 1_000_000.0)
#: GPU peak (TFLOP/s): B200 dense FP8 is ~4,500.
MAX_PEAK_TFLOPS = 1_000_000.0
#: One-way NIC-to-NIC latency (ns): one second.
MAX_LATENCY_NS = 1_000_000_000
#: Micro batch (sequences): published runs use 1-16.
MAX_MICRO_BATCH_SIZE = 65_536
#: Global batch (sequences): Llama 3.1 405B 16M tokens = 2,048 x 8,192; DeepSeek-V3 15,360.
MAX_GLOBAL_BATCH_SIZE = 1 << 24
#: NCCL channels: NCCL's ``MAXCHANNELS`` (``src/include/device.h``: 64; 32 in older releases).
MAX_CHANNELS = 64
#: Iterations of one capture: MESSAGE_DTYPE.iteration is int16.
MAX_ITERATIONS = 32_767
#: Seed: the range ``WireContext.payload_seed`` accepts (a non-negative int64).
MAX_SEED = (1 << 63) - 1
#: Ports of one switch of a queued fabric: Broadcom Tomahawk 5 (51.2 Tb/s) has 512 SerDes lanes
#: of 100 Gb/s, so at most 512 ports of one lane each; 2x margin.
MAX_SWITCH_PORTS = 1024
#: Planes of a queued fabric (ports per NIC, one in each plane): Alibaba HPN (SIGCOMM 2024) runs
#: 2 planes, every NIC's 2 x 200G ports to two ToRs of disjoint planes; more are not modelled.
MAX_FABRIC_PLANES = 2
#: Shared buffer of one switch: deep-buffer switches (on-chip plus HBM, VOQ) hold up to 32 GB per
#: system (Arista 7280R architecture white paper, "up to 32GB per system"); 2x margin.
MAX_SWITCH_BUFFER_BYTES = 1 << 36
#: ECMP seed (``fabric.ecmp.seed``): a 32-bit value, as the hash functions take it (HPCC ns-3
#: ``SwitchNode::EcmpHash`` ``uint32_t seed``; zlib's ``crc32`` start value).
MAX_ECMP_SEED = (1 << 32) - 1
#: Bytes of a workload call (``workload.bytes``): 64 GiB, several times an H100's 80 GB of
#: memory split over a send and a receive buffer (nccl-tests' ``-e`` sweeps end below it).
MAX_WORKLOAD_BYTES = 1 << 36
#: Repetitions of a workload's calls: the repetition is the message table's microbatch (int16).
MAX_REPEAT = 32_767
#: Start offset of a workload rank: 1000 s in ns (a staggered start, not a schedule).
MAX_START_OFFSET_NS = 10 ** 12
