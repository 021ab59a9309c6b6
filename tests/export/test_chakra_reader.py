"""Chakra's own Python reader read our ET files (tests/cases/astra-sim/jsonizer-*.json.gz) and
our files made again decode to exactly what it read.

How the fixtures were made (2026-12-07): Chakra astra-sim/chakra
214f2c559c10f897bcc395f8e1502d80d14f1541 (the commit ASTRA-sim c459ab6 pins; Apache License 2.0),
``et_def_pb2`` generated from its ``schema/protobuf/et_def.proto`` by protoc 3.21.12 and run
with the ``protobuf`` package 6.33.6, its ``chakra_jsonizer`` (``src/jsonizer/jsonizer.py``:
``protolib.openFileRd`` and ``decodeMessage`` read the varint-delimited stream into
``GlobalMetadata`` then ``Node`` after ``Node``, each written with protobuf's
``MessageToJson``), outside this repository, on our exports (this repository at the commit
adding this file)::

    tokenpcap export profiles/scenarios/dante.yaml --to chakra -o dante
    tokenpcap export profiles/scenarios/gpt2-all-cross.yaml --to chakra --chakra-p2p -o gpt2p2p
    chakra_jsonizer --input_filename dante.0.et --output_filename jsonizer-dante.0.json
    chakra_jsonizer --input_filename gpt2p2p.1.et \\
        --output_filename jsonizer-gpt2-all-cross-p2p.1.json

kept gzip-compressed. What Chakra read carries every field under the schema's names (a field
our encoder wrote with a wrong number or wire type would be missing or misnamed there)."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from tests.export.test_chakra import decode
from tokenpcap.export.core import export_scenario

pytest.importorskip("google.protobuf")
from google.protobuf.json_format import MessageToDict  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "tests" / "cases" / "astra-sim"
SCEN = ROOT / "profiles" / "scenarios"


def _chakra_read(name: str) -> list[dict]:
    """The JSON objects chakra_jsonizer wrote one after another (GlobalMetadata first)."""
    text = gzip.decompress((CASES / name).read_bytes()).decode()
    dec, pos, out = json.JSONDecoder(), 0, []
    while pos < len(text):
        obj, pos = dec.raw_decode(text, pos)
        out.append(obj)
    return out


@pytest.mark.parametrize("fixture,scenario,p2p,rank", [
    ("jsonizer-dante.0.json.gz", "dante", False, 0),
    ("jsonizer-gpt2-all-cross-p2p.1.json.gz", "gpt2-all-cross", True, 1)])
def test_chakras_reader_read_what_we_write(tmp_path, fixture, scenario, p2p, rank):
    out = tmp_path / "x"
    export_scenario(SCEN / f"{scenario}.yaml", "chakra", out, p2p=p2p)
    meta, nodes = decode(out.with_name(f"x.{rank}.et"))
    ours = [MessageToDict(m) for m in [meta, *nodes]]
    chakra = _chakra_read(fixture)
    assert len(chakra) == len(ours) > 300
    assert chakra == ours
    kinds = {n.get("type") for n in chakra[1:]}
    assert kinds == ({"COMP_NODE", "COMM_SEND_NODE", "COMM_RECV_NODE"} if p2p else
                     {"COMP_NODE", "COMM_SEND_NODE", "COMM_RECV_NODE", "COMM_COLL_NODE"})
    # what ASTRA-sim reads of a node, under Chakra's names
    coll = [n for n in chakra if n.get("type") == "COMM_COLL_NODE"]
    for n in coll:
        a = {x["name"]: x for x in n["attr"]}
        assert {"comm_type", "comm_size", "pg_name", "buffer_bytes"} <= set(a)
        if a["comm_type"]["int64Val"] == "2":                        # ALL_GATHER
            assert int(a["comm_size"]["int64Val"]) < int(a["buffer_bytes"]["int64Val"])
    assert all("dataDeps" in n for n in chakra[2:])
