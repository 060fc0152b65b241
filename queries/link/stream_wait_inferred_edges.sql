-- question: Which GPU op on another stream did a GPU op wait for, where neither its stream nor its launch explains
--   when it started (a cross-stream event wait that no cuda_sync event records)?
-- inputs: events, launch_edges, stream_edges, sync_edges
-- notes: A GPU op can start once the op before it on its stream has ended and its launch call has queued it; an op
--   that started more than 25 µs (the lag bound of sync_inferred_edges.sql) after both, just after an op on another
--   stream of its device ended (at most 25 µs before), waited for that op: a cudaStreamWaitEvent on an event that
--   op's stream recorded (NCCL kernels and copies on side streams, e.g.). Its launch call queued it at the call's
--   end, or at the call's start when the call still ran as the op started (a blocking copy queues its op, then
--   waits). An op with neither a stream predecessor nor a launch call in the trace is not judged. An op with a
--   recorded sync edge into it (Stream Wait Event) gets none. stream_edges, launch_edges and sync_edges are the
--   results of those passes. lag is the op's start minus the waited op's end, as for sync edges.
with ops as (
    select g.rank, g.id, g.device, g.stream, g.ts,
           g.ts - s.lag as prev_end,
           case when c.ts + coalesce(c.dur, 0) <= g.ts then c.ts + coalesce(c.dur, 0) else c.ts end as queued_at
    from events g
    left join stream_edges s on s.rank = g.rank and s.dst = g.id
    left join launch_edges l on l.rank = g.rank and l.dst = g.id
    left join events c on c.rank = l.rank and c.id = l.src
    where g.kind in ('kernel', 'memcpy', 'memset') and g.ts is not null and g.stream is not null
),
unexplained as (
    select o.*, greatest(coalesce(prev_end, queued_at), coalesce(queued_at, prev_end)) as released_at,
           25000 as max_lag_ns
    from ops o
    anti join sync_edges r on r.rank = o.rank and r.dst = o.id
    where coalesce(prev_end, queued_at) is not null
),
-- GPU ops by end, one per (device, end time): the highest id among ops ending together
device_ends as (
    select rank, id, device, stream, ts + coalesce(dur, 0) as end_ns
    from events
    where kind in ('kernel', 'memcpy', 'memset') and ts is not null
    qualify row_number() over (partition by rank, device, ts + coalesce(dur, 0) order by id desc) = 1
),
waits as (
    select u.rank, u.id, u.stream, u.ts, u.released_at, u.max_lag_ns, w.id as src, w.stream as src_stream,
           w.end_ns as src_end
    from (select * from unexplained where ts - released_at > max_lag_ns) u
    asof join device_ends w on w.rank = u.rank and w.device = u.device and w.end_ns <= u.ts
)
select rank, src, id as dst, 'stream_wait_inferred' as kind, 'cross_stream' as subkind, ts - src_end as lag
from waits
where src_stream <> stream and src_end > released_at and ts - src_end <= max_lag_ns
