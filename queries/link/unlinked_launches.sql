-- question: Which GPU ops have no launch call, and which launch calls enqueued no GPU op?
-- inputs: events, launch_edges
-- notes: GPU work queued before the profiling window has no launcher in the file; calls that should have enqueued GPU
--   work but did not (graph capture, some memsets) have no GPU op. Both are flagged (diagnostics rows), not guessed.
--   launch_edges is the result of launch_edges.sql.
with launch as (select * from launch_edges)
select e.rank, e.id as position, 'edges' as stage, 'no_launcher' as reason,
       e.kind || ' ' || e.name || ' has no launch call in the trace (queued before the profiling window?)' as detail,
       false as dropped
from events e anti join launch l on l.rank = e.rank and l.dst = e.id
where e.kind in ('kernel', 'memcpy', 'memset')
union all
select e.rank, e.id, 'edges', 'launch_without_gpu_op',
       e.name || ' (correlation ' || coalesce(e.correlation::varchar, 'none') || ') enqueued no GPU op in the trace',
       false
from events e anti join launch l on l.rank = e.rank and l.src = e.id
where e.kind in ('runtime', 'driver') and regexp_matches(e.name, '(?i)(launch|memcpy|memset)')
