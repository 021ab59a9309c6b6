"""The reference of every profile key, generated from the loaders' own specs.

:func:`spec_table` renders the key tables of ``docs/profiles.md`` (Markdown) from the spec
mappings the loaders read YAML with (``_MODEL_SPEC`` of :mod:`~tokenpcap.config.model_profile`,
``_CLUSTER_SPEC`` of :mod:`~tokenpcap.config.cluster_profile`, ``SCENARIO_SPEC`` and
``WORKLOAD_SCENARIO_SPEC`` of :mod:`~tokenpcap.config.scenario_spec`, the workload kinds' keys of
:mod:`~tokenpcap.config.workload`, and the mappings nested in them): the keys, their defaults,
and the range in the words of the error a value outside it gets (each checker is asked with a
value no checker accepts, and the ``expected`` of its :class:`~tokenpcap.errors.ProfileError`
is printed). The meaning and unit of a key are in :data:`tokenpcap.config.keydocs.KEYS` (those of
the congestion-control keys in :data:`tokenpcap.config.fabric_cc.CC_KEYS`); a key
without one, or one that no loader reads, raises, so the reference cannot miss or invent a key.

Regenerate the doc with ``python3 -m tokenpcap.config.spectable > docs/profiles.md``.
"""
from __future__ import annotations

import inspect
import re
from typing import Any, Callable

from tokenpcap.config import bounds
from tokenpcap.config import cluster_profile as cp
from tokenpcap.config import fabric as fab
from tokenpcap.config import fabric_cc as fcc
from tokenpcap.config import model_profile as mp
from tokenpcap.config import scenario_spec as p
from tokenpcap.config import workload as wl
from tokenpcap.config import yamlcheck as yc
from tokenpcap.config.keydocs import KEYS
from tokenpcap.errors import ProfileError

__all__ = ["SECTIONS", "KEYS", "spec_table", "bounds_table", "profiles_doc"]

#: (title, dotted prefix, spec) of every mapping a loader reads, in document order
SECTIONS: tuple[tuple[str, str, dict], ...] = (
    ("Model profile (`profiles/models/*.yaml`, or inline as a scenario's `model:`)", "model",
     mp._MODEL_SPEC),
    ("`moe:` (mixture of experts; absent: a dense model)", "model.moe", mp._MOE_SPEC),
    ("`multi_latent_attention:` (DeepSeek's MLA; absent: MHA/GQA of `kv_heads`)",
     "model.multi_latent_attention", mp._MLA_SPEC),
    ("Cluster profile (`profiles/clusters/*.yaml`, or inline as a scenario's `cluster:`)",
     "cluster", cp._CLUSTER_SPEC),
    ("`gpu:`", "cluster.gpu", cp._GPU_SPEC),
    ("`network:` (addressing and marking of the frames; absent keys take their defaults)",
     "cluster.network", cp._NETWORK_SPEC),
    ("`fabric:` (the switches between the NICs; absent or `model: ideal`: none, and no output "
     "changes; a key absent takes the preset's value, else the default below)",
     "cluster.fabric", fab._FABRIC_SPEC),
    ("`fabric.topology:`", "cluster.fabric.topology", fab._TOPOLOGY_SPEC),
    ("`fabric.switch:`", "cluster.fabric.switch", fab._SWITCH_SPEC),
    ("`fabric.pfc:` (IEEE 802.1Qbb priority flow control and the ingress buffer accounting)",
     "cluster.fabric.pfc", fab._PFC_SPEC),
    ("`fabric.ecmp:` (the choice among equal-cost next hops)", "cluster.fabric.ecmp",
     fab._ECMP_SPEC),
    ("`fabric.ecn:` (RED marking of ECT packets CE on a switch's egress queues)",
     "cluster.fabric.ecn", fcc.ECN_SPEC),
    ("`fabric.dcqcn:` (the sending NIC's DCQCN, NVIDIA's names and units; used with `cc: "
     "dcqcn`)", "cluster.fabric.dcqcn", fcc.DCQCN_SPEC),
    ("`fabric.np:` (the receiving NIC's CNPs, NVIDIA's names and units; used with `cc: dcqcn`)",
     "cluster.fabric.np", fcc.NP_SPEC),
    ("Scenario (`profiles/scenarios/*.yaml`)", "scenario", p.SCENARIO_SPEC),
    ("`tokenizer:` (a mapping, or one of the strings `utf8`, `bpe`, `tiktoken:NAME`, `hf:PATH`)",
     "scenario.tokenizer", p.TOKENIZER_SPEC),
    ("`parallelism:` (Megatron-LM's parallel layout)", "scenario.parallelism",
     p.PARALLELISM_SPEC),
    ("`training:`", "scenario.training", p.TRAINING_SPEC),
    ("`collectives:` (NCCL-like)", "scenario.collectives", p.COLLECTIVES_SPEC),
    ("`generation:` (what `generate` and `run` write)", "scenario.generation",
     p.GENERATION_SPEC),
    ("`published:` (what a published run of the recipe reports; `plan --time` prints it beside "
     "the schedule's MFU)", "scenario.published", p.PUBLISHED_SPEC),
    ("Workload scenario (`profiles/scenarios/*.yaml` with `workload:` in place of a corpus, "
     "tokenizer, model, parallelism and training; `collectives:` and `generation:` as above)",
     "workload_scenario", p.WORKLOAD_SCENARIO_SPEC),
    ("`workload:` (every kind)", "workload", wl._COMMON),
    ("`workload:` of kind `incast`", "workload.incast", wl.WORKLOAD_KINDS["incast"].spec),
    ("`workload:` of kinds `alltoall`, `allreduce`, `allgather`, `reducescatter`",
     "workload.group", wl._GROUP_SPEC),
    ("`workload:` of kind `sendrecv`", "workload.sendrecv", wl.WORKLOAD_KINDS["sendrecv"].spec),
    ("`workload:` of kind `flows` (no `bytes`, `repeat` or `start_offsets_ns`: the file has them)",
     "workload.flows", {"file": wl.WORKLOAD_KINDS["flows"].spec["file"]}),
)

