-- question: Which GPU op did a blocking host call wait for, where no cuda_sync event says so (inferred from the
--   times the trace records)?
-- inputs: events, launch_edges, sync_edges
-- notes: A runtime/driver call that blocks until the GPU gets somewhere returns soon after the GPU op it waited for
--   ends. So: a call of a blocking class whose end comes at most 25 µs (the lag bound; 100 µs for a sync call of
--   1 ms or more) after a GPU op ended inside it waited for that op (the latest such op; of the call's device where
--   the call launched something, else of any device of the rank). The classes (subkind), by call name (CUDA, HIP
--   and driver spellings alike):
--     device_sync (cudaDeviceSynchronize, hipDeviceSynchronize, cuCtxSynchronize), stream_sync (*StreamSynchronize),
--     event_sync (*EventSynchronize), allocator (cudaMalloc/cudaFree, hipMalloc/hipFree, cuMemAlloc/cuMemFree,
--     host allocations; not the stream-ordered *Async ones): the latest GPU op to end inside the call;
--     memcpy, memset (cudaMemcpy, cudaMemcpyAsync to pageable memory, hipMemcpyWithStream, cudaMemset...): the
--     copy's own GPU op (its launch edge), when it ended inside the call, i.e. the call did not return until its
--     copy was done (an asynchronous copy returns before its op ends and gets no edge);
--     launch_queue (*Launch*: kernel and graph launches): a call lasting at least 4 times the median of its name on
--     its rank (a launch blocked on a full launch queue returns when a slot frees, i.e. when an op ends), waiting
--     for the latest op to end inside it; not when that op is one the call launched itself (then the call ran
--     long after submitting, it was not queued).
--   The lag bound is measured on traces with cuda_sync events (docs/critical_path.md): the recorded blocking calls
--   returned 3-15 µs after the op they waited for, blocking pageable copies 6-23 µs after their own copy (a few
--   later, left out). A sync-class call of 1 ms or more gets 100 µs: a host thread that waits that long sleeps
--   (CUDA's default schedule spins, then yields) and wakes later; the final 71 and 74 ms cudaStreamSynchronize of
--   the two SD3.5 captures of bench/recorded returned 31 and 33 µs after the last GPU op ended inside them (their
--   shorter syncs 4-8 µs), and with 25 µs the critical path read those 74 ms as host CPU time. A call with a
--   recorded sync edge (sync_edges, the result of sync_edges.sql) gets no inferred
--   one: recorded events take precedence. lag is the call's start minus the op's end (negative: the call was
--   already waiting), as for sync edges.
with calls as (
    select rank, id, name, ts, ts + dur as end_ns, dur,
           case
               when regexp_matches(name, '(?i)(device|ctx|thread)synchronize') then 'device_sync'
               when regexp_matches(name, '(?i)streamsynchronize') then 'stream_sync'
               when regexp_matches(name, '(?i)eventsynchronize') then 'event_sync'
               when regexp_matches(name, '(?i)memcpy') then 'memcpy'
               when regexp_matches(name, '(?i)memset') then 'memset'
               when regexp_matches(name, '(?i)launch') then 'launch_queue'
               when regexp_matches(name, '(?i)^(cuda|hip|cu)(mem|host)?(malloc|alloc|free)(host)?(_v\d+)?$')
                   then 'allocator'
           end as subkind,
           median(dur) over (partition by rank, name) as usual_dur
    from events
    where kind in ('runtime', 'driver') and dur > 0 and ts is not null
),
blocking as (
    -- a sync call of 1 ms or more slept rather than spun, and woke later after the GPU finished (see notes)
    select c.* exclude (usual_dur),
           if(c.subkind in ('device_sync', 'stream_sync', 'event_sync') and c.dur >= 1000000, 100000, 25000)
               as max_lag_ns
    from calls c
    anti join sync_edges s on s.rank = c.rank and s.dst = c.id
    where c.subkind is not null and (c.subkind <> 'launch_queue' or c.dur >= 4 * c.usual_dur)
),
own_ops as (
    select l.rank, l.src as call_id, g.id, g.device, g.ts + coalesce(g.dur, 0) as end_ns
    from launch_edges l
    join events g on g.rank = l.rank and g.id = l.dst
    where g.ts is not null
),
call_devices as (
    select rank, call_id, min(device) as device from own_ops group by rank, call_id
),
-- memcpy / memset: the call's own op, the last of them to end inside the call
own_waits as (
    select b.rank, b.id as call_id, b.subkind, b.ts, b.end_ns, b.max_lag_ns,
           arg_max(o.id, struct_pack(o.end_ns, o.id)) as op_id, max(o.end_ns) as op_end
    from blocking b
    join own_ops o on o.rank = b.rank and o.call_id = b.id and o.end_ns > b.ts and o.end_ns <= b.end_ns
    where b.subkind in ('memcpy', 'memset')
    group by b.rank, b.id, b.subkind, b.ts, b.end_ns, b.max_lag_ns
),
-- GPU ops by end, one per end time (the highest id among ops ending together: the asof match is then unique)
gpu_ends as (
    select rank, id, device, ts + coalesce(dur, 0) as end_ns
    from events
    where kind in ('kernel', 'memcpy', 'memset') and ts is not null
),
device_ends as (
    select * from gpu_ends qualify row_number() over (partition by rank, device, end_ns order by id desc) = 1
),
rank_ends as (
    select * from gpu_ends qualify row_number() over (partition by rank, end_ns order by id desc) = 1
),
others as (
    select b.*, d.device
    from blocking b
    left join call_devices d on d.rank = b.rank and d.call_id = b.id
    where b.subkind not in ('memcpy', 'memset')
),
-- the rest: the latest GPU op to end by the call's end, on the call's device where it is known
latest_ends as (
    select o.rank, o.id as call_id, o.subkind, o.ts, o.end_ns, o.max_lag_ns, g.id as op_id, g.end_ns as op_end
    from (select * from others where device is not null) o
    asof join device_ends g on g.rank = o.rank and g.device = o.device and g.end_ns <= o.end_ns
    union all
    select o.rank, o.id, o.subkind, o.ts, o.end_ns, o.max_lag_ns, g.id, g.end_ns
    from (select * from others where device is null) o
    asof join rank_ends g on g.rank = o.rank and g.end_ns <= o.end_ns
),
waits as (
    select * from own_waits
    union all
    select l.* from latest_ends l
    anti join own_ops o on o.rank = l.rank and o.call_id = l.call_id and o.id = l.op_id
)
select rank, op_id as src, call_id as dst, 'sync_inferred' as kind, subkind, ts - op_end as lag
from waits
where op_end > ts and end_ns - op_end <= max_lag_ns
