-- question: Which cross-chain dependencies hold a replayed event back, with what measured lag?
-- outputs: replay_constraints
-- inputs: events, edges
-- columns:
--   rank: rank
--   src: events.id of the event whose END (launch_start: START) releases the dependant
--   dst: events.id of the dependant
--   kind: launch (dst's START waits for the launch call's end), launch_start (dst's START, from the launch call's
--     start: a call that launched the GPU op and then waited for it, a blocking memcpy), sync (dst's END: a host
--     call that waited for a GPU op, recorded or inferred), wait (dst's START: a GPU op after cudaStreamWaitEvent),
--     flow (dst's START: a backward op after its forward op), wake (a host thread that resumed after another
--     thread's point: src_end and dst_end say which points)
--   lag: ns, measured dst start (sync: dst end) - src end (launch_start: - src start; wake: dst's point - src's)
--   dst_ts: ns, dst's measured start
--   dst_dur: ns, dst's measured duration
--   inferred: true for a sync, wait or wake from an inferred edge (sync_inferred, stream_wait_inferred,
--     thread_wait_inferred: the trace recorded no event for it)
--   src_end: true when src's end releases the dependant, false its start
--   dst_end: true when the constraint holds dst's end (a sync; a wake into a call that waited), false its start
-- notes: From the launch, sync, sync_inferred, stream_wait_inferred, thread_wait_inferred and flow edges of
--   tracekit/link/edges.py;
--   nest and stream edges are the chains. A sync_inferred edge (src the GPU op waited for, dst the host call that
--   waited) is a sync like a recorded one, a stream_wait_inferred edge (GPU op -> a GPU op on another stream) a
--   wait like a recorded Stream Wait Event. A launch whose GPU op its own call waited for starts from the call's
--   start: from its end it would make a cycle (the call ends after the op, the op starts after the call ends). A
--   pair with both a recorded and an inferred edge is one constraint.
with waits as (  -- the lag from the events: an inferred edge's own lag column is not relied on
    select w.rank, w.src, w.dst, bool_and(w.kind <> 'sync') as inferred,
           any_value(d.ts - (g.ts + coalesce(g.dur, 0))) as lag
    from edges w
    join events g on g.rank = w.rank and g.id = w.src
    join events d on d.rank = w.rank and d.id = w.dst
    where w.kind in ('sync', 'sync_inferred', 'stream_wait_inferred')
    group by w.rank, w.src, w.dst
)
select l.rank, l.src, l.dst, case when w.rank is null then 'launch' else 'launch_start' end as kind,
       case when w.rank is null then l.lag else d.ts - c.ts end as lag,
       d.ts as dst_ts, coalesce(d.dur, 0) as dst_dur, false as inferred,
       w.rank is null as src_end, false as dst_end
from edges l
join events d on d.rank = l.rank and d.id = l.dst
join events c on c.rank = l.rank and c.id = l.src
left join waits w on w.rank = l.rank and w.src = l.dst and w.dst = l.src
where l.kind = 'launch'
union all
select s.rank, s.src, s.dst, case when d.kind in ('kernel', 'memcpy', 'memset') then 'wait' else 'sync' end,
       case when d.kind in ('kernel', 'memcpy', 'memset') then s.lag else s.lag + coalesce(d.dur, 0) end,
       d.ts, coalesce(d.dur, 0), s.inferred, true, d.kind not in ('kernel', 'memcpy', 'memset')
from waits s join events d on d.rank = s.rank and d.id = s.dst
union all
select f.rank, f.src, f.dst, 'flow', f.lag, d.ts, coalesce(d.dur, 0), false, true, false
from edges f join events d on d.rank = f.rank and d.id = f.dst
where f.kind = 'flow'
union all
select t.rank, t.src, t.dst, 'wake', t.lag, d.ts, coalesce(d.dur, 0), true,
       starts_with(t.subkind, 'end'), ends_with(t.subkind, 'end')
from edges t join events d on d.rank = t.rank and d.id = t.dst
where t.kind = 'thread_wait_inferred'
