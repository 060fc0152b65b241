-- question: Which sync events gave no edge, and why (the first reason that explains it)?
-- inputs: events, host_calls, sync_edges, gpu_launched, sync_records
-- notes: host_calls, sync_edges, gpu_launched and sync_records are the results of those queries.
with unresolved as (
    select s.rank, s.id, s.sync_kind, s.device, s.stream, s.wait_on_event_correlation,
           s.correlation, c.name as call_name, c.id as call_id, r.record_id, r.record_ts, r.recorded_stream,
           coalesce(r.record_inferred, false) as record_inferred,
           s.sync_kind is null or s.sync_kind not in ('Event Sync', 'Stream Wait Event', 'Stream Sync', 'Context Sync') as kind_unknown,
           s.sync_kind in ('Event Sync', 'Stream Wait Event') and coalesce(s.wait_on_event_correlation, -1) < 0
               and r.record_id is null as record_unknown,
           s.sync_kind in ('Event Sync', 'Stream Wait Event') and r.record_id is not null
               and coalesce(r.recorded_stream, -1) < 0 as recorded_stream_unknown,
           s.sync_kind in ('Stream Sync', 'Stream Wait Event') and coalesce(s.stream, -1) < 0 as stream_unknown
    from events s
    left join host_calls c on c.rank = s.rank and c.correlation = s.correlation
    left join sync_records r on r.rank = s.rank and r.sync_id = s.id
    anti join sync_edges e on e.rank = s.rank and e.sync_id = s.id
    where s.kind = 'sync'
)
select rank, id as position, 'edges' as stage,
    case
        when kind_unknown then 'sync_kind_unknown'
        when record_unknown or recorded_stream_unknown or stream_unknown then 'sync_target_unknown'
        when call_id is null then 'sync_call_not_in_trace'
        when sync_kind in ('Event Sync', 'Stream Wait Event') and record_id is null then 'sync_record_not_in_trace'
        when record_inferred then 'sync_record_inferred_refuted'
        else 'sync_nothing_to_wait_for'
    end as reason,
    case
        when kind_unknown then 'cuda_sync_kind ' || coalesce(sync_kind, 'missing') || ' is not one tracekit knows'
        when record_unknown
            then sync_kind || ' names no event record (-1 or absent: libkineto matched no record to the event, as '
                 || 'before its cuda_sync fix, or with records by cudaEventRecordWithFlags) and the '
                 || 'waiting thread made no event-record call before it (or is not in the trace), so what it waited '
                 || 'for is unknown'
        when recorded_stream_unknown
            then sync_kind || ' names no stream for its event and the thread that recorded it (call '
                 || record_id::varchar || ') launched no GPU op before the record, so what it waited for is unknown'
        when stream_unknown
            then sync_kind || ' does not say which stream waited (-1 or absent), so what it waited for is unknown'
        when call_id is null
            then sync_kind || ': no runtime/driver call with correlation ' || coalesce(correlation::varchar, 'none')
                 || ' in the trace'
        when sync_kind in ('Event Sync', 'Stream Wait Event') and record_id is null
            then sync_kind || ': the cudaEventRecord call (correlation ' || wait_on_event_correlation::varchar
                 || ') is not in the trace'
        when sync_kind = 'Stream Sync'
            then call_name || ': no GPU op on stream ' || stream::varchar || ' was launched before it'
        when sync_kind = 'Context Sync'
            then call_name || ': no GPU op on device ' || coalesce(device::varchar, '?') || ' was launched before it'
        when not exists (select 1 from gpu_launched g where g.rank = u.rank and g.device = u.device
                         and g.stream = u.recorded_stream and g.launched_ts < u.record_ts)
            then sync_kind || ': no GPU op on stream ' || recorded_stream::varchar
                 || ' was launched before the event record (call ' || record_id::varchar
                 || '): nothing in the trace to wait for'
        when record_inferred and sync_kind = 'Stream Wait Event' and recorded_stream = stream
            then sync_kind || ': it names no event record, and the one taken by thread order (call '
                 || record_id::varchar || ') would be on the waiting stream ' || stream::varchar
                 || ' itself, which orders nothing: the record was likely on another stream (the GPU timing judges it)'
        when record_inferred and (sync_kind = 'Event Sync' or exists (
                 select 1 from gpu_launched g where g.rank = u.rank and g.device = u.device and g.stream = u.stream
                 and g.launched_ts > (select ts from events c where c.rank = u.rank and c.id = u.call_id)))
            then sync_kind || ': it names no event record, and the one taken by thread order (call '
                 || record_id::varchar || ' on stream ' || recorded_stream::varchar
                 || ') is refuted by the timing: what waited ran before the last op it recorded ended, or went on '
                 || 'waiting long after it'
        else 'Stream Wait Event: no GPU op on the waiting stream ' || stream::varchar
             || ' was launched after the wait'
    end as detail,
    false as dropped
from unresolved u
