"""The dependency graph: `edges` built from `events` with joins, never per-event loops.

Kinds built here:
- nest: parent → child on the same (rank, pid, tid), by time containment;
- launch: runtime/driver call → GPU kernel/memcpy/memset, joined on (rank, correlation);
- stream: GPU op → the next GPU op on the same (rank, device, stream);
- sync: GPU op a `cuda_sync` event waited for → the host call that waited (Event Sync, Stream Sync, Context Sync) or
  the next GPU op on the waiting stream (Stream Wait Event);
- flow: forward op → backward op, from `fwdbwd` flow endpoints bound to the cpu_op they sit on.

Every join key includes rank, so merged multi-rank input (whose correlation ids restart per rank) cannot cross-link.
"""

from __future__ import annotations

import numpy as np
import polars as pl
import pyarrow as pa

from tracekit import schema
from tracekit.engine.tables import TraceTables

# Host-side kinds that nest on a thread; GPU ops live on streams and are linked by launch/stream edges instead.
NESTING_KINDS = ("trace", "user_annotation", "python_function", "cpu_op", "runtime", "driver", "overhead", "other")
# Among events with identical start and duration, the outer one comes first in this order.
NESTING_RANK = {kind: i for i, kind in enumerate(NESTING_KINDS)}

LAUNCHER_KINDS = ("runtime", "driver")
# Runtime calls that enqueue GPU work (and so should have a GPU op with their correlation).
LAUNCH_CALL_PATTERN = r"(?i)(launch|memcpy|memset)"


def build_edges(tables: TraceTables) -> TraceTables:
    """Tables with `edges` filled (nest, launch, stream, sync, flow) and what could not be linked in `diagnostics`."""
    nest, nest_notes = nest_edges(tables.events)
    with tables.connect() as con:
        # Later joins reuse these intermediate results, so each is computed once and registered by name.
        def materialise(name: str, sql: str) -> pa.Table:
            result = con.sql(sql).to_arrow_table()
            con.register(name, result)
            return result

        launch = materialise("launch_edges", LAUNCH_EDGES_SQL)
        stream = con.sql(STREAM_EDGES_SQL).to_arrow_table()
        launch_notes = con.sql(UNLINKED_SQL).to_arrow_table()
        materialise("host_calls", HOST_CALLS_SQL)
        materialise("gpu_launched", GPU_LAUNCHED_SQL)
        materialise("sync_edges", SYNC_EDGES_SQL)
        # Two sync events of one call would give the same edge twice; each still counts as resolved.
        sync = con.sql("select distinct on (rank, src, dst) * from sync_edges").to_arrow_table()
        sync_notes = con.sql(UNRESOLVED_SYNC_SQL).to_arrow_table()
        materialise("flow_bindings", FLOW_BINDINGS_SQL)
        flow = con.sql(FLOW_EDGES_SQL).to_arrow_table()
        flow_notes = con.sql(UNBOUND_FLOW_SQL).to_arrow_table()
    edges = pa.concat_tables([schema.conform("edges", t) for t in (nest, launch, stream, sync, flow)])
    notes = pa.concat_tables([tables.diagnostics] + [schema.conform("diagnostics", t)
                                                     for t in (nest_notes, launch_notes, sync_notes, flow_notes)])
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
    # No search crosses a segment start, so blocks longer than the longest segment are never used: the depth (and
    # the cost per element) depends on the longest thread, not on how many threads or ranks there are.
    longest = int((np.arange(n) - start).max()) + 1 if n else 0
    table = [values]
    while (1 << len(table)) <= longest:
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
with launch as (select * from launch_edges)
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


# --- sync edges -------------------------------------------------------------------------------------------------
# A `cuda_sync` event says which host call waited (its correlation) and, for event waits, which cudaEventRecord it
# waited on (`wait_on_event_correlation`) on which stream (`wait_on_stream`). The GPU work waited for is the last GPU
# op on that stream whose launch call started before the record call (or, for stream and device syncs, before the
# waiting call itself). Ids of -1 (libkineto before its cuda_sync fix) name nothing: such events go to diagnostics.

SYNC_KINDS = ("Event Sync", "Stream Wait Event", "Stream Sync", "Context Sync")
EVENT_WAIT_KINDS = ("Event Sync", "Stream Wait Event")

# One host call per (rank, correlation): duplicated zero-length runtime rows resolve to the longest, then lowest id.
HOST_CALLS_SQL = f"""
select rank, correlation, id, ts, name from events
where kind in {LAUNCHER_KINDS} and correlation is not null and ts is not null
qualify row_number() over (partition by rank, correlation order by dur desc nulls last, id) = 1
"""

