-- question: Which GPU op runs next on the same (rank, device, stream)?
-- inputs: events
-- columns:
--   rank: rank
--   src: events.id, the edge's source
--   dst: events.id, the edge's destination
--   kind: edge kind (stream)
--   subkind: null
--   lag: ns, gap from one op's end to the next op's start
with ordered as (
    select rank, id, ts, ts + coalesce(dur, 0) as end_ts,
           lead(id) over w as next_id, lead(ts) over w as next_ts
    from events
    where kind in ('kernel', 'memcpy', 'memset') and stream is not null and ts is not null
    window w as (partition by rank, device, stream order by ts, id)
)
select rank, id as src, next_id as dst, 'stream' as kind, null as subkind, next_ts - end_ts as lag
from ordered where next_id is not null
