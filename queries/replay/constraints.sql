-- question: Which cross-chain dependencies hold a replayed event back, with what measured lag?
-- inputs: events, edges
-- columns:
--   rank: rank
--   src: events.id of the event whose END releases the dependant
--   dst: events.id of the dependant
--   kind: launch (dst's START waits for the launch call's end), sync (dst's END: a host call that waited for a
--     GPU op), wait (dst's START: a GPU op after cudaStreamWaitEvent), flow (dst's START: a backward op after its
--     forward op)
--   lag: ns, measured dst start (sync: dst end) - src end
--   dst_ts: ns, dst's measured start
--   dst_dur: ns, dst's measured duration
-- notes: From the launch, sync and flow edges of tracekit/link/edges.py; nest and stream edges are the chains.
select l.rank, l.src, l.dst, 'launch' as kind, l.lag, d.ts as dst_ts, coalesce(d.dur, 0) as dst_dur
from edges l join events d on d.rank = l.rank and d.id = l.dst
where l.kind = 'launch'
union all
select s.rank, s.src, s.dst, case when d.kind in ('kernel', 'memcpy', 'memset') then 'wait' else 'sync' end,
       case when d.kind in ('kernel', 'memcpy', 'memset') then s.lag else s.lag + coalesce(d.dur, 0) end,
       d.ts, coalesce(d.dur, 0)
from edges s join events d on d.rank = s.rank and d.id = s.dst
where s.kind = 'sync'
union all
select f.rank, f.src, f.dst, 'flow', f.lag, d.ts, coalesce(d.dur, 0)
from edges f join events d on d.rank = f.rank and d.id = f.dst
where f.kind = 'flow'
