"""Kineto trace files → Arrow tables.

Speed comes from msgspec: entries decode into typed Structs with `args`, `ts`
and `dur` kept as raw JSON text, so the arguments stay byte-exact and
timestamps are parsed from their decimal text without float rounding.
Every entry of `traceEvents` ends up as a row of some table or as a
diagnostic with `dropped = true` (the nothing-lost invariant).
"""

from __future__ import annotations

import gzip
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import msgspec
import numpy as np
import polars as pl
import pyarrow as pa

from . import schema
from .errors import InputError

# --------------------------------------------------------------------------- decoding


class Entry(msgspec.Struct):
    """One `traceEvents` entry, decoded only as far as tables need."""

    ph: str | None = None
    cat: str | None = None
    name: str | None = None
    pid: int | str | None = None
    tid: int | str | None = None
    ts: msgspec.Raw = msgspec.Raw(b"")
    dur: msgspec.Raw = msgspec.Raw(b"")
    id: int | str | None = None
    bp: str | None = None
    s: str | None = None
    args: msgspec.Raw = msgspec.Raw(b"")


def _f(json_name: str):
    return msgspec.field(name=json_name, default=None)


class Args(msgspec.Struct):
    """The `args` keys that become typed columns of `events` (legacy spellings included)."""

    device: int | None = None
    stream: int | None = None
    correlation: int | None = None
    external_id: int | None = _f("External id")
    external_id_legacy: int | None = _f("external id")
    record_function_id: int | None = _f("Record function id")
    sequence_number: int | None = _f("Sequence number")
    fwd_thread_id: int | None = _f("Fwd thread id")
    input_dims: msgspec.Raw = _f("Input Dims")
    input_dims_legacy: msgspec.Raw = _f("Input dims")
    input_type: msgspec.Raw = _f("Input type")
    input_strides: msgspec.Raw = _f("Input Strides")
    concrete_inputs: msgspec.Raw = _f("Concrete Inputs")
    grid: list[int] | None = None
    block: list[int] | None = None
    bytes: int | None = None
    collective_name: str | None = _f("Collective name")
    in_msg_nelems: int | None = _f("In msg nelems")
    out_msg_nelems: int | None = _f("Out msg nelems")
    dtype: str | None = None
    group_size: int | None = _f("Group size")
    process_group_name: str | None = _f("Process Group Name")
    process_group_desc: str | None = _f("Process Group Description")
    process_group_ranks: msgspec.Raw = _f("Process Group Ranks")
    sync_kind: str | None = _f("cuda_sync_kind")
    wait_on_stream: int | None = None
    wait_on_event_correlation: int | None = _f("wait_on_cuda_event_record_corr_id")
    rank: int | None = None


ARGS_FIELDS = Args.__struct_fields__
ARG_TYPES = {f.name: pa.string() if str in get_args(f.type) else pa.list_(pa.int64()) if f.name in ("grid", "block")
             else pa.int64() for f in msgspec.structs.fields(Args)}
RAW_ARGS_FIELDS = {"input_dims", "input_dims_legacy", "input_type", "input_strides", "concrete_inputs", "process_group_ranks"}
_ENTRIES = msgspec.json.Decoder(list[Entry])
_ARGS_LIST = msgspec.json.Decoder(list[Args | None], strict=False)
_ARGS_ONE = msgspec.json.Decoder(Args | None, strict=False)
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_TOP = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY = msgspec.json.Decoder()

CATEGORY_KINDS = {
    "cpu_op": "cpu_op", "operator": "cpu_op",
    "user_annotation": "user_annotation",
    "python_function": "python_function",
    "cuda_runtime": "runtime", "runtime": "runtime", "hip_runtime": "runtime", "mtia_runtime": "runtime",
    "cuda_driver": "driver", "driver": "driver", "hip_driver": "driver",
    "kernel": "kernel", "mtia_ccp_events": "kernel",
    "gpu_memcpy": "memcpy", "memcpy": "memcpy",
    "gpu_memset": "memset", "memset": "memset",
    "gpu_user_annotation": "gpu_annotation",
    "cuda_sync": "sync",
    "trace": "trace",
    "overhead": "overhead",
}

RANK_FILE_PATTERN = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


