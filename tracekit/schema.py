"""Every table tracekit produces, defined once.

Each table is a list of columns with an Arrow type, a unit and a description.
`docs/schema.md` is generated from this module (`tracekit schema`), and a test
checks that the two agree. Timestamps and durations are int64 nanoseconds;
every table carries `rank`, and every key includes it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    unit: str
    doc: str


@dataclass(frozen=True)
class Table:
    name: str
    doc: str
    key: tuple[str, ...]
    columns: tuple[Column, ...]

    @property
    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(c.name, c.type) for c in self.columns])

    @property
    def column_names(self) -> list[str]:
        return [c.name for c in self.columns]


I32, I64, STR, BOOL, F64 = pa.int32(), pa.int64(), pa.string(), pa.bool_(), pa.float64()
I64_LIST = pa.list_(pa.int64())


def _col(name: str, type_: pa.DataType, unit: str, doc: str) -> Column:
    return Column(name, type_, unit, doc)


RANK = _col("rank", I32, "", "Rank (global process index) the row belongs to.")
ID = _col("id", I64, "", "Position of the entry in its file's `traceEvents` list: stable, unique within the rank.")
PID = _col("pid", STR, "", "`pid` as written in the trace (integers in decimal; some traces use text such as `Spans`).")
TID = _col("tid", STR, "", "`tid` as written in the trace (integers in decimal; legacy GPU rows use text such as `stream 7`).")
TS = _col("ts", I64, "ns", "Start, epoch nanoseconds (`baseTimeNanoseconds` added where the trace is relative), parsed exactly from the JSON text.")
ARGS = _col("args", STR, "JSON", "The entry's `args` object, byte-for-byte as written in the trace (null when absent).")

EVENTS = Table(
    "events",
    "One row per complete (`ph: X`) event: CPU ops, annotations, Python functions, runtime and driver calls, "
    "GPU kernels, memcpys, memsets, GPU annotations, sync events.",
    ("rank", "id"),
    (
        RANK,
        ID,
        _col("kind", STR, "", "Normalised kind: cpu_op, user_annotation, python_function, runtime, driver, kernel, "
             "memcpy, memset, gpu_annotation, sync, trace, overhead, other (see `KINDS`)."),
        _col("cat", STR, "", "Category exactly as written in the trace (null when absent)."),
        _col("name", STR, "", "Event name."),
        PID,
        TID,
        TS,
        _col("dur", I64, "ns", "Duration in nanoseconds, parsed exactly (null when absent)."),
        _col("device", I32, "", "GPU device index from `args.device` (never from `pid`)."),
        _col("stream", I64, "", "GPU stream from `args.stream` (never from `tid`)."),
        _col("correlation", I64, "", "`args.correlation`: links a runtime/driver call to the GPU work it launched, within a rank."),
        _col("external_id", I64, "", "`args.External id` (legacy `external id`): links CPU ops to the launches they made."),
        _col("record_function_id", I64, "", "`args.Record function id`: links to Execution Trace `rf_id`."),
        _col("sequence_number", I64, "", "`args.Sequence number`: autograd sequence number."),
        _col("fwd_thread_id", I64, "", "`args.Fwd thread id`: thread of the forward op a backward op belongs to."),
        _col("input_dims", STR, "JSON", "`args.Input Dims` (legacy `Input dims`) as JSON text: one entry per input, a list of sizes."),
        _col("input_type", STR, "JSON", "`args.Input type` as JSON text: one dtype or kind string per input."),
        _col("input_strides", STR, "JSON", "`args.Input Strides` as JSON text."),
        _col("concrete_inputs", STR, "JSON", "`args.Concrete Inputs` as JSON text: scalar values per input, as strings."),
        _col("grid", I64_LIST, "", "Kernel grid dimensions [x, y, z]."),
        _col("block", I64_LIST, "", "Kernel block dimensions [x, y, z]."),
        _col("bytes", I64, "bytes", "Bytes moved (memcpy) or set (memset)."),
        _col("collective_name", STR, "", "`args.Collective name` (e.g. allreduce, allgather, send)."),
        _col("in_msg_nelems", I64, "elements", "`args.In msg nelems`."),
        _col("out_msg_nelems", I64, "elements", "`args.Out msg nelems`."),
        _col("dtype", STR, "", "`args.dtype` of a collective."),
        _col("group_size", I32, "ranks", "`args.Group size` of a collective."),
        _col("process_group_name", STR, "", "`args.Process Group Name`."),
        _col("process_group_desc", STR, "", "`args.Process Group Description`."),
        _col("process_group_ranks", STR, "JSON", "`args.Process Group Ranks` as JSON text."),
        _col("sync_kind", STR, "", "`args.cuda_sync_kind` of a sync event: Event Sync, Stream Sync, Stream Wait Event, Context Sync."),
        _col("wait_on_stream", I64, "", "`args.wait_on_stream` of a sync event (-1 or null: not known)."),
        _col("wait_on_event_correlation", I64, "", "`args.wait_on_cuda_event_record_corr_id`: correlation of the cudaEventRecord waited on."),
        ARGS,
    ),
)

INSTANTS = Table(
    "instants",
    "One row per instant (`ph: i` / `I`) event: CPU instant events, iteration markers, memory events.",
    ("rank", "id"),
    (RANK, ID, _col("cat", STR, "", "Category as written."), _col("name", STR, "", "Event name."), PID, TID, TS,
     _col("scope", STR, "", "Instant scope `s` (g, p or t)."), ARGS),
)

FLOWS = Table(
    "flows",
    "One row per flow endpoint (`ph: s`, `f`, `t`): `ac2g` (CPU launch → GPU), `fwdbwd` (forward → backward), "
    "legacy `async`. Endpoints with the same (rank, cat, flow_id) form one flow.",
    ("rank", "id"),
    (RANK, ID, _col("flow_id", I64, "", "Flow `id` (for ac2g, the correlation)."),
     _col("phase", STR, "", "s (start), t (step) or f (finish)."), _col("cat", STR, "", "Category as written."),
     _col("name", STR, "", "Flow name."), PID, TID, TS,
     _col("binding_point", STR, "", "`bp`: e binds to the enclosing slice."), ARGS),
)

THREADS = Table(
    "threads",
    "One row per (rank, pid, tid) named by `ph: M` metadata (`thread_name`, `thread_sort_index`).",
    ("rank", "pid", "tid"),
    (RANK, PID, TID, _col("thread_name", STR, "", "`thread_name` metadata."),
     _col("sort_index", I64, "", "`thread_sort_index` metadata."),
     _col("source_entries", I32, "entries", "How many `traceEvents` entries this row was built from.")),
)

PROCESSES = Table(
    "processes",
    "One row per (rank, pid) described by `ph: M` metadata (`process_name`, `process_labels`, `process_sort_index`).",
    ("rank", "pid"),
    (RANK, PID, _col("process_name", STR, "", "`process_name` metadata."),
     _col("labels", STR, "", "`process_labels` metadata."), _col("sort_index", I64, "", "`process_sort_index` metadata."),
     _col("source_entries", I32, "entries", "How many `traceEvents` entries this row was built from.")),
)

RANKS = Table(
    "ranks",
    "One row per rank: where it came from and what the trace says about the job and the device.",
    ("rank",),
    (
        RANK,
        _col("source_file", STR, "", "Path of the trace file the rank was read from."),
        _col("rank_source", STR, "", "Where the rank number came from: option, distributedInfo, event_args, file_name, file_order."),
        _col("world_size", I32, "ranks", "`distributedInfo.world_size`."),
        _col("backend", STR, "", "`distributedInfo.backend` (nccl, gloo, ...)."),
        _col("pg_config", STR, "JSON", "`distributedInfo.pg_config`: process groups."),
        _col("device_name", STR, "", "Name of the GPU the rank's kernels ran on (from `deviceProperties`); for an "
             "accelerator that is not a GPU, the label of its process (`MTIA 17`)."),
        _col("device_properties", STR, "JSON", "`deviceProperties` as JSON text."),
        _col("base_time_ns", I64, "ns", "`baseTimeNanoseconds` (0 when the trace uses absolute timestamps)."),
        _col("schema_version", STR, "", "`schemaVersion`."),
        _col("trace_metadata", STR, "JSON", "Every other top-level key of the trace file, as one JSON object."),
        _col("trace_entries", I64, "entries", "Length of the file's `traceEvents` list (all ranks of a merged file); "
             "for a cut file, the complete entries plus the one the cut fell in."),
    ),
)

DIAGNOSTICS = Table(
    "diagnostics",
    "What tracekit could not use or had to resolve, and why. An input entry that became no row anywhere has "
    "`dropped = true`; `raw` keeps it.",
    ("rank", "source_file", "position"),
    (
        _col("rank", I32, "", "Rank concerned (null when not known)."),
        _col("source_file", STR, "", "File concerned."),
        _col("position", I64, "", "Position in `traceEvents` (null for file-level notes); equals `events.id` for events."),
        _col("stage", STR, "", "Stage that wrote the note: ingest, edges, et, capture (graph replays matched to a "
             "capture, `graph_kernels`); export for the notes a Chakra "
             "export returns (`write_chakra(...).diagnostics`, reason chakra_fallback: one per fallback a node "
             "rests on)."),
        _col("reason", STR, "", "Short machine-readable reason (e.g. unknown_phase, bad_timestamp, bad_duration, "
             "duplicate_entry, truncated, no_launcher; README, Damaged and unusual traces)."),
        _col("detail", STR, "", "Human-readable explanation."),
        _col("dropped", BOOL, "", "True when the entry became no row in any table."),
        _col("raw", STR, "JSON", "The entry as JSON text, when it was dropped."),
    ),
)

EDGES = Table(
    "edges",
    "The dependency graph over `events` (and, for et_* kinds, `et_nodes`). `src` and `dst` are ids within the same rank.",
    ("rank", "src", "dst", "kind"),
    (
        RANK,
        _col("src", I64, "", "Source id (`events.id`; `et_nodes.id` for et_ctrl / et_data)."),
        _col("dst", I64, "", "Destination id (`events.id`; `et_nodes.id` for et_ctrl / et_data)."),
        _col("kind", STR, "", "nest, launch, stream, sync, sync_inferred, stream_wait_inferred, "
             "thread_wait_inferred, flow, et_ctrl, et_data (see `EDGE_KINDS`)."),
        _col("subkind", STR, "", "Refinement: for sync the sync kind (`(record inferred)` appended where the "
             "cuda_sync event named no event record and it was taken by thread order); for sync_inferred the class "
             "of blocking call "
             "(stream_sync, device_sync, event_sync, memcpy, memset, launch_queue, allocator); for "
             "stream_wait_inferred `cross_stream`; for thread_wait_inferred the points joined (start_start, "
             "start_end, end_start, end_end: src's point, then dst's); for launch `graph` when one call ran many "
             "kernels."),
        _col("lag", I64, "ns", "dst.ts − src end for launch/stream/sync/flow edges (launch delay, stream gap, wait; "
             "negative when a waiting call started before the awaited op ended); for thread_wait_inferred dst's "
             "point − src's point (subkind)."),
    ),
)

ET_NODES = Table(
    "et_nodes",
    "One row per Execution Trace node (an op or record_function range recorded by ExecutionTraceObserver), "
    "schemas 1.0.1 (flat) through 1.1.x-chakra (`attrs` list), read into the same columns.",
    ("rank", "id"),
    (
        RANK,
        _col("id", I64, "", "ET node id (handed out as ops start, so id order is start order)."),
        _col("parent", I64, "", "Parent node id (`parent`, or `ctrl_deps` in 1.1.x); the root names itself."),
        _col("name", STR, "", "Op name."),
        _col("op_schema", STR, "", "Op schema string, where recorded (empty for record_function ranges)."),
        _col("rf_id", I64, "", "Record function id, where recorded; links to `events.record_function_id` where "
             "Kineto recorded that too (PyTorch ≥ 2.1)."),
        _col("pid", STR, "", "Process id (the file's top-level `pid`)."),
        _col("tid", I64, "", "Thread as recorded by the ET (`tid` attribute: a small index, not the OS thread id)."),
        _col("seq_id", I64, "", "Autograd sequence id (-1 when none)."),
        _col("fw_parent", I64, "", "Forward parent node id for backward ops."),
        _col("event_id", I64, "", "Linked Kineto event (`events.id` of a cpu_op or user_annotation), null if unlinked."),
        _col("link_method", STR, "", "How it linked: rf_id (record function id), name_order (n-th node of that name "
             "on the ET thread ↔ n-th op of that name on the matching Kineto thread), or null."),
        _col("inputs", STR, "JSON", "Inputs as one JSON object {values, shapes, types[, strides]} (1.0.1's parallel "
             "`inputs` / `input_shapes` / `input_types` lists are put in this form)."),
        _col("outputs", STR, "JSON", "Outputs, in the same form as `inputs`."),
        _col("attrs", STR, "JSON", "Every other attribute (scope, fw_tid, kernel_backend, unknown keys...) as one "
             "JSON object {name: value}."),
    ),
)

ET_TENSORS = Table(
    "et_tensors",
    "One row per tensor among an ET node's inputs or outputs (tensors inside lists included): the tensor uses "
    "that data dependencies (`et_data` edges) are built from.",
    ("rank", "node", "direction", "position", "element"),
    (
        RANK,
        _col("node", I64, "", "ET node id."),
        _col("direction", STR, "", "input or output."),
        _col("position", I32, "", "Index in the node's inputs or outputs."),
        _col("element", I32, "", "Index of the tensor within a list argument (depth-first), null for a tensor argument."),
        _col("tensor_id", I64, "", "Tensor id (unique id of the tensor object)."),
        _col("storage_id", I64, "", "Storage id (0: undefined tensor without storage)."),
        _col("offset", I64, "elements", "Storage offset."),
        _col("numel", I64, "elements", "Number of elements."),
        _col("elem_bytes", I64, "bytes", "Bytes per element."),
        _col("device", STR, "", "Device string (cpu, cuda:0...)."),
        _col("shape", STR, "JSON", "Shape as JSON text."),
        _col("strides", STR, "JSON", "Strides as JSON text (schema 1.1.x; null before)."),
        _col("dtype", STR, "", "Element type from the ET type string, e.g. float for `Tensor(float)`."),
    ),
)

GRAPH_KERNELS = Table(
    "graph_kernels",
    "One row per GPU op a CUDA/HIP graph launch replayed that matched a launch of the graph's capture "
    "(`--graph-capture FILE`, `tracekit.load(graph_captures=...)`; docs/categories.md, Graph replays): the op, "
    "shapes and module stack the capture trace recorded around that launch call. A replayed GPU op no captured "
    "launch matched has a `graph_capture_*` row in `diagnostics` instead (stage capture). Empty without a capture.",
    ("rank", "id"),
    (
        RANK,
        _col("id", I64, "", "`events.id` of the replayed GPU op (kernel, memcpy, memset)."),
        _col("launch", I64, "", "`events.id` of the graph launch call (cudaGraphLaunch, hipGraphLaunch) that replayed it."),
        _col("capture_file", STR, "", "The capture trace the matched launch is in."),
        _col("graph", I32, "", "The captured graph within capture_file: its capture region (cudaStreamBeginCapture .. "
             "EndCapture on one thread), numbered from 1 in start order."),
        _col("position", I32, "", "Index of the matched launch call among its graph's launch calls, from 0, in call order."),
        _col("captured_kernel", STR, "", "Kernel name the captured launch call recorded (`args.kernel`, as HIP "
             "writes it); null where the call names none (CUDA's do not) or it is a memcpy or memset."),
        _col("match", STR, "", "How the replayed op was paired: name (the n-th GPU op of that kernel name in the "
             "launch ↔ the graph's n-th launch of it) or position (the capture names no kernels: the n-th GPU op of "
             "the launch in start order ↔ the graph's n-th launch call, kinds agreeing, where the launch ran on one "
             "stream) or category (no kernel names and several streams: the n-th GPU op of a kernel_category ↔ the "
             "graph's n-th launch under an op of that op_category)."),
        _col("graphs_fitting", I32, "", "How many captured graphs fit the launch equally well (1: no doubt; more: "
             "the earliest one was taken, and its shapes may be another's; a graph_capture_ambiguous note says so)."),
        _col("owner_kind", STR, "", "What enclosed the captured launch call: op (a cpu_op), annotation or "
             "python_frame (outside every op, as for ownership without a capture), none."),
        _col("op_call", I64, "", "`events.id` in the capture trace of the owner (one call of it: a launch replays "
             "each captured call once)."),
        _col("op_name", STR, "", "The owner's name (the innermost cpu_op enclosing the launch call, else the "
             "annotation or Python frame)."),
        _col("input_dims", STR, "JSON", "The owner's `Input Dims` in the capture."),
        _col("input_type", STR, "JSON", "The owner's `Input type` in the capture."),
        _col("module", STR, "", "The innermost `nn.Module: ...` Python frame enclosing the launch call (with_stack / "
             "with_modules captures), null when none."),
        _col("module_stack", STR, "JSON", "Every `nn.Module: ...` frame enclosing the launch call, outermost first."),
    ),
)

TABLES: dict[str, Table] = {t.name: t for t in (EVENTS, INSTANTS, FLOWS, THREADS, PROCESSES, RANKS, DIAGNOSTICS, EDGES, ET_NODES, ET_TENSORS,
                                                GRAPH_KERNELS)}

# Tables whose rows are built one-for-one (or by `source_entries`) from `traceEvents` entries.
TRACE_ENTRY_TABLES = ("events", "instants", "flows", "threads", "processes")

KINDS = {
    "cpu_op": "An operator (aten::, user ops). Legacy category `Operator`.",
    "user_annotation": "A `record_function` range, e.g. ProfilerStep#N.",
    "python_function": "A Python function frame (with_stack).",
    "runtime": "A CUDA/HIP/MTIA runtime call on the host (cudaLaunchKernel, hipMemcpyAsync...). Legacy `Runtime`.",
    "driver": "A CUDA driver API call (cuLaunchKernel...).",
    "kernel": "A GPU kernel. Legacy `Kernel`; MTIA `mtia_ccp_events`.",
    "memcpy": "A GPU memory copy. Legacy `Memcpy`.",
    "memset": "A GPU memory set. Legacy `Memset`.",
    "gpu_annotation": "A user annotation projected on the GPU timeline.",
    "sync": "A CUDA synchronisation event (`cuda_sync`, recorded with enable_cuda_sync_events).",
    "trace": "The profiler's own span (category `Trace`).",
    "overhead": "Profiler overhead spans.",
    "other": "A category tracekit does not know; `cat` keeps it.",
}

GPU_KINDS = ("kernel", "memcpy", "memset")

EDGE_KINDS = {
    "nest": "Parent → child event on one thread, by time containment.",
    "launch": "Runtime/driver call → the GPU op it launched (same correlation).",
    "stream": "GPU op → the next GPU op on its (device, stream).",
    "sync": "Recorded by a `cuda_sync` event: the GPU op waited for → the host call that waited (Event, Stream, "
            "Context Sync) or the next GPU op on the waiting stream (Stream Wait Event).",
    "sync_inferred": "Inferred where no `cuda_sync` event covers the call: the GPU op waited for → the blocking host "
                     "call that waited (it returned at most 25 µs after the op, which ended inside it); subkind the "
                     "class of call. Recorded sync edges take precedence (docs/critical_path.md).",
    "stream_wait_inferred": "Inferred: a GPU op on another stream → a GPU op that started just after it ended (at "
                            "most 25 µs), over 25 µs after its own stream and launch released it (an unrecorded "
                            "cross-stream event wait; docs/critical_path.md).",
    "thread_wait_inferred": "Inferred: an event's start or end on one host thread → the cpu_op, annotation or Python "
                            "function on another thread of the rank that started or ended (subkind) at most "
                            "min(1 ms, gap/10) after it, its thread idle ≥ 1 ms (gap) until then: autograd "
                            "hand-over and return, data-loader hand-over (docs/critical_path.md).",
    "flow": "Forward op → backward op, from `fwdbwd` flow endpoints.",
    "et_ctrl": "Execution Trace parent → child node.",
    "et_data": "Execution Trace node that wrote a tensor → a node that read it.",
}


# The version of these tables as written to a Parquet dataset (`tracekit ingest`): readers elsewhere rely on it.
# Any change to a table or column name or type must add a version here with the new fingerprint (a test checks),
# and datasets written under another version are refused with a message saying to ingest again.
# Version 2 added `graph_kernels`; a version-1 dataset holds every other table unchanged and is read with it empty.
SCHEMA_VERSION = 2
FINGERPRINTS = {1: "4778422c53bf", 2: "925863ee2694"}
READABLE_VERSIONS = (1, 2)


def fingerprint() -> str:
    """A short hash of every table's column names and types, in order."""
    text = "\n".join(f"{t.name}.{c.name}:{c.type}" for t in TABLES.values() for c in t.columns)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def empty(table: str) -> pa.Table:
    return TABLES[table].arrow_schema.empty_table()


