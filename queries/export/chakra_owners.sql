-- question: Which Chakra node does each host event fold into?
-- inputs: events
-- columns:
--   rank: rank
--   id: events.id of a cpu_op, runtime or driver event
--   node: events.id of the node it folds into: the outermost cpu_op, runtime or driver event that contains it on
--     its thread (itself when none does)
-- notes: Containment by time on (pid, tid), as the nest edges are built: in start order (longest first on a tie),
--   an event is outermost when it ends after every earlier one of its thread has ended; the others belong to the
--   latest outermost event started at or before them. Annotations and Python functions are not host ops: an op
--   under a ProfilerStep or record_function range is still outermost.
with
host as (
    select rank, id, coalesce(pid, '') as pid, coalesce(tid, '') as tid, ts, ts + coalesce(dur, 0) as end_ns
    from events
    where kind in ('cpu_op', 'runtime', 'driver') and ts is not null
),
ordered as materialized (
    select *,
           row_number() over thread_order as pos,
           max(end_ns) over (thread_order rows between unbounded preceding and 1 preceding) as earlier_end
    from host
    window thread_order as (partition by rank, pid, tid order by ts, end_ns desc, id)
),
outermost as (
    select rank, pid, tid, pos, id from ordered where earlier_end is null or end_ns > earlier_end
)
select o.rank, o.id, t.id as node
from ordered o
asof join outermost t on t.rank = o.rank and t.pid = o.pid and t.tid = o.tid and t.pos <= o.pos
