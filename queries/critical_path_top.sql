-- question: Which ops and kernels carry the most time on the critical path, and how often are they on it?
-- inputs: events, edges, graph_kernels
-- includes: lib/critical_path
-- columns:
--   rank: rank
--   name: event name (the 50 longest per rank; "(other events)" sums the rest; "(no event)" is idle time
--     and host time between top-level events; ProfilerStep#N stands for every step annotation)
--   kind: event kind (cpu_op, kernel, runtime, ...; null for "(no event)" and "(other events)"); a name of
--     two kinds (an annotation and an op) is a row for each
--   category: critical-path category of the time (one name can appear under several: a kernel's own time is
--     gpu_compute, the gap before it kernel_to_kernel_gap)
--   time_ms: ms, time on the path, all steps together
--   percent: percent of the path (all windows of the rank)
--   segments: critical_path segments
--   events: distinct events (calls, launches) on the path
--   steps: steps (windows) in which the name is on the path
-- notes: Bounded: at most 51 rows per rank (the rest in "(other events)"), whatever the trace's
--   length. The full path, segment by segment, is the critical_path analysis (`tracekit sql`, `tracekit run`).
with
-- the segments come summed per event (step_critical_paths), their names looked up then: far fewer rows than
-- segments (an inference trace whose path runs through every Python frame: 149k rows for 297k segments)
by_event as materialized (
    select rank, event_id, category, window_start_ns, duration_ns as time_ns, segments
    from step_critical_paths()
),
-- count(distinct) of events and of windows per name without a distinct aggregate over the named rows (DuckDB
-- materialized them and hashed the names three more times: 393M instructions on OWLv2): the rows summed per
-- window, where an event has one row per category (step_critical_paths), so a name's windows are its rows here
-- and its events their event rows less the repeats of an event in several windows (overlapping steps; few)
by_window as (
    -- ProfilerStep#N are one name: the step annotations' own time
    select p.rank, _critical_path_name(e.name) as name, e.kind, p.category, p.window_start_ns,
           sum(p.time_ns) as time_ns, sum(p.segments) as segments, count(p.event_id) as event_rows
    from by_event p
    left join events e on e.rank = p.rank and e.id = p.event_id
    group by all
),
repeats as (
    select p.rank, _critical_path_name(e.name) as name, e.kind, p.category, sum(p.windows - 1) as repeats
    from (select rank, event_id, category, count(*) as windows from by_event where event_id is not null
          group by all having count(*) > 1) p
    left join events e on e.rank = p.rank and e.id = p.event_id
    group by all
),
by_name as (
    select w.rank, w.name, w.kind, w.category, sum(w.time_ns) as time_ns, sum(w.segments) as segments,
           sum(w.event_rows) - coalesce(any_value(r.repeats), 0) as events, count(w.window_start_ns) as steps
    from by_window w
    left join repeats r on r.rank = w.rank and r.name = w.name and r.kind is not distinct from w.kind
                       and r.category = w.category
    group by w.rank, w.name, w.kind, w.category
),
ranked as (
    select *, row_number() over (partition by rank order by time_ns desc, name, kind, category) as place,
           sum(time_ns) over (partition by rank) as path_ns
    from by_name
),
kept as (
    select rank, name, kind, category, time_ns, segments, events, steps, path_ns, false as is_rest
    from ranked where place <= 50
    union all
    select rank, '(other events)', null, null, sum(time_ns), sum(segments), sum(events), max(steps),
           any_value(path_ns), true
    from ranked where place > 50
    group by rank
)
select rank, name, kind, category::varchar as category, time_ns / 1e6 as time_ms,
       100.0 * time_ns / nullif(path_ns, 0) as percent,
       segments::bigint as segments, events::bigint as events, steps
from kept
order by rank, is_rest, time_ns desc, name, kind, category
