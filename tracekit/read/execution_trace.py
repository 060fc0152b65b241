"""Execution Traces (PyTorch ExecutionTraceObserver JSON) → `et_nodes` / `et_tensors` rows of one rank.

Two node layouts are read:
- schema 1.0.1: flat nodes (`parent`, `rf_id`, `tid`, ... as keys; `inputs` a list of values beside
  `input_shapes` / `input_types`, likewise for outputs);
- schema 1.1.x-chakra: `ctrl_deps` is the parent, `inputs` / `outputs` are objects {values, shapes, types, strides},
  and per-node attributes are a list `attrs: [{name, type, value}]`.
Both become the same rows; `et_nodes.inputs` / `outputs` are always {values, shapes, types[, strides]} JSON text.
Linking the rows to Kineto events is `tracekit.link.et`'s job.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit import schema, storage
from tracekit.errors import InputError
from tracekit.read.columns import raw_text
from tracekit.read.ranks import RANK_FILE_PATTERN
from tracekit.read.text import NotStreamable, ParsedFile, StreamCut, decompressed_blocks

# --------------------------------------------------------------------------- decoding


class Attr(msgspec.Struct, gc=False):
    """One entry of a 1.1.x node's `attrs` list."""

    name: str
    value: Any = None
    type: str | None = None


