"""Decoded entries → rank-free Arrow tables (`EntryTables`), with the notes (diagnostics to be) that entries give.

Columns are transposed in C and stay in Arrow; `ts` and `dur` become exact int64 ns from their decimal text. Every
entry of `traceEvents` ends up as a row of some table or as a note with `dropped = true` (the nothing-lost
invariant). `TraceParts` is one file read: its top-level keys and its entries' tables, ranks not yet applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from operator import itemgetter

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.read.entries import (
    ARG_TYPES,
    ARGS_FIELDS,
    RAW_ARGS_FIELDS,
    RAW_LIST,
    REPAIR_DETAILS,
    Args,
    Entry,
    Repair,
    decode_args,
    decode_entries,
)
from tracekit.read.text import Cut
from tracekit.storage import Location

if TYPE_CHECKING:
    import polars as pl  # imported where used: only entries with problems need it (bench/RESULTS.md, ingest's floor)


# Scalars typed once: pyarrow infers the type of a Python value (pc.equal(x, "X"), pa.repeat(True, n)) by trying to
# import dateutil.relativedelta, a file search of ~0.2 ms each time it is not installed (0.06 s of a 38 MB trace's
# report, once per chunk and call).
TRUE, FALSE = pa.scalar(True, pa.bool_()), pa.scalar(False, pa.bool_())
ZERO = pa.scalar(0, pa.int64())
COMPLETE_PHASE, METADATA_PHASE, OTHER_KIND = (pa.scalar(text, pa.string()) for text in ("X", "M", "other"))


def raw_text(values, nullable: bool = True) -> pa.Array:
    """JSON texts (msgspec.Raw, bytes, or None where `nullable`) → a string array from one buffer (empty → null)."""
    if nullable:
        if not any(values):
            return pa.nulls(len(values), pa.string())
        values = [v or b"" for v in values]
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    valid = pa.py_buffer(np.packbits(lengths > 0, bitorder="little"))
    data = pa.py_buffer(b"".join(values))
    if offsets[-1] < 2**31:
        return pa.StringArray.from_buffers(len(values), pa.py_buffer(offsets.astype(np.int32)), data, valid)
    return pa.LargeStringArray.from_buffers(len(values), pa.py_buffer(offsets), data, valid).cast(pa.string())


def id_text(values) -> pa.Array:
    """pid / tid values (int or text) → text, integers in decimal."""
    try:
        return pa.array(values, type=pa.int64()).cast(pa.string())
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        pass
    text = {v: v if v.__class__ is str else None if v is None else str(v) for v in set(values)}  # few distinct ids
    return pa.array(list(map(text.__getitem__, values)), type=pa.string())


INT64_MAX = 2**63 - 1
NS_PER_UNIT = np.array([1000, 100, 10, 1], np.int64)  # by count of decimals
LARGEST_DIGITS = np.array([INT64_MAX // 10 ** (3 - d) for d in range(4)], np.int64)  # that still scale into int64


def microseconds_to_ns(text: pa.Array) -> pa.Array:
    """Decimal microseconds text → int64 nanoseconds, exactly.

    Numbers with at most 3 decimals (what profilers write) are their digits without the dot, scaled: the dots are
    dropped from the text buffer in numpy and the rest is one integer cast. Anything else (more decimals,
    exponents, not a number) goes through exact_ns.
    """
    text = pa.concat_arrays([text.cast(pa.string())]) if text.offset or text.type != pa.string() else text
    n = len(text)
    validity, offsets, data = text.buffers()
    offsets = np.frombuffer(offsets, np.int32, n + 1)
    data = np.frombuffer(data, np.uint8, offsets[-1]) if data is not None else np.zeros(0, np.uint8)
    dots = np.flatnonzero(data == ord("."))
    rows = np.searchsorted(offsets, dots, side="right") - 1
    decimals = np.zeros(n, np.int64)
    decimals[rows] = offsets[rows + 1] - dots - 1
    undotted = pa.StringArray.from_buffers(n, pa.py_buffer((offsets - np.searchsorted(dots, offsets)).astype(np.int32)),
                                           pa.py_buffer(np.delete(data, dots)), validity, text.null_count)
    values, parsed = _integers(undotted)
    unit = np.minimum(decimals, 3)
    largest = LARGEST_DIGITS[unit]
    one_dot = np.bincount(rows, minlength=n) <= 1
    fits = parsed & one_dot & (decimals <= 3) & (values <= largest) & (values >= -largest)
    ns = pa.array(values * NS_PER_UNIT[unit], mask=~fits)
    other = ~fits & text.is_valid().to_numpy(zero_copy_only=False)
    if not other.any():
        return ns
    import polars as pl  # the rare texts only: a command that never meets one does not load polars

    exact = pl.DataFrame({"text": pl.from_arrow(text.filter(other))}).select(exact_ns(pl.col("text"))).to_series()
    return pc.replace_with_mask(ns, pa.array(other), exact.to_arrow().cast(pa.int64()))


INTEGER_BYTES = np.zeros(256, dtype=bool)
INTEGER_BYTES[list(b"-0123456789")] = True


def _integers(text: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """Integer text → (int64 values, 0 where not parsed; whether parsed): an optional sign and 1 to 18 digits
    (within int64 whatever the digits; longer text is left to exact_ns), the rest not parsed; in a column whose
    every text is an integer in int64, 19 characters too.

    Most columns are such text or empty (no `dur`): those are one cast, the empty ones masked (the regex that
    picks the parsable values took 0.14 s of a 38 MB trace's 1.8 s read). Epoch microseconds with 3 decimals are
    19 digits once their dot is dropped: the cast takes them, where Arrow refuses a value beyond int64 (then the
    regex decides): v100_ns_resolution's read 0.39 -> 0.28 s, its ingest 1.26 -> 1.01 s (bench/RESULTS.md)."""
    _, offsets, data = text.buffers()
    offsets = np.frombuffer(offsets, np.int32, len(text) + 1, 4 * text.offset)
    start, lengths = offsets[0], np.diff(offsets)
    digits = np.frombuffer(data, np.uint8, offsets[-1] - start, start) if data is not None else None
    if len(text) and digits is not None and lengths.max() <= 19 and INTEGER_BYTES[digits].all():
        parsed = (lengths > 0) & text.is_valid().to_numpy(zero_copy_only=False)
        present = pa.StringArray.from_buffers(len(text), pa.py_buffer(offsets - start), data.slice(start),
                                              pa.py_buffer(np.packbits(parsed, bitorder="little")))
        try:  # a sign alone, or a minus after a digit, is no integer: the cast says so
            return pc.fill_null(present.cast(pa.int64()), ZERO).to_numpy(), parsed
        except pa.ArrowInvalid:
            pass
    parsed = pc.fill_null(pc.match_substring_regex(text, r"^[+-]?[0-9]{1,18}$"), False)
    text = pc.if_else(parsed, text, "0")
    if pc.any(pc.starts_with(text, "+")).as_py():
        text = pc.replace_substring_regex(text, r"^\+", "")  # Arrow's cast refuses a plus sign
    return text.cast(pa.int64()).to_numpy(), parsed.to_numpy(zero_copy_only=False)


def exact_ns(text: pl.Expr) -> pl.Expr:
    """Decimal microseconds text → int64 nanoseconds, exactly (rounded half up past the ns digit).

    Plain decimals are parsed digit by digit; anything else (exponent notation) goes through float64.
    """
    import polars as pl

    negative = text.str.starts_with("-")
    parts = text.str.strip_prefix("-").str.split_exact(".", 1)
    whole = parts.struct.field("field_0").cast(pl.Int64, strict=False)
    frac = parts.struct.field("field_1").fill_null("").str.pad_end(4, "0").str.slice(0, 4)
    frac = pl.when(text.str.contains(r"^[+-]?[0-9]+(\.[0-9]+)?$")).then(frac.cast(pl.Int64, strict=False))
    frac_ns = (frac + 5) // 10  # 0 to 1000
    # beyond int64 the arithmetic would wrap: null instead (a bad_timestamp or bad_duration note)
    fits = (whole < INT64_MAX // 1000) | ((whole == INT64_MAX // 1000) & (frac_ns <= INT64_MAX % 1000 + negative))
    ns = pl.when(fits).then(whole * 1000 + frac_ns)
    ns = pl.when(negative).then(-ns).otherwise(ns)
    plain = pl.when(text.str.contains("[eE]").not_()).then(ns)
    scaled = (text.cast(pl.Float64, strict=False) * 1000).round(0)
    # a float of 2^63 or more, or of -2^63 (which is what the values just beyond int64's low end round to), fits no
    # int64 exactly
    return pl.coalesce(plain, pl.when(scaled.abs() < 2.0**63).then(scaled.cast(pl.Int64, strict=False)))


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


def kinds(categories: pa.Array) -> pa.Array:
    """Category → normalised kind, looked up once per distinct category."""
    encoded = pc.dictionary_encode(categories)
    names = [CATEGORY_KINDS.get(c.lower(), "other") for c in encoded.dictionary.to_pylist()]
    return pc.fill_null(pa.array(names, pa.string()).take(encoded.indices), OTHER_KIND)


# --------------------------------------------------------------------------- entries → rank-free tables

METADATA_KEYS = {  # metadata entry name → (table, column, args key)
    "thread_name": ("threads", "thread_name", "name"),
    "thread_sort_index": ("threads", "sort_index", "sort_index"),
    "process_name": ("processes", "process_name", "name"),
    "process_labels": ("processes", "labels", "labels"),
    "process_sort_index": ("processes", "sort_index", "sort_index"),
}


NOTES_SCHEMA = pa.schema([("group", pa.int8()), ("position", pa.int64()), ("pid", pa.string()),
                          ("args_rank", pa.int64()), ("reason", pa.string()), ("detail", pa.string()),
                          ("dropped", pa.bool_()), ("raw", pa.string())])
METADATA_SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("pid", pa.string()), ("tid", pa.string()),
                             ("args", pa.string())])
