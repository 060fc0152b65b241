-- question: Which GPU op did each cuda_sync event wait for, and what waited on it?
-- inputs: events, host_calls, gpu_launched
-- columns:
--   rank: rank
--   sync_id: events.id of the cuda_sync event that records the wait
--   src: events.id of the GPU op waited for
--   dst: events.id of the host call or GPU op that waited
--   kind: edge kind (sync)
--   subkind: the cuda_sync event's sync kind
--   lag: ns, from the end of the op waited for to the start of what waited
-- notes: A `cuda_sync` event says which host call waited (its correlation) and, for event waits, which cudaEventRecord it
--   waited on (`wait_on_event_correlation`) on which stream (`wait_on_stream`). The GPU work waited for is the last
--   GPU op on that stream whose launch call started before the record call (or, for stream and device syncs, before
--   the waiting call itself). Ids of -1 (libkineto before its cuda_sync fix) name nothing: such events go to
--   diagnostics (unresolved_syncs.sql). host_calls and gpu_launched are the results of those queries.
with syncs as (
    select s.rank, s.id as sync_id, s.sync_kind, s.device, s.stream, s.wait_on_stream,
           c.id as call_id, c.ts as call_ts, r.ts as record_ts
    from events s
    join host_calls c on c.rank = s.rank and c.correlation = s.correlation
    left join host_calls r on r.rank = s.rank and r.correlation = s.wait_on_event_correlation
    where s.kind = 'sync'
),
-- Where each sync looks for the GPU work it waits on: a stream, and the time that work must have been launched by.
targets as (
    select *, wait_on_stream as waited_stream, record_ts as launched_before from syncs
    where sync_kind in ('Event Sync', 'Stream Wait Event') and wait_on_stream >= 0
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
    select t.*, g.id as src, g.end_ts as src_end
    from targets t asof join last_launched g
      on g.rank = t.rank and g.device = t.device and g.stream = t.waited_stream and g.launched_ts < t.launched_before
)
select rank, sync_id, src, call_id as dst, 'sync' as kind, sync_kind as subkind, call_ts - src_end as lag
from waited where sync_kind <> 'Stream Wait Event'
union all
-- The waiting stream's next op, launched after cudaStreamWaitEvent, cannot start before the waited op ends.
select w.rank, w.sync_id, w.src, g.id, 'sync', w.sync_kind, g.ts - w.src_end
from (select * from waited where sync_kind = 'Stream Wait Event' and stream >= 0) w
asof join first_launched g
  on g.rank = w.rank and g.device = w.device and g.stream = w.stream and g.launched_ts > w.call_ts
