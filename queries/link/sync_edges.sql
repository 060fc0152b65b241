-- question: Which GPU op did each cuda_sync event wait for, and what waited on it?
-- inputs: events, host_calls, gpu_launched, sync_records
-- columns:
--   rank: rank
--   sync_id: events.id of the cuda_sync event that records the wait
--   src: events.id of the GPU op waited for
--   dst: events.id of the host call or GPU op that waited
--   kind: edge kind (sync)
--   subkind: the cuda_sync event's sync kind; `(record inferred)` appended where the event named no record
--   lag: ns, from the end of the op waited for to the start of what waited
-- notes: A `cuda_sync` event says which host call waited (its correlation) and, for event waits, which event record it
--   waited on on which stream (sync_records.sql: named by the event, else inferred by thread order). The GPU work
--   waited for is the last GPU op on that stream whose launch call started before the record call (or, for stream
--   and device syncs, before the waiting call itself). An inferred record the timing refutes (what waited started, or
--   the call returned, before that op ended) gives no edge. Waits that give none go to diagnostics
--   (unresolved_syncs.sql). host_calls, gpu_launched and sync_records are the results of those queries.
with syncs as (
    select s.rank, s.id as sync_id, s.sync_kind, s.device, s.stream,
           c.id as call_id, c.ts as call_ts, c.ts + coalesce(e.dur, 0) as call_end,
           r.recorded_stream, r.record_ts, coalesce(r.record_inferred, false) as record_inferred
    from events s
    join host_calls c on c.rank = s.rank and c.correlation = s.correlation
    join events e on e.rank = c.rank and e.id = c.id
    left join sync_records r on r.rank = s.rank and r.sync_id = s.id
    where s.kind = 'sync'
),
-- Where each sync looks for the GPU work it waits on: a stream, and the time that work must have been launched by.
targets as (
    select *, recorded_stream as waited_stream, record_ts as launched_before from syncs
    where sync_kind in ('Event Sync', 'Stream Wait Event') and recorded_stream >= 0
    union all
    select *, stream, call_ts from syncs where sync_kind = 'Stream Sync' and stream >= 0
    union all
    select s.*, d.stream, s.call_ts
    from syncs s
    join (select distinct rank, device, stream from gpu_launched) d on d.rank = s.rank and d.device = s.device
    where s.sync_kind = 'Context Sync'
),
-- Ops launched together (one graph launch) share a launch time: the last of them to run is "the last launched".
last_launched as (
    select * from gpu_launched
    qualify row_number() over (partition by rank, device, stream, launched_ts order by ts desc, id desc) = 1
),
first_launched as (
    select * from gpu_launched
    qualify row_number() over (partition by rank, device, stream, launched_ts order by ts, id) = 1
),
waited as (
    select t.*, g.id as src, g.end_ts as src_end,
           t.sync_kind || case when t.record_inferred then ' (record inferred)' else '' end as subkind
    from targets t asof join last_launched g
      on g.rank = t.rank and g.device = t.device and g.stream = t.waited_stream and g.launched_ts < t.launched_before
)
-- A record taken by thread order is refuted by the timing where the host call returned before the op ended, or kept
-- blocking more than 25 µs (the lag bound of sync_inferred_edges.sql) after both its start and the op's end: it
-- waited for something else (tests/data/gpu/waits.json.gz: an event recorded on another stream than the thread's
-- last launch). sync_inferred_edges then judges the call by its timing alone.
select rank, sync_id, src, call_id as dst, 'sync' as kind, subkind, call_ts - src_end as lag
from waited where sync_kind <> 'Stream Wait Event'
    and (not record_inferred or (call_end >= src_end and call_end - greatest(call_ts, src_end) <= 25000))
union all
-- The waiting stream's next op, launched after cudaStreamWaitEvent, cannot start before the waited op ends.
select w.rank, w.sync_id, w.src, g.id, 'sync', w.subkind, g.ts - w.src_end
from (select * from waited where sync_kind = 'Stream Wait Event' and stream >= 0) w
asof join first_launched g
  on g.rank = w.rank and g.device = w.device and g.stream = w.stream and g.launched_ts > w.call_ts
-- A record taken by thread order on the waiting stream itself orders nothing stream order does not, and is more
-- likely a record on another stream than the thread's last launch: no edge, and stream_wait_inferred_edges judges
-- the op by its timing.
where not w.record_inferred or (g.ts >= w.src_end and w.waited_stream <> w.stream)