class Node(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """Every key either layout writes; a node with any other key is decoded by `_lenient_node`, which keeps it."""

    id: int | None = None
    name: str | None = None
    parent: int | None = None  # 1.0.1
    ctrl_deps: int | None = None  # 1.1.x
    rf_id: int | None = None
    fw_parent: int | None = None
    seq_id: int | None = None
    tid: int | None = None
    op_schema: str | None = None
    scope: Any = None
    fw_tid: Any = None
    inputs: msgspec.Raw = msgspec.Raw(b"")
    outputs: msgspec.Raw = msgspec.Raw(b"")
    input_shapes: msgspec.Raw = msgspec.Raw(b"")
    input_types: msgspec.Raw = msgspec.Raw(b"")
    output_shapes: msgspec.Raw = msgspec.Raw(b"")
    output_types: msgspec.Raw = msgspec.Raw(b"")
    attrs: list[Attr] | None = None


class Values(msgspec.Struct, gc=False):
    """A node's inputs or outputs in the common {values, shapes, types, strides} form, values left as JSON text."""

    values: list[msgspec.Raw] = []
    shapes: list[msgspec.Raw] = []
    types: list[Any] = []
    strides: list[msgspec.Raw] | None = None


TensorValue = tuple[int, int, int, int, int, str]  # [tensor_id, storage_id, offset, numel, elem_bytes, device]


NODE_TYPES = {f.name: f.type for f in msgspec.structs.fields(Node)}
# Columns of their own in et_nodes; every other attribute stays in `attrs`.
PROMOTED_ATTRS = {"rf_id": int, "fw_parent": int, "seq_id": int, "tid": int, "op_schema": str}
FLAT_EXTRA_FIELDS = ("scope", "fw_tid")  # 1.0.1 keys that are plain attributes

_NODES = msgspec.json.Decoder(list[Node])
_RAW_NODES = msgspec.json.Decoder(list[msgspec.Raw])
_VALUES_LIST = msgspec.json.Decoder(list[Values])
_VALUES = msgspec.json.Decoder(Values)
_TENSOR_VALUES = msgspec.json.Decoder(list[TensorValue])
_TENSOR_VALUE = msgspec.json.Decoder(TensorValue)
_ANY = msgspec.json.Decoder()
_encode = msgspec.json.encode


def decode_nodes(parsed: ParsedFile) -> tuple[list[Node | None], list[dict[str, Any]], list[tuple[int, str]]]:
    """(nodes, extra keys per node, [(position, problem)]); a node that cannot be read at all is None."""
    try:
        nodes = _NODES.decode(parsed.entries)
        return nodes, [{}] * len(nodes), []
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError as exc:
        raise InputError(f"{parsed.path}: not valid JSON ({exc})") from None
    try:
        raws = _RAW_NODES.decode(parsed.entries)
    except msgspec.ValidationError:
        raise InputError(f"{parsed.path}: Execution Trace `nodes` is not a list") from None
    nodes, extras, problems = [], [], []
    for position, raw in enumerate(raws):
        node, extra, problem = _lenient_node(raw)
        nodes.append(node)
        extras.append(extra)
        if problem:
            problems.append((position, problem))
    return nodes, extras, problems


def _lenient_node(raw: msgspec.Raw) -> tuple[Node | None, dict[str, Any], str | None]:
    """A node with unknown keys or unexpected types: known keys that fit are typed, the rest kept as extras."""
    value = _ANY.decode(raw)
    if not isinstance(value, dict):
        return None, {}, "node is not a JSON object"
    fields, extra = {}, {}
    for key, v in value.items():
        if key not in NODE_TYPES:
            extra[key] = v
        elif NODE_TYPES[key] is msgspec.Raw:
            fields[key] = msgspec.Raw(_encode(v))
        else:
            try:
                fields[key] = msgspec.convert(v, NODE_TYPES[key], strict=False)
            except msgspec.ValidationError:
                extra[key] = v
    if not isinstance(fields.get("id"), int):
        return None, {}, "node has no integer `id`"
    bad = sorted(k for k in extra if k in NODE_TYPES)
    return Node(**fields), extra, f"fields with unexpected types kept in attrs: {bad}" if bad else None


def _io_text(values: msgspec.Raw, shapes: msgspec.Raw, types: msgspec.Raw) -> bytes:
    """Inputs or outputs as {values, shapes, types[, strides]} text: 1.1.x objects as written, 1.0.1's parallel
    lists put together."""
    text = bytes(values)
    if text[:1] == b"{":
        return text
    return b'{"values":%s,"shapes":%s,"types":%s}' % (text or b"[]", bytes(shapes) or b"[]", bytes(types) or b"[]")


def _node_row(node: Node, extra: dict[str, Any]) -> tuple:
    """(parent, rf_id, fw_parent, seq_id, tid, op_schema, inputs, outputs, attrs) of one node, either layout."""
    attrs = {k: v for k in FLAT_EXTRA_FIELDS if (v := getattr(node, k)) is not None}
    if node.attrs is None:  # 1.0.1: the promoted attributes are the node's own keys
        promoted = (node.rf_id, node.fw_parent, node.seq_id, node.tid, node.op_schema)
    else:  # 1.1.x
        attrs.update((a.name, a.value) for a in node.attrs)
        promoted = tuple(attrs.pop(key) if isinstance(value := attrs.get(key), kind) and not isinstance(value, bool)
                         else getattr(node, key) for key, kind in PROMOTED_ATTRS.items())
    parent = node.ctrl_deps if node.ctrl_deps is not None else node.parent
    attrs.update(extra)
    return (parent, *promoted, _io_text(node.inputs, node.input_shapes, node.input_types),
            _io_text(node.outputs, node.output_shapes, node.output_types),
            _encode(attrs).decode() if attrs else None)


# --------------------------------------------------------------------------- tensors


@functools.lru_cache(maxsize=4096)
def list_element_types(type_: str) -> tuple[str, ...]:
    """`GenericList[Tensor(float),GenericList[Tensor(int)],None]` → its element types, brackets respected."""
    inner = type_[len("GenericList["):-1]
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(inner):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(inner[start:i])
            start = i + 1
    if inner:
        parts.append(inner[start:])
    return tuple(parts)


def list_leaves(value, type_: str, shape, stride, out: list):
    """(value, dtype, shape, stride) of every tensor inside a decoded GenericList value, depth-first."""
    if type_.startswith("Tensor"):
        out.append((value, tensor_dtype(type_), shape, stride))
    elif type_.startswith("GenericList[") and isinstance(value, list):
        types = list_element_types(type_)
        shapes = shape if isinstance(shape, list) else []
        strides = stride if isinstance(stride, list) else []
        for k, element in enumerate(value):
            element_type = types[k] if k < len(types) else (types[-1] if types else "")
            if "Tensor" in element_type:
                list_leaves(element, element_type, shapes[k] if k < len(shapes) else None,
                            strides[k] if k < len(strides) else None, out)


def tensor_dtype(type_: str) -> str | None:
    return type_[7:-1] if type_.startswith("Tensor(") else None


def _item(items: list[msgspec.Raw] | None, position: int) -> msgspec.Raw | bytes:
    return items[position] if items is not None and position < len(items) else b""


def tensor_rows(node_ids: list[int], inputs: list[bytes | None], outputs: list[bytes | None]
                ) -> tuple[pa.Table, list[tuple[int, str]]]:
    """One row per tensor among each node's inputs and outputs; [(node id, problem)] for what did not fit.

    Python only walks the argument types; the tensor tuples of all nodes are decoded by one msgspec call and
    shapes / strides are kept as the JSON text they were written as. Lists of tensors (rare) are decoded and walked.
    """
    rows: list[tuple] = []  # (node, direction, position, element, dtype, value, shape, stride): one tuple a tensor
    problems: list[tuple[int, str]] = []
    for direction, texts in (("input", inputs), ("output", outputs)):
        blob = b"[" + b",".join(t or b"{}" for t in texts) + b"]"
        try:
            decoded = _VALUES_LIST.decode(blob)
        except (msgspec.ValidationError, msgspec.DecodeError):
            decoded = []
            for node, text in zip(node_ids, texts):
                try:
                    decoded.append(_VALUES.decode(text or b"{}"))
                except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                    decoded.append(Values())
                    problems.append((node, f"{direction}s not readable: {exc}"))
        for node, io in zip(node_ids, decoded):
            for position, type_ in enumerate(io.types):
                if type(type_) is not str or "Tensor" not in type_:
                    continue
                value, shape, stride = _item(io.values, position), _item(io.shapes, position), _item(io.strides, position)
                if type_.startswith("Tensor"):
                    rows.append((node, direction, position, None, tensor_dtype(type_), value, shape, stride))
                    continue
                leaves = []
                list_leaves(_ANY.decode(value) if value else None, type_, _ANY.decode(shape) if shape else None,
                            _ANY.decode(stride) if stride else None, leaves)
                rows += [(node, direction, position, element, dtype, _encode(v),
                          b"" if shape_ is None else _encode(shape_), b"" if stride_ is None else _encode(stride_))
                         for element, (v, dtype, shape_, stride_) in enumerate(leaves)]
    columns = list(zip(*rows)) if rows else [()] * 8
    keys = dict(zip(("node", "direction", "position", "element", "dtype"), columns[:5]))
    values, shapes, strides = columns[5:]

    try:
        tensors = _TENSOR_VALUES.decode(b"[" + b",".join(bytes(v) or b"null" for v in values) + b"]")
    except (msgspec.ValidationError, msgspec.DecodeError):
        tensors = []
        for row, value in enumerate(values):
            try:
                tensors.append(_TENSOR_VALUE.decode(value or b"null"))
            except (msgspec.ValidationError, msgspec.DecodeError):
                tensors.append((None,) * 6)
                problems.append((keys["node"][row], f"{keys['direction'][row]} {keys['position'][row]} holds a value "
                                 f"that is not [tensor_id, storage_id, offset, numel, elem_bytes, device]"))
    fields = schema.ET_TENSORS.arrow_schema
    tensor_columns = list(zip(*tensors)) if tensors else [()] * 6
    table = pa.table({
        **{c: pa.array(v, fields.field(c).type) for c, v in keys.items()},
        **{c: pa.array(v, fields.field(c).type) for c, v in zip(
            ("tensor_id", "storage_id", "offset", "numel", "elem_bytes", "device"), tensor_columns)},
        "shape": raw_text(shapes),
        "strides": raw_text(strides),
    })
    return table.filter(pc.is_valid(table.column("tensor_id"))), problems


# --------------------------------------------------------------------------- one file → tables


def read_execution_trace(parsed: ParsedFile, rank: int) -> dict[str, pa.Table]:
    """et_nodes (one row per node, nothing dropped that has an id), et_tensors and diagnostics of one file."""
    source = str(parsed.path)
    nodes, extras, problems = decode_nodes(parsed)
    kept = [(n, e) for n, e in zip(nodes, extras) if n is not None]
    rows = list(zip(*(_node_row(n, e) for n, e in kept))) if kept else [()] * 9
    parent, rf_id, fw_parent, seq_id, tid, op_schema, inputs, outputs, attrs = rows
    pid = _top_value(parsed, "pid")
    ids = [n.id for n, _ in kept]
    et_nodes = pa.table({
        "rank": pa.array([rank] * len(kept), pa.int32()),
        "id": pa.array(ids, pa.int64()),
        "parent": pa.array(parent, pa.int64()),
        "name": pa.array([n.name for n, _ in kept], pa.string()),
        "op_schema": pa.array(op_schema, pa.string()),
        "rf_id": pa.array(rf_id, pa.int64()),
        "pid": pa.array([None if pid is None else str(pid)] * len(kept), pa.string()),
        "tid": pa.array(tid, pa.int64()),
        "seq_id": pa.array(seq_id, pa.int64()),
        "fw_parent": pa.array(fw_parent, pa.int64()),
        "inputs": raw_text(inputs),
        "outputs": raw_text(outputs),
        "attrs": pa.array(attrs, pa.string()),
    })
    tensors, tensor_problems = tensor_rows(ids, list(inputs), list(outputs))
    et_tensors = tensors.append_column("rank", pa.array(np.full(tensors.num_rows, rank, dtype=np.int32)))

    raws = _RAW_NODES.decode(parsed.entries) if any(n is None for n in nodes) else None
    notes = [dict(position=p, reason="et_bad_node", detail=problem, dropped=nodes[p] is None,
                  raw=bytes(raws[p]).decode(errors="replace") if nodes[p] is None else None)
             for p, problem in problems]
    notes += [dict(position=None, reason="et_bad_tensor", detail=f"node {node}: {problem}", dropped=False)
              for node, problem in tensor_problems]
    import polars as pl  # imported here: `pipeline` imports this module for every ingest, which needs no polars

    duplicated = pl.Series(ids, dtype=pl.Int64).filter(pl.Series(ids, dtype=pl.Int64).is_duplicated()).unique()
    if duplicated.len():
        notes.append(dict(position=None, reason="et_duplicate_node_id", dropped=False,
                          detail=f"{duplicated.len()} node ids occur more than once, "
                                 f"e.g. {duplicated.sort()[:5].to_list()}"))
    diagnostics = pa.Table.from_pylist(
        [dict(rank=rank, source_file=source, stage="et", **{"raw": None, **n}) for n in notes],
        schema=schema.DIAGNOSTICS.arrow_schema) if notes else schema.empty("diagnostics")
    return {"et_nodes": schema.conform("et_nodes", et_nodes), "et_tensors": schema.conform("et_tensors", et_tensors),
            "diagnostics": diagnostics}


def _top_value(parsed: ParsedFile, key: str):
    raw = parsed.top.get(key)
    try:
        return None if raw is None else _ANY.decode(raw)
    except msgspec.DecodeError:
        return None


def execution_trace_rank(parsed: ParsedFile, kineto_ranks: list[int], pid_ranks: dict[str, list[int]]
                         ) -> tuple[int | None, str]:
    """Rank of an ET file: its file name (`et_rank3`), else the Kineto rank with the ET's pid, else the only Kineto
    rank loaded, else 0 when no Kineto trace was given; (None, why) when it cannot be told."""
    named = named_rank(parsed.path)
    if named is not None:
        return named, "file_name"
    pid = _top_value(parsed, "pid")
    by_pid = pid_ranks.get(str(pid), []) if pid is not None else []
    if len(by_pid) == 1:
        return by_pid[0], "pid"
    if len(kineto_ranks) == 1:
        return kineto_ranks[0], "only_kineto_rank"
    if not kineto_ranks:
        return 0, "default"
    return None, (f"file name has no rank, pid {pid} matches {len(by_pid)} of the {len(kineto_ranks)} Kineto ranks "
                  f"loaded; name it like et_rank3.json")


def named_rank(path: storage.Location) -> int | None:
    """The rank an Execution Trace's file name gives (`et_rank3.json`), which wins over every other rule; None."""
    match = RANK_FILE_PATTERN.search(storage.name(path))
    return int(match.group(1)) if match else None


NODES_KEY = re.compile(rb'"nodes"[ \t\r\n]*:')
SNIFF_BYTES = 1 << 16


def opens_as_execution_trace(path: storage.Location) -> bool:
    """Whether the file opens as an Execution Trace does (an object whose top-level keys before "nodes" include
    "schema"), from its first 64 KiB only: for refusing one before any work. False for anything unreadable (the
    reader says why, later)."""
    blocks = decompressed_blocks(path, SNIFF_BYTES)
    try:
        head = next(blocks, b"")
    except (InputError, NotStreamable, StreamCut, OSError):
        return False
    finally:
        blocks.close()
    for match in NODES_KEY.finditer(head):
        try:
            top = msgspec.json.decode(head[:match.start()] + b'"nodes":null}')
        except (msgspec.DecodeError, UnicodeDecodeError):
            continue
        return isinstance(top, dict) and "schema" in top
    return False