def conform(table: str, data: pa.Table) -> pa.Table:
    """Cast `data` to the table's schema, in column order (columns it lacks become nulls)."""
    schema = TABLES[table].arrow_schema
    n = data.num_rows
    arrays = [
        data.column(f.name).cast(f.type) if f.name in data.column_names else pa.nulls(n, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def markdown() -> str:
    """The schema document (docs/schema.md)."""
    lines = [
        "# tracekit tables",
        "",
        "Generated from `tracekit/schema.py` by `tracekit schema`; a test keeps the two in step.",
        "Timestamps and durations are int64 nanoseconds. Every table carries `rank`, and every key includes it.",
        "",
    ]
    for t in TABLES.values():
        lines += [f"## `{t.name}`", "", t.doc, "", f"Key: ({', '.join(t.key)})", "",
                  "| column | type | unit | meaning |", "|---|---|---|---|"]
        lines += [f"| `{c.name}` | {c.type} | {c.unit} | {c.doc} |" for c in t.columns]
        lines.append("")
    lines += ["## Event kinds", "", "| kind | meaning |", "|---|---|"]
    lines += [f"| `{k}` | {v} |" for k, v in KINDS.items()]
    lines += ["", "## Edge kinds", "", "| kind | meaning |", "|---|---|"]
    lines += [f"| `{k}` | {v} |" for k, v in EDGE_KINDS.items()]
    lines.append("")
    return "\n".join(lines)
