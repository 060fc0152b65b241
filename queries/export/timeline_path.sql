-- question: Which slices does the critical-path track of the all-ranks timeline hold?
-- inputs: path_runs (timeline_path_runs rows with the pid and tid of their critical-path track), placed_slices
--   (rank, id, track of every slice placed), $base (ns, the file's base time)
-- columns:
--   pid: pid of the rank's critical-path process
--   tid: tid of its track
--   body: the slice's JSON members except pid and tid: name = "category · where" (the category with the most of the
--     run's time, then its event where the run has one, else the track it ran on, without "rank R · "), cname
--     (Chrome's colour for that category: one colour per category), ts and dur in µs from the base, args: rank,
--     step, track, the run's segments and events (counts), first and last position (in critical_path), time_us (µs
--     per category) and longest (the five events with the most of the run's time, µs each)
-- notes: One slice per run of the path on one CPU thread or GPU stream (queries/export/timeline_path_runs.sql): the
--   track's own slices under it are the path's events, and an arrow joins consecutive runs. The runs of a window
--   tile it, so they never overlap. A slice per critical_path segment was 279k slices and 79 of the 131 MB timeline
--   of the SD3.5 trace of bench/recorded, whose path is 13 runs.
-- the slices of the runs' first and last events (a few), looked up once among every slice
with ends as materialized (
    select s.rank, s.id, s.track
    from placed_slices s
    semi join (select rank, first_event_id as id from path_runs union all select rank, last_event_id from path_runs) r
        on r.rank = s.rank and r.id = s.id
)
select r.pid, r.tid,
       '"ph":"X","cat":"critical_path","name":'
       -- the track without its "rank R · ": the slice is on the rank's critical-path process already
       || to_json(r.category || coalesce(' · ' || coalesce(r.only_event,
                                                           r.track[length('rank ' || r.rank || ' · ') + 1:]), ''))
       || ',"cname":' || to_json(case r.category
              when 'compute' then 'thread_state_running' when 'communication' then 'rail_animation'
              when 'memcpy' then 'rail_load' when 'memset' then 'rail_load' when 'cpu' then 'thread_state_runnable'
              when 'launch' then 'thread_state_iowait' when 'kernel_to_kernel_gap' then 'bad'
              when 'sync_wait' then 'terrible' when 'unexplained_gpu_wait' then 'thread_state_unknown'
              else 'grey' end)
       || ',"ts":' || format('{}.{:03d}', (r.start_ns - $base) // 1000, (r.start_ns - $base) % 1000)
       || ',"dur":' || format('{}.{:03d}', (r.end_ns - r.start_ns) // 1000, (r.end_ns - r.start_ns) % 1000)
       || ',"args":' || to_json({'rank': r.rank, 'step': r.step, 'track': r.track, 'segments': r.segments,
                                  'events': r.events, 'first_position': r.first_position,
                                  'last_position': r.last_position, 'time_us': json(r.time_us),
                                  'longest': r.longest}) as body
from (select r.*, coalesce(f.track, l.track) as track
      from path_runs r
      -- the track of its first event, or of its last where the first is not shown (--step: a step's path may
      -- start on an event of the step before)
      left join ends f on f.rank = r.rank and f.id = r.first_event_id
      left join ends l on l.rank = r.rank and l.id = r.last_event_id) r
order by r.rank, r.start_ns, r.window_start_ns, r.end_ns, r.tid
