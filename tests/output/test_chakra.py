"""`tracekit export chakra`: the files decode with Chakra's schema compiled by protoc (not tracekit's encoder), and
the graph they hold is one a simulator can run: unique ids, dependencies inside the file, acyclic, GPU work with
successors, collectives after the GPU work queued before them."""

from __future__ import annotations

import importlib
import json
import math
import subprocess
import sys
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tests.conftest import shared_trace
from tests.support.categories import communication_kernel
from tracekit import synth
from tracekit.cli import main
from tracekit.engine.tables import TraceTables
from tracekit.output import chakra
from tracekit.pipeline import load

PROTO = Path(chakra.__file__).with_name("et_def.proto")
GPU_KINDS = ("kernel", "memcpy", "memset")


@pytest.fixture(scope="module")
def et_def(tmp_path_factory):
    """et_def_pb2, compiled from the repository's .proto by grpc_tools' protoc."""
    out = tmp_path_factory.mktemp("et_def")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO.parent}", f"--python_out={out}",
                    str(PROTO)], check=True)
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("et_def_pb2")
    finally:
        sys.path.remove(str(out))


@dataclass(frozen=True)
class Exported:
    tables: TraceTables
    result: chakra.ChakraExport
    out: Path  # the folder written
    paths: dict[int, Path]  # rank → its .et file


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """A shared trace loaded, and exported with the defaults (prefix "job"), once for the module: several tests read
    the same trace's export. Tables are never changed in place, so the tests may share them."""
    done = {}

    def get(trace: str) -> Exported:
        if trace not in done:
            tables = load([shared_trace(trace)])
            out = tmp_path_factory.mktemp("export")
            result = chakra.write_chakra(tables, out, prefix="job")
            done[trace] = Exported(tables, result, out, by_rank(result.paths))
        return done[trace]
    return get


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


def by_rank(paths) -> dict[int, Path]:
    return {int(p.name.split(".")[1]): p for p in paths}


def export(tables, out: Path) -> dict[int, Path]:
    return by_rank(chakra.write_chakra(tables, out, prefix="job").paths)


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
           "tid": -1, "stream": 7, "comm_type": "BARRIER", "comm_size": 0, "pg_name": "", "num_ops": 2**40,
           "tensor_size": None, "inferred": "pg_name: é"}
    node = et_def.Node.FromString(chakra.node_message(row))
    assert (node.id, node.name, node.type) == (2**63 + 5, "aten::mm · é", et_def.COMM_COLL_NODE)
    assert list(node.ctrl_deps) == [0, 127, 128] and list(node.data_deps) == []
    assert node.start_time_micros == 1_700_000_000_000_000 and node.duration_micros == 0
    assert attrs(node) == {"is_cpu_op": False, "tid": -1, "stream": 7, "comm_type": et_def.BARRIER, "comm_size": 0,
                           "pg_name": "", "num_ops": 2**40, "tracekit_inferred": "pg_name: é"}


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


def test_dlrm_8_ranks(et_def, exports):
    dlrm = exports("multirank/dlrm_8ranks_v100")
    tables, paths = dlrm.tables, dlrm.paths
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
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["run.0.et", "run.1.et", "run.comm_groups.json"]
    assert f"communicator groups: {tmp_path / 'out' / 'run.comm_groups.json'}" in result.output
    result = CliRunner().invoke(main, ["export", "chakra", str(tmp_path / "in"), "-o", str(tmp_path / "x"),
                                       "--prefix", "a/b"])
    assert result.exit_code == 2 and "prefix" in result.output


# --- what simulators need: collective attributes, compute sizes, data_deps --------------------------------------
def comm_nodes(et_def, nodes):
    return [n for n in nodes if n.type in (et_def.COMM_COLL_NODE, et_def.COMM_SEND_NODE, et_def.COMM_RECV_NODE)]


def launchers(events: pl.DataFrame) -> dict[int, dict]:
    """GPU op id → the innermost cpu_op around the runtime call with the op's correlation id (by time on the
    call's thread): found from the events alone, not from tracekit's edges."""
    calls = events.filter(pl.col("kind").is_in(["runtime", "driver"]) & pl.col("correlation").is_not_null())
    gpu = events.filter(pl.col("kind").is_in(GPU_KINDS) & pl.col("correlation").is_not_null())
    call_of = {c: row for row in calls.iter_rows(named=True) for c in [row["correlation"]]}
    ops = defaultdict(list)
    for row in events.filter(pl.col("kind") == "cpu_op").iter_rows(named=True):
        ops[row["pid"], row["tid"]].append(row)
    found = {}
    for row in gpu.iter_rows(named=True):
        call = call_of.get(row["correlation"])
        if call is None:
            continue
        around = [op for op in ops[call["pid"], call["tid"]]
                  if op["ts"] <= call["ts"] and call["ts"] + (call["dur"] or 0) <= op["ts"] + (op["dur"] or 0)]
        if around:
            found[row["id"]] = min(around, key=lambda op: (op["dur"] or 0, -op["ts"]))
    return found


