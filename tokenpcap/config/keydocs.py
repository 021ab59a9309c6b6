"""The meaning and unit of every profile key, the one place they are written: the text
:mod:`tokenpcap.config.spectable` puts beside each key's default and range in
``docs/profiles.md`` (the congestion-control keys' are in
:data:`tokenpcap.config.fabric_cc.CC_KEYS`). A key the loaders read that is missing here, or one
here that no loader reads, makes the reference raise.
"""
from __future__ import annotations

from tokenpcap.config import bounds
from tokenpcap.config import fabric_cc as fcc

__all__ = ["KEYS"]

#: dotted key -> (unit, meaning); the unit is "" where the key has none (names, switches)
KEYS: dict[str, tuple[str, str]] = {
    "model.name": ("", "names the model in reports; default: the file's stem"),
    "model.source": ("", "where the numbers come from (paper, config.json)"),
    "model.description": ("", "free text"),
    "model.layers": ("layers", "transformer layers `L`"),
    "model.hidden_size": ("elements", "hidden size `h`; a multiple of `attention_heads`"),
    "model.attention_heads": ("heads", "attention heads `a`"),
    "model.kv_heads": ("heads", "key/value heads (GQA); default: `attention_heads` (multi-head "
                                "attention); divides `attention_heads`"),
    "model.ffn_hidden_size": ("elements", "MLP hidden size; default: `4 * hidden_size`"),
    "model.vocab_size": ("entries", "vocabulary `V` of the embedding and output layers"),
    "model.seq_length": ("tokens", "sequence length `s`: tokens per sample"),
    "model.mlp": ("", "MLP kind: GELU (2 matrices) or SwiGLU (3)"),
    "model.norm": ("", "LayerNorm (weight and bias) or RMSNorm (weight)"),
    "model.tied_embeddings": ("", "output layer shares the word embedding (the tied-embedding "
                                  "AllReduce between first and last stage)"),
    "model.position_embedding": ("", "learned position table (`s * h` parameters) or RoPE (none)"),
    "model.bias": ("", "linear layers carry biases"),
    "model.moe": ("", "mixture of experts, the keys below"),
    "model.make_vocab_size_divisible_by": ("tokens", "Megatron pads the vocabulary to a "
                                                     "multiple of this x tp "
                                                     "(`vocab_size_with_padding`)"),
    "model.multi_latent_attention": ("", "multi-latent attention, the keys below; only at tp 1 "
                                         "in a scenario"),
    "model.mtp_num_layers": ("modules", "multi-token prediction modules (Megatron-core "
                                        "`mtp_num_layers`): counted in the parameters, not "
                                        "modelled in a plan (a scenario needs 0)"),
    "model.multi_latent_attention.q_lora_rank": ("elements", "query latent (down-projection) "
                                                             "size; absent: no query "
                                                             "compression"),
    "model.multi_latent_attention.kv_lora_rank": ("elements", "key/value latent size"),
    "model.multi_latent_attention.qk_head_dim": ("elements", "per-head query/key dims without "
                                                             "rotary position"),
    "model.multi_latent_attention.qk_pos_emb_head_dim": ("elements", "per-head rotary "
                                                                     "query/key dims (the "
                                                                     "rotary key is shared)"),
    "model.multi_latent_attention.v_head_dim": ("elements", "per-head value dims"),
    "model.moe.shared_expert_intermediate_size": ("elements", "hidden size of the shared "
                                                              "experts together (always "
                                                              "active; Megatron-core "
                                                              "`moe_shared_expert_intermediate_"
                                                              "size`); 0: none"),
    "model.moe.layer_freq": ("", "which layers are MoE (Megatron-core `moe_layer_freq`): N "
                                 "makes layer i MoE when i % N == 0; a list of 0/1 names each "
                                 "layer; the others have the dense MLP of `ffn_hidden_size`"),
    "model.moe.experts": ("experts", "experts per MoE layer"),
    "model.moe.aux_loss_coeff": ("", "Megatron-core `moe_aux_loss_coeff` (load balancing type "
                                     "`aux_loss`); > 0: each router AllReduces its tokens per "
                                     "expert (int64) over TP x CP per MoE layer and microbatch"),
    "model.moe.router_enable_expert_bias": ("", "Megatron-core `moe_router_enable_expert_bias` "
                                                "(auxiliary-loss-free balancing): the routers' "
                                                "tokens per expert (fp32) AllReduced over TP x "
                                                "DP x CP once per iteration"),
    "model.moe.dispatch_dtype": ("", "element type of the routed tokens the EP AllToAlls send "
                                     "to the experts (the dispatch and the combine's gradient; "
                                     "DeepEP / DeepSeek-V3 Sec. 3.3.3); `fp8` adds one fp32 "
                                     "scale per 128 elements of a token; the combine and the "
                                     "dispatch's gradient keep `training.precision`; default: "
                                     "`training.precision`"),
    "model.moe.router_num_groups": ("groups", "Megatron-core `moe_router_num_groups` "
                                              "(DeepSeek-V3 `n_group`): groups of consecutive "
                                              "experts for group-limited routing; divides "
                                              "`experts`; with `token_dispatcher: deepep` one "
                                              "per node of an EP group; null: no groups"),
    "model.moe.router_group_topk": ("groups", "Megatron-core `moe_router_group_topk` "
                                              "(DeepSeek-V3 `topk_group`): the groups a token's "
                                              "experts are chosen from, so with one group per "
                                              "node the nodes it is sent to; given with "
                                              "`router_num_groups`"),
    "model.moe.token_dispatcher": ("", "how the routed tokens travel: `alltoall` (Megatron-core "
                                       "`MoEAlltoAllTokenDispatcher`: an AllToAll of one row "
                                       "per token and expert over the EP group) or `deepep` "
                                       "(Megatron-core's flex dispatcher on DeepEP, DeepSeek-V3 "
                                       "Sec. 3.2.2: once per chosen node over IB to the GPU of "
                                       "the same local index, then over NVLink to the experts' "
                                       "GPUs; needs the router groups, tp 1; docs/plan.md)"),
    "model.moe.top_k": ("experts", "experts each token is routed to; at most `experts`"),
    "model.moe.ffn_hidden_size": ("elements", "hidden size of one expert's MLP; default: the "
                                              "model's `ffn_hidden_size`"),
    "cluster.name": ("", "names the cluster in reports; default: the file's stem"),
    "cluster.description": ("", "free text"),
    "cluster.nodes": ("nodes", "nodes; `nodes * gpus_per_node` at most "
                               f"{bounds.MAX_WORLD_SIZE:,} GPUs"),
    "cluster.gpus_per_node": ("GPUs", "GPUs per node (one NVLink domain)"),
    "cluster.nics_per_node": ("NICs", "RDMA NICs per node, at most `gpus_per_node`; GPU g uses "
                                      "NIC `g * nics_per_node // gpus_per_node` (rail-optimised)"),
    "cluster.link_gbps": ("Gb/s", "NIC line rate; frames are spaced at it"),
    "cluster.nvlink_gbps": ("Gb/s", "NVLink rate per GPU; hops inside a node take this time and "
                                    "never reach a NIC"),
    "cluster.gpu": ("", "the GPU, the keys below"),
    "cluster.transport": ("", "RoCEv2 (Ethernet/IP/UDP 4791) or native InfiniBand (LRH, "
                              "no Ethernet)"),
    "cluster.pmtu_bytes": ("bytes", "path MTU: RDMA payload per packet"),
    "cluster.network": ("", "addressing and marking, the keys below"),
    "cluster.fabric": ("", "the fabric, the keys below; absent: ideal"),
    "cluster.fabric.model": ("", "`ideal`: no switch (a message arrives `network.latency_ns` "
                                 "after its last bit); `queued`: switches with queues and PFC "
                                 "in the engine"),
    "cluster.fabric.preset": ("", "fills every key not given: `hpcc-ns3` (HPCC ns-3 `third.cc` "
                                  "as `export --to hpcc` feeds it), `th5-400g` (Broadcom "
                                  "Tomahawk 5, SONiC Arista-7060X6-64PE), `spectrum4-400g` "
                                  "(NVIDIA SN5600, SONiC), `simai-400g` (SimAI.conf's "
                                  "ECN and DCQCN on hpcc-ns3's switches); sources in "
                                  "`tokenpcap/config/fabric_presets.py`"),
    "cluster.fabric.topology": ("", "the cabling: the keys below, or a kind alone "
                                "(`topology: single-switch`)"),
    "cluster.fabric.switch": ("", "the switches, the keys below"),
    "cluster.fabric.pfc": ("", "PFC, the keys below"),
    "cluster.fabric.ecmp": ("", "ECMP, the keys below"),
    "cluster.fabric.timing": ("", "`rocev2`: our frames with layer-1 overhead, serialization "
                                  "rounded up to whole ns; `hpcc-ns3`: frame = payload + 48 B, "
                                  "no layer-1 overhead, serialization truncated to whole ns, an "
                                  "ACK per packet (HPCC ns-3 `qbb-net-device.cc`)"),
    "cluster.fabric.qlen_sample_ns": ("ns", "queue-depth sampling interval of the side files "
                                            "(HPCC ns-3 `third.cc` `monitor_buffer` samples every 100 ns)"),
    "cluster.fabric.topology.kind": ("", "`single-switch` (every NIC on one switch), "
                                         "`rail-optimized` (one leaf per rail per unit, every "
                                         "leaf to every spine: `export --to hpcc`'s topology), "
                                         "`leaf-spine` (all NICs of a node on one leaf), "
                                         "`clos3` (rail-optimized pods, cores above)"),
    "cluster.fabric.topology.nodes_per_leaf": ("nodes", "nodes under one leaf (leaf-spine) or "
                                                        "per scalable unit, one leaf per rail "
                                                        "(rail-optimized, clos3; NVIDIA DGX "
                                                        "SuperPOD SU: 32); divides the nodes "
                                                        "(of a pod); absent: all"),
    "cluster.fabric.topology.spines": ("switches", "spines (per pod for clos3; clos3 has as "
                                                   "many cores); absent: `nics_per_node`"),
    "cluster.fabric.topology.oversubscription": ("ratio", "leaf down:up bandwidth (1: "
                                                          "non-blocking); sizes a null "
                                                          "`uplink_gbps`"),
    "cluster.fabric.topology.pods": ("nodes", "clos3: nodes per pod (Meta's 24K RoCE "
                                              "cluster: 3,072 GPUs = 384 nodes of 8, Llama 3 "
                                              "paper Sec. 3.3.1); divides the nodes; absent: all"),
    "cluster.fabric.topology.core_oversubscription": ("ratio", "clos3: pod-spine down:up "
                                                               "bandwidth (Meta: 7)"),
    "cluster.fabric.topology.nic_link_gbps": ("Gb/s", "NIC-to-leaf link rate (of each port "
                                                      "with planes); absent: `link_gbps` / "
                                                      "`planes`"),
    "cluster.fabric.topology.uplink_gbps": ("Gb/s", "leaf-spine and spine-core link rate; "
                                                    "absent: the NIC rate x ceil(down links / "
                                                    "(ratio x up links)), as `export --to "
                                                    "hpcc`"),
    "cluster.fabric.topology.planes": ("planes", "copies of the topology with no link "
                                                 "between them; every NIC has one port of "
                                                 "`link_gbps / planes` in each, every QP on "
                                                 "one of them (`plane_select`); Alibaba HPN "
                                                 "(SIGCOMM 2024): 2, 2 x 200G per 400G NIC; "
                                                 "docs/fabric.md"),
    "cluster.fabric.topology.plane_select": ("", "the plane of a QP, as Linux mlx5 picks a "
                                                 "RoCE QP's port on a bonded pair "
                                                 "(`lag_port_select_mode`): `round-robin` "
                                                 "(`queue_affinity`, the default: a NIC's QPs "
                                                 "alternate in creation order, `qp.c` "
                                                 "`get_tx_affinity_rr`) or `five-tuple` "
                                                 "(`hash`: a hash of the QP's 5-tuple, here "
                                                 "CRC-32)"),
    "cluster.fabric.topology.dual_tor": ("", "each NIC's ports on different ToRs (HPN's "
                                             "non-stacked dual-ToR); absent: `planes > 1`; "
                                             "true needs planes 2 (two ToRs sharing one plane's "
                                             "spines are not modelled)"),
    "cluster.fabric.topology.propagation_ns": ("ns", "link propagation per tier (NIC-leaf, "
                                                     "leaf-spine, spine-core), one integer for "
                                                     "all; absent: `network.latency_ns // 2` "
                                                     "(>= 1), as `export --to hpcc`"),
    "cluster.fabric.switch.forwarding": ("", "store-and-forward (HPCC ns-3) or cut-through"),
    "cluster.fabric.switch.pipeline_ns": ("ns", "added per switch hop (0 in HPCC ns-3; 700 for "
                                                "th5-400g is a modelling choice)"),
    "cluster.fabric.switch.buffer_bytes": ("bytes", "shared buffer of one switch (TH5 "
                                                    "ingress_lossless_pool 165,660,324; "
                                                    "hpcc-ns3: 16 x link_gbps // 50 MiB)"),
    "cluster.fabric.switch.control_priority": ("", "strict-priority class of ACKs and CNPs "
                                                   "(NVIDIA CNP_802P_PRIO 6; ns-3 queue 0); "
                                                   "not a lossless priority"),
    "cluster.fabric.pfc.enabled": ("", "PFC on the lossless priorities"),
    "cluster.fabric.pfc.priorities": ("", "lossless 802.1p priorities; absent: "
                                          "`[network.pcp]`"),
    "cluster.fabric.pfc.reserve_bytes": ("bytes", "guaranteed per (ingress port, priority) "
                                                  "(TH5 18,796; ns-3 4,096)"),
    "cluster.fabric.pfc.headroom_bytes": ("bytes", "per (ingress port, priority) after XOFF "
                                                   "(TH5 612,140); null: 3 x port rate x "
                                                   "propagation (HPCC ns-3 `third.cc`)"),
    "cluster.fabric.pfc.dynamic_th": ("", "alpha = 2**dynamic_th of the free shared buffer "
                                          "(SONiC; TH5 0; ns-3 pfc_a_shift 3: -3)"),
    "cluster.fabric.pfc.dynamic_th_rate_scaled": ("", "+1 per doubling of the port rate above "
                                                      "the NIC rate, up to 0 (ns-3 `third.cc`)"),
    "cluster.fabric.pfc.resume_offset_bytes": ("bytes", "XON at threshold - offset (TH5 "
                                                        "xon_offset 3,556; ns-3 3,072)"),
    "cluster.fabric.pfc.pause_quanta": ("quanta", "XOFF pause time in 512 bit times (IEEE "
                                                  "802.1Qbb; 65,535 = 83.9 us at 400G)"),
    "cluster.fabric.pfc.pause_until_resume": ("", "paused until the XON, no timer (HPCC ns-3); "
                                                  "false: the pause expires, refreshed while "
                                                  "congested"),
    "cluster.fabric.ecmp.mode": ("", "`five-tuple` hash, `dest-qp` (hash of the destination "
                                     "QPN: Meta's E-ECMP) or `spray` (per packet)"),
    "cluster.fabric.ecmp.hash": ("", "`crc32` (zlib CRC-32) or `hpcc-murmur3` (HPCC ns-3 "
                                     "`SwitchNode::EcmpHash`, seeded by the ns-3 node id)"),
    "cluster.fabric.ecmp.seed": ("", "combined with the switch index into each switch's seed"),
    **fcc.CC_KEYS,
    "cluster.gpu.name": ("", "GPU model, for reports"),
    "cluster.gpu.peak_tflops": ("TFLOP/s", "dense peak at the training precision; compute time "
                                           "= FLOPs / (peak * efficiency), per kernel kind"),
    "cluster.gpu.gemm_efficiency": ("fraction", "share of the peak the matrix multiplies (the "
                                                "weights' FLOPs) reach; null: "
                                                "`training.mfu`, else 0.45"),
    "cluster.gpu.attention_efficiency": ("fraction", "share of the peak the attention kernel "
                                                     "(causal scores and values) reaches; "
                                                     "null: `training.mfu`, else 0.45"),
    "cluster.network.ip_version": ("", "IPv4 or IPv6 headers (RoCEv2)"),
    "cluster.network.dscp": ("", "IP DSCP of every RoCEv2 frame (26: AF31, the usual RoCE "
                                 "class)"),
    "cluster.network.ecn": ("", "IP ECN field: 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE"),
    "cluster.network.ttl": ("hops", "IPv4 TTL / IPv6 hop limit"),
    "cluster.network.vlan_id": ("", "802.1Q VLAN tag on every frame; absent: untagged"),
    "cluster.network.pcp": ("", "802.1p priority of the VLAN tag"),
    "cluster.network.mac_prefix": ("", "first octets of every NIC's MAC; node and NIC fill the "
                                       "rest"),
    "cluster.network.ipv4_base": ("", "NIC i of node n gets base + 256 n + i + 1; last octet 0; "
                                      "10.0.0.0 for over 512 nodes"),
    "cluster.network.ipv6_base": ("", "NIC i of node n gets base + (n << 64) + i + 1"),
    "cluster.network.pkey": ("", "BTH partition key (0xffff: the default full-member key)"),
    "cluster.network.latency_ns": ("ns", "one-way NIC-to-NIC latency (a message arrives this "
                                         "long after its last bit left)"),
    "cluster.network.ib_sl": ("", "InfiniBand service level (LRH)"),
    "cluster.network.ib_vl": ("", "InfiniBand virtual lane (LRH; 15 is the management lane)"),
    "scenario.name": ("", "names the output files; default: the file's stem"),
    "scenario.description": ("", "free text"),
    "scenario.corpus": ("", "text file (UTF-8), relative to the scenario file"),
    "scenario.tokenizer": ("", "the tokenizer, the keys below, or a string"),
    "scenario.model": ("", "model profile: a path relative to the scenario file, or inline"),
    "scenario.cluster": ("", "cluster profile: a path relative to the scenario file, or inline"),
    "scenario.parallelism": ("", "the keys below; `dp * context_parallel_size * tp * pp` = "
                                 "the cluster's GPUs"),
    "scenario.training": ("", "the keys below"),
    "scenario.collectives": ("", "the keys below"),
    "scenario.generation": ("", "the keys below"),
    "scenario.published": ("", "the keys below; absent: no published figure to compare with"),
    "scenario.published.mfu": ("fraction", "the published MFU (Megatron-LM's formula: model "
                                           "FLOPs without recomputation over the dense peak)"),
    "scenario.published.source": ("", "where it is published (paper, table, README)"),
    "scenario.tokenizer.kind": ("", "utf8 (one token per byte), bpe (trained on the corpus), "
                                    "tiktoken or hf (local files only)"),
    "scenario.tokenizer.vocab_size": ("entries", "BPE vocabulary to train (it ends smaller when "
                                                 "the corpus has no more merges); bpe only"),
    "scenario.tokenizer.name": ("", "tiktoken encoding name, or the path of an hf "
                                    "`tokenizer.json` (relative to the scenario file)"),
    "scenario.parallelism.dp": ("ranks", "data-parallel size (without context parallelism: "
                                         "samples are split over it)"),
    "scenario.parallelism.tp": ("ranks", "tensor-parallel size"),
    "scenario.parallelism.pp": ("stages", "pipeline-parallel size (1F1B)"),
    "scenario.parallelism.virtual_pipeline_model_parallel_size": (
        "chunks", "Megatron's interleaved 1F1B: model chunks per pipeline stage (`null` or 1: "
                  "none); needs pp > 1, chunks that divide the pipeline split (`layers` a multiple "
                  "of `pp * chunks`, or with the account_for_* switches `layers + 1 [+ 1]`; "
                  "each stage's layers with decoder_first/last_pipeline_num_layers) and "
                  "microbatches a multiple of pp"),
    "scenario.parallelism.sequence_parallel": ("", "Megatron sequence parallelism (TP "
                                                   "AllReduce becomes ReduceScatter + "
                                                   "AllGather); required at tp > 1 for a model "
                                                   "with MoE layers (Megatron-core MoELayer)"),
    "scenario.parallelism.zero_stage": ("", "ZeRO stage of the DP group (0: replicated "
                                            "optimizer)"),
    "scenario.parallelism.ep": ("ranks", "expert-parallel size (MoE models; divides "
                                         "`dp * context_parallel_size`)"),
    "scenario.parallelism.context_parallel_size": ("ranks", "Megatron's "
                                                   "`--context-parallel-size`: ring attention "
                                                   "(Transformer Engine, `cp_comm_type p2p`) over "
                                                   "`cp` ranks holding `seq_length / cp` tokens "
                                                   "each; `seq_length` a multiple of `2 * cp`"),
    "scenario.parallelism.decoder_first_pipeline_num_layers": (
        "layers", "layers on the first stage (Megatron `--decoder-first-pipeline-num-layers`); "
                  "the middle stages share the rest evenly; absent: an even split"),
    "scenario.parallelism.decoder_last_pipeline_num_layers": (
        "layers", "layers on the last stage (Megatron `--decoder-last-pipeline-num-layers`)"),
    "scenario.parallelism.account_for_embedding_in_pipeline_split": (
        "", "the embedding counts as one layer of the first stage in the split (Megatron)"),
    "scenario.parallelism.account_for_loss_in_pipeline_split": (
        "", "the loss counts as one layer of the last stage in the split (Megatron)"),
    "scenario.training.micro_batch_size": ("sequences", "micro batch `b`"),
    "scenario.training.global_batch_size": ("sequences", "global batch; a multiple of "
                                                         "`micro_batch_size * dp`"),
    "scenario.training.precision": ("", "dtype of activations and parameters"),
    "scenario.training.grad_reduce_dtype": ("", "dtype of the DP gradient reduction"),
    "scenario.training.recompute": ("", "activation recomputation (Megatron's "
                                        "`--recompute-granularity`)"),
    "scenario.training.mfu": ("fraction", "one share of the GPU peak for every kernel kind "
                                          "(overrides the GPU's per-kernel efficiencies); "
                                          "null: those, else 0.45"),
    "scenario.training.overlap_grad_reduce": ("", "Megatron DDP `--overlap-grad-reduce`: DP "
                                                  "gradients in buckets as backward makes "
                                                  "them (first stage); else one collective "
                                                  "per buffer after backward"),
    "scenario.training.bucket_size": ("parameters", "Megatron DDP bucket size; null: "
                                                    "max(40,000,000, 1,000,000 x dp)"),
    "scenario.training.overlap_param_gather": (
        "", "Megatron `--overlap-param-gather`: with the distributed optimizer each bucket's "
            "parameter AllGather runs during the next iteration's first forward, waited for "
            "before the layers that use it (without interleaving the next bucket's is started "
            "then; with it every chunk's at once, `--align-param-gather`); needs "
            "`overlap_grad_reduce` and `zero_stage` 1 or 2"),
    "scenario.training.overlap_moe_expert_parallel_comm": (
        "", "Megatron `--overlap-moe-expert-parallel-comm`: one extra warm-up forward, then "
            "each 1F1B step runs one microbatch's forward and another's backward layer by "
            "layer, each EP AllToAll of one beside a computation of the other "
            "(`combined_1f1b.py`); needs ep > 1 and no full recomputation"),
    "scenario.training.clip_grad": ("", "Megatron `--clip-grad`; > 0: the gradient norm is "
                                        "AllReduced over the model-parallel group"),
    "scenario.training.create_attention_mask_in_dataloader": (
        "", "Megatron's default true: TP rank 0 broadcasts the b*s*s attention mask with the "
            "batch (`--no-create-attention-mask-in-dataloader`: false)"),
    "scenario.collectives.algorithm": ("", "NCCL algorithm of AllReduce, ReduceScatter and "
                                           "AllGather"),
    "scenario.collectives.channels": ("channels", "NCCL channels, one QP per peer each; "
                                                  "`auto` (`nccl` the same): NCCL's choice, the "
                                                  "communicator's min(64, 2 x nics_per_node) at "
                                                  "most `MAX_CHANNELS`, fewer for small "
                                                  "collectives (enqueue.cc topoGetAlgoInfo); an "
                                                  "integer: every call on that many; "
                                                  "rings and trees cross nodes on NIC c mod g "
                                                  "of the group's NICs"),
    "scenario.collectives.slice_bytes": ("bytes", "largest RDMA message of one transfer"),
    "scenario.collectives.NCCL_PROTO": ("", "NCCL's NCCL_PROTO, its list syntax "
                                            "(`LL,LL128`, `^LL128`, `allreduce:Simple`); "
                                            "`auto`: NCCL's tuner picks LL, LL128 or Simple per "
                                            "call (src/graph/tuning.cc); `Simple`: every "
                                            "collective Simple, the bytes of the payload"),
    "scenario.collectives.NCCL_ALGO": ("", "NCCL's NCCL_ALGO for the tuner's own choice "
                                           "(Ring, Tree, PAT, ...): where it would run another "
                                           "algorithm than `algorithm`, the plan says the "
                                           "scenario's was forced"),
    "scenario.collectives.NCCL_P2P_LL_THRESHOLD": ("bytes", "p2p (SendRecv, AllToAll peers) "
                                                            "goes LL up to channels x this "
                                                            "(NCCL's default, enqueue.cc); 0 "
                                                            "keeps p2p Simple"),
    "scenario.collectives.NCCL_PXN_DISABLE": ("", "NCCL's NCCL_PXN_DISABLE: 1 turns PXN off "
                                                  "(src/graph/paths.cc); 0, NCCL's default, "
                                                  "lets a p2p send to a GPU of local index j "
                                                  "go over NVLink to the sender node's GPU j "
                                                  "and out of its NIC"),
    "scenario.collectives.NCCL_P2P_PXN_LEVEL": ("", "NCCL's NCCL_P2P_PXN_LEVEL "
                                                    "(src/graph/search.cc): 0 no PXN for p2p, "
                                                    "1 if needed, 2 (default) as much as "
                                                    "possible"),
    "scenario.collectives.NCCL_CROSS_NIC": ("", "NCCL's NCCL_CROSS_NIC: 0 sends p2p on the "
                                                "NIC of the peer's local index even without "
                                                "PXN; 1 and 2 (default) allow other NICs"),
    "scenario.collectives.NCCL_P2P_NET_CHUNKSIZE": ("bytes", "NCCL's NCCL_P2P_NET_CHUNKSIZE: "
                                                             "one network p2p step (one RDMA "
                                                             "WRITE with immediate), at most "
                                                             "NCCL_BUFFSIZE / NCCL_STEPS = "
                                                             "512 KiB; default 131072; "
                                                             "0 (not NCCL's): no p2p chunks, "
                                                             "slice_bytes and channels cut p2p "
                                                             "like collectives (the simulator "
                                                             "validation scenarios' flows)"),
    "scenario.collectives.empty_ring_steps": ("", "true: a ring AllReduce's empty steps (a "
                                                  "rank whose chunk holds no element, in calls "
                                                  "of fewer elements than ranks) are sent as "
                                                  "NCCL sends them, one 0-byte RDMA WRITE with "
                                                  "immediate each (all_reduce.h runRing, "
                                                  "net.cc sendProxyProgress, net_ib "
                                                  "ncclIbMultiSend); false (default): they "
                                                  "send nothing"),
    "scenario.generation.seed": ("", "seed of payload bytes, QPNs and PSNs: same seed, same "
                                     "bytes"),
    "scenario.generation.iterations": ("iterations", "training iterations to write"),
    "scenario.generation.ack_every_packets": ("packets", "an ACK also every N packets of a "
                                                         "message; 0: one ACK per message"),
    "scenario.generation.clear_to_send": ("", "an NCCL-like 64-byte clear-to-send write before "
                                              "each data message"),
    "workload_scenario.name": ("", "names the output files; default: the file's stem"),
    "workload_scenario.description": ("", "free text"),
    "workload_scenario.cluster": ("", "cluster profile: a path relative to the scenario file, "
                                      "or inline; rank r is GPU r (node r // gpus_per_node)"),
    "workload_scenario.workload": ("", "the microbenchmark: the keys below"),
    "workload_scenario.collectives": ("", "as a training scenario's `collectives:`"),
    "workload_scenario.generation": ("", "as a training scenario's `generation:`; an iteration "
                                         "is one pass of the workload's calls"),
    "workload.kind": ("", "what the ranks do: the kinds' own keys are below"),
    "workload.bytes": ("bytes", "incast, sendrecv: per transfer; alltoall: per rank pair (the "
                                "buffer is bytes x ranks); allreduce, allgather, reducescatter: "
                                "S, the whole buffer (nccl-tests' size)"),
    "workload.dtype": ("", "element type (nccl-tests `-d`); `bytes` is whole elements"),
    "workload.repeat": ("calls", "back-to-back repetitions of the calls (nccl-tests `-n`)"),
    "workload.start_offsets_ns": ("ns", "when each rank starts: a list aligned with `senders` "
                                        "(incast), `ranks` or `pairs` (their senders), or "
                                        "`{rank: ns}`; default all 0"),
    "workload.incast.senders": ("ranks", "a count n (the first n ranks other than the "
                                         "receiver) or a list of ranks"),
    "workload.incast.receiver": ("", "the rank every sender sends to"),
    "workload.group.ranks": ("", "the group in ring order; default every rank"),
    "workload.sendrecv.pairs": ("", "`[[src, dst], ...]`, each pair sending `bytes`"),
    "workload.flows.file": ("", "a flow file (`src dst pg dport size_bytes start_seconds` per "
                                "line after the count: HPCC ns-3's FLOW_FILE, what `export --to "
                                "hpcc` writes), relative to the scenario file; each line one "
                                "transfer started at its time (the earliest is time 0), open "
                                "loop; ranks are NICs"),
}
