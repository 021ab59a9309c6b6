"""docs/profiles.md: generated from the loaders' specs, and listing exactly the keys the loaders
accept, as the loaders themselves tell (every unknown-key error names the keys its mapping
takes)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tokenpcap.config.profiles import load_cluster, load_model, load_scenario
from tokenpcap.config.spectable import SECTIONS, profiles_doc, spec_table
from tokenpcap.errors import ProfileError

ROOT = Path(__file__).resolve().parents[2]
PROFILES = ROOT / "profiles"
DOC = ROOT / "docs" / "profiles.md"


def test_the_doc_is_the_generated_reference():
    assert DOC.read_text(encoding="utf-8") == profiles_doc(), (
        "docs/profiles.md differs from the loaders' specs: regenerate it with "
        "`python3 -m tokenpcap.config.spectable > docs/profiles.md`")


def _doc_keys() -> dict[str, list[str]]:
    """Section heading -> the keys its table lists, read from docs/profiles.md."""
    out: dict[str, list[str]] = {}
    section = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("### "):
            section = line[4:]
            out[section] = []
        m = re.match(r"\| `([a-z0-9_]+|NCCL_[A-Z0-9_]+)` \|", line)   # NCCL_* keys: NCCL's names
        if m and section is not None:
            out[section].append(m.group(1))
    return out


def _accepted_keys(load, path: Path, data: dict, where: list[str]) -> list[str]:
    """The keys the loader accepts in the mapping at ``where`` of ``data``: put an unknown key
    there and read the loader's error, which lists them."""
    target = data
    for k in where:
        target = target[k]
    target["no_such_key"] = 1
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(ProfileError) as info:
        load(path)
    m = re.fullmatch(r"a known key \(one of: (.*)\)", info.value.expected)
    assert m, info.value
    return m.group(1).split(", ")


def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _scenario() -> dict:
    d = _yaml(PROFILES / "scenarios" / "dante.yaml")
    base = PROFILES / "scenarios"
    for k in ("corpus", "model", "cluster"):
        d[k] = str((base / d[k]).resolve())
    return d


def _fabric_cluster() -> dict:
    d = _yaml(PROFILES / "clusters" / "h100-rocev2-400g.yaml")
    d["fabric"] = {"model": "queued", "topology": {}, "switch": {}, "pfc": {}, "ecmp": {}}
    return d


def _workload_scenario(**workload) -> dict:
    d = _yaml(PROFILES / "scenarios" / "incast-63x16m.yaml")
    d["cluster"] = str((PROFILES / "scenarios" / d["cluster"]).resolve())
    d["workload"] = workload or d["workload"]
    return d


@pytest.mark.parametrize("prefix,load,base,where", [
    ("model", load_model, lambda: _yaml(PROFILES / "models" / "gpt2-small.yaml"), []),
    ("model.moe", load_model, lambda: _yaml(PROFILES / "models" / "mixtral-8x7b.yaml"), ["moe"]),
    ("cluster", load_cluster, lambda: _yaml(PROFILES / "clusters" / "h100-rocev2-400g.yaml"), []),
    ("cluster.gpu", load_cluster, lambda: _yaml(PROFILES / "clusters" / "h100-rocev2-400g.yaml"),
     ["gpu"]),
    ("cluster.network", load_cluster,
     lambda: _yaml(PROFILES / "clusters" / "h100-rocev2-400g.yaml"), ["network"]),
    ("cluster.fabric", load_cluster, _fabric_cluster, ["fabric"]),
    ("cluster.fabric.topology", load_cluster, _fabric_cluster, ["fabric", "topology"]),
    ("cluster.fabric.switch", load_cluster, _fabric_cluster, ["fabric", "switch"]),
    ("cluster.fabric.pfc", load_cluster, _fabric_cluster, ["fabric", "pfc"]),
    ("cluster.fabric.ecmp", load_cluster, _fabric_cluster, ["fabric", "ecmp"]),
    ("scenario", load_scenario, _scenario, []),
    ("scenario.tokenizer", load_scenario, _scenario, ["tokenizer"]),
    ("scenario.parallelism", load_scenario, _scenario, ["parallelism"]),
    ("scenario.training", load_scenario, _scenario, ["training"]),
    ("scenario.collectives", load_scenario, _scenario, ["collectives"]),
    ("scenario.generation", load_scenario, _scenario, ["generation"]),
    ("scenario.published", load_scenario,
     lambda: {**_scenario(), "published": {"mfu": 0.4, "source": "a paper"}}, ["published"]),
    ("workload_scenario", load_scenario, _workload_scenario, []),
])
def test_each_table_lists_exactly_the_keys_the_loader_accepts(tmp_path, prefix, load, base, where):
    title = next(t for t, p, _ in SECTIONS if p == prefix)
    accepted = _accepted_keys(load, tmp_path / "p.yaml", base(), where)
    assert sorted(_doc_keys()[title]) == sorted(accepted)


@pytest.mark.parametrize("prefix,workload", [
    ("workload.incast", {"kind": "incast", "senders": 3, "bytes": 8}),
    ("workload.group", {"kind": "allreduce", "bytes": 8}),
    ("workload.group", {"kind": "alltoall", "bytes": 8}),
    ("workload.sendrecv", {"kind": "sendrecv", "pairs": [[0, 1]], "bytes": 8})])
def test_a_workload_kind_accepts_the_common_keys_and_its_own(tmp_path, prefix, workload):
    title = {p: t for t, p, _ in SECTIONS}
    accepted = _accepted_keys(load_scenario, tmp_path / "p.yaml", _workload_scenario(**workload),
                              ["workload"])
    doc = _doc_keys()
    assert sorted(doc[title["workload"]] + doc[title[prefix]]) == sorted(accepted)


def test_every_section_of_the_doc_is_checked():
    assert list(_doc_keys()) == [t for t, _, _ in SECTIONS] and len(SECTIONS) == 27


def test_a_key_without_a_meaning_is_refused(monkeypatch):
    from tokenpcap.config import spectable

    keys = dict(spectable.KEYS)
    del keys["model.layers"]
    monkeypatch.setattr(spectable, "KEYS", keys)
    with pytest.raises(ValueError, match=r"keys without a meaning: \['model.layers'\]"):
        spec_table()


def test_every_upper_bound_is_listed_with_its_value_and_source():
    from tokenpcap.config import bounds

    names = sorted(n for n in vars(bounds) if n.startswith(("MAX_", "MIN_")) or n.endswith("_RANGE"))
    rows = {m.group(1): (m.group(2), m.group(3)) for m in re.finditer(
        r"^\| `([A-Z][A-Z0-9_]*)` \| ([^|]+) \| ([^|]+) \|$", DOC.read_text(encoding="utf-8"), re.M)}
    assert sorted(rows) == names
    assert rows["MAX_LAYERS"][0] == "1,024" and "Narayanan et al. 2021" in rows["MAX_LAYERS"][1]
    assert rows["LINK_GBPS_RANGE"][0] == "1 .. 1,000,000"
