"""Chakra ET export: every file decodes with the ``protobuf`` package (a descriptor built here from
mlcommons/chakra ``schema/protobuf/et_def.proto``, field numbers and types as the schema states
them, not from our encoder) into a GlobalMetadata and Nodes; the nodes carry the plan's calls
of the rank (comm_type, comm_size = plan bytes (an AllGather's per rank), the group of pg_name) and its compute (exact ns
beside the microsecond durations, rounding as the summary says); dependencies point back (ids
in program order, so acyclic); sends and receives pair up across ranks; the DP buckets run
beside the backward and are joined before the optimizer."""
from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from tokenpcap.config.profiles import load_scenario
from tokenpcap.export import chakra_pb as pb
from tokenpcap.export.core import export_scenario
from tokenpcap.plan.build import build_plan

pytest.importorskip("google.protobuf")
from google.protobuf import (descriptor_pb2, descriptor_pool, message_factory,  # noqa: E402
                             unknown_fields)

ROOT = Path(__file__).resolve().parents[2]
SCEN = ROOT / "profiles" / "scenarios"
F = descriptor_pb2.FieldDescriptorProto

# et_def.proto, the messages an ET file holds (AttributeProto's scalar oneof members).
_ATTR_SCALARS = [("double_val", 3, F.TYPE_DOUBLE), ("float_val", 5, F.TYPE_FLOAT),
                 ("int32_val", 7, F.TYPE_INT32), ("int64_val", 9, F.TYPE_INT64),
                 ("uint32_val", 11, F.TYPE_UINT32), ("uint64_val", 13, F.TYPE_UINT64),
                 ("sint32_val", 15, F.TYPE_SINT32), ("sint64_val", 17, F.TYPE_SINT64),
                 ("bool_val", 27, F.TYPE_BOOL), ("string_val", 29, F.TYPE_STRING),
                 ("bytes_val", 31, F.TYPE_BYTES)]
NODE_TYPE = {"INVALID_NODE": 0, "METADATA_NODE": 1, "MEM_LOAD_NODE": 2, "MEM_STORE_NODE": 3,
             "COMP_NODE": 4, "COMM_SEND_NODE": 5, "COMM_RECV_NODE": 6, "COMM_COLL_NODE": 7}
COMM_TYPE = {"AllReduce": 0, "AllGather": 2, "Broadcast": 5, "AllToAll": 6, "ReduceScatter": 7}