# Notes are ordered by group, then position.
ARGS_TYPE, BAD_TIMESTAMP, BAD_DURATION, MISSING_THREAD, REPAIRED, DROPPED, DUPLICATE, TRUNCATED = range(8)


@dataclass(frozen=True)
class EntryTables:
    """What a run of consecutive entries gives, before ranks are known (a rank can depend on the whole file)."""

    entry_count: int
    events: pa.Table  # `events` columns but rank, plus args_rank (`args.rank`); ts without baseTimeNanoseconds
    instants: pa.Table  # `instants` columns but rank
    flows: pa.Table  # `flows` columns but rank
    metadata: pa.Table  # ph M entries whose name tracekit keeps (METADATA_SCHEMA)
    notes: pa.Table  # diagnostics to be (NOTES_SCHEMA)

    TABLES = ("events", "instants", "flows", "metadata", "notes")  # the fields after entry_count, in order

    @staticmethod
    def concat(parts: list[EntryTables]) -> EntryTables:
        return EntryTables(sum(p.entry_count for p in parts),
                           *(pa.concat_tables([getattr(p, name) for p in parts]) for name in EntryTables.TABLES))

    def shifted(self, offset: int) -> EntryTables:
        """These entries' tables with their ids (and the notes' positions) OFFSET further: entries of a chunk made
        with ids from 0, in their place in the file."""
        if not offset:
            return self

        def moved(table: pa.Table, column: str) -> pa.Table:
            i = table.schema.get_field_index(column)
            return table.set_column(i, table.field(i), pc.add(table.column(i), pa.scalar(offset, pa.int64())))

        return EntryTables(self.entry_count, moved(self.events, "id"), moved(self.instants, "id"),
                           moved(self.flows, "id"), moved(self.metadata, "id"), moved(self.notes, "position"))

    def with_cut(self, cut: Cut) -> EntryTables:
        """These entries of a cut file: the entry cut short counts as read, and is dropped with the `truncated`
        note."""
        return EntryTables(self.entry_count + bool(cut.partial), self.events, self.instants, self.flows,
                           self.metadata, pa.concat_tables([self.notes, cut_note(cut, self.entry_count)]))


