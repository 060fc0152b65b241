"""`tracekit export chakra`: the files decode with Chakra's schema compiled by protoc (not tracekit's encoder), and
the graph they hold is one a simulator can run: unique ids, dependencies inside the file, acyclic, GPU work with
successors, collectives after the GPU work queued before them."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections import defaultdict, deque
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tests.conftest import shared_trace
from tests.support.categories import communication_kernel
from tracekit import synth
from tracekit.cli import main
from tracekit.output import chakra
from tracekit.pipeline import load

PROTO = Path(chakra.__file__).with_name("et_def.proto")
GPU_KINDS = ("kernel", "memcpy", "memset")


@pytest.fixture(scope="module")
def et_def(tmp_path_factory):
    """et_def_pb2, compiled from the repository's .proto by grpc_tools' protoc."""
    pytest.importorskip("google.protobuf")
    pytest.importorskip("grpc_tools")
    out = tmp_path_factory.mktemp("et_def")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO.parent}", f"--python_out={out}",
                    str(PROTO)], check=True)
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("et_def_pb2")
    finally:
        sys.path.remove(str(out))


def read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def decode(et_def, path: Path):
    """(GlobalMetadata, [Node]) of a length-delimited ET file."""
    data = path.read_bytes()
    messages, pos = [], 0
    while pos < len(data):
        size, pos = read_varint(data, pos)
        messages.append(data[pos:pos + size])
        pos += size
    assert pos == len(data), "the last message runs past the end of the file"
    metadata = et_def.GlobalMetadata.FromString(messages[0])
    return metadata, [et_def.Node.FromString(m) for m in messages[1:]]


def attrs(node) -> dict:
    return {a.name: getattr(a, a.WhichOneof("value")) for a in node.attr}


def is_acyclic(nodes) -> bool:
    """Kahn's algorithm over ctrl and data dependencies."""
    waiting = {n.id: len(set(n.ctrl_deps) | set(n.data_deps)) for n in nodes}
    users = defaultdict(list)
    for n in nodes:
        for dep in set(n.ctrl_deps) | set(n.data_deps):
            users[dep].append(n.id)
    ready = deque(i for i, count in waiting.items() if count == 0)
    done = 0
    while ready:
        done += 1
        for user in users[ready.popleft()]:
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.append(user)
    return done == len(nodes)


def export(tables, out: Path) -> dict[int, Path]:
    paths = chakra.write_chakra(tables, out, prefix="job")
    return {int(p.name.split(".")[1]): p for p in paths}


def check_graph(et_def, tables, paths: dict[int, Path]) -> dict:
    """The checks every export must pass; returns counts for the measured shares."""
    events = pl.from_arrow(tables.events)
    edges = pl.from_arrow(tables.edges)
    counts = defaultdict(int)
    assert sorted(paths) == tables.rank_list
    for rank, path in paths.items():
        metadata, nodes = decode(et_def, path)
        assert metadata.version == "0.0.4"
        ids = [n.id for n in nodes]
        assert len(ids) == len(set(ids)), "node ids are not unique"
        known = set(ids)
        for n in nodes:
            assert set(n.ctrl_deps) <= known and set(n.data_deps) <= known, f"node {n.id} depends on a missing node"
        assert is_acyclic(nodes)

        rank_events = events.filter(pl.col("rank") == rank)
        by_id = {row["id"]: row for row in rank_events.iter_rows(named=True)}
        gpu_ids = set(rank_events.filter(pl.col("kind").is_in(GPU_KINDS) & pl.col("ts").is_not_null())["id"])
        node_of = {n.id: n for n in nodes}
        # every GPU op is a node; the others are host ops (cpu_op, runtime, driver) of the trace
        assert gpu_ids <= known
        assert all(by_id[i]["kind"] in ("cpu_op", "runtime", "driver") for i in known - gpu_ids)
        for n in nodes:
            event = by_id[n.id]
            assert n.name == event["name"]
            assert n.start_time_micros == event["ts"] // 1000
            assert abs(n.duration_micros * 1000 - (event["dur"] or 0)) <= 500
            assert attrs(n)["is_cpu_op"] == (n.id not in gpu_ids)

        successors = defaultdict(set)
        for n in nodes:
            for dep in n.ctrl_deps:
                successors[dep].add(n.id)
        # a GPU op followed by another on its stream has a successor (oracle: the events, not the edges)
        gpu = rank_events.filter(pl.col("id").is_in(gpu_ids) & pl.col("stream").is_not_null()).sort("ts", "id")
        later_on_stream = gpu.with_columns(has_next=pl.col("id").shift(-1).over("device", "stream").is_not_null())
        for gpu_id, has_next in later_on_stream.select("id", "has_next").iter_rows():
            if has_next:
                assert successors[gpu_id], f"GPU op {gpu_id} ({by_id[gpu_id]['name']}) has no successor"
        counts["gpu_nodes"] += len(gpu_ids)
        counts["gpu_with_successor"] += sum(1 for i in gpu_ids if successors[i])
        # collectives wait for GPU compute launched before them on another stream of their device
        launches = edges.filter((pl.col("rank") == rank) & (pl.col("kind") == "launch"))
        launch_ts = {dst: by_id[src]["ts"] for src, dst in launches.select("src", "dst").iter_rows()}
        for n in nodes:
            if n.type not in (et_def.COMM_COLL_NODE, et_def.COMM_SEND_NODE, et_def.COMM_RECV_NODE):
                continue
            counts["collectives"] += 1
            event = by_id[n.id]
            assert communication_kernel(event["name"])
            earlier_compute = [i for i in gpu_ids if i in launch_ts and n.id in launch_ts
                               and launch_ts[i] < launch_ts[n.id] and not communication_kernel(by_id[i]["name"])
                               and by_id[i]["device"] == event["device"] and by_id[i]["stream"] != event["stream"]]
            on_gpu = [d for d in n.ctrl_deps if not attrs(node_of[d])["is_cpu_op"]]
            if earlier_compute:
                assert any(not communication_kernel(node_of[d].name) for d in on_gpu), \
                    f"collective {n.id} does not depend on the GPU compute queued before it"
            counts["collectives_after_gpu"] += bool(on_gpu)
            comm_type = attrs(n).get("comm_type")
            if "AllReduce" in event["name"]:
                assert comm_type == et_def.ALL_REDUCE
        counts["nodes"] += len(nodes)
        counts["deps"] += sum(len(n.ctrl_deps) + len(n.data_deps) for n in nodes)
    return counts


