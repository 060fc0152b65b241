"""Chakra execution traces (the input of ASTRA-sim and other simulators): one file per rank, `DIR/PREFIX.RANK.et`.

The wire format is protobuf with Chakra's schema (`et_def.proto` beside this module, from mlcommons/chakra
schema/protobuf/et_def.proto, schema version 0.0.4): a `GlobalMetadata` message, then one `Node` message per node,
each preceded by its length as a varint. The few messages are encoded here by hand (varints and length-delimited
fields), so writing needs no protobuf runtime; the tests decode the files with the .proto compiled by protoc.

What becomes a node and what it depends on is SQL: queries/export/chakra_owners.sql, chakra_compute.sql (num_ops
and tensor_size of GPU compute nodes, from the op_perf analysis), chakra_nodes.sql, chakra_deps.sql and
chakra_groups.sql (the communicator groups file). This module runs them and writes the bytes. Dependencies are written as Chakra's two lists (ctrl_deps: order and launch; data_deps: tensors
of an Execution Trace), or all as data_deps for feeders that follow only those (mlcommons' legacy ETFeeder).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import polars as pl
import pyarrow as pa

from tracekit import schema
from tracekit.engine.catalog import connect, prepare, run_stage
from tracekit.engine.tables import TraceTables
from tracekit.errors import InputError
from tracekit.output.atomic import replacing_file

SCHEMA_VERSION = "0.0.4"

# Field numbers and enum values of et_def.proto (the facts of Chakra's schema; tests check them against the
# compiled .proto).
NODE_TYPES = {"COMP_NODE": 4, "COMM_SEND_NODE": 5, "COMM_RECV_NODE": 6, "COMM_COLL_NODE": 7}
COLLECTIVE_COMM_TYPES = {"ALL_REDUCE": 0, "REDUCE": 1, "ALL_GATHER": 2, "GATHER": 3, "SCATTER": 4, "BROADCAST": 5,
                         "ALL_TO_ALL": 6, "REDUCE_SCATTER": 7, "REDUCE_SCATTER_BLOCK": 8, "BARRIER": 9}
GLOBAL_METADATA_FIELDS = {"version": 1, "attr": 2}
NODE_FIELDS = {"id": 1, "name": 2, "type": 3, "ctrl_deps": 4, "data_deps": 5, "start_time_micros": 6,
               "duration_micros": 7, "attr": 10}
ATTRIBUTE_FIELDS = {"name": 1, "int64_val": 9, "bool_val": 27, "string_val": 29}

VARINT, LENGTH_DELIMITED = 0, 2


# --- protobuf wire format -----------------------------------------------------------------------------------------
def varint(value: int) -> bytes:
    """Base-128 varint; a negative int64 as its 64-bit two's complement (10 bytes), as protobuf writes it."""
    value &= (1 << 64) - 1
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def key(field: int, wire_type: int) -> bytes:
    return varint(field << 3 | wire_type)


def varint_field(field: int, value: int) -> bytes:
    return key(field, VARINT) + varint(value)


def bytes_field(field: int, payload: bytes) -> bytes:
    return key(field, LENGTH_DELIMITED) + varint(len(payload)) + payload


def string_field(field: int, text: str) -> bytes:
    return bytes_field(field, text.encode("utf-8", "replace"))


def packed_varints(field: int, values: list[int]) -> bytes:
    return bytes_field(field, b"".join(map(varint, values))) if values else b""


def attribute(name: str, value: bool | int | str) -> bytes:
    """An AttributeProto: the oneof member by the value's Python type (bool, int64, string)."""
    body = string_field(ATTRIBUTE_FIELDS["name"], name)
    if isinstance(value, bool):
        body += varint_field(ATTRIBUTE_FIELDS["bool_val"], int(value))
    elif isinstance(value, int):
        body += varint_field(ATTRIBUTE_FIELDS["int64_val"], value)
    else:
        body += string_field(ATTRIBUTE_FIELDS["string_val"], value)
    return body


def delimited(message: bytes) -> bytes:
    """A message as Chakra's ET files hold it: its length as a varint, then its bytes."""
    return varint(len(message)) + message


def global_metadata(attrs: dict[str, bool | int | str]) -> bytes:
    body = string_field(GLOBAL_METADATA_FIELDS["version"], SCHEMA_VERSION)
    for name, value in attrs.items():
        body += bytes_field(GLOBAL_METADATA_FIELDS["attr"], attribute(name, value))
    return body


# attribute name → chakra_nodes column; tracekit_inferred says which attributes rest on a fallback (docs/exports.md)
NODE_ATTRIBUTES = {"is_cpu_op": "is_cpu_op", "tid": "tid", "stream": "stream", "comm_type": "comm_type",
                   "comm_size": "comm_size", "pg_name": "pg_name", "num_ops": "num_ops", "tensor_size": "tensor_size",
                   "tracekit_inferred": "inferred"}


def node_message(row: dict) -> bytes:
    """A Node from one row of chakra_nodes with its `ctrl_deps` and `data_deps` lists. Proto3 leaves a scalar at
    its default (0) out; an attribute present is written whatever its value."""
    f = NODE_FIELDS
    body = varint_field(f["id"], row["id"]) + string_field(f["name"], row["name"] or "")
    body += varint_field(f["type"], NODE_TYPES[row["node_type"]])
    body += packed_varints(f["ctrl_deps"], row["ctrl_deps"] or [])
    body += packed_varints(f["data_deps"], row["data_deps"] or [])
    if row["start_time_micros"]:
        body += varint_field(f["start_time_micros"], row["start_time_micros"])
    if row["duration_micros"]:
        body += varint_field(f["duration_micros"], row["duration_micros"])
    for name, column in NODE_ATTRIBUTES.items():
        value = row[column]
        if value is None:
            continue
        if name == "comm_type":
            value = COLLECTIVE_COMM_TYPES[value]
        body += bytes_field(f["attr"], attribute(name, value))
    return body


