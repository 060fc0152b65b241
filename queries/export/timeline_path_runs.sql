-- question: Where does each window's critical path run, one CPU thread or GPU stream at a time, for the timeline's
--   critical-path track and its arrows?
-- inputs: events, edges, graph_kernels
-- includes: lib/critical_path, lib/steps
-- columns:
--   rank: rank
--   step: N of ProfilerStep#N (null: the whole trace of a rank without steps)
--   window_start_ns: ns, start of the window (as critical_path's)
--   window_end_ns: ns, its end
--   start_ns: ns, start of the run
--   end_ns: ns, its end
--   segments: critical_path segments in the run
--   first_position: critical_path position of its first segment
--   last_position: of its last
--   category: the category with the most of the run's time (a tie: the last by name)
--   time_us: JSON text, an object category → µs of the run's time, most first (text: a map does not survive the
--     timeline's Polars pass alike in every Polars version)
--   events: events the run's segments belong to
--   longest: the five events with the most of the run's time, as {event: name, us: µs}, most first
--   only_event: the name of its one event, where it has one
--   first_event_id: the event of its first segment that has one (null: none has)
--   first_event_start_ns: ns, that segment's start
--   first_event_end_ns: ns, that segment's end
--   last_event_id: the event of its last segment that has one
--   last_event_start_ns: ns, that segment's start
--   last_event_end_ns: ns, that segment's end
-- notes: The segments are critical_path's (the same walk, lib/critical_path.sql, over the same windows), grouped
--   into runs: consecutive segments whose events are on one CPU thread (pid, tid) or GPU stream (device, stream);
--   a segment without an event (host time between top-level calls, idle before a thread's first call) is on the
--   thread it was walked on, and the idle after a window's last event is a run of its own. The path moves
--   between tracks only at a launch, a sync or a hand-over between threads; within a run it goes through the
--   track's calls one after the other (a thread's calls and their children, a stream's ops), so the track's own
--   slices under a run are the path's events. critical_path itself names every segment (279k on the SD3.5 trace
--   of bench/recorded, whose path is 13 runs): here only the runs' longest events are named.
with
windows as materialized (
    select rank, window_id, step, start_ns, work_end_ns as end_ns from step_or_trace_windows()
),
-- each segment on its event's lane, the walk's own thread or stream of it (without an event: the lane of the
-- walk's run; the idle after the window's last event: none)
segments as materialized (
    select rank, window_id, iteration, event_id, category, start_ns, end_ns, duration_ns,
           coalesce(event_lane, lane) as lane
    from _critical_path_walk('windows')
),
-- The walk goes down one lane at a time (a run of the walk, `iteration`), whose segments are contiguous in time;
-- its last state may give time to an event on another lane (a launch call still running when its op started).
-- Pieces (a walk run's segments on one lane) are ordered and merged into runs without sorting the segments: a
-- sort of the 279k segments of the SD3.5 trace and the windows over them took 0.12 s, most of this query.
pieces as (
    select rank, window_id, iteration, lane, min(start_ns) as start_ns, max(end_ns) as end_ns, count(*) as segments,
           arg_min({'id': event_id, 'start_ns': start_ns, 'end_ns': end_ns}, start_ns)
               filter (where event_id is not null) as first_event,
           arg_max({'id': event_id, 'start_ns': start_ns, 'end_ns': end_ns}, start_ns)
               filter (where event_id is not null) as last_event
    from segments group by all
),
numbered as materialized (
    select *, sum(changed::int) over in_time as run,
           sum(segments) over in_time - segments + 1 as first_position
    from (select *, lane is distinct from lag(lane) over (partition by rank, window_id order by start_ns) as changed
          from pieces)
    window in_time as (partition by rank, window_id order by start_ns rows between unbounded preceding and current row)
),
run_spans as (
    select rank, window_id, run, min(start_ns) as start_ns, max(end_ns) as end_ns, sum(segments) as segments,
           min(first_position) as first_position, max(first_position + segments - 1) as last_position,
           arg_min(first_event, start_ns) filter (where first_event is not null) as first_event,
           arg_max(last_event, start_ns) filter (where last_event is not null) as last_event
    from numbered group by all
),
categories as (
    select rank, window_id, run, arg_max(category, (ns, category)) as category,
           to_json(map_from_entries(list((category::varchar, round(ns / 1000, 3))
                                         order by ns desc, category)))::varchar
               as time_us
    from (select n.rank, n.window_id, n.run, s.category, sum(s.ns) as ns
          from (select rank, window_id, iteration, lane, category, sum(duration_ns) as ns from segments group by all) s
          join numbered n on n.rank = s.rank and n.window_id = s.window_id and n.iteration = s.iteration
                         and n.lane is not distinct from s.lane
          group by all)
    group by all
),
run_events as (
    select rank, window_id, run, count(*) as events, max_by(event_id, (ns, -event_id), 5) as longest_ids,
           max_by(ns, (ns, -event_id), 5) as longest_ns
    -- each segment to its run (a join to the few pieces), then one sum per event and run: summed per piece first,
    -- the path's events were grouped twice (SD3.5: 137k events, 29 of the query's 125 ms)
    from (select n.rank, n.window_id, n.run, s.event_id, sum(s.duration_ns) as ns
          from segments s
          join numbered n on n.rank = s.rank and n.window_id = s.window_id and n.iteration = s.iteration
                         and n.lane is not distinct from s.lane
          where s.event_id is not null
          group by all)
    group by all
),
-- names for the five longest events of each run only
longest_rows as (
    select rank, window_id, run, events, unnest(longest_ids) as id, unnest(longest_ns) as ns,
           generate_subscripts(longest_ids, 1) as i
    from run_events
),
longest as (
    select l.rank, l.window_id, l.run, any_value(l.events) as events,
           list({'event': e.name, 'us': round(l.ns / 1000, 3)} order by l.i) as longest,
           if(any_value(l.events) = 1, any_value(e.name), null) as only_event
    from longest_rows l
    join events e on e.rank = l.rank and e.id = l.id
    group by l.rank, l.window_id, l.run
)
select s.rank, w.step, w.start_ns as window_start_ns, w.end_ns as window_end_ns, s.start_ns, s.end_ns,
       s.segments, s.first_position, s.last_position, c.category::varchar as category, c.time_us,
       coalesce(l.events, 0) as events,
       coalesce(l.longest, []) as longest, l.only_event,
       s.first_event.id as first_event_id, s.first_event.start_ns as first_event_start_ns,
       s.first_event.end_ns as first_event_end_ns, s.last_event.id as last_event_id,
       s.last_event.start_ns as last_event_start_ns, s.last_event.end_ns as last_event_end_ns
from run_spans s
join windows w on w.rank = s.rank and w.window_id = s.window_id
join categories c on c.rank = s.rank and c.window_id = s.window_id and c.run = s.run
left join longest l on l.rank = s.rank and l.window_id = s.window_id and l.run = s.run
order by s.rank, s.window_id, s.start_ns
