"""Upper (and, where a small value breaks arithmetic, lower) bounds of profile values: the largest published training setup times a margin, or a
width of the message table (``MESSAGE_DTYPE``: iteration, layer and microbatch are int16),
whichever is smaller.

They keep every accepted input within bounded plan time and memory (the plan grows with
microbatches x layers and with the number of GPUs; measured figures in ``docs/plan.md``).
Each bound's ``#:`` comment gives its source; the "Upper bounds" table of
``docs/profiles.md`` is generated from these comments
(:func:`tokenpcap.config.spectable.bounds_table`), so a bound is named here with the ``MAX_``
or ``MIN_`` prefix or the ``_RANGE`` suffix and has a ``#:`` comment.
"""
from __future__ import annotations

__all__ = [
    "MAX_LAYERS", "MAX_HIDDEN_SIZE", "MAX_ATTENTION_HEADS", "MAX_FFN_HIDDEN_SIZE",
    "MAX_VOCAB_SIZE", "MAX_SEQ_LENGTH", "MAX_EXPERTS", "MAX_GPUS_PER_NODE", "MAX_WORLD_SIZE",
    "LINK_GBPS_RANGE", "MAX_PEAK_TFLOPS", "MAX_LATENCY_NS", "MAX_MICRO_BATCH_SIZE",
    "MAX_GLOBAL_BATCH_SIZE", "MAX_CHANNELS", "MAX_ITERATIONS", "MAX_SEED",
    "MAX_SWITCH_PORTS", "MAX_SWITCH_BUFFER_BYTES", "MAX_ECMP_SEED", "MAX_FABRIC_PLANES",
    "MAX_WORKLOAD_BYTES", "MAX_REPEAT", "MAX_START_OFFSET_NS", "MIN_PEAK_TFLOPS", "MFU_RANGE",
    "SLICE_BYTES_RANGE", "P2P_NET_CHUNKSIZE_RANGE", "MAX_ACK_EVERY_PACKETS", "MAX_BUCKET_SIZE",
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
#: Lowest GPU peak (TFLOP/s): 1 TFLOP/s, below a 2016 P100's 9.3 (fp32) and 10,000x below an
#: H100; lower peaks make compute times of the largest models pass int64 ns.
MIN_PEAK_TFLOPS = 1.0
#: Model FLOPs utilisation: published runs reach 0.38-0.55 (Llama 3 405B 38-43 %, Megatron-LM's
#: 1T model 52 %); down to 10^-9 to let compute dominate a small run on purpose. Compute
#: times are exact fractions checked against int64 ns (``schedule/compute.py``), so no value in
#: the range wraps; 1e-300 would only overflow every one of them.
MFU_RANGE = (1e-9, 1.0)
#: Largest RDMA message of one transfer (``collectives.slice_bytes``): from one 4 KiB page (the
#: largest RoCE path MTU; NCCL never posts smaller network chunks for bulk data, its
#: ``NCCL_P2P_NET_CHUNKSIZE`` defaults to 128 KiB) to ``MAX_WORKLOAD_BYTES``, the largest call.
SLICE_BYTES_RANGE = (4096, 1 << 36)
#: Bytes of one network p2p chunk (``collectives.NCCL_P2P_NET_CHUNKSIZE``; 0 turns NCCL's p2p
#: chunking off): from one 4 KiB page, as ``slice_bytes`` (a 1-byte chunk made a message per
#: byte: minutes to plan an 8-GPU run), to 1 GiB; NCCL caps what it uses at 512 KiB
#: (``NCCL_BUFFSIZE / NCCL_STEPS``, ``src/init.cc``).
P2P_NET_CHUNKSIZE_RANGE = (4096, 1 << 30)
#: ACK coalescing (``generation.ack_every_packets``): the packets of the largest call
#: (``MAX_WORKLOAD_BYTES`` at the smallest RoCE path MTU, 256 B); a larger N is never reached.
MAX_ACK_EVERY_PACKETS = 1 << 28
#: Gradient bucket (``training.bucket_size``, elements): above the parameter count of every
#: published model (DeepSeek-V3 671 B < 2^40); larger is one bucket, as this is.
MAX_BUCKET_SIZE = 1 << 40
#: One-way NIC-to-NIC latency (ns): one second.
MAX_LATENCY_NS = 1_000_000_000
#: Micro batch (sequences): published runs use 1-16.
MAX_MICRO_BATCH_SIZE = 65_536
#: Global batch (sequences): Llama 3.1 405B 16M tokens = 2,048 x 8,192; DeepSeek-V3 15,360.
MAX_GLOBAL_BATCH_SIZE = 1 << 24
#: NCCL channels: what the QP numbering holds. A message goes on QP index ``dimension x
#: channels + channel`` (``schedule/runner.py``) and an index must be below 256
#: (``wire/qpn.py`` ``QP_STRIDE``) for each of the 8 dimensions of ``records.DIMS``: 256 / 8.
#: NCCL's own ``MAXCHANNELS`` is 64 (``src/include/device.h``; 32 in older releases).
MAX_CHANNELS = 32
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
