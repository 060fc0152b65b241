"""Screening a file's timed entries before ranks are applied: exact duplicates dropped (the first kept), and
timestamps and durations that cannot be real nulled; each is a note."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tracekit.read.columns import (
    BAD_DURATION,
    BAD_TIMESTAMP,
    DUPLICATE,
    INT64_MAX,
    NOTES_SCHEMA,
    EntryTables,
    TraceParts,
)
from tracekit.read.ranks import base_time_ns, top_json, top_value

if TYPE_CHECKING:
    import polars as pl  # imported where used: most traces need no note

# --------------------------------------------------------------------------- screening a file's entries

GPU_OP_KINDS = ("kernel", "memcpy", "memset")
MAX_DURATION_NS = 86_400 * 10**9  # one day: longer than any profiler window (the shared traces' longest event: 43 s)
# A GPU op ending this long after the next op on its stream (stream work runs in order) has a corrupt dur (TraceLens
# #669: ROCm completions flushed late, ms to s; legitimate overlaps, programmatic dependent launch, are µs: 3.7 µs
# at most in the shared traces).
STREAM_OVERRUN_NS = 100_000
TS_RANGE_NS = (-(2**61), 2**62)  # ±73 / 146 years around the epoch: sums and differences stay within int64
EVENT_KEY = ["cat", "name", "pid", "tid", "ts", "dur", "args"]
INSTANT_KEY = ["cat", "name", "pid", "tid", "ts", "scope", "args"]
FLOW_KEY = ["phase", "cat", "name", "pid", "tid", "ts", "binding_point", "flow_id", "args"]


def screened(parts: TraceParts) -> TraceParts:
    """The file's timed entries with exact duplicates dropped (the first kept), and timestamps and durations that
    cannot be real nulled: out-of-range timestamps, negative durations, durations over a day, and GPU ops that run
    past the start of the next op on their stream by more than STREAM_OVERRUN_NS. Each is a diagnostic."""
    entries = parts.entries
    base = base_time_ns(parts)
    tables, duplicates, other_notes = {}, [], []
    for name, key in (("events", EVENT_KEY), ("instants", INSTANT_KEY), ("flows", FLOW_KEY)):
        table, dropped = _without_duplicates(getattr(entries, name), key)
        tables[name], out_of_range = _timestamps_in_range(table, base, name)
        duplicates.append(dropped)
        other_notes.append(out_of_range)
    tables["events"], bad_durations = _possible_durations(tables["events"])
    other_notes.append(bad_durations)
    if "baseTimeNanoseconds" in parts.top and base != top_value(parts, "baseTimeNanoseconds"):
        other_notes.append(_file_note(BAD_TIMESTAMP, "bad_base_time", "baseTimeNanoseconds "
                                      f"{top_json(parts, 'baseTimeNanoseconds')[:100]} is not an integer within "
                                      "±2^62 ns; timestamps are read without it"))
    if not any(n.num_rows for n in duplicates + other_notes):
        return parts
    dropped_positions = pa.concat_tables(duplicates).column("position")
    notes = entries.notes.filter(pc.invert(pc.is_in(entries.notes.column("position"), dropped_positions)))
    screened_entries = EntryTables(entries.entry_count, tables["events"], tables["instants"], tables["flows"],
                                   entries.metadata, pa.concat_tables([notes, *duplicates, *other_notes]))
    return TraceParts(parts.path, parts.top, screened_entries)


def _without_duplicates(table: pa.Table, key: list[str]) -> tuple[pa.Table, pa.Table]:
    """The table without rows identical in every column read from the entry but the position (timed rows only),
    and their notes."""
    if table.num_rows < 2:
        return table, NOTES_SCHEMA.empty_table()
    candidates = _same_times(table, ["ts", "dur"] if "dur" in key else ["ts"], ["name", "args"])
    if not candidates.any():
        return table, NOTES_SCHEMA.empty_table()
    rows = np.flatnonzero(candidates)
    extra = ["args_rank"] if "args_rank" in table.column_names else []
    # filter, not take: take would first join the chunks of every column (the args text: the bulk of the file)
    picked = table.select(["id", *key, *extra]).filter(pa.array(candidates))
    ids = picked.column("id").to_numpy()
    group = _group_codes(picked, key)
    first = np.full(group.max() + 1, np.iinfo(np.int64).max)
    np.minimum.at(first, group, ids)
    first = first[group]
    later = ids != first
    if not later.any():
        return table, NOTES_SCHEMA.empty_table()
    drop = np.zeros(table.num_rows, dtype=bool)
    drop[rows[later]] = True
    same = picked.filter(pa.array(later))
    n = same.num_rows
    notes = pa.table({
        "group": pa.repeat(pa.scalar(DUPLICATE, pa.int8()), n), "position": same.column("id"),
        "pid": same.column("pid"),
        "args_rank": same.column("args_rank").cast(pa.int64()) if extra else pa.nulls(n, pa.int64()),
        "reason": pa.repeat(pa.scalar("duplicate_entry"), n),
        "detail": [f"identical to entry {f} (kept): a duplicate is dropped" for f in first[later].tolist()],
        "dropped": pa.repeat(pa.scalar(True), n), "raw": pa.nulls(n, pa.string())})
    return table.filter(pa.array(~drop)), notes.cast(NOTES_SCHEMA)


def _group_codes(table: pa.Table, columns: list[str]) -> np.ndarray:
    """One integer per row, the same for rows equal in every column (nulls equal to nulls): the rank of the row's
    tuple of column codes, the columns folded in one at a time (a row-wise np.unique sorted the rows as records:
    ~10× slower, 0.09 s of a 38 MB trace's read). A code and the next column's fit int64 below 3 billion rows."""
    group = np.zeros(table.num_rows, dtype=np.int64)
    for column in columns:
        values = table.column(column).combine_chunks()
        if pa.types.is_dictionary(values.type):
            values = values.cast(values.type.value_type)
        codes = pc.dictionary_encode(values, null_encoding="encode").indices.to_numpy().astype(np.int64)
        group = np.unique(group * (int(codes.max(initial=0)) + 1) + codes, return_inverse=True)[1].reshape(-1)
    return group


def _same_times(table: pa.Table, columns: list[str], texts: list[str]) -> np.ndarray:
    """Rows whose times (none null) and lengths of `texts` hash like another row's: the only rows that can be
    duplicates. By sorting a hash in numpy: a fraction of the memory a hash table over the columns takes."""
    valid = np.ones(table.num_rows, dtype=bool)
    hashed = np.zeros(table.num_rows, dtype=np.int64)
    for column in columns:
        values = table.column(column)
        valid &= ~values.is_null().to_numpy(zero_copy_only=False)
        hashed = hashed * np.int64(1_000_003) ^ pc.fill_null(values, 0).to_numpy()  # wraps: a hash
    for column in texts:
        lengths = pc.fill_null(pc.binary_length(table.column(column)), -1).cast(pa.int64())
        hashed = hashed * np.int64(1_000_003) ^ lengths.to_numpy()
    order = np.argsort(hashed)
    repeated = np.flatnonzero(hashed[order[1:]] == hashed[order[:-1]])
    same = np.zeros(table.num_rows, dtype=bool)
    same[order[repeated]] = same[order[repeated + 1]] = True
    return same & valid


def _timestamps_in_range(table: pa.Table, base: int, name: str) -> tuple[pa.Table, pa.Table]:
    """ts nulled where it would lie outside TS_RANGE_NS once baseTimeNanoseconds is added; notes for those."""
    low = max(TS_RANGE_NS[0] - base, -INT64_MAX - 1)
    high = min(TS_RANGE_NS[1] - base, INT64_MAX)
    ts = table.column("ts")
    outside = pc.fill_null(pc.or_(pc.less(ts, low), pc.greater(ts, high)), False)
    if not pc.any(outside).as_py():
        return table, NOTES_SCHEMA.empty_table()
    what = {"events": "event", "instants": "instant", "flows": "flow endpoint"}[name]
    import polars as pl

    notes = _row_notes(table.filter(outside), BAD_TIMESTAMP, "bad_timestamp", pl.format(
        "ts {} ns (baseTimeNanoseconds not added) is out of range (more than 2^61 ns before or 2^62 ns after the "
        "epoch); the {} is kept with a null ts", pl.col("ts"), pl.lit(what)))
    return table.set_column(table.column_names.index("ts"), "ts", pc.if_else(outside, pa.scalar(None, pa.int64()), ts)), notes


def _possible_durations(events: pa.Table) -> tuple[pa.Table, pa.Table]:
    """dur nulled where negative, over MAX_DURATION_NS, or running over the next GPU op on its stream; notes."""
    dur = events.column("dur")
    impossible = pc.fill_null(pc.or_(pc.less(dur, 0), pc.greater(dur, MAX_DURATION_NS)), False)
    notes = []
    if pc.any(impossible).as_py():
        import polars as pl

        notes.append(_row_notes(events.filter(impossible), BAD_DURATION, "bad_duration", pl.format(
            "dur {} ns is {}; the event is kept with a null dur", pl.col("dur"),
            pl.when(pl.col("dur") < 0).then(pl.lit("negative")).otherwise(pl.lit("longer than a day")))))
        dur = pc.if_else(impossible, pa.scalar(None, pa.int64()), dur)
    timed_gpu_op = pc.and_(pc.is_in(events.column("kind"), pa.array(GPU_OP_KINDS)),
                           pc.and_(pc.is_valid(events.column("ts")), pc.is_valid(dur)))
    rows = np.flatnonzero(timed_gpu_op.to_numpy(zero_copy_only=False))
    gpu = events.select(["id", "args_rank", "pid", "tid", "ts"]).filter(timed_gpu_op)
    stream = ["args_rank", "pid", "tid"]
    order = pc.sort_indices(gpu, sort_keys=[(c, "ascending") for c in (*stream, "ts", "id")]).to_numpy()  # nulls last
    codes = _group_codes(gpu, stream)[order]
    ts = gpu.column("ts").to_numpy()[order]
    ids = gpu.column("id").to_numpy()[order]
    gpu_dur = pc.filter(dur, timed_gpu_op).to_numpy()[order]
    overrun_ns = ts[:-1] + gpu_dur[:-1] - ts[1:]
    is_over = (codes[:-1] == codes[1:]) & (overrun_ns > STREAM_OVERRUN_NS)
    if is_over.any():
        import polars as pl  # the notes' text only: a trace without such an op does not load polars

        overrun = pl.DataFrame({"id": ids[:-1][is_over], "overrun": overrun_ns[is_over],
                                "next_id": ids[1:][is_over]})
        over = np.zeros(events.num_rows, dtype=bool)
        over[rows[order[:-1][is_over]]] = True
        notes.append(_row_notes(events.filter(pa.array(over)).set_column(
            events.column_names.index("dur"), "dur", pc.filter(dur, pa.array(over))), BAD_DURATION, "bad_duration",
            pl.format("dur {} ns runs {} ns past the start of the next op on its stream, entry {} (work on a stream "
                      "runs in order: a corrupt dur); the event is kept with a null dur", pl.col("dur"),
                      pl.col("overrun"), pl.col("next_id")),
            extra=overrun))
        dur = pc.if_else(pa.array(over), pa.scalar(None, pa.int64()), dur)
    if not notes:
        return events, NOTES_SCHEMA.empty_table()
    return events.set_column(events.column_names.index("dur"), "dur", dur), pa.concat_tables(notes)


def _file_note(group: int, reason: str, detail: str) -> pa.Table:
    return pa.table({"group": pa.array([group], pa.int8()), "position": pa.nulls(1, pa.int64()),
                     "pid": pa.nulls(1, pa.string()), "args_rank": pa.nulls(1, pa.int64()), "reason": [reason],
                     "detail": [detail], "dropped": [False], "raw": pa.nulls(1, pa.string())}, schema=NOTES_SCHEMA)


def _row_notes(rows: pa.Table, group: int, reason: str, detail: pl.Expr, extra: pl.DataFrame | None = None
               ) -> pa.Table:
    """Notes (NOTES_SCHEMA) on these rows of a timed table: kept rows, so not dropped."""
    import polars as pl

    frame = pl.from_arrow(rows.select([c for c in ("id", "pid", "args_rank", "ts", "dur") if c in rows.column_names]))
    if extra is not None:
        frame = frame.join(extra, on="id", how="left")
    return frame.select(
        group=pl.lit(group, dtype=pl.Int8), position="id", pid="pid",
        args_rank=pl.col("args_rank") if "args_rank" in frame.columns else pl.lit(None, dtype=pl.Int64),
        reason=pl.lit(reason), detail=detail, dropped=pl.lit(False), raw=pl.lit(None, dtype=pl.String),
    ).to_arrow().cast(NOTES_SCHEMA)