def read_bytes(path: Path) -> bytes:
    """The file's JSON bytes, gunzipped when it is gzip (by magic number, not by name)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory") from None
    except PermissionError:
        raise InputError(f"{path}: permission denied") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:
            raise InputError(f"{path}: corrupt gzip data ({exc})") from None
    return data


@dataclass(frozen=True)
class ParsedFile:
    """A trace file split into its parts, nothing interpreted yet."""

    path: Path
    top: dict[str, msgspec.Raw]  # top-level keys other than traceEvents (empty for bare-list files)
    entries: bytes | msgspec.Raw  # the traceEvents JSON array (the `nodes` array of an Execution Trace)
    is_execution_trace: bool = False


def parse_file(path: Path) -> ParsedFile:
    data = read_bytes(path)
    start = data[:64].lstrip()[:1]
    try:
        if start == b"[":
            return ParsedFile(path, {}, data)
        top = _TOP.decode(data)
    except msgspec.ValidationError:
        raise InputError(f"{path}: JSON but not a trace (top level is neither an object nor a list)") from None
    except msgspec.DecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    if "traceEvents" not in top:
        if "nodes" in top and "schema" in top:
            return ParsedFile(path, {k: v for k, v in top.items() if k != "nodes"}, top["nodes"], True)
        raise InputError(f"{path}: JSON but not a Kineto trace (no traceEvents)")
    return ParsedFile(path, {k: v for k, v in top.items() if k != "traceEvents"}, top["traceEvents"])


def decode_entries(parsed: ParsedFile) -> tuple[list[Entry | None], list[bytes] | None]:
    """Decode every entry; an entry that is not an object becomes None (its raw text is returned)."""
    try:
        return _ENTRIES.decode(parsed.entries), None
    except msgspec.ValidationError:
        pass
    except msgspec.DecodeError as exc:
        raise InputError(f"{parsed.path}: not valid JSON ({exc})") from None
    try:
        raws = _RAW_LIST.decode(parsed.entries)
    except msgspec.ValidationError:
        raise InputError(f"{parsed.path}: traceEvents is not a list") from None
    one = msgspec.json.Decoder(Entry)
    entries: list[Entry | None] = []
    for raw in raws:
        try:
            entries.append(one.decode(raw))
        except msgspec.ValidationError:
            entries.append(_lenient_entry(raw))
    return entries, [bytes(r) for r in raws]


def _lenient_entry(raw: msgspec.Raw) -> Entry | None:
    """An entry whose fields have unexpected types: coerce what can be coerced."""
    value = _ANY.decode(raw)
    if not isinstance(value, dict):
        return None

    def text(key):
        v = value.get(key)
        return None if v is None else v if isinstance(v, str) else msgspec.json.encode(v).decode()

    def raw_of(key):
        return msgspec.Raw(msgspec.json.encode(value[key])) if key in value else msgspec.Raw(b"")

    return Entry(
        ph=text("ph"), cat=text("cat"), name=text("name"), pid=text("pid"), tid=text("tid"),
        ts=raw_of("ts"), dur=raw_of("dur"), id=text("id"), bp=text("bp"), s=text("s"), args=raw_of("args"),
    )


def decode_args(raws: list[msgspec.Raw]) -> tuple[list[Args], list[tuple[int, str]]]:
    """Typed args for each raw args text; returns (args, [(row, problem)]) for fields that did not fit."""
    blob = b"[" + b",".join(bytes(r) if len(r) else b"null" for r in raws) + b"]"
    empty = Args()
    try:
        return [a or empty for a in _ARGS_LIST.decode(blob)], []
    except (msgspec.ValidationError, msgspec.DecodeError):
        pass
    out, problems = [], []
    for row, raw in enumerate(raws):
        if not len(raw):
            out.append(empty)
            continue
        try:
            out.append(_ARGS_ONE.decode(raw) or empty)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            out.append(_lenient_args(raw))
            problems.append((row, str(exc)))
    return out, problems


def _lenient_args(raw: msgspec.Raw) -> Args:
    value = _ANY.decode(raw)
    if not isinstance(value, dict):
        return Args()
    fields = {}
    for field in msgspec.structs.fields(Args):
        if field.encode_name not in value:
            continue
        v = value[field.encode_name]
        if field.name in RAW_ARGS_FIELDS:
            fields[field.name] = msgspec.Raw(msgspec.json.encode(v))
            continue
        try:
            fields[field.name] = msgspec.convert(v, field.type, strict=False)
        except msgspec.ValidationError:
            pass
    return Args(**fields)


# --------------------------------------------------------------------------- columns


def raw_text(values) -> pa.Array:
    """JSON texts (msgspec.Raw, bytes or None) → a string array, built from one buffer (empty → null)."""
    values = [b"" if v is None else v for v in values]
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    valid = np.packbits(lengths > 0, bitorder="little")
    data = b"".join(values)
    return pa.LargeStringArray.from_buffers(len(values), pa.py_buffer(offsets), pa.py_buffer(data),
                                            pa.py_buffer(valid)).cast(pa.string())


def id_text(values) -> pa.Array:
    """pid / tid values (int or text) → text, integers in decimal."""
    try:
        return pa.array(values, type=pa.int64()).cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return pa.array([None if v is None else v if isinstance(v, str) else str(v) for v in values], type=pa.string())


def exact_ns(text: pl.Expr) -> pl.Expr:
    """Decimal microseconds text → int64 nanoseconds, exactly (rounded half up past the ns digit).

    Plain decimals are parsed digit by digit; anything else (exponent notation) goes through float64.
    """
    negative = text.str.starts_with("-")
    parts = text.str.strip_prefix("-").str.split_exact(".", 1)
    whole = parts.struct.field("field_0").cast(pl.Int64, strict=False)
    frac = parts.struct.field("field_1").fill_null("").str.pad_end(4, "0").str.slice(0, 4)
    frac = pl.when(frac.str.contains(r"^\d{4}$")).then(frac.cast(pl.Int64, strict=False))
    ns = whole * 1000 + (frac + 5) // 10
    ns = pl.when(negative).then(-ns).otherwise(ns)
    return pl.coalesce(ns, (text.cast(pl.Float64, strict=False) * 1000).round(0).cast(pl.Int64, strict=False))


# --------------------------------------------------------------------------- one file → tables


@dataclass(frozen=True)
class FileTables:
    """What one file contributes (one or several ranks)."""

    tables: dict[str, pa.Table]
    entry_count: int


def _top_json(parsed: ParsedFile, key: str) -> str | None:
    raw = parsed.top.get(key)
    return bytes(raw).decode() if raw is not None else None


def _top_value(parsed: ParsedFile, key: str):
    raw = parsed.top.get(key)
    if raw is None:
        return None
    try:
        return _ANY.decode(raw)
    except msgspec.DecodeError:
        return None


def file_rank(path: Path, parsed: ParsedFile, rank_option: int | None) -> tuple[int | None, str]:
    """The rank of a whole file (per-event `args.rank` may still override it in merged files)."""
    if rank_option is not None:
        return rank_option, "option"
    info = _top_value(parsed, "distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return info["rank"], "distributedInfo"
    match = RANK_FILE_PATTERN.search(path.name)
    if match:
        return int(match.group(1)), "file_name"
    return None, "file_order"


ENTRY_FIELDS = Entry.__struct_fields__
PLACEHOLDER = Entry()


def entry_columns(entries: list[Entry | None], base_ns: int) -> pl.DataFrame:
    """Every entry as one row, transposed in C (astuple + zip); text kept for ts, dur, id and args."""
    rows = [PLACEHOLDER if e is None else e for e in entries]
    cols = dict(zip(ENTRY_FIELDS, zip(*map(msgspec.structs.astuple, rows)))) if rows else {f: () for f in ENTRY_FIELDS}
    table = pa.table({
        "id": pa.array(np.arange(len(rows), dtype=np.int64)),
        "ph": pa.array(cols["ph"], type=pa.string()),
        "cat": pa.array(cols["cat"], type=pa.string()),
        "name": pa.array(cols["name"], type=pa.string()),
        "pid": id_text(cols["pid"]),
        "tid": id_text(cols["tid"]),
        "ts_text": raw_text(cols["ts"]),
        "dur_text": raw_text(cols["dur"]),
        "flow_id_text": id_text(cols["id"]),
        "binding_point": pa.array(cols["bp"], type=pa.string()),
        "scope": pa.array(cols["s"], type=pa.string()),
        "args": raw_text(cols["args"]),
        "is_object": pa.array([e is not None for e in entries], type=pa.bool_()),
    })
    return pl.from_arrow(table).with_columns(
        ts=exact_ns(pl.col("ts_text")) + base_ns,
        dur=exact_ns(pl.col("dur_text")),
        flow_id=pl.col("flow_id_text").cast(pl.Int64, strict=False),
    )


def tables_from_file(path: Path, rank: int, rank_source: str, parsed: ParsedFile | None = None) -> FileTables:
    parsed = parsed or parse_file(path)
    entries, raws = decode_entries(parsed)
    n = len(entries)
    source = str(path)
    base_ns = _top_value(parsed, "baseTimeNanoseconds")
    base_ns = base_ns if isinstance(base_ns, int) else 0
    rows = entry_columns(entries, base_ns)
    ph = pl.col("ph")

    # Events (ph X), with typed args
    x = rows.filter(ph == "X")
    x_positions = x["id"].to_list()
    args, arg_problems = decode_args([entries[p].args for p in x_positions])
    arg_cols = dict(zip(ARGS_FIELDS, zip(*map(msgspec.structs.astuple, args)))) if args else {f: () for f in ARGS_FIELDS}
    typed = pa.table({f: (raw_text(arg_cols[f]) if f in RAW_ARGS_FIELDS else pa.array(arg_cols[f], type=ARG_TYPES[f]))
                      for f in ARGS_FIELDS})
    x = pl.concat([x, pl.from_arrow(typed)], how="horizontal")

    # Rank of each row: args.rank (files merged by TraceFuse), else the rank of its pid, else the file's rank.
    pid_rank = x.filter(pl.col("rank").is_not_null()).unique("pid", keep="first", maintain_order=True)
    pid_rank = dict(zip(pid_rank["pid"].to_list(), pid_rank["rank"].to_list()))
    rank_of_pid = (pl.col("pid").replace_strict(pid_rank, default=rank, return_dtype=pl.Int32) if pid_rank
                   else pl.lit(rank, dtype=pl.Int32))
    rows = rows.with_columns(rank=rank_of_pid)
    x = x.with_columns(rank=pl.col("rank").cast(pl.Int32).fill_null(rank_of_pid))

    events = x.with_columns(
        kind=pl.col("cat").str.to_lowercase().replace_strict(CATEGORY_KINDS, default="other", return_dtype=pl.String),
        external_id=pl.coalesce("external_id", "external_id_legacy"),
        input_dims=pl.coalesce("input_dims", "input_dims_legacy"),
    )
    instants = rows.filter(ph.is_in(["i", "I"]))
    flow_rows = rows.filter(ph.is_in(["s", "f", "t"]))
    flows = flow_rows.filter(pl.col("flow_id").is_not_null()).rename({"ph": "phase"})
    threads, processes, meta_dropped = _metadata_tables(rows.filter(ph == "M"))

    diag = [dict(rank=r, position=p, reason="args_type", dropped=False,
                 detail=f"an args field has an unexpected type and was left null: {problem}")
            for (row, problem), r in ((rp, events["rank"][rp[0]]) for rp in arg_problems)
            for p in [x_positions[row]]]
    diag += [dict(rank=r, position=p, reason="bad_timestamp", dropped=False,
                  detail="ts is missing or not a number; the event is kept with a null ts")
             for r, p in events.filter(pl.col("ts").is_null()).select("rank", "id").iter_rows()]
    dropped = pl.concat([
        flow_rows.filter(pl.col("flow_id").is_null()).select(
            "rank", "id", reason=pl.lit("bad_flow_id"), detail=pl.format("flow entry with non-integer id {}", "flow_id_text")),
        rows.filter(~pl.col("is_object")).select(
            "rank", "id", reason=pl.lit("not_an_object"), detail=pl.lit("traceEvents entry is not a JSON object")),
        rows.filter(pl.col("is_object") & ~ph.is_in(["X", "i", "I", "s", "f", "t", "M"]).fill_null(False)).select(
            "rank", "id", reason=pl.lit("unknown_phase"),
            detail=pl.format("phase {} is not one tracekit turns into rows", pl.col("ph").fill_null("(none)"))),
        meta_dropped,
    ]).sort("id")
    if dropped.height:
        raws = raws or [bytes(r) for r in _RAW_LIST.decode(parsed.entries)]
        diag += [dict(rank=r, position=p, reason=reason, detail=detail, dropped=True, raw=raws[p].decode(errors="replace"))
                 for r, p, reason, detail in dropped.iter_rows()]

    events_t = schema.conform("events", events.to_arrow())
    tables = {
        "events": events_t,
        "instants": schema.conform("instants", instants.to_arrow()),
        "flows": schema.conform("flows", flows.to_arrow()),
        "threads": threads,
        "processes": processes,
        "diagnostics": _diagnostics_table([dict(source_file=source, stage="ingest", **d) for d in diag]),
        "ranks": _ranks_table(parsed, source, rank_source, n, events_t),
    }
    return FileTables(tables, n)


METADATA_KEYS = {  # metadata entry name → (table, column, args key)
    "thread_name": ("threads", "thread_name", "name"),
    "thread_sort_index": ("threads", "sort_index", "sort_index"),
    "process_name": ("processes", "process_name", "name"),
    "process_labels": ("processes", "labels", "labels"),
    "process_sort_index": ("processes", "sort_index", "sort_index"),
}


def _metadata_tables(meta: pl.DataFrame) -> tuple[pa.Table, pa.Table, pl.DataFrame]:
    """`ph: M` rows → threads and processes (one row per thread / process), plus the rows neither takes."""
    known = meta.filter(pl.col("name").is_in(list(METADATA_KEYS)))
    values = [None if a is None else _ANY.decode(a) for a in known["args"].to_list()]
    records = {"threads": {}, "processes": {}}
    for (name, r, pid, tid), value in zip(known.select("name", "rank", "pid", "tid").iter_rows(), values):
        table, column, key = METADATA_KEYS[name]
        row_key = (r, pid, tid) if table == "threads" else (r, pid)
        row = records[table].setdefault(row_key, dict(zip(schema.TABLES[table].key, row_key), source_entries=0))
        row[column] = value.get(key) if isinstance(value, dict) else None
        row["source_entries"] += 1
    tables = [
        schema.conform(t, pa.Table.from_pylist(list(records[t].values()))) if records[t] else schema.empty(t)
        for t in ("threads", "processes")
    ]
    unknown = meta.filter(~pl.col("name").is_in(list(METADATA_KEYS)).fill_null(False)).select(
        "rank", "id", reason=pl.lit("unknown_metadata"),
        detail=pl.format("metadata {} is not one tracekit keeps", pl.col("name").fill_null("(none)")))
    return tables[0], tables[1], unknown


def _diagnostics_table(rows: list[dict]) -> pa.Table:
    if not rows:
        return schema.empty("diagnostics")
    return pa.Table.from_pylist(rows, schema=schema.DIAGNOSTICS.arrow_schema)


TOP_LEVEL_COLUMNS = ("traceEvents", "deviceProperties", "distributedInfo", "baseTimeNanoseconds", "schemaVersion")


def _ranks_table(parsed: ParsedFile, source: str, rank_source: str, n: int, events: pa.Table) -> pa.Table:
    info = _top_value(parsed, "distributedInfo")
    info = info if isinstance(info, dict) else {}
    devices = _top_value(parsed, "deviceProperties")
    base = _top_value(parsed, "baseTimeNanoseconds")
    rest = [(k, v) for k, v in parsed.top.items() if k not in TOP_LEVEL_COLUMNS]
    metadata = "{" + ",".join(msgspec.json.encode(k).decode() + ":" + bytes(v).decode() for k, v in rest) + "}"
    gpu = pl.from_arrow(events.select(["rank", "kind", "device"])).filter(
        pl.col("kind").is_in(list(schema.GPU_KINDS)) & pl.col("device").is_not_null())
    ranks = pl.from_arrow(events.column("rank")).unique().sort().to_list() or [None]
    rows = []
    for r in ranks:
        used = gpu.filter(pl.col("rank") == r)["device"].mode().sort().to_list()
        rows.append(dict(
            rank=r, source_file=source, rank_source="event_args" if len(ranks) > 1 else rank_source,
            world_size=info.get("world_size") if isinstance(info.get("world_size"), int) else None,
            backend=info.get("backend") if isinstance(info.get("backend"), str) else None,
            pg_config=msgspec.json.encode(info["pg_config"]).decode() if "pg_config" in info else None,
            device_name=_device_name(devices, used[0] if used else None),
            device_properties=_top_json(parsed, "deviceProperties"),
            base_time_ns=base if isinstance(base, int) else 0,
            schema_version=str(v) if (v := _top_value(parsed, "schemaVersion")) is not None else None,
            trace_metadata=metadata, trace_entries=n,
        ))
    return pa.Table.from_pylist(rows, schema=schema.RANKS.arrow_schema)


def _device_name(devices, device: int | None) -> str | None:
    if not isinstance(devices, list):
        return None
    named = [d for d in devices if isinstance(d, dict) and "name" in d]
    for d in named:
        if device is not None and d.get("id") == device:
            return d["name"]
    return named[0]["name"] if named else None