class _Nothing:
    """A value no checker accepts (not a number, string, bool, mapping or None)."""

    def __repr__(self) -> str:
        return "<nothing>"


#: what the keys handed on to a nested loader accept, in the words of that loader's error
_NESTED = {
    "scenario.tokenizer": "a mapping, or 'utf8', 'bpe', 'tiktoken:NAME', 'hf:PATH'",
    "scenario.model": "a path to a YAML profile or an inline mapping",
    "scenario.cluster": "a path to a YAML profile or an inline mapping",
    "workload_scenario.cluster": "a path to a YAML profile or an inline mapping",
    "workload.start_offsets_ns": "a list of integers in [0, 1e12], or a mapping {rank: ns}",
    "workload.incast.senders": "an integer in [1, world - 1], or a list of distinct ranks",
    "workload.incast.receiver": "a rank in [0, world - 1]",
    "workload.group.ranks": "a list of at least 2 distinct ranks in [0, world - 1]",
    "workload.sendrecv.pairs": "a non-empty list of distinct [src, dst], src != dst",
    "workload.flows.file": "a path to a readable flow file",
}


def _range(check: Callable[..., Any], prefix: str, key: str) -> str:
    """What ``check`` accepts, in the words of its error (``"an integer in [1, 1024]"``)."""
    if check.__name__ == "<lambda>":          # passed on as it is, read by a nested loader
        return _NESTED[f"{prefix}.{key}"]
    try:
        check(None, "key", _Nothing())
    except ProfileError as err:
        expected = err.expected
    else:
        raise ValueError(f"{check!r} accepts anything: cannot describe its range")
    try:
        null_ok = check(None, "key", None) is None
    except ProfileError:
        null_ok = False
    return expected + (", or null" if null_ok else "")


def _default(value: Any) -> str:
    """A default as YAML spells it."""
    if value is yc.REQUIRED:
        return "required"
    if value is None:
        return "—"
    if value == "":
        return '`""`'
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, dict):
        return "`{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}`"
    return f"`{value}`"


