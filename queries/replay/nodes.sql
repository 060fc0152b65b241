-- question: Which events does a replay re-time, on which chain, with which parent?
-- outputs: replay_nodes
-- inputs: events, edges
-- columns:
--   rank: rank
--   id: events.id
--   is_gpu: true for a GPU op (kernel, memcpy, memset) on a stream, false for a host event on a thread
--   chain: the thread (rank, pid, tid) or stream (rank, device, stream) the event runs on, as one text key
--   ts: ns, measured start
--   end_ns: ns, measured end (ts + dur, dur null counted 0)
--   parent: events.id of the nest parent (host events; null for a root or a GPU op)
--   outer_first: among host events with the same start and end, the outer one sorts first (nesting order)
-- notes: The same events and order the nest edges were built from (tracekit/link/edges.py NESTING_KINDS); GPU
--   annotations and sync markers are projections, not work, and are not re-timed.
select e.rank, e.id, e.kind in ('kernel', 'memcpy', 'memset') as is_gpu,
       case when e.kind in ('kernel', 'memcpy', 'memset')
            then 'g' || e.rank::varchar || '/' || coalesce(e.device, -1)::varchar || '/' || e.stream::varchar
            else 'h' || e.rank::varchar || '/' || coalesce(e.pid, '') || '/' || coalesce(e.tid, '') end as chain,
       e.ts, e.ts + greatest(coalesce(e.dur, 0), 0) as end_ns,
       n.src as parent,
       case e.kind when 'trace' then 0 when 'user_annotation' then 1 when 'python_function' then 2 when 'cpu_op' then 3
                   when 'runtime' then 4 when 'driver' then 5 when 'overhead' then 6 else 7 end as outer_first
from events e
left join edges n on n.kind = 'nest' and n.rank = e.rank and n.dst = e.id
where e.ts is not null
  and (e.kind in ('trace', 'user_annotation', 'python_function', 'cpu_op', 'runtime', 'driver', 'overhead', 'other')
       or (e.kind in ('kernel', 'memcpy', 'memset') and e.stream is not null))
