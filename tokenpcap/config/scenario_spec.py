"""The keys of a scenario file: each mapping's keys with their checks and defaults, read by
:func:`tokenpcap.config.yamlcheck.read_mapping` (every key is documented in docs/profiles.md),
and the checks of the collectives keys that take NCCL's own values.

Each spec maps a key to ``(check, default)``: ``check(file, key, value)`` returns the value
(converted) or raises :class:`tokenpcap.errors.ProfileError` (file, dotted key, value got,
value expected); ``default`` is :data:`tokenpcap.config.yamlcheck.REQUIRED` for a key that must
be given.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenpcap.collectives.algorithms import selectable_algorithms
from tokenpcap.collectives.protocols import PROTOCOL_IDS
from tokenpcap.collectives.tuning import ALGOS, parse_list
from tokenpcap.config import yamlcheck as yc
from tokenpcap.config.bounds import (MAX_ACK_EVERY_PACKETS, MAX_BUCKET_SIZE, MAX_CHANNELS,
                                     MAX_GLOBAL_BATCH_SIZE, MAX_ITERATIONS, MFU_RANGE,
                                     SLICE_BYTES_RANGE, P2P_NET_CHUNKSIZE_RANGE,
                                     MAX_LAYERS, MAX_MICRO_BATCH_SIZE, MAX_SEED, MAX_VOCAB_SIZE)
from tokenpcap.config.types import DTYPE_BYTES, CollectivesConfig
from tokenpcap.errors import InputError, ProfileError

__all__ = ["default_channels", "TOKENIZER_SPEC", "PARALLELISM_SPEC", "TRAINING_SPEC",
           "COLLECTIVES_SPEC", "GENERATION_SPEC", "SCENARIO_SPEC", "PUBLISHED_SPEC",
           "WORKLOAD_SCENARIO_SPEC", "TRAINING_ONLY"]


def default_channels(nics_per_node: int) -> int:
    """Channels NCCL runs a ring or tree collective on, on nodes of ``nics_per_node`` NICs
    (the default of ``collectives.channels``): ``min(64, 2 * nics_per_node)``, and at most
    :data:`~tokenpcap.config.bounds.MAX_CHANNELS` (32: what the QP numbering holds).

    NCCL's graph search builds one ring channel per NIC, each entering and leaving the node on
    its own NIC (``src/graph/search.cc``: "NET n -> GPU a -> GPU b -> .. -> GPU x -> NET n"), and
    ``ncclTopoPostset`` doubles the channels (``src/graph/connect.cc``: "Duplication should be
    complete now", ``nChannels * 2``), at most ``MAXCHANNELS`` (64).

    Raises:
        ValueError: ``nics_per_node < 1``.
    """
    if nics_per_node < 1:
        raise ValueError(f"nics_per_node: got {nics_per_node}, expected an integer >= 1")
    return min(MAX_CHANNELS, 2 * nics_per_node)


def _channels(file: Path | None, key: str, value: Any) -> Any:
    """``collectives.channels``: ``auto`` (NCCL's choice: the communicator's
    :func:`default_channels`, fewer for small collectives as NCCL's ``topoGetAlgoInfo`` trims
    them; ``nccl`` is the same), or an integer 1..MAX_CHANNELS used for every call."""
    if value in ("auto", "nccl"):
        return value
    try:
        return yc.integer(1, MAX_CHANNELS)(file, key, value)
    except ProfileError:
        raise ProfileError(file, key, value,
                           f"'auto', 'nccl' or an integer in [1, {MAX_CHANNELS}]") from None


def _p2p_chunksize(file: Path | None, key: str, value: Any) -> int:
    """``collectives.NCCL_P2P_NET_CHUNKSIZE``: 0 (p2p cut like a collective) or an integer in
    :data:`~tokenpcap.config.bounds.P2P_NET_CHUNKSIZE_RANGE`."""
    lo, hi = P2P_NET_CHUNKSIZE_RANGE
    if type(value) is int and value == 0:
        return 0
    try:
        return yc.integer(lo, hi)(file, key, value)
    except ProfileError:
        raise ProfileError(file, key, value, f"0 or an integer in [{lo:,}, {hi:,}]") from None


def _nccl_list(name: str):  # type: ignore[no-untyped-def]
    """``collectives.NCCL_PROTO`` / ``NCCL_ALGO``: ``auto`` or a list in NCCL's syntax
    (:func:`tokenpcap.collectives.tuning.parse_list`), checked here."""
    elems = PROTOCOL_IDS if name == "NCCL_PROTO" else ALGOS

    def check(file: Path | None, key: str, value: Any) -> Any:
        if not isinstance(value, str) or not value.strip():
            raise ProfileError(file, key, value, "'auto' or a list in NCCL's syntax")
        if value != "auto":
            try:
                parse_list(value, elems, name)
            except InputError as err:
                raise ProfileError(file, key, value, str(err).split(": ", 1)[-1]) from None
        return value
    return check


TOKENIZER_SPEC = {
    "kind": (yc.enum("utf8", "bpe", "tiktoken", "hf"), yc.REQUIRED),
    "vocab_size": (yc.integer(1, MAX_VOCAB_SIZE), 32000),
    "name": (yc.string, None),
}
PARALLELISM_SPEC = {
    "dp": (yc.integer(1), 1),
    "tp": (yc.integer(1), 1),
    "pp": (yc.integer(1), 1),
    "sequence_parallel": (yc.boolean, False),
    "zero_stage": (yc.enum(0, 1, 2, 3), 0),
    "ep": (yc.integer(1), 1),
    "context_parallel_size": (yc.integer(1), 1),
    "virtual_pipeline_model_parallel_size": (yc.optional(yc.integer(1)), None),
    "decoder_first_pipeline_num_layers": (yc.optional(yc.integer(1, MAX_LAYERS)), None),
    "decoder_last_pipeline_num_layers": (yc.optional(yc.integer(1, MAX_LAYERS)), None),
    "account_for_embedding_in_pipeline_split": (yc.boolean, False),
    "account_for_loss_in_pipeline_split": (yc.boolean, False),
}
_DTYPES = tuple(DTYPE_BYTES)
TRAINING_SPEC = {
    "micro_batch_size": (yc.integer(1, MAX_MICRO_BATCH_SIZE), yc.REQUIRED),
    "global_batch_size": (yc.integer(1, MAX_GLOBAL_BATCH_SIZE), yc.REQUIRED),
    "precision": (yc.enum("bf16", "fp16", "fp32"), "bf16"),
    "grad_reduce_dtype": (yc.enum(*_DTYPES), "fp32"),
    "recompute": (yc.enum("none", "selective", "full"), "none"),
    "mfu": (yc.optional(yc.number(ge=MFU_RANGE[0], le=MFU_RANGE[1])), None),
    "overlap_grad_reduce": (yc.boolean, False),
    "bucket_size": (yc.optional(yc.integer(1, MAX_BUCKET_SIZE)), None),
    "overlap_param_gather": (yc.boolean, False),
    "overlap_moe_expert_parallel_comm": (yc.boolean, False),
    "clip_grad": (yc.number(ge=0, le=1e30), 1.0),
    "create_attention_mask_in_dataloader": (yc.boolean, True),
}
_NCCL = CollectivesConfig()     # the defaults, written once (config/types.py)
COLLECTIVES_SPEC = {
    "algorithm": (yc.enum(*selectable_algorithms()), "ring"),
    "channels": (_channels, "auto"),
    "slice_bytes": (yc.integer(*SLICE_BYTES_RANGE), _NCCL.slice_bytes),
    "NCCL_PROTO": (_nccl_list("NCCL_PROTO"), _NCCL.NCCL_PROTO),
    "NCCL_ALGO": (_nccl_list("NCCL_ALGO"), _NCCL.NCCL_ALGO),
    "NCCL_P2P_LL_THRESHOLD": (yc.integer(0, 1 << 30), _NCCL.NCCL_P2P_LL_THRESHOLD),
    "NCCL_PXN_DISABLE": (yc.integer(0, 1), _NCCL.NCCL_PXN_DISABLE),
    "NCCL_P2P_PXN_LEVEL": (yc.integer(0, 2), _NCCL.NCCL_P2P_PXN_LEVEL),
    "NCCL_CROSS_NIC": (yc.integer(0, 2), _NCCL.NCCL_CROSS_NIC),
    "NCCL_P2P_NET_CHUNKSIZE": (_p2p_chunksize, _NCCL.NCCL_P2P_NET_CHUNKSIZE),
    "empty_ring_steps": (yc.boolean, _NCCL.empty_ring_steps),
}
GENERATION_SPEC = {
    "seed": (yc.integer(0, MAX_SEED), 0),
    "iterations": (yc.integer(1, MAX_ITERATIONS), 1),
    "ack_every_packets": (yc.integer(0, MAX_ACK_EVERY_PACKETS), 0),
    "clear_to_send": (yc.boolean, True),
}
SCENARIO_SPEC = {
    "name": (yc.file_name, None),
    "description": (yc.string, ""),
    "corpus": (yc.path_text, yc.REQUIRED),
    "tokenizer": (lambda f, k, v: v, {"kind": "bpe"}),
    "model": (lambda f, k, v: v, yc.REQUIRED),
    "cluster": (lambda f, k, v: v, yc.REQUIRED),
    "parallelism": (yc.mapping, yc.REQUIRED),
    "training": (yc.mapping, yc.REQUIRED),
    "collectives": (yc.mapping, {}),
    "generation": (yc.mapping, {}),
    "published": (yc.optional(yc.mapping), None),
}
PUBLISHED_SPEC = {
    "mfu": (yc.number(ge=MFU_RANGE[0], le=MFU_RANGE[1]), yc.REQUIRED),
    "source": (yc.string, yc.REQUIRED),
}

#: A workload scenario (:mod:`tokenpcap.config.workload`): a cluster and a workload, no model.
WORKLOAD_SCENARIO_SPEC = {
    "name": (yc.file_name, None),
    "description": (yc.string, ""),
    "cluster": (lambda f, k, v: v, yc.REQUIRED),
    "workload": (yc.mapping, yc.REQUIRED),
    "collectives": (yc.mapping, {}),
    "generation": (yc.mapping, {}),
}
#: The keys of a training scenario a workload scenario has none of.
TRAINING_ONLY = ("corpus", "tokenizer", "model", "parallelism", "training")