def _classes():
    fd = descriptor_pb2.FileDescriptorProto(name="et_def_test.proto", package="ChakraProtoMsg",
                                            syntax="proto3")
    a = fd.message_type.add(name="AttributeProto")
    a.field.add(name="name", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    a.field.add(name="doc_string", number=2, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    a.oneof_decl.add(name="value")
    for name, num, typ in _ATTR_SCALARS:
        a.field.add(name=name, number=num, type=typ, label=F.LABEL_OPTIONAL, oneof_index=0)
    e = fd.enum_type.add(name="NodeType")
    for k, v in NODE_TYPE.items():
        e.value.add(name=k, number=v)
    g = fd.message_type.add(name="GlobalMetadata")
    g.field.add(name="version", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    g.field.add(name="attr", number=2, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                type_name=".ChakraProtoMsg.AttributeProto")
    io = fd.message_type.add(name="IOInfo")
    for i, n in enumerate(("values", "shapes", "types"), 1):
        io.field.add(name=n, number=i, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    n = fd.message_type.add(name="Node")
    for name, num, typ, lab, tn in [
            ("id", 1, F.TYPE_UINT64, F.LABEL_OPTIONAL, None),
            ("name", 2, F.TYPE_STRING, F.LABEL_OPTIONAL, None),
            ("type", 3, F.TYPE_ENUM, F.LABEL_OPTIONAL, ".ChakraProtoMsg.NodeType"),
            ("ctrl_deps", 4, F.TYPE_UINT64, F.LABEL_REPEATED, None),
            ("data_deps", 5, F.TYPE_UINT64, F.LABEL_REPEATED, None),
            ("start_time_micros", 6, F.TYPE_UINT64, F.LABEL_OPTIONAL, None),
            ("duration_micros", 7, F.TYPE_UINT64, F.LABEL_OPTIONAL, None),
            ("inputs", 8, F.TYPE_MESSAGE, F.LABEL_OPTIONAL, ".ChakraProtoMsg.IOInfo"),
            ("outputs", 9, F.TYPE_MESSAGE, F.LABEL_OPTIONAL, ".ChakraProtoMsg.IOInfo"),
            ("attr", 10, F.TYPE_MESSAGE, F.LABEL_REPEATED, ".ChakraProtoMsg.AttributeProto")]:
        f = n.field.add(name=name, number=num, type=typ, label=lab)
        if tn:
            f.type_name = tn
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    get = message_factory.GetMessageClass
    return {m: get(pool.FindMessageTypeByName(f"ChakraProtoMsg.{m}"))
            for m in ("AttributeProto", "GlobalMetadata", "Node")}


M = _classes()


def decode(path: Path):
    """(GlobalMetadata, [Node]) of one ET file, every field known to the schema."""
    frames = list(pb.read_frames(path.read_bytes()))
    meta = M["GlobalMetadata"].FromString(frames[0])
    nodes = [M["Node"].FromString(b) for b in frames[1:]]
    for msg, raw in zip([meta, *nodes], frames):
        assert len(unknown_fields.UnknownFieldSet(msg)) == 0
        assert msg.SerializeToString() == raw       # nothing lost, canonical field order
    return meta, nodes


def attrs(node) -> dict:
    return {a.name: getattr(a, a.WhichOneof("value")) for a in node.attr}


def _export(tmp_path, name, scale=1, p2p=False, **training):
    """Export scenario ``name`` (``training``: settings replaced; then written by the writer the
    export command registers, without the command's output set)."""
    import dataclasses

    from tokenpcap.export.registry import EXPORTS

    s = load_scenario(SCEN / f"{name}.yaml")
    if training:
        s = dataclasses.replace(s, training=dataclasses.replace(s.training, **training))
        plan = build_plan(s, scale=scale)
        (tmp_path / "x").mkdir()
        return plan, EXPORTS["chakra"].write(plan, tmp_path / "x" / name, p2p=p2p)
    plan = build_plan(s, scale=scale)
    opts = {"p2p": True} if p2p else {}
    paths = export_scenario(SCEN / f"{name}.yaml", "chakra", tmp_path / "x" / name,
                            scale=scale, **opts)
    return plan, paths


def _check_common(plan, paths):
    """Files per rank, deps pointing back, summary = the files; returns per-rank nodes."""
    W = plan.layout.world_size
    ets = [p for p in paths if p.suffix == ".et"]
    assert [p.name for p in ets] == [f"{ets[0].name.split('.')[0]}.{r}.et" for r in range(W)]
    summary = json.loads(next(p for p in paths if p.name.endswith("summary.json")).read_text())
    groups = json.loads(next(p for p in paths if p.name.endswith("comm_groups.json")).read_text())
    per_rank, kinds, err, exact = [], Counter(), 0, 0
    for r, p in enumerate(ets):
        meta, nodes = decode(p)
        assert attrs(meta)["schema"].startswith("1.0.2-chakra")
        for i, n in enumerate(nodes):
            assert n.id == i and all(d < i for d in n.data_deps) and not n.ctrl_deps
            kinds[M["Node"].DESCRIPTOR.fields_by_name["type"].enum_type
                  .values_by_number[n.type].name] += 1
            if n.type == NODE_TYPE["COMP_NODE"]:
                a = attrs(n)
                assert abs(n.duration_micros * 1000 - a["duration_ns"]) <= 500
                assert a["is_cpu_op"] is False
                err += n.duration_micros * 1000 - a["duration_ns"]
                exact += a["duration_ns"]
            if i:
                assert n.data_deps or n.type != NODE_TYPE["COMP_NODE"], (r, i)
        per_rank.append(nodes)
    assert summary["nodes"] == dict(kinds)
    assert (summary["rounding_error_ns"], summary["compute_ns"]) == (err, exact)
    assert summary["compute_written_ns"] == exact + err
    return per_rank, groups, summary


def _pairs_match(per_rank):
    """Every send has one receive of the same (src, dst, tag, size) on the other side."""
    sends, recvs = Counter(), Counter()
    for r, nodes in enumerate(per_rank):
        for n in nodes:
            if n.type in (NODE_TYPE["COMM_SEND_NODE"], NODE_TYPE["COMM_RECV_NODE"]):
                a = attrs(n)
                key = (a["comm_src"], a["comm_dst"], a["comm_tag"], a["comm_size"])
                if n.type == NODE_TYPE["COMM_SEND_NODE"]:
                    assert a["comm_src"] == r
                    sends[key] += 1
                else:
                    assert a["comm_dst"] == r
                    recvs[key] += 1
    assert sends == recvs and set(sends.values()) <= {1}
    return sends


@pytest.mark.parametrize("name,scale", [("gpt2-all-cross", 1), ("alltoall-64", 64),
                                        ("incast-8x1m-hpcc-ns3", 1)])
def test_collective_nodes_are_the_plans_calls(tmp_path, name, scale):
    plan, paths = _export(tmp_path, name, scale)
    per_rank, groups, summary = _check_common(plan, paths)
    for r, nodes in enumerate(per_rank):
        calls = {c.call_id: c for c in plan.calls(0, ranks={r})}
        seen = Counter()
        for n in nodes:
            a = attrs(n)
            if n.type == NODE_TYPE["COMP_NODE"]:
                continue
            c = calls[a["call_id"]]
            seen[c.call_id] += 1
            if n.type == NODE_TYPE["COMM_COLL_NODE"]:
                # ASTRA-sim's ring reads an AllGather's comm_size as the per-rank input
                assert a["buffer_bytes"] == c.message_bytes
                assert a["comm_size"] * (len(c.group) if c.collective == "AllGather" else 1) \
                    == c.message_bytes
                assert a["comm_type"] == COMM_TYPE[c.collective]
                assert groups[a["pg_name"]] == sorted(c.group) and r in c.group
                assert a["pg_name"] not in ("", "0")
            else:
                assert a["comm_size"] == c.message_bytes
                assert c.collective == "SendRecv" and (a["comm_src"], a["comm_dst"]) == \
                    (c.src, c.dst)
        assert seen == Counter(calls.keys())   # every call of the rank, once
    _pairs_match(per_rank)
    n_bcast = sum(1 for r in range(plan.layout.world_size) for c in plan.calls(0, ranks={r})
                  if c.collective == "Broadcast")
    assert summary["not_generated_by_astra_sim"].get("Broadcast", 0) == n_bcast


def _reach(nodes) -> list[set[int]]:
    """Per node, every node it depends on, directly or not."""
    anc: list[set[int]] = []
    for n in nodes:
        s = set(n.data_deps)
        for d in n.data_deps:
            s |= anc[d]
        anc.append(s)
    return anc


def test_dp_buckets_overlap_the_backward_and_join_before_the_optimizer(tmp_path):
    """gpt2-all-cross (overlap_grad_reduce): a bucket is launched during the last backward, the
    next backward compute does not wait for it, the optimizer's compute waits for every bucket,
    and the buckets of a rank run one after another (each depends on the one before)."""
    plan, paths = _export(tmp_path, "gpt2-all-cross", overlap_grad_reduce=True,
                          bucket_size=2_000_000)     # 10 buckets per rank
    per_rank, _, _ = _check_common(plan, paths)
    many = 0
    for r, nodes in enumerate(per_rank):
        calls = {c.call_id: c for c in plan.calls(0, ranks={r})}
        anc = _reach(nodes)
        buckets = [i for i, n in enumerate(nodes) if n.type == NODE_TYPE["COMM_COLL_NODE"]
                   and calls[attrs(n)["call_id"]].bucket >= 0
                   and calls[attrs(n)["call_id"]].phase == "backward"]
        assert buckets, r
        many += len(buckets) > 2
        for a, b in zip(buckets, buckets[1:]):
            assert a in anc[b]
        comps = [i for i, n in enumerate(nodes) if n.type == NODE_TYPE["COMP_NODE"]]
        opt = comps[-1]                        # the optimizer step: the last compute
        assert set(buckets) <= anc[opt]
        beside = [i for i in comps if i > buckets[0] and buckets[0] not in anc[i]]
        # backward compute after the first bucket, not waiting for it
        assert beside or len(buckets) == 1, r
    assert many


def test_p2p_nodes_are_our_transfers(tmp_path):
    """--chakra-p2p: per rank the sends and receives are exactly the transfers of our schedule
    the rank takes part in (bytes per call and direction), paired across ranks."""
    plan, paths = _export(tmp_path, "gpt2-all-cross", p2p=True)
    per_rank, _, summary = _check_common(plan, paths)
    assert summary["granularity"] == "p2p" and "COMM_COLL_NODE" not in summary["nodes"]
    _pairs_match(per_rank)
    for r, nodes in enumerate(per_rank):
        got = defaultdict(int)
        for n in nodes:
            if n.type != NODE_TYPE["COMP_NODE"]:
                a = attrs(n)
                got[(a["call_id"], a["comm_src"], a["comm_dst"])] += a["comm_size"]
        want = defaultdict(int)
        for c in plan.calls(0, ranks={r}):
            t = plan.call_transfers(c).table
            for s, d, b in zip(t["src"].tolist(), t["dst"].tolist(), t["bytes"].tolist()):
                if r in (s, d):
                    want[(c.call_id, s, d)] += b
        assert dict(got) == dict(want)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=12))
def test_varint_framing_round_trips(messages):
    data = b"".join(pb.frame(m) for m in messages)
    assert list(pb.read_frames(data)) == messages
    if data:
        with pytest.raises(ValueError):
            list(pb.read_frames(data[:-1] if messages[-1] else data + b"\x05"))


@settings(max_examples=80, deadline=None)
@given(st.integers(-(1 << 63), (1 << 63) - 1), st.text(st.characters(codec="utf-8"), max_size=20))
def test_attribute_bytes_equal_protobufs(n, name):
    """Our AttributeProto encoding is byte for byte what protobuf serialises (int64, negative
    included: ten-byte two's complement; string; bool)."""
    A = M["AttributeProto"]
    assert pb.attr(name, "int64", n) == A(name=name, int64_val=n).SerializeToString()
    assert pb.attr(name, "uint64", abs(n)) == A(name=name, uint64_val=abs(n)).SerializeToString()
    assert pb.attr(name, "string", name) == A(name=name, string_val=name).SerializeToString()
    assert pb.attr(name, "bool", n > 0) == A(name=name, bool_val=n > 0).SerializeToString()


def test_chakra_p2p_is_refused_with_another_format(tmp_path):
    from click.testing import CliRunner

    from tokenpcap.cli import main

    res = CliRunner().invoke(main, ["export", str(SCEN / "gpt2-all-cross.yaml"), "--to", "csv",
                                    "--chakra-p2p", "-o", str(tmp_path / "x.csv")])
    assert res.exit_code == 2 and "--chakra-p2p" in res.output