# --- the graph ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChakraGraph:
    """The nodes (queries/export/chakra_nodes.sql, with `ctrl_deps` and `data_deps` lists), every dependency
    considered (chakra_deps.sql; those with `forward` false are not written) and the communicator groups the
    nodes' pg_name ids stand for (chakra_groups.sql)."""

    nodes: pl.DataFrame
    deps: pl.DataFrame
    groups: pl.DataFrame

    def diagnostics(self) -> pa.Table:
        """One diagnostics row (stage export, reason chakra_fallback, position = the node's event id) per fallback
        a node rests on: the parts of chakra_nodes' `inferred`, which the node carries as `tracekit_inferred`."""
        parts = (self.nodes.filter(pl.col("inferred").is_not_null())
                 .select("rank", position="id", detail=pl.col("inferred").str.split("; "))
                 .explode("detail")
                 .with_columns(stage=pl.lit("export"), reason=pl.lit("chakra_fallback"), dropped=pl.lit(False)))
        return schema.conform("diagnostics", parts.to_arrow())


@dataclass(frozen=True)
class ChakraExport:
    paths: list[Path]
    diagnostics: pa.Table  # the fallbacks nodes rest on, in the diagnostics table's columns (ChakraGraph.diagnostics)
    groups_path: Path  # ASTRA-sim's --comm-group-configuration
    groups: pl.DataFrame  # group_id, process_group, npus, members_from

    @property
    def inferred(self) -> dict[str, int]:
        """How many nodes rest on each fallback."""
        notes = pl.from_arrow(self.diagnostics)
        return dict(notes.group_by("detail").len().sort("detail").iter_rows())


def chakra_graph(tables: TraceTables, data_deps: bool = False) -> ChakraGraph:
    """The graph; with `data_deps`, every dependency in the nodes' `data_deps` list and none in `ctrl_deps`."""
    with connect(tables) as con:
        prepare(con, "from op_perf")  # the one op model (chakra_compute reads it), as a view
        # the passes they read first, in the order their headers declare
        made = run_stage(con, ["export/chakra_nodes", "export/chakra_deps", "export/chakra_groups"])
    nodes, deps, groups = (pl.from_arrow(made[name]) for name in ("chakra_nodes", "chakra_deps", "chakra_groups"))
    written = deps.filter("forward")
    if data_deps:  # a pair that is both ctrl and data is one data dependency
        written = written.with_columns(dep=pl.lit("data")).unique(["rank", "src", "dst"])
    lists = (written
             .group_by("rank", "dst")
             .agg(ctrl_deps=pl.col("src").filter(pl.col("dep") == "ctrl").sort(),
                  data_deps=pl.col("src").filter(pl.col("dep") == "data").sort())
             .rename({"dst": "id"}))
    nodes = nodes.join(lists, on=["rank", "id"], how="left", maintain_order="left")
    return ChakraGraph(nodes, deps, groups)


def groups_path(out_dir: Path, prefix: str) -> Path:
    """The communicator groups of the files PREFIX.*.et: PREFIX.comm_groups.json, ASTRA-sim's
    --comm-group-configuration ({"id": [npu, ...]}, ids from 1 as the nodes' pg_name carries them)."""
    return Path(out_dir) / f"{prefix}.comm_groups.json"


def et_path(out_dir: Path, prefix: str, rank: int) -> Path:
    """The file of one rank: PREFIX.RANK.et, the names ASTRA-sim's workload option expects."""
    return Path(out_dir) / f"{prefix}.{rank}.et"


def write_chakra(tables: TraceTables, out_dir: str | Path, prefix: str = "tracekit",
                 data_deps: bool = False) -> ChakraExport:
    """Write one Chakra ET file per rank into `out_dir` (created if missing): `prefix.RANK.et`, every dependency
    as a data dependency with `data_deps`, and the communicator groups beside them (`groups_path`). Returns the
    paths, how many nodes rest on each fallback, and the groups.

    Each file is written under a temporary name and renamed when complete.
    """
    out_dir = Path(out_dir)
    if not prefix or "/" in prefix or prefix.startswith("."):
        raise InputError(f"--prefix {prefix!r}: give a plain file name prefix")
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"{out_dir}: is not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    graph = chakra_graph(tables, data_deps)
    ranks = tables.ranks.select(["rank", "world_size"]).to_pylist()
    paths = []
    for rank_row in ranks:
        rank = rank_row["rank"]
        path = et_path(out_dir, prefix, rank)
        nodes = graph.nodes.filter(pl.col("rank") == rank)
        metadata = {"producer": "tracekit", "rank": rank, "dependencies": "data_deps" if data_deps else "ctrl_deps"}
        if rank_row["world_size"] is not None:
            metadata["world_size"] = rank_row["world_size"]
        with replacing_file(path) as temp, open(temp, "wb") as out:
            out.write(delimited(global_metadata(metadata)))
            for row in nodes.iter_rows(named=True):
                out.write(delimited(node_message(row)))
        paths.append(path)
    groups = groups_path(out_dir, prefix)
    with replacing_file(groups) as temp:
        temp.write_text(json.dumps({str(g["group_id"]): g["npus"] for g in graph.groups.iter_rows(named=True)}) + "\n")
    return ChakraExport(paths, graph.diagnostics(), groups, graph.groups)