ENTRY_FIELDS = Entry.__struct_fields__
PLACEHOLDER = Entry()
INSTANT_PHASES = pa.array(["i", "I"])
FLOW_PHASES = pa.array(["s", "f", "t"])
KNOWN_PHASES = ["X", "i", "I", "s", "f", "t", "M"]
METADATA_NAMES = pa.array(list(METADATA_KEYS))


def entry_tables(path: Location, text, first_id: int) -> EntryTables:
    """A JSON array of consecutive entries (the first at position `first_id`) → rank-free tables.

    Columns are transposed in C (astuple + zip) and converted to Arrow once for the whole chunk, and each table
    takes its rows from them; only args, the bulk of the bytes, go straight into each table's own buffer.
    """
    entries, raws, repairs = decode_entries(path, text)
    n = len(entries)
    rows = entries if raws is None else [PLACEHOLDER if e is None else e for e in entries]
    cols = dict(zip(ENTRY_FIELDS, zip(*map(msgspec.structs.astuple, rows)))) if n else {f: () for f in ENTRY_FIELDS}
    is_object = pa.array([e is not None for e in entries], type=pa.bool_()) if raws else pa.repeat(TRUE, n)
    del rows, entries
    ph = pa.array(cols["ph"], type=pa.string())
    is_x, is_instant, is_flow = (pc.fill_null(mask, FALSE) for mask in (
        pc.equal(ph, COMPLETE_PHASE), pc.is_in(ph, INSTANT_PHASES), pc.is_in(ph, FLOW_PHASES)))
    is_other = pc.invert(pc.or_(pc.or_(is_x, is_instant), is_flow))  # metadata, unknown phases, not objects
    x_rows, instant_rows, flow_rows, other_rows = (np.flatnonzero(mask.to_numpy(zero_copy_only=False))
                                                   for mask in (is_x, is_instant, is_flow, is_other))
    flow_id, flow_id_text = _flow_ids(cols["id"])
    table = pa.table({
        "id": np.arange(first_id, first_id + n, dtype=np.int64),
        "ph": ph,
        "cat": pa.array(cols["cat"], type=pa.string()),
        "name": pa.array(cols["name"], type=pa.string()),
        "pid": id_text(cols["pid"]),
        "tid": id_text(cols["tid"]),
        "ts": microseconds_to_ns(raw_text(cols["ts"], nullable=False)),
        "dur": microseconds_to_ns(raw_text(cols["dur"], nullable=False)),
        "flow_id": flow_id,
        "flow_id_text": flow_id_text,
        "binding_point": pa.array(cols["bp"], type=pa.string()),
        "scope": pa.array(cols["s"], type=pa.string()),
        "is_object": is_object,
    })

    x_args = pick(cols["args"], x_rows)
    events, arg_problems = _events(rows_of(table, ["id", "cat", "name", "pid", "tid", "ts", "dur"], x_rows, x_args),
                                   x_args)
    del x_args
    instants = rows_of(table, ["id", "cat", "name", "pid", "tid", "ts", "scope"], instant_rows,
                       pick(cols["args"], instant_rows))
    flow_table = rows_of(table, ["id", "ph", "cat", "name", "pid", "tid", "ts", "binding_point", "flow_id",
                                 "flow_id_text"], flow_rows, pick(cols["args"], flow_rows))
    others = rows_of(table, ["id", "ph", "name", "pid", "tid", "is_object"], other_rows,
                     pick(cols["args"], other_rows))
    del table, cols
    has_flow_id = pc.is_valid(flow_table.column("flow_id"))
    flows = flow_table.drop_columns(["flow_id_text"]).rename_columns({"ph": "phase"})
    flows = flows.filter(has_flow_id) if flows.column("flow_id").null_count else flows
    kept = pc.and_(pc.equal(others.column("ph"), METADATA_PHASE), pc.is_in(others.column("name"), METADATA_NAMES))
    metadata = others.filter(pc.fill_null(kept, FALSE)).select(METADATA_SCHEMA.names)
    if flows.num_rows < flow_table.num_rows or others.num_rows > metadata.num_rows:
        import polars as pl

        bad_flows = flow_table.select(["id", "pid", "flow_id_text"]).filter(pc.invert(has_flow_id))
        dropped = _dropped(pl.from_arrow(bad_flows), pl.from_arrow(others))
        raws = raws or [bytes(r) for r in RAW_LIST.decode(text)]
        dropped = dropped.with_columns(raw=pl.Series(
            [raws[p - first_id].decode(errors="replace") for p in dropped["id"]], dtype=pl.String))
    else:
        dropped = None
    return EntryTables(n, events, instants, flows, metadata,
                       _notes(events, instants, flows, arg_problems, dropped, repairs, first_id))


