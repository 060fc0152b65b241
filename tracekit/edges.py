"""The dependency graph: `edges` built from `events` with joins, never per-event loops.

Kinds built here:
- nest: parent → child on the same (rank, pid, tid), by time containment;
- launch: runtime/driver call → GPU kernel/memcpy/memset, joined on (rank, correlation);
- stream: GPU op → the next GPU op on the same (rank, device, stream).

Every join key includes rank, so merged multi-rank input (whose correlation ids restart per rank) cannot cross-link.
"""

from __future__ import annotations

import duckdb
import numpy as np
import polars as pl
import pyarrow as pa

from . import schema
from .tables import TraceTables

# Host-side kinds that nest on a thread; GPU ops live on streams and are linked by launch/stream edges instead.
NESTING_KINDS = ("trace", "user_annotation", "python_function", "cpu_op", "runtime", "driver", "overhead", "other")
# Among events with identical start and duration, the outer one comes first in this order.
NESTING_RANK = {kind: i for i, kind in enumerate(NESTING_KINDS)}

LAUNCHER_KINDS = ("runtime", "driver")
# Runtime calls that enqueue GPU work (and so should have a GPU op with their correlation).
LAUNCH_CALL_PATTERN = r"(?i)(launch|memcpy|memset)"


def build_edges(tables: TraceTables) -> TraceTables:
    """Tables with `edges` filled (nest, launch, stream) and what could not be linked in `diagnostics`."""
    events = tables.events
    nest, nest_notes = nest_edges(events)
    with tables.connect() as con:
        launch = con.sql(LAUNCH_EDGES_SQL).to_arrow_table()
        stream = con.sql(STREAM_EDGES_SQL).to_arrow_table()
        launch_notes = con.sql(UNLINKED_SQL).to_arrow_table()
    edges = pa.concat_tables([schema.conform("edges", t) for t in (nest, launch, stream)])
    notes = pa.concat_tables([tables.diagnostics] + [schema.conform("diagnostics", t) for t in (nest_notes, launch_notes)])
    return tables.with_tables(edges=edges, diagnostics=notes)


def nest_edges(events: pa.Table) -> tuple[pa.Table, pa.Table]:
    """parent → child by containment on each (rank, pid, tid), and a diagnostic per improper overlap.

    An event's parent is the nearest earlier-starting event on its thread that ends no earlier than it does.
    Real traces hold sub-microsecond overlaps that are not nesting (an op that starts inside another and ends after
    it): such an event is attached to the innermost event that fully contains it, and counted in diagnostics.
    Both searches are "nearest previous element with value ≥ v", done for all events at once by binary lifting over
    a sparse table of range maxima: O(n log n) vectorised, no per-event loop.
    """
    frame = (
        pl.from_arrow(events.select(["rank", "id", "kind", "pid", "tid", "ts", "dur"]))
        .filter(pl.col("kind").is_in(NESTING_KINDS) & pl.col("ts").is_not_null())
        .with_columns(end=pl.col("ts") + pl.col("dur").fill_null(0).clip(lower_bound=0),
                      outer_first=pl.col("kind").replace_strict(NESTING_RANK, return_dtype=pl.Int32))
        .sort(["rank", "pid", "tid", "ts", "end", "outer_first", "id"], descending=[False, False, False, False, True, False, False],
              nulls_last=True)
    )
    if frame.height == 0:
        return schema.empty("edges"), schema.empty("diagnostics")
    thread = frame.select(pl.struct("rank", "pid", "tid").rank("dense").alias("t"))["t"].to_numpy()
    n = frame.height
    index = np.arange(n)
    new_thread = np.r_[True, thread[1:] != thread[:-1]]
    thread_start = np.maximum.accumulate(np.where(new_thread, index, 0))
    ts, end = frame["ts"].to_numpy(), frame["end"].to_numpy()

    # A container must still be open after the child starts: a zero-length event at the instant a sibling ends
    # belongs to the enclosing event, not to that sibling.
    parent = nearest_previous_at_least(end, np.maximum(end, ts + 1), thread_start)
    # The nearest earlier event still open when this one starts; if it is not the parent, the two overlap improperly.
    open_at_start = nearest_previous_at_least(end, ts + 1, thread_start)
    improper = (open_at_start >= 0) & (open_at_start != parent)

    ids, ranks = frame["id"].to_numpy(), frame["rank"].to_numpy()
    has_parent = parent >= 0
    edges = pa.table({
        "rank": pa.array(ranks[has_parent], pa.int32()),
        "src": pa.array(ids[parent[has_parent]], pa.int64()),
        "dst": pa.array(ids[has_parent], pa.int64()),
        "kind": pa.array(np.full(has_parent.sum(), "nest", dtype=object), pa.string()),
    })
    overlap_with = ids[open_at_start[improper]]
    notes = pa.table({
        "rank": pa.array(ranks[improper], pa.int32()),
        "position": pa.array(ids[improper], pa.int64()),
        "stage": pa.array(["edges"] * int(improper.sum()), pa.string()),
        "reason": pa.array(["improper_nesting"] * int(improper.sum()), pa.string()),
        "detail": pa.array([f"starts inside event {o} but ends after it; nested under the innermost event that "
                            f"contains it" for o in overlap_with], pa.string()),
        "dropped": pa.array(np.zeros(int(improper.sum()), dtype=bool)),
    })
    return edges, notes