# Every GPU op on a stream with the start of the call that launched it. An op with no launcher in the trace was
# queued before its own start, which is the latest launch time the trace proves.
GPU_LAUNCHED_SQL = f"""
select g.rank, g.id, g.device, g.stream, g.ts, g.ts + coalesce(g.dur, 0) as end_ts,
       coalesce(c.ts, g.ts) as launched_ts
from events g
left join launch_edges l on l.rank = g.rank and l.dst = g.id
left join (select rank, id, ts from events where kind in {LAUNCHER_KINDS}) c on c.rank = l.rank and c.id = l.src
where g.kind in {schema.GPU_KINDS} and g.stream is not null and g.ts is not null
"""

SYNC_EDGES_SQL = f"""
with syncs as (
    select s.rank, s.id as sync_id, s.sync_kind, s.device, s.stream, s.wait_on_stream,
           c.id as call_id, c.ts as call_ts, r.ts as record_ts
    from events s
    join host_calls c on c.rank = s.rank and c.correlation = s.correlation
    left join host_calls r on r.rank = s.rank and r.correlation = s.wait_on_event_correlation
    where s.kind = 'sync'
),
-- Where each sync looks for the GPU work it waits on: a stream, and the time that work must have been launched by.
targets as (
    select *, wait_on_stream as waited_stream, record_ts as launched_before from syncs
    where sync_kind in {EVENT_WAIT_KINDS} and wait_on_stream >= 0
    union all
    select *, stream, call_ts from syncs where sync_kind = 'Stream Sync' and stream >= 0
    union all
    select s.*, d.stream, s.call_ts
    from syncs s
    join (select distinct rank, device, stream from gpu_launched) d on d.rank = s.rank and d.device = s.device
    where s.sync_kind = 'Context Sync'
),
-- Ops launched together (one graph launch) share a launch time: the last of them to run is "the last launched".
last_launched as (
    select * from gpu_launched
    qualify row_number() over (partition by rank, device, stream, launched_ts order by ts desc, id desc) = 1
),
first_launched as (
    select * from gpu_launched
    qualify row_number() over (partition by rank, device, stream, launched_ts order by ts, id) = 1
),
waited as (
    select t.*, g.id as src, g.end_ts as src_end
    from targets t asof join last_launched g
      on g.rank = t.rank and g.device = t.device and g.stream = t.waited_stream and g.launched_ts < t.launched_before
)
select rank, sync_id, src, call_id as dst, 'sync' as kind, sync_kind as subkind, call_ts - src_end as lag
from waited where sync_kind <> 'Stream Wait Event'
union all
-- The waiting stream's next op, launched after cudaStreamWaitEvent, cannot start before the waited op ends.
select w.rank, w.sync_id, w.src, g.id, 'sync', w.sync_kind, g.ts - w.src_end
from (select * from waited where sync_kind = 'Stream Wait Event' and stream >= 0) w
asof join first_launched g
  on g.rank = w.rank and g.device = w.device and g.stream = w.stream and g.launched_ts > w.call_ts
"""