def rows_of(table: pa.Table, columns: list[str], rows: np.ndarray, args: tuple) -> pa.Table:
    """COLUMNS of TABLE's ROWS, with their `args` texts."""
    return table.select(columns).take(rows).append_column("args", raw_text(args, nullable=False))


def pick(values: tuple | list, rows: np.ndarray) -> tuple:
    """values[r] for each row, picked in C (itemgetter)."""
    if len(rows) > 1:
        return itemgetter(*rows.tolist())(values)
    return tuple(values[r] for r in rows.tolist())


def _flow_ids(values) -> tuple[pa.Array, pa.Array]:
    """Flow entries' `id`s → (flow id, the id as text for diagnostics); a text id holds an integer, or is bad."""
    try:
        return pa.array(values, type=pa.int64()), pa.nulls(len(values), pa.string())  # text only matters when null
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        import polars as pl

        text = id_text(values)
        return pl.from_arrow(text).cast(pl.Int64, strict=False).to_arrow(), text


def _dropped(bad_flows: pl.DataFrame, others: pl.DataFrame) -> pl.DataFrame:
    """Entries that become no row, with the reason: (id, pid, reason, detail), by id."""
    import polars as pl

    meta = others.filter(pl.col("ph") == "M")
    return pl.concat([
        bad_flows.select(
            "id", "pid", reason=pl.lit("bad_flow_id"),
            detail=pl.format("flow entry with non-integer id {}", "flow_id_text")),
        others.filter(~pl.col("is_object")).select(
            "id", "pid", reason=pl.lit("not_an_object"), detail=pl.lit("traceEvents entry is not a JSON object")),
        others.filter(pl.col("is_object") & ~pl.col("ph").is_in(KNOWN_PHASES).fill_null(False)).select(
            "id", "pid", reason=pl.lit("unknown_phase"),
            detail=pl.format("phase {} is not one tracekit turns into rows", pl.col("ph").fill_null("(none)"))),
        meta.filter(~pl.col("name").is_in(list(METADATA_KEYS)).fill_null(False)).select(
            "id", "pid", reason=pl.lit("unknown_metadata"),
            detail=pl.format("metadata {} is not one tracekit keeps", pl.col("name").fill_null("(none)"))),
    ]).sort("id")


