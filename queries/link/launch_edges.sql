-- question: Which runtime/driver call launched each GPU op (one launch edge per GPU op)?
-- inputs: events
-- columns:
--   rank: rank
--   src: events.id, the edge's source
--   dst: events.id, the edge's destination
--   kind: edge kind (launch)
--   subkind: 'graph' for a call that launched several ops, else null
--   lag: ns, GPU op start − call end
-- notes: A correlation with several launch calls (duplicated zero-length runtime rows in some traces) is resolved to the
--   longest call that started no later than the GPU op, then the lowest id. subkind 'graph': a call that launched
--   several ops (a CUDA/HIP graph launch).
with gpu as (
    select rank, id, correlation, ts from events
    where kind in ('kernel', 'memcpy', 'memset') and correlation is not null
),
launcher as (
    select rank, id, correlation, ts, dur from events
    where kind in ('runtime', 'driver') and correlation is not null
),
matched as (
    select g.rank, l.id as src, g.id as dst, g.ts - (l.ts + coalesce(l.dur, 0)) as lag,
           row_number() over (partition by g.rank, g.id
                              order by (l.ts <= g.ts) desc, l.dur desc nulls last, l.id) as choice
    from gpu g join launcher l on l.rank = g.rank and l.correlation = g.correlation
),
chosen as (select * from matched where choice = 1)
select rank, src, dst, 'launch' as kind,
       case when count(*) over (partition by rank, src) > 1 then 'graph' end as subkind,
       lag
from chosen
