-- question: Which arrows does the all-ranks timeline draw, and where do their two ends sit?
-- inputs: edges, timeline_slices (rank, id, pid, tid, ts, end_ns of every slice placed), timeline_path (critical
--   path segments with their slice's pid and tid), $base (ns, the file's base time)
-- columns:
--   cat: launch, sync or critical_path
--   src_pid: pid of the start's slice
--   src_tid: tid of the start's slice
--   src_ts: µs text, the start: the middle of its slice
--   dst_pid: pid of the end's slice
--   dst_tid: tid of the end's slice
--   dst_ts: µs text, the end: the middle of its slice
-- notes: launch and sync edges whose two events are both on the timeline; and along the critical path, from each
--   segment's event to the next segment's (a different event), both on the timeline. Each end sits at the middle
--   of its slice, so it lands inside it (a viewer binds a flow end to the slice enclosing it on its track).
with
arrows as (
    select rank, src, dst, kind as cat, 0 as sort from edges where kind in ('launch', 'sync')
    union all
    select rank, event_id, next_event, 'critical_path', 1
    from (
        select rank, event_id, lead(event_id) over (partition by rank, step order by position) as next_event
        from timeline_path where event_id is not null
    )
    where next_event is not null and next_event <> event_id
)
select a.cat,
       s.pid as src_pid, s.tid as src_tid,
       format('{}.{:03d}', (s.ts + (s.end_ns - s.ts) // 2 - $base) // 1000, (s.ts + (s.end_ns - s.ts) // 2 - $base) % 1000) as src_ts,
       d.pid as dst_pid, d.tid as dst_tid,
       format('{}.{:03d}', (d.ts + (d.end_ns - d.ts) // 2 - $base) // 1000, (d.ts + (d.end_ns - d.ts) // 2 - $base) % 1000) as dst_ts
from arrows a
join timeline_slices s on s.rank = a.rank and s.id = a.src
join timeline_slices d on d.rank = a.rank and d.id = a.dst
order by a.sort, a.rank, s.ts, a.src, a.dst
