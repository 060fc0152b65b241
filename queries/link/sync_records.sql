-- question: Which event record did each event wait (Event Sync, Stream Wait Event) wait on, and which stream had
--   recorded it?
-- inputs: events, host_calls, gpu_launched
-- columns:
--   rank: rank
--   sync_id: events.id of the cuda_sync event
--   record_id: events.id of the event-record call waited on (null when neither named nor inferable)
--   record_ts: ns, that call's start
--   recorded_stream: the stream the event was recorded on (null when unknown)
--   record_inferred: true when the cuda_sync event named no record and the record was taken by thread order
-- notes: libkineto names the record (`wait_on_cuda_event_record_corr_id`) and its stream (`wait_on_stream`) only for
--   records it matched to the event; it writes -1 when it matched none: before its cuda_sync fix, and with PyTorch
--   2.11 + CUDA 13, whose event records are cudaEventRecordWithFlags calls (tests/data/gpu/kineto_train.json.gz:
--   every wait -1 though its event id is set; docs/critical_path.md). Such a wait is resolved by thread order: the event a thread waits on
--   was recorded before the wait, and a program records it just before (`event.record(); s.wait_event(event)`,
--   `wait_stream`), so the record is the waiting thread's last event-record call before the wait; the stream it
--   recorded on is, unless the sync event names it, the stream of the last GPU op that thread launched before the
--   record (the current stream, or the stream it had just worked on: `wait_stream` records on the other stream).
--   sync_edges.sql drops an inferred wait that the GPU timing refutes (the waiter ran before the op ended).
with waits as (
    select s.rank, s.id as sync_id, s.wait_on_stream, s.wait_on_event_correlation, c.pid, c.tid, c.ts as call_ts
    from events s
    left join host_calls c on c.rank = s.rank and c.correlation = s.correlation
    where s.kind = 'sync' and s.sync_kind in ('Event Sync', 'Stream Wait Event')
),
event_records as (
    select rank, pid, tid, id, ts from events
    where kind in ('runtime', 'driver') and regexp_matches(name, '^cu(da)?EventRecord') and ts is not null
),
named as (
    select w.*, r.id as record_id, r.ts as record_ts, false as record_inferred
    from (select * from waits where wait_on_event_correlation >= 0) w
    left join host_calls r on r.rank = w.rank and r.correlation = w.wait_on_event_correlation
),
by_thread as (
    select w.*, r.id as record_id, r.ts as record_ts, true as record_inferred
    from (select * from waits where coalesce(wait_on_event_correlation, -1) < 0 and call_ts is not null) w
    asof left join event_records r on r.rank = w.rank and r.pid = w.pid and r.tid = w.tid and r.ts < w.call_ts
),
unnamed_without_call as (
    select *, null::bigint as record_id, null::bigint as record_ts, false as record_inferred
    from waits where coalesce(wait_on_event_correlation, -1) < 0 and call_ts is null
),
records as (
    select * from named union all select * from by_thread union all select * from unnamed_without_call
),
-- The stream of the last GPU op the recording thread launched before the record
thread_streams as (
    select r.rank, r.sync_id, g.stream
    from (select * from records where record_inferred and record_id is not null) r
    asof join (select * from gpu_launched where launch_tid is not null) g
      on g.rank = r.rank and g.launch_pid = r.pid and g.launch_tid = r.tid and g.launched_ts < r.record_ts
)
select r.rank, r.sync_id, r.record_id, r.record_ts,
       case when r.wait_on_stream >= 0 then r.wait_on_stream when r.record_inferred then t.stream end
           as recorded_stream,
       r.record_inferred and r.record_id is not null as record_inferred
from records r
left join thread_streams t on t.rank = r.rank and t.sync_id = r.sync_id