def nearest_previous_at_least(values: np.ndarray, targets: np.ndarray, start: np.ndarray) -> np.ndarray:
    """For each i, the largest j in [start[i], i) with values[j] >= targets[i], or -1.

    Binary lifting: skip back over the longest run of elements all below the target, in power-of-two blocks whose
    maxima come from a sparse table. Runs over every element at once.
    """
    n = len(values)
    table = [values]
    while (1 << len(table)) <= n:
        prev, half = table[-1], 1 << (len(table) - 1)
        table.append(np.maximum(prev[:-half] if half < len(prev) else prev[:0], prev[half:]))
    pos = np.arange(n)  # exclusive end of the unsearched prefix
    for level in range(len(table) - 1, -1, -1):
        size = 1 << level
        block_start = pos - size
        can_skip = block_start >= start
        idx = np.where(can_skip, block_start, 0)
        level_max = table[level]
        valid_idx = np.minimum(idx, len(level_max) - 1)
        can_skip &= idx < len(level_max)
        can_skip &= level_max[valid_idx] < targets
        pos = np.where(can_skip, block_start, pos)
    candidate = pos - 1
    found = (candidate >= start) & (values[np.maximum(candidate, 0)] >= targets)
    return np.where(found, candidate, -1)


# One launch edge per GPU op. A correlation with several launch calls (duplicated zero-length runtime rows in some
# traces) is resolved to the longest call that started no later than the GPU op, then the lowest id.
LAUNCH_EDGES_SQL = f"""
with gpu as (
    select rank, id, correlation, ts from events
    where kind in {schema.GPU_KINDS} and correlation is not null
),
launcher as (
    select rank, id, correlation, ts, dur from events
    where kind in {LAUNCHER_KINDS} and correlation is not null
),
matched as (
    select g.rank, l.id as src, g.id as dst, g.ts - (l.ts + coalesce(l.dur, 0)) as lag,
           row_number() over (partition by g.rank, g.id
                              order by (l.ts <= g.ts) desc, l.dur desc nulls last, l.id) as choice
    from gpu g join launcher l on l.rank = g.rank and l.correlation = g.correlation
),
chosen as (select * from matched where choice = 1)
select rank, src, dst, 'launch' as kind,
       case when count(*) over (partition by rank, src) > 1 then 'graph' end as subkind,
       lag
from chosen
"""

STREAM_EDGES_SQL = f"""
with ordered as (
    select rank, id, ts, ts + coalesce(dur, 0) as end_ts,
           lead(id) over w as next_id, lead(ts) over w as next_ts
    from events
    where kind in {schema.GPU_KINDS} and stream is not null and ts is not null
    window w as (partition by rank, device, stream order by ts, id)
)
select rank, id as src, next_id as dst, 'stream' as kind, null as subkind, next_ts - end_ts as lag
from ordered where next_id is not null
"""

# GPU work queued before the profiling window has no launcher in the file; calls that should have enqueued GPU work
# but did not (graph capture, some memsets) have no GPU op. Both are flagged, not guessed.
UNLINKED_SQL = f"""
with launch as ({LAUNCH_EDGES_SQL})
select e.rank, e.id as position, 'edges' as stage, 'no_launcher' as reason,
       e.kind || ' ' || e.name || ' has no launch call in the trace (queued before the profiling window?)' as detail,
       false as dropped
from events e anti join launch l on l.rank = e.rank and l.dst = e.id
where e.kind in {schema.GPU_KINDS}
union all
select e.rank, e.id, 'edges', 'launch_without_gpu_op',
       e.name || ' (correlation ' || coalesce(e.correlation::varchar, 'none') || ') enqueued no GPU op in the trace',
       false
from events e anti join launch l on l.rank = e.rank and l.src = e.id
where e.kind in {LAUNCHER_KINDS} and regexp_matches(e.name, '{LAUNCH_CALL_PATTERN}')
"""
