"""Ranks and metadata: the rank of a file (`file_rank`), its tables with ranks applied (`rank_tables`), the
`threads` and `processes` tables from metadata entries, and the `ranks` table from the file's top-level keys
(baseTimeNanoseconds, distributedInfo, deviceProperties).

Reading a file needs no other file: ranks are applied afterwards, since a rank can depend on the whole file, so
files can be read in worker processes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit import schema, storage
from tracekit.read.columns import ARGS_TYPE, INT64_MAX, METADATA_KEYS, RANK_LIMIT, TraceParts
from tracekit.storage import Location

RANK_FILE_PATTERN = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
_ANY = msgspec.json.Decoder()


def top_json(parts: TraceParts, key: str) -> str | None:
    raw = parts.top.get(key)
    return raw.decode(errors="replace") if raw is not None else None


def top_value(parts: TraceParts, key: str):
    raw = parts.top.get(key)
    if raw is None:
        return None
    try:
        return _ANY.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        return None


BASE_TIME_LIMIT = 2**62


def base_time_ns(parts: TraceParts) -> int:
    """`baseTimeNanoseconds`, or 0 when absent (or not an integer within ±2^62, which no clock gives)."""
    base = top_value(parts, "baseTimeNanoseconds")
    return base if isinstance(base, int) and not isinstance(base, bool) and abs(base) <= BASE_TIME_LIMIT else 0


def file_rank(path: Location, parts: TraceParts, rank_option: int | None) -> tuple[int | None, str]:
    """The rank of a whole file (per-event `args.rank` may still override it in merged files)."""
    if rank_option is not None:
        return rank_option, "option"
    info = top_value(parts, "distributedInfo")
    if isinstance(info, dict) and is_rank(info.get("rank")):
        return info["rank"], "distributedInfo"
    match = RANK_FILE_PATTERN.search(storage.name(path))
    if match:
        return int(match.group(1)), "file_name"
    return None, "file_order"


def is_rank(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < RANK_LIMIT


@dataclass(frozen=True)
class FileTables:
    """What one file contributes (one or several ranks)."""

    tables: dict[str, pa.Table]
    entry_count: int


def rank_tables(parts: TraceParts, rank: int, rank_source: str) -> FileTables:
    """The file's tables with ranks: `args.rank` (files merged by TraceFuse), else the rank of the entry's pid, else
    the file's rank."""
    entries = parts.entries
    source = str(parts.path)
    with_ranks = entries.events.filter(pc.is_valid(entries.events.column("args_rank")))
    ranked_pids = pc.unique(with_ranks.column("pid"))  # in the order first seen, null included
    codes = pc.index_in(with_ranks.column("pid"), value_set=ranked_pids).to_numpy()
    first_row = np.unique(codes, return_index=True)[1]
    pid_rank = with_ranks.column("args_rank").take(pa.array(first_row)).cast(pa.int32())  # each pid's first

    def rank_of_pid(table: pa.Table) -> pa.Array:
        if not len(ranked_pids):
            return pa.array(np.full(table.num_rows, rank, dtype=np.int32))
        ranks = pid_rank.take(pc.index_in(table.column("pid"), value_set=ranked_pids))
        return pc.fill_null(ranks, pa.scalar(rank, pa.int32()))

    def with_rank(table: pa.Table, name: str) -> pa.Table:
        ranks = rank_of_pid(table)
        if "args_rank" in table.column_names:
            ranks = pc.coalesce(table.column("args_rank").cast(pa.int32()), ranks)
        table = table.append_column("rank", ranks)
        return schema.conform(name, table) if name else table

    base_ns = base_time_ns(parts)

    def shifted(table: pa.Table) -> pa.Table:
        if not base_ns:
            return table
        return table.set_column(table.column_names.index("ts"), "ts", pc.add(table.column("ts"), base_ns))

    events = with_rank(shifted(entries.events), "events")
    notes = entries.notes.sort_by([("group", "ascending"), ("position", "ascending")])
    notes = with_rank(notes, "").append_column("source_file", pa.repeat(pa.scalar(source), notes.num_rows)) \
        .append_column("stage", pa.repeat(pa.scalar("ingest"), notes.num_rows))
    threads, processes, problems = _metadata_tables(with_rank(entries.metadata, ""))
    if problems:
        entry, ranks, pids, details = zip(*problems)
        notes = pa.concat_tables([notes, pa.table({
            "group": pa.repeat(pa.scalar(ARGS_TYPE, pa.int8()), len(problems)), "position": pa.array(entry, pa.int64()),
            "pid": pa.array(pids, pa.string()), "args_rank": pa.nulls(len(problems), pa.int64()),
            "reason": pa.repeat(pa.scalar("args_type"), len(problems)), "detail": pa.array(details, pa.string()),
            "dropped": pa.repeat(pa.scalar(False), len(problems)), "raw": pa.nulls(len(problems), pa.string()),
            "rank": pa.array(ranks, pa.int32()), "source_file": pa.repeat(pa.scalar(source), len(problems)),
            "stage": pa.repeat(pa.scalar("ingest"), len(problems))}, schema=notes.schema)])
    tables = {
        "events": events,
        "instants": with_rank(shifted(entries.instants), "instants"),
        "flows": with_rank(shifted(entries.flows), "flows"),
        "threads": threads,
        "processes": processes,
        "diagnostics": schema.conform("diagnostics", notes),
        "ranks": _ranks_table(parts, source, rank, rank_source, entries.entry_count, events, processes),
    }
    return FileTables(tables, entries.entry_count)