def _events(x: pa.Table, x_args: tuple[msgspec.Raw, ...]) -> tuple[pa.Table, list[tuple[int, str]]]:
    """The ph X rows' table: their columns, typed args columns and kind."""
    args, problems = decode_args(x_args, all_present=x.column("args").null_count == 0)
    arg_cols = (dict(zip(ARGS_FIELDS, zip(*map(msgspec.structs.astuple, args)))) if args
                else {f: () for f in ARGS_FIELDS})
    del args
    n = len(x_args)
    zeros = pa.py_buffer(bytes(8 * (n + 1)))  # calloc'd: costs no memory until read
    typed = {f: null_array(ARG_TYPES[f], n, zeros) if not any(arg_cols[f]) and arg_cols[f].count(None) == n
             else raw_text(arg_cols[f]) if f in RAW_ARGS_FIELDS else _int_column(f, arg_cols[f], problems)
             for f in ARGS_FIELDS}
    typed["external_id"] = pc.coalesce(typed.pop("external_id"), typed.pop("external_id_legacy"))
    typed["input_dims"] = pc.coalesce(typed.pop("input_dims"), typed.pop("input_dims_legacy"))
    typed["args_rank"] = _rank_column(typed.pop("rank"), problems)
    typed["kind"] = kinds(x.column("cat").combine_chunks())
    return pa.table({**dict(zip(x.column_names, x.columns)), **typed}), sorted(problems)