def gemm_ops(shapes: list, name: str) -> int | None:
    """2·b·M·N·K of an aten GEMM call from its Input Dims (the op's own signature), plus b·M·N for addmm's bias add
    (docs/perf_models.md counts it), None if not a GEMM."""
    a, b = {"aten::mm": (0, 1), "aten::bmm": (0, 1), "aten::addmm": (1, 2), "aten::baddbmm": (1, 2)}.get(name, (None, None))
    if a is None:
        return None
    bias = name in ("aten::addmm", "aten::baddbmm")
    a, b = shapes[a], shapes[b]
    batch = a[0] if len(a) == 3 else 1
    m, k = a[-2], a[-1]
    assert b[-2] == k
    return 2 * batch * m * b[-1] * k + bias * batch * m * b[-1]


@pytest.mark.parametrize("trace", ["multirank/dlrm_8ranks_v100", "amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz",
                                   "nvidia/a100_trainer_rank0of16_cudagraph.json.gz"])
def test_every_collective_has_type_size_and_group(et_def, exports, trace):
    """DLRM: every collective has args; MI300X: ncclDevKernel_Generic kernels queued before the window (no args, no
    launch call); A100 trainer: SendRecv kernels replayed from a CUDA graph. Each gets the three attributes, and a
    kernel with no collective args and no launch call in the trace says what was inferred."""
    tables, exported = exports(trace).tables, exports(trace).result
    events = pl.from_arrow(tables.events)
    correlations_called = set(events.filter(pl.col("kind").is_in(["runtime", "driver"]))["correlation"].drop_nulls())
    inferred_nodes = 0
    for path in exported.paths:
        rank = int(path.name.split(".")[1])
        by_id = {row["id"]: row for row in events.filter(pl.col("rank") == rank).iter_rows(named=True)}
        _, nodes = decode(et_def, path)
        comms = comm_nodes(et_def, nodes)
        assert comms
        for n in comms:
            a = attrs(n)
            assert {"comm_size", "pg_name"} <= set(a), f"{n.name} lacks size or group: {a}"
            if n.type == et_def.COMM_COLL_NODE:
                assert "comm_type" in a, f"{n.name} lacks comm_type"
            event = by_id[n.id]
            if event["collective_name"] is None and event["correlation"] not in correlations_called:
                assert "tracekit_inferred" in a, f"{n.name}: nothing in the trace describes it, yet nothing is inferred"
            inferred_nodes += "pg_name" in a.get("tracekit_inferred", "") or "comm_" in a.get("tracekit_inferred", "")
    assert inferred_nodes > 0


def test_process_groups_are_ids_from_1_with_their_file(et_def, exports):
    """MI300X ResNet: PyTorch's default group "0" (distributedInfo.pg_config: ranks 0-7) is written as pg_name "1",
    and PREFIX.comm_groups.json, ASTRA-sim's --comm-group-configuration, has {"1": [0..7]}; nodes whose group the
    trace does not say keep '' (every rank). Every pg_name is '' or a key of the file, and no key is below 1."""
    resnet = exports("amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz")
    exported = resnet.result
    groups = json.loads((resnet.out / "job.comm_groups.json").read_text())
    assert exported.groups_path == resnet.out / "job.comm_groups.json"
    assert groups == {"1": list(range(8))}
    _, nodes = decode(et_def, exported.paths[0])
    names = [attrs(n)["pg_name"] for n in comm_nodes(et_def, nodes)]
    assert set(names) <= {"", *groups} and all(int(k) >= 1 for k in groups)
    assert names.count("1") > 0 and names.count("") == 5  # the 5 ncclDevKernel_Generic kernels without args
    # every fallback a node carries is a diagnostics row of the export, and no other
    carried = {(n.id, part) for n in nodes for part in attrs(n).get("tracekit_inferred", "").split("; ") if part}
    notes = pl.from_arrow(exported.diagnostics)
    assert set(notes.columns) >= {"rank", "position", "stage", "reason", "detail", "dropped"}
    assert set(notes.select("position", "detail").iter_rows()) == carried and len(carried) == notes.height
    assert set(notes["stage"]) == {"export"} and not notes["dropped"].any()