def test_schema_constants_match_the_compiled_proto(et_def):
    node = et_def.Node.DESCRIPTOR.fields_by_name
    assert {name: node[name].number for name in chakra.NODE_FIELDS} == chakra.NODE_FIELDS
    meta = et_def.GlobalMetadata.DESCRIPTOR.fields_by_name
    assert {name: meta[name].number for name in chakra.GLOBAL_METADATA_FIELDS} == chakra.GLOBAL_METADATA_FIELDS
    attr = et_def.AttributeProto.DESCRIPTOR.fields_by_name
    assert {name: attr[name].number for name in chakra.ATTRIBUTE_FIELDS} == chakra.ATTRIBUTE_FIELDS
    assert {name: et_def.NodeType.Value(name) for name in chakra.NODE_TYPES} == chakra.NODE_TYPES
    assert {name: et_def.CollectiveCommType.Value(name) for name in chakra.COLLECTIVE_COMM_TYPES} \
        == chakra.COLLECTIVE_COMM_TYPES


def test_encoder_agrees_with_protobuf_on_edge_values(et_def):
    """Values where hand-written varints go wrong: 0, 127/128, 2^63, negative int64, empty lists, non-ASCII."""
    row = {"id": 2**63 + 5, "name": "aten::mm · é", "node_type": "COMM_COLL_NODE", "ctrl_deps": [0, 127, 128],
           "data_deps": [], "start_time_micros": 1_700_000_000_000_000, "duration_micros": 0, "is_cpu_op": False,
           "tid": -1, "stream": 7, "comm_type": "BARRIER", "comm_size": 0, "pg_name": ""}
    node = et_def.Node.FromString(chakra.node_message(row))
    assert (node.id, node.name, node.type) == (2**63 + 5, "aten::mm · é", et_def.COMM_COLL_NODE)
    assert list(node.ctrl_deps) == [0, 127, 128] and list(node.data_deps) == []
    assert node.start_time_micros == 1_700_000_000_000_000 and node.duration_micros == 0
    assert attrs(node) == {"is_cpu_op": False, "tid": -1, "stream": 7, "comm_type": et_def.BARRIER, "comm_size": 0,
                           "pg_name": ""}


def test_synth_job(et_def, tmp_path):
    synth.generate(tmp_path / "in", ranks=2, steps=2, seed=4)
    tables = load([tmp_path / "in"])
    counts = check_graph(et_def, tables, export(tables, tmp_path / "et"))
    assert counts["collectives"] > 0 and counts["collectives_after_gpu"] == counts["collectives"]


def test_synth_expert_parallel_job(et_def, tmp_path):
    """DeepEP dispatch/combine kernels (no NCCL args) are ALL_TO_ALL collectives, custom all-reduce ALL_REDUCE."""
    synth.generate(tmp_path / "in", ranks=2, steps=1, seed=4, expert_parallel=True)
    tables = load([tmp_path / "in"])
    paths = export(tables, tmp_path / "et")
    counts = check_graph(et_def, tables, paths)
    assert counts["collectives"] > 0 and counts["collectives_after_gpu"] == counts["collectives"]
    _, nodes = decode(et_def, paths[0])
    types = {(n.name.split("<")[0], attrs(n).get("comm_type")) for n in nodes if n.type == et_def.COMM_COLL_NODE}
    assert {("void deep_ep::intranode::dispatch", et_def.ALL_TO_ALL),
            ("void deep_ep::intranode::combine", et_def.ALL_TO_ALL),
            ("void vllm::cross_device_reduce_1stage", et_def.ALL_REDUCE)} <= types


def test_dlrm_8_ranks(et_def, tmp_path):
    tables = load([shared_trace("multirank/dlrm_8ranks_v100")])
    paths = export(tables, tmp_path)
    counts = check_graph(et_def, tables, paths)
    assert len(paths) == 8
    assert counts["collectives"] == 8 * 8  # 8 NCCL kernels per rank (MANIFEST)
    assert counts["collectives_after_gpu"] == counts["collectives"]
    _, nodes = decode(et_def, paths[0])
    assert any(n.data_deps for n in nodes), "the Execution Trace's tensor edges gave no data_deps"


def test_cpu_gpu_single_rank(et_def, tmp_path):
    tables = load([shared_trace("nvidia/a100_alexnet_cuda_sync.json.gz")])
    counts = check_graph(et_def, tables, export(tables, tmp_path))
    assert counts["gpu_nodes"] > 0


def test_command(et_def, tmp_path):
    synth.generate(tmp_path / "in", ranks=2, steps=1, seed=1)
    result = CliRunner().invoke(main, ["export", "chakra", str(tmp_path / "in"), "-o", str(tmp_path / "out"),
                                       "--prefix", "run"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["run.0.et", "run.1.et"]
    result = CliRunner().invoke(main, ["export", "chakra", str(tmp_path / "in"), "-o", str(tmp_path / "x"),
                                       "--prefix", "a/b"])
    assert result.exit_code == 2 and "prefix" in result.output
