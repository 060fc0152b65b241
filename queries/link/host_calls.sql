-- question: Which host call has each (rank, correlation)?
-- inputs: events
-- columns:
--   rank: rank
--   correlation: the call's correlation id
--   id: events.id of the call
--   ts: ns, the call's start
--   name: the call's name
--   pid: the calling process, as written in the trace
--   tid: the calling thread, as written in the trace
-- notes: One call per (rank, correlation): duplicated zero-length runtime rows resolve to the longest, then lowest id.
select rank, correlation, id, ts, name, pid, tid from events
where kind in ('runtime', 'driver') and correlation is not null and ts is not null
qualify row_number() over (partition by rank, correlation order by dur desc nulls last, id) = 1