_METADATA_ARGS = msgspec.json.Decoder(dict[str, msgspec.Raw])
_INT64 = msgspec.json.Decoder(int)
_STR = msgspec.json.Decoder(str)


def _metadata_tables(meta: pa.Table) -> tuple[pa.Table, pa.Table, list[tuple[int, int, str, str]]]:
    """`ph: M` entries tracekit keeps → threads and processes (one row per thread / process), and problems with
    their values: (entry, rank, pid, detail). A name that is not a string is kept as its JSON text; a sort index
    that is not an integer becomes null."""
    records = {"threads": {}, "processes": {}}
    problems = []
    for entry, name, r, pid, tid, args in zip(*(meta.column(c).to_pylist()
                                                 for c in ("id", "name", "rank", "pid", "tid", "args"))):
        table, column, key = METADATA_KEYS[name]
        value, problem = _metadata_value(args, key, integer=column == "sort_index")
        if problem:
            problems.append((entry, r, pid, f"{name}: {problem}; left null"))
        row_key = (r, pid, tid) if table == "threads" else (r, pid)
        row = records[table].setdefault(row_key, dict(zip(schema.TABLES[table].key, row_key), source_entries=0))
        row[column] = value
        row["source_entries"] += 1
    threads, processes = (
        pa.Table.from_pylist(list(records[t].values()), schema=schema.TABLES[t].arrow_schema)
        for t in ("threads", "processes")
    )
    return threads, processes, problems


def _metadata_value(args: str | None, key: str, integer: bool) -> tuple[str | int | None, str | None]:
    """A metadata entry's args[key] as the column wants it, or (None, the problem)."""
    try:
        raw = _METADATA_ARGS.decode(args).get(key) if args else None
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None, "args is not a JSON object"
    if raw is None:
        return None, None
    if not integer:
        try:
            return _STR.decode(raw), None
        except msgspec.ValidationError:
            return bytes(raw).decode(), None  # not a string: its JSON text
    try:
        value = _INT64.decode(raw)
    except msgspec.ValidationError:
        return None, f"args.{key} {bytes(raw).decode()[:40]} is not an integer"
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        return None, f"args.{key} {value} is beyond the int64 range"
    return value, None


TOP_LEVEL_COLUMNS = ("traceEvents", "deviceProperties", "distributedInfo", "baseTimeNanoseconds", "schemaVersion")