ARG_JSON_NAMES = {f.name: f.encode_name for f in msgspec.structs.fields(Args)}


def _int_column(field: str, values: tuple, problems: list[tuple[int, str]]) -> pa.Array:
    """An integer (or integer list, or text) args column; integers beyond its type become null, each noted."""
    type_ = ARG_TYPES[field]
    try:
        return pa.array(values, type=type_)
    except (OverflowError, pa.ArrowInvalid, pa.ArrowTypeError):
        pass

    bits = type_.value_type.bit_width if pa.types.is_list(type_) else type_.bit_width
    low, high = -(2 ** (bits - 1)), 2 ** (bits - 1) - 1

    def fits(v) -> bool:
        return all(low <= i <= high for i in v) if isinstance(v, list) else low <= v <= high

    kept = [v if v is None or fits(v) else None for v in values]
    problems += [(row, f"args.{ARG_JSON_NAMES[field]} is beyond the int{bits} range")
                 for row, (v, k) in enumerate(zip(values, kept)) if v is not None and k is None]
    return pa.array(kept, type=type_)


RANK_LIMIT = 2**31  # ranks are int32


def _rank_column(ranks: pa.Array, problems: list[tuple[int, str]]) -> pa.Array:
    """`args.rank`, where it can be a rank (0 ≤ rank < 2^31); other values become null, each noted."""
    if ranks.null_count == len(ranks):
        return ranks
    bad = pc.fill_null(pc.or_(pc.less(ranks, 0), pc.greater_equal(ranks, RANK_LIMIT)), False)
    if not pc.any(bad).as_py():
        return ranks
    rows = np.flatnonzero(bad.to_numpy(zero_copy_only=False))
    problems += [(int(row), f"args.rank {ranks[int(row)]} is not a rank (0 to 2^31-1)") for row in rows]
    return pc.if_else(bad, pa.nulls(len(ranks), ranks.type), ranks)


def null_array(type_: pa.DataType, n: int, zeros: pa.Buffer) -> pa.Array:
    """n nulls of a primitive, string or list type, every buffer a view of one shared zero-filled buffer: the many
    args columns a chunk never fills cost nothing each."""
    if pa.types.is_list(type_):
        return pa.Array.from_buffers(type_, n, [zeros, zeros], null_count=n, children=[pa.array([], type_.value_type)])
    if pa.types.is_string(type_):
        return pa.Array.from_buffers(type_, n, [zeros, zeros, zeros.slice(0, 0)], null_count=n)
    return pa.Array.from_buffers(type_, n, [zeros, zeros], null_count=n)