def spec_table() -> str:
    """The Markdown tables of every profile key: one section per mapping of :data:`SECTIONS`,
    one row per key (key, unit, default, range, meaning), in the loaders' key order.

    Raises:
        ValueError: a key the loaders read has no entry in :data:`KEYS`, or :data:`KEYS` names
            a key no loader reads.
    """
    read = {f"{prefix}.{k}" for _, prefix, spec in SECTIONS for k in spec}
    if read != set(KEYS):
        raise ValueError(f"keys without a meaning: {sorted(read - set(KEYS))}; meanings of no "
                         f"key: {sorted(set(KEYS) - read)}")
    out: list[str] = []
    for title, prefix, spec in SECTIONS:
        out += [f"### {title}", "", "| key | unit | default | accepted | meaning |",
                "|---|---|---|---|---|"]
        for k, (check, default) in spec.items():
            unit, meaning = KEYS[f"{prefix}.{k}"]
            accepted = _range(check, prefix, k).replace("|", "\\|")
            out.append(f"| `{k}` | {unit} | {_default(default)} | {accepted} | {meaning} |")
        out.append("")
    return "\n".join(out)


def bounds_table() -> str:
    """The Markdown table of the upper bounds (``MAX_*`` and ``*_RANGE`` of
    :mod:`tokenpcap.config.bounds`): name, value and the source comment written above it."""
    out = ["| bound | value | why |", "|---|---|---|"]
    for m in re.finditer(r"((?:^#: .*\n)+)^([A-Z][A-Z0-9_]*) = ", inspect.getsource(bounds), re.M):
        name = m.group(2)
        why = " ".join(line[3:].strip() for line in m.group(1).splitlines()).replace("``", "`")
        value = getattr(bounds, name)
        text = " .. ".join(map(_number, value)) if isinstance(value, tuple) else _number(value)
        out.append(f"| `{name}` | {text} | {why} |")
    return "\n".join(out) + "\n"


def _number(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() else f"{x:g}"


_HEAD = """# Profile reference

Every key a model, cluster or scenario profile accepts: its unit, its default (*required* keys
have none; — means absent, with the meaning given), and the values accepted, in the words of the
error a value outside them gets. A key not listed is an error naming the file and the key. The
upper bounds are the largest published setups with a margin, or the widths of the message table
([below](#upper-bounds), with their sources). Paths are relative to the file that names them.

Generated from the loaders' specs (`tokenpcap/config/model_profile.py`,
`cluster_profile.py`, `profiles.py`, `workload.py`; the bounds: `bounds.py`) by
`python3 -m tokenpcap.config.spectable > docs/profiles.md`; a test fails when this file and the
loaders disagree.

## Changing a key for one run: `--set KEY=VALUE`

Every command that reads a scenario (`generate`, `run`, `plan`, `plot`, `export`, `trace`,
`compare`, `inspect --against`) takes `--set KEY=VALUE`, repeatable: `KEY` is the key's dotted
path from the scenario's top level, `VALUE` is read as YAML (`4`, `0.4`, `false`, `[0, 1]`,
`queued`). The keys of the model and cluster profiles the scenario names are under `model.` and
`cluster.` (the profile file is read as is and changed in memory, so no relative path breaks);
a workload scenario's under `workload.`:

```
tokenpcap plan profiles/scenarios/dante.yaml --set parallelism.dp=8 --set cluster.nodes=8
tokenpcap generate profiles/scenarios/dante.yaml -o out --set generation.clear_to_send=false \
    --set collectives.channels=4 --set cluster.fabric.model=queued
```

A `--set` is checked as the file is, and a bad key or value gets the same one-line error with
`--set` in place of the file (`error: --set: parallelism.dp: got 'two', expected an integer >=
1`, exit 1); a malformed `KEY=VALUE` is a usage error (exit 2). A `--set` equal to the file's
value changes no byte of the output. `null` is taken as an absent key where a key accepts it
("or null" below): `--set cluster.fabric=null` runs a queued cluster on the ideal fabric (`--set
cluster.fabric.model=ideal` alone is refused where the file sets switch keys, which an ideal
fabric would ignore).

"""


def profiles_doc() -> str:
    """The whole of ``docs/profiles.md``: a short introduction and :func:`spec_table`."""
    return _HEAD + spec_table() + "\n## Upper bounds\n\n" + bounds_table()


if __name__ == "__main__":
    print(profiles_doc(), end="")