def test_compute_nodes_carry_the_op_model(et_def, exports):
    """DLRM: the GPU ops a GEMM op launched share its FLOPs (2·M·N·K, + M·N for addmm's bias, from the op's Input
    Dims) and carry together a tensor_size at least its operands'; every GPU compute node carries num_ops and
    tensor_size (ASTRA-sim's roofline needs them), those of no modelled op from their measured duration at the
    V100 SXM2's fp32 peak (15.7 TFLOP/s) and HBM bandwidth (0.9 TB/s, NVIDIA's datasheet), saying so."""
    dlrm = exports("multirank/dlrm_8ranks_v100")
    tables, paths = dlrm.tables, dlrm.paths
    events = pl.from_arrow(tables.events)
    checked = measured = 0
    for rank, path in paths.items():
        rank_events = events.filter(pl.col("rank") == rank)
        launcher = launchers(rank_events)
        by_id = {row["id"]: row for row in rank_events.iter_rows(named=True)}
        _, nodes = decode(et_def, path)
        owned = defaultdict(list)
        for n in nodes:
            a = attrs(n)
            if n.type != et_def.COMP_NODE or a["is_cpu_op"]:
                continue
            assert {"num_ops", "tensor_size"} <= set(a), f"GPU compute node {n.id} {n.name} lacks num_ops"
            op = launcher.get(n.id)
            if op is not None and op["name"] in ("aten::mm", "aten::addmm", "aten::bmm"):
                owned[op["id"]].append(a)
            if "from the measured duration" in a.get("tracekit_inferred", ""):
                dur = by_id[n.id]["dur"] or 0
                assert abs(a["num_ops"] - dur * 15_700) <= 1 and abs(a["tensor_size"] - dur * 900) <= 1
                measured += 1
        assert owned, "no GEMM kernels found"
        for op_id, shares in owned.items():
            op = by_id[op_id]
            shapes = json.loads(op["input_dims"])
            expected = gemm_ops(shapes, op["name"])
            assert abs(sum(a["num_ops"] for a in shares) - expected) <= len(shares), f"{op['name']} {shapes}"
            assert all("tracekit_inferred" not in a for a in shares)
            operand_bytes = 4 * sum(math.prod(s) for s in shapes if s)  # DLRM's GEMMs are float32
            assert sum(a["tensor_size"] for a in shares) >= operand_bytes - len(shares)
            checked += 1
    assert checked == 8 * 23  # 23 GEMM calls per rank (13 mm, 7 addmm, 3 bmm)
    assert measured > 0


def test_convolution_nodes(et_def, exports):
    """A forward convolution with Concrete Inputs (stride 2, padding 1): input [10, 256, 14, 14], weight
    [512, 256, 3, 3] → output 7×7, 2·10·49·(512·256·9) = 1,156,055,040 operations (worked by hand), shared by the
    GPU ops of each such aten::miopen_convolution call."""
    resnet = exports("amd/mi300x_resnet_act_checkpoint_rank0of8.json.gz")
    tables = resnet.tables
    _, nodes = decode(et_def, resnet.paths[0])
    launcher = launchers(pl.from_arrow(tables.events))
    per_call = defaultdict(list)
    for n in nodes:
        op = launcher.get(n.id)
        if op is not None and op["name"] == "aten::miopen_convolution" \
                and op["input_dims"].replace(" ", "").startswith("[[10,256,14,14],[512,256,3,3]"):
            per_call[op["id"]].append(attrs(n)["num_ops"])
    assert per_call
    for shares in per_call.values():
        assert abs(sum(shares) - 1_156_055_040) <= len(shares)
    assert all(attrs(n)["num_ops"] >= 0 for n in nodes if "num_ops" in attrs(n))


def test_data_deps_option(et_def, exports, tmp_path):
    """--data-deps: the same dependencies, every one a data dependency (what mlcommons' legacy ETFeeder follows)."""
    dlrm = exports("multirank/dlrm_8ranks_v100")
    tables, default = dlrm.tables, dlrm.paths
    as_data = by_rank(chakra.write_chakra(tables, tmp_path / "data", prefix="job", data_deps=True).paths)
    for rank in default:
        meta, nodes = decode(et_def, as_data[rank])
        _, reference = decode(et_def, default[rank])
        assert {a.name: a.string_val for a in meta.attr if a.name == "dependencies"} == {"dependencies": "data_deps"}
        assert not any(n.ctrl_deps for n in nodes)
        assert {(d, n.id) for n in nodes for d in n.data_deps} \
            == {(d, n.id) for n in reference for d in [*n.ctrl_deps, *n.data_deps]}
        assert is_acyclic(nodes)
    result = CliRunner().invoke(main, ["export", "chakra", str(shared_trace("multirank/dlrm_8ranks_v100")),
                                       "-o", str(tmp_path / "cli"), "--data-deps"])
    assert result.exit_code == 0, result.output
    _, nodes = decode(et_def, tmp_path / "cli" / "tracekit.0.et")
    assert not any(n.ctrl_deps for n in nodes) and any(n.data_deps for n in nodes)
