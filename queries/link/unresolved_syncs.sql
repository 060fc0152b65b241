-- question: Which sync events gave no edge, and why (the first reason that explains it)?
-- inputs: events, host_calls, sync_edges, gpu_launched
-- notes: host_calls, sync_edges and gpu_launched are the results of those queries.
with unresolved as (
    select s.rank, s.id, s.sync_kind, s.device, s.stream, s.wait_on_stream, s.wait_on_event_correlation,
           s.correlation, c.name as call_name, c.id as call_id, r.id as record_id, r.ts as record_ts,
           s.sync_kind is null or s.sync_kind not in ('Event Sync', 'Stream Wait Event', 'Stream Sync', 'Context Sync') as kind_unknown,
           s.sync_kind in ('Event Sync', 'Stream Wait Event') and coalesce(s.wait_on_stream, -1) < 0 as recorded_stream_unknown,
           s.sync_kind in ('Event Sync', 'Stream Wait Event') and coalesce(s.wait_on_event_correlation, -1) < 0 as record_unknown,
           s.sync_kind in ('Stream Sync', 'Stream Wait Event') and coalesce(s.stream, -1) < 0 as stream_unknown
    from events s
    left join host_calls c on c.rank = s.rank and c.correlation = s.correlation
    left join host_calls r on r.rank = s.rank and r.correlation = s.wait_on_event_correlation
    anti join sync_edges e on e.rank = s.rank and e.sync_id = s.id
    where s.kind = 'sync'
)
select rank, id as position, 'edges' as stage,
    case
        when kind_unknown then 'sync_kind_unknown'
        when recorded_stream_unknown or record_unknown or stream_unknown then 'sync_target_unknown'
        when call_id is null then 'sync_call_not_in_trace'
        when sync_kind in ('Event Sync', 'Stream Wait Event') and record_id is null then 'sync_record_not_in_trace'
        else 'sync_nothing_to_wait_for'
    end as reason,
    case
        when kind_unknown then 'cuda_sync_kind ' || coalesce(sync_kind, 'missing') || ' is not one tracekit knows'
        when recorded_stream_unknown or record_unknown or stream_unknown
            then sync_kind || ' does not say '
                 || case when recorded_stream_unknown then 'which stream the awaited event was recorded on'
                         when record_unknown then 'which cudaEventRecord it waited on'
                         else 'which stream waited' end
                 || ' (-1 or absent, as libkineto wrote before its cuda_sync fix), so what it waited for is unknown'
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
                         and g.stream = u.wait_on_stream and g.launched_ts < u.record_ts)
            then sync_kind || ': no GPU op on stream ' || wait_on_stream::varchar
                 || ' was launched before the cudaEventRecord (correlation ' || wait_on_event_correlation::varchar
                 || '): nothing in the trace to wait for'
        else 'Stream Wait Event: no GPU op on the waiting stream ' || stream::varchar
             || ' was launched after the wait'
    end as detail,
    false as dropped
from unresolved u
