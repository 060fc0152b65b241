-- question: Which slices does the critical-path track of the all-ranks timeline hold?
-- inputs: path_segments (critical_path rows with the track's pid and tid), $base (ns, the file's base time)
-- columns:
--   pid: pid of the rank's critical-path process
--   tid: tid of its track
--   body: the slice's JSON members except pid and tid: name = "category · event" (the segment's category, then
--     the event its time belongs to; the category alone where it has none), cname (Chrome's colour for the
--     category: one colour per category, whatever the event), ts and dur in µs from the base, args naming the
--     category, event, step, position and rank
-- notes: One slice per segment of critical_path (queries/critical_path.sql): the segments of a window tile it, so
--   the slices never overlap.
select pid, tid,
       '"ph":"X","cat":"critical_path","name":' || to_json(category || coalesce(' · ' || name, ''))
       || ',"cname":' || to_json(case category
              when 'compute' then 'thread_state_running' when 'communication' then 'rail_animation'
              when 'memcpy' then 'rail_load' when 'memset' then 'rail_load' when 'cpu' then 'thread_state_runnable'
              when 'launch' then 'thread_state_iowait' when 'kernel_to_kernel_gap' then 'bad'
              when 'sync_wait' then 'terrible' else 'grey' end)
       || ',"ts":' || format('{}.{:03d}', (start_ns - $base) // 1000, (start_ns - $base) % 1000)
       || ',"dur":' || format('{}.{:03d}', duration_ns // 1000, duration_ns % 1000)
       || ',"args":' || to_json({'category': category, 'event': name, 'event_id': event_id, 'step': step,
                                  'position': position, 'rank': rank}) as body
from path_segments
order by rank, start_ns, position