def _notes(events: pa.Table, instants: pa.Table, flows: pa.Table, arg_problems: list[tuple[int, str]],
           dropped: pl.DataFrame | None, repairs: list[Repair], first_id: int) -> pa.Table:
    """Diagnostics of these entries, ranks still to come."""
    timed = (events, instants, flows)
    if (not arg_problems and dropped is None and not repairs and not any(t.column("ts").null_count for t in timed)
            and not any(events.column(c).null_count for c in ("dur", "pid", "tid"))):
        return NOTES_SCHEMA.empty_table()
    import polars as pl

    columns = ["id", "pid", "args_rank"]
    rows = [r for r, _ in arg_problems]
    arg_notes = pl.from_arrow(events.select(columns).take(pa.array(rows, pa.int64()))).select(
        group=pl.lit(ARGS_TYPE, dtype=pl.Int8), position="id", pid="pid", args_rank="args_rank",
        reason=pl.lit("args_type"),
        detail=pl.Series([f"an args field has an unexpected type and was left null: {p}" for _, p in arg_problems],
                         dtype=pl.String))

    def noted(table: pa.Table, mask: pa.Array, group: int, reason: str, detail: str) -> pl.DataFrame:
        picked = table.filter(mask)
        args_rank = picked.column("args_rank") if "args_rank" in picked.column_names else pa.nulls(len(picked))
        return pl.from_arrow(picked.select(["id", "pid"])).select(
            group=pl.lit(group, dtype=pl.Int8), position="id", pid="pid",
            args_rank=pl.from_arrow(args_rank).cast(pl.Int64), reason=pl.lit(reason), detail=pl.lit(detail))

    no_thread = pc.or_(pc.is_null(events.column("pid")), pc.is_null(events.column("tid")))
    notes = pl.concat([
        arg_notes,
        *(noted(t, pc.is_null(t.column("ts")), BAD_TIMESTAMP, "bad_timestamp",
                f"ts is missing, not a number or beyond int64 ns; the {what} is kept with a null ts")
          for t, what in zip(timed, ("event", "instant", "flow endpoint"))),
        noted(events, pc.is_null(events.column("dur")), BAD_DURATION, "bad_duration",
              "dur is missing, not a number or beyond int64 ns; the event is kept with a null dur"),
        noted(events, no_thread, MISSING_THREAD, "missing_pid_tid",
              "pid or tid is missing; the event is kept with a null pid / tid"),
        pl.DataFrame({"group": [REPAIRED] * len(repairs), "position": [first_id + r.index for r in repairs],
                      "pid": [r.pid for r in repairs], "args_rank": [None] * len(repairs),
                      "reason": [r.reason for r in repairs], "detail": [REPAIR_DETAILS[r.reason] for r in repairs]},
                     schema={"group": pl.Int8, "position": pl.Int64, "pid": pl.String, "args_rank": pl.Int64,
                             "reason": pl.String, "detail": pl.String}),
    ]).with_columns(dropped=pl.lit(False), raw=pl.lit(None, pl.String))
    if dropped is not None:
        notes = pl.concat([notes, dropped.select(
            group=pl.lit(DROPPED, dtype=pl.Int8), position="id", pid="pid", args_rank=pl.lit(None, dtype=pl.Int64),
            reason="reason", detail="detail", dropped=pl.lit(True), raw="raw")])
    return notes.to_arrow().cast(NOTES_SCHEMA)


@dataclass(frozen=True)
class TraceParts:
    """One trace file read, ranks not yet applied (picklable: files can be read in worker processes)."""

    path: Location
    top: dict[str, bytes]  # top-level keys other than traceEvents, as JSON text
    entries: EntryTables | None  # None for an Execution Trace (not read yet)

    @property
    def is_execution_trace(self) -> bool:
        return self.entries is None


RAW_LIMIT = 1 << 16  # characters of a cut entry kept in its diagnostic


def cut_note(cut: Cut, complete: int) -> pa.Table:
    """The `truncated` diagnostic of a cut file (NOTES_SCHEMA): the CLI's warning line is its detail."""
    detail = f"truncated at byte {cut.text_bytes} (of the decompressed text); {complete} complete entries recovered"
    if cut.partial:
        detail += f"; the entry cut short (from byte {cut.partial_at}) is dropped"
    elif cut.after_entries:
        detail += "; the cut falls after the last entry" + (", in the top-level keys that follow the entries"
                                                              if cut.in_object else "")
    else:
        detail += "; the cut falls between two entries"
    if cut.in_object and not cut.after_entries:
        detail += "; top-level keys written after traceEvents (if any) are lost"
    if cut.zero_bytes:
        detail += f"; {cut.zero_bytes} zero bytes follow the text (as a crash or a full disk leaves)"
    if cut.gzip_cut:
        detail += "; the gzip stream ends early"
    return pa.table({
        "group": pa.array([TRUNCATED], pa.int8()), "position": pa.array([complete if cut.partial else None], pa.int64()),
        "pid": pa.nulls(1, pa.string()), "args_rank": pa.nulls(1, pa.int64()), "reason": ["truncated"],
        "detail": [detail], "dropped": [bool(cut.partial)],
        "raw": [cut.partial[:RAW_LIMIT].decode(errors="replace") if cut.partial else None],
    }, schema=NOTES_SCHEMA)
