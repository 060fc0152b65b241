-- question: When was each GPU op on a stream launched?
-- inputs: events, launch_edges
-- columns:
--   rank: rank
--   id: events.id of the GPU op
--   device: GPU device
--   stream: GPU stream
--   ts: ns, the op's start
--   end_ts: ns, the op's end
--   launched_ts: ns, its launch call's start (the op's own start when no launcher is in the trace)
--   launch_pid: the launch call's process (null when no launcher is in the trace)
--   launch_tid: the launch call's thread (null when no launcher is in the trace)
-- notes: An op with no launcher in the trace was queued before its own start, which is the latest launch time the trace
--   proves. launch_edges is the result of launch_edges.sql.
select g.rank, g.id, g.device, g.stream, g.ts, g.ts + coalesce(g.dur, 0) as end_ts,
       coalesce(c.ts, g.ts) as launched_ts, c.pid as launch_pid, c.tid as launch_tid
from events g
left join launch_edges l on l.rank = g.rank and l.dst = g.id
left join (select rank, id, ts, pid, tid from events where kind in ('runtime', 'driver')) c on c.rank = l.rank and c.id = l.src
where g.kind in ('kernel', 'memcpy', 'memset') and g.stream is not null and g.ts is not null