# Every sync event that gave no edge, with the first reason that explains it.
UNRESOLVED_SYNC_SQL = f"""
with unresolved as (
    select s.rank, s.id, s.sync_kind, s.device, s.stream, s.wait_on_stream, s.wait_on_event_correlation,
           s.correlation, c.name as call_name, c.id as call_id, r.id as record_id, r.ts as record_ts,
           s.sync_kind is null or s.sync_kind not in {SYNC_KINDS} as kind_unknown,
           s.sync_kind in {EVENT_WAIT_KINDS} and coalesce(s.wait_on_stream, -1) < 0 as recorded_stream_unknown,
           s.sync_kind in {EVENT_WAIT_KINDS} and coalesce(s.wait_on_event_correlation, -1) < 0 as record_unknown,
           s.sync_kind in ('Stream Sync', 'Stream Wait Event') and coalesce(s.stream, -1) < 0 as stream_unknown
    from events s
    left join host_calls c on c.rank = s.rank and c.correlation = s.correlation
    left join host_calls r on r.rank = s.rank and r.correlation = s.wait_on_event_correlation
    anti join sync_edges e on e.rank = s.rank and e.sync_id = s.id
    where s.kind = 'sync'
)
select rank, id as position, 'edges' as stage,
    case
        when kind_unknown then 'sync_kind_unknown'
        when recorded_stream_unknown or record_unknown or stream_unknown then 'sync_target_unknown'
        when call_id is null then 'sync_call_not_in_trace'
        when sync_kind in {EVENT_WAIT_KINDS} and record_id is null then 'sync_record_not_in_trace'
        else 'sync_nothing_to_wait_for'
    end as reason,
    case
        when kind_unknown then 'cuda_sync_kind ' || coalesce(sync_kind, 'missing') || ' is not one tracekit knows'
        when recorded_stream_unknown or record_unknown or stream_unknown
            then sync_kind || ' does not say '
                 || case when recorded_stream_unknown then 'which stream the awaited event was recorded on'
                         when record_unknown then 'which cudaEventRecord it waited on'
                         else 'which stream waited' end
                 || ' (-1 or absent, as libkineto wrote before its cuda_sync fix), so what it waited for is unknown'
        when call_id is null
            then sync_kind || ': no runtime/driver call with correlation ' || coalesce(correlation::varchar, 'none')
                 || ' in the trace'
        when sync_kind in {EVENT_WAIT_KINDS} and record_id is null
            then sync_kind || ': the cudaEventRecord call (correlation ' || wait_on_event_correlation::varchar
                 || ') is not in the trace'
        when sync_kind = 'Stream Sync'
            then call_name || ': no GPU op on stream ' || stream::varchar || ' was launched before it'
        when sync_kind = 'Context Sync'
            then call_name || ': no GPU op on device ' || coalesce(device::varchar, '?') || ' was launched before it'
        when not exists (select 1 from gpu_launched g where g.rank = u.rank and g.device = u.device
                         and g.stream = u.wait_on_stream and g.launched_ts < u.record_ts)
            then sync_kind || ': no GPU op on stream ' || wait_on_stream::varchar
                 || ' was launched before the cudaEventRecord (correlation ' || wait_on_event_correlation::varchar
                 || '): nothing in the trace to wait for'
        else 'Stream Wait Event: no GPU op on the waiting stream ' || stream::varchar
             || ' was launched after the wait'
    end as detail,
    false as dropped
from unresolved u
"""


# --- flow edges -------------------------------------------------------------------------------------------------
# A `fwdbwd` flow starts (`s`) at the forward op and finishes (`f`, binding point `e`: the enclosing slice) at the
# backward op. Both endpoints sit on a cpu_op of their thread: the latest-starting one at or before the endpoint,
# provided it is still open there (among ops starting together, the innermost, as trace viewers bind).
FLOW_BINDINGS_SQL = """
with endpoints as (
    select rank, id, flow_id, phase, cat, pid, tid, ts from flows
    where cat = 'fwdbwd' and phase in ('s', 'f')
),
ops as (
    select rank, pid, tid, id, ts, ts + coalesce(dur, 0) as end_ts from events
    where kind = 'cpu_op' and ts is not null
    qualify row_number() over (partition by rank, pid, tid, ts order by end_ts, id desc) = 1
)
select p.rank, p.id as endpoint, p.flow_id, p.phase, p.cat, p.ts,
       case when o.end_ts >= p.ts then o.id end as op, o.ts as op_ts, o.end_ts as op_end
from endpoints p asof left join ops o
  on o.rank = p.rank and o.pid = p.pid and o.tid = p.tid and o.ts <= p.ts
"""

FLOW_EDGES_SQL = """
select s.rank, s.op as src, f.op as dst, 'flow' as kind, s.cat as subkind, f.op_ts - s.op_end as lag
from flow_bindings s join flow_bindings f on f.rank = s.rank and f.cat = s.cat and f.flow_id = s.flow_id
where s.phase = 's' and f.phase = 'f' and s.op is not null and f.op is not null
"""

UNBOUND_FLOW_SQL = """
select b.rank, b.endpoint as position, 'edges' as stage,
       case when b.op is null then 'flow_endpoint_unbound' else 'flow_unpaired' end as reason,
       case when b.op is null
            then b.cat || ' flow ' || b.flow_id::varchar || ' endpoint ' || b.phase
                 || ' sits on no cpu_op of its thread'
            else b.cat || ' flow ' || b.flow_id::varchar || ' has a bound ' || b.phase || ' endpoint but no bound '
                 || case b.phase when 's' then 'f' else 's' end || ' endpoint'
       end as detail,
       false as dropped
from flow_bindings b
where b.op is null or not exists (
    select 1 from flow_bindings o
    where o.rank = b.rank and o.cat = b.cat and o.flow_id = b.flow_id and o.phase <> b.phase and o.op is not null)
"""