def _ranks_table(parts: TraceParts, source: str, rank: int, rank_source: str, n: int, events: pa.Table,
                 processes: pa.Table) -> pa.Table:
    info = top_value(parts, "distributedInfo")
    info = info if isinstance(info, dict) else {}
    devices = top_value(parts, "deviceProperties")
    rest = [(k, v) for k, v in parts.top.items() if k not in TOP_LEVEL_COLUMNS]
    metadata = "{" + ",".join(msgspec.json.encode(k).decode() + ":" + v.decode() for k, v in rest) + "}"
    gpu = events.select(["rank", "device", "pid"]).filter(pc.is_in(events.column("kind"), pa.array(schema.GPU_KINDS)))
    labels = _accelerator_labels(processes)
    # null first; no events: the file's rank
    ranks = sorted(pc.unique(events.column("rank")).to_pylist(), key=lambda r: (r is not None, r)) or [rank]
    rows = []
    for r in ranks:
        on_rank = gpu.filter(pc.is_null(gpu.column("rank")) if r is None else pc.equal(gpu.column("rank"), r))
        used = most_common(on_rank.column("device"))
        pids = most_common(on_rank.column("pid"))
        rows.append(dict(
            rank=r, source_file=source, rank_source="event_args" if len(ranks) > 1 else rank_source,
            world_size=info.get("world_size") if is_rank(info.get("world_size")) else None,
            backend=info.get("backend") if isinstance(info.get("backend"), str) else None,
            pg_config=msgspec.json.encode(info["pg_config"]).decode() if "pg_config" in info else None,
            device_name=_device_name(devices, used[0] if used else None)
            or (labels.get((r, pids[0])) if pids else None),
            device_properties=top_json(parts, "deviceProperties"),
            base_time_ns=base_time_ns(parts),
            schema_version=str(v) if (v := top_value(parts, "schemaVersion")) is not None else None,
            trace_metadata=metadata, trace_entries=n,
        ))
    return pa.Table.from_pylist(rows, schema=schema.RANKS.arrow_schema)


def most_common(values: pa.ChunkedArray) -> list:
    """The values (nulls aside) seen most often, in ascending order."""
    counts = pc.value_counts(values.drop_null())
    if not len(counts):
        return []
    top = pc.max(counts.field("counts"))
    return sorted(counts.field("values").filter(pc.equal(counts.field("counts"), top)).to_pylist())


def _accelerator_labels(processes: pa.Table) -> dict[tuple[int, str], str]:
    """(rank, pid) → the label (else name) of a process that is an accelerator other than a GPU ("MTIA 17"): the
    device's name where the trace has no deviceProperties. Kineto labels GPU processes "GPU N", which names no
    model: those give none."""
    out = {}
    for row in processes.select(["rank", "pid", "process_name", "labels"]).to_pylist():
        label = row["labels"] or row["process_name"]
        if label and re.match(r"(MTIA|TPU|HPU|NPU|XPU)\b", label):
            out[(row["rank"], row["pid"])] = label
    return out


# Keys under which traces record the PyTorch version (top level, or nested in the trace's metadata objects).
VERSION_KEYS = ("pytorch_version", "torch_version", "PyTorch version", "pytorch version")


def pytorch_version(metadata: str | None) -> str | None:
    """The first VERSION_KEYS value in a `ranks.trace_metadata` JSON text (breadth first); None when it has none."""
    try:
        queue = [msgspec.json.decode(metadata)] if metadata else []
    except msgspec.DecodeError:
        return None
    while queue:
        node = queue.pop(0)
        if isinstance(node, dict):
            for key in VERSION_KEYS:
                if isinstance(node.get(key), (str, int, float)) and not isinstance(node.get(key), bool):
                    return str(node[key])
            queue += [v for v in node.values() if isinstance(v, (dict, list))]
        elif isinstance(node, list):
            queue += [v for v in node if isinstance(v, (dict, list))]
    return None


def _device_name(devices, device: int | None) -> str | None:
    if not isinstance(devices, list):
        return None
    named = [d for d in devices if isinstance(d, dict) and isinstance(d.get("name"), str)]
    for d in named:
        if device is not None and d.get("id") == device:
            return d["name"]
    return named[0]["name"] if named else None
