-- question: Which cpu_op does each fwdbwd flow endpoint sit on?
-- inputs: flows, events
-- columns:
--   rank: rank
--   endpoint: flows.id of the endpoint
--   flow_id: the flow's id (both endpoints share it)
--   phase: s (start, at the forward op) or f (finish, at the backward op)
--   cat: flow category (fwdbwd)
--   ts: ns, the endpoint's time
--   op: events.id of the cpu_op the endpoint sits on (null: none)
--   op_ts: ns, that op's start
--   op_end: ns, that op's end
-- notes: A `fwdbwd` flow starts (`s`) at the forward op and finishes (`f`, binding point `e`: the enclosing slice) at the
--   backward op. Both endpoints sit on a cpu_op of their thread: the latest-starting one at or before the endpoint,
--   provided it is still open there (among ops starting together, the innermost, as trace viewers bind).
with endpoints as (
    select rank, id, flow_id, phase, cat, pid, tid, ts from flows
    where cat = 'fwdbwd' and phase in ('s', 'f')
),
-- the ops of the threads endpoints sit on (none without fwdbwd flows: serving traces)
ops as (
    select rank, pid, tid, id, ts, ts + coalesce(dur, 0) as end_ts from events
    semi join (select distinct rank, pid, tid from endpoints) t
        on t.rank = events.rank and t.pid = events.pid and t.tid = events.tid
    where kind = 'cpu_op' and ts is not null
    qualify row_number() over (partition by rank, pid, tid, ts order by end_ts, id desc) = 1
)
select p.rank, p.id as endpoint, p.flow_id, p.phase, p.cat, p.ts,
       case when o.end_ts >= p.ts then o.id end as op, o.ts as op_ts, o.end_ts as op_end
from endpoints p asof left join ops o
  on o.rank = p.rank and o.pid = p.pid and o.tid = p.tid and o.ts <= p.ts
