-- question: Which event on another thread of its rank did a host thread wait for, where it sat idle and resumed
--   right after that event started or ended (inferred: no trace records it)?
-- inputs: events
-- columns:
--   rank: rank
--   src: events.id of the event on the other thread whose start or end released the waiting thread
--   dst: events.id of the event on the waiting thread that started or ended after the wait
--   kind: thread_wait_inferred
--   subkind: which points the wait joins, src's then dst's: start_start, start_end, end_start or end_end (end_start:
--     the other thread's op ended, the waiting thread's next op started; end_end: a call that waited, e.g.
--     run_backward, returned)
--   lag: ns, dst's point - src's point (measured)
-- notes: A trace records no edge between host threads except fwdbwd flows (forward op -> backward op). The autograd
--   thread starts a backward pass right after the main thread enters it, and the main thread resumes right after
--   the autograd thread finishes (a run_backward that waited, or the next op after a bare gap); a data-loading
--   thread hands a batch over the same way. Rule: a point (start or end) of a cpu_op, user annotation or Python
--   function whose thread had no point for at least 1 ms (gap), that comes at most min(1 ms, gap / 10) after the
--   latest point of such an event on another thread of the rank (lag), waited for that point. A thread's first
--   point has no gap: the lag alone decides. Runtime calls are not points here: polling threads (NCCL watchdogs
--   querying events) would wake on anything. Seen on the shared traces: lags of 43-169 µs (autograd hand-over and
--   return on the V100 ResNet and MI300X ResNet traces; 277-423 µs on the A100 DDP trace), gaps of 5-144 ms.
--   Evidence and limits: docs/critical_path.md.
-- Plan: no sort of every point (a window per thread and one per rank over them until 2026-11-27, the link's costliest
--   pass: OWLv2 0.051 -> 0.028 s, its ingest's peak 315 -> 290 MB; the same edges on the 43 shared and recorded
--   traces). Points fall in 1 ms buckets (t floored to the ms), where a thread's points are less than 1 ms apart: a
--   thread waited only before the first point of one of its buckets, for the time since the last point of its
--   previous non-empty bucket (an aggregation per thread and bucket, and a window over those rows). The rank's
--   point just before such a point (order: t, then ends before starts, then id) is the one before it in its bucket,
--   or else the last of the bucket before (an earlier one is more than 1 ms before): the points are sorted only in
--   the buckets where a thread wakes, each bucket apart.
with points as (
    select *, (t - ((t % 1000000) + 1000000) % 1000000) // 1000000 as bucket
    from (
        select rank, id, hash(pid, tid) as thread, false as is_end, ts as t from events
        where kind in ('cpu_op', 'user_annotation', 'python_function') and ts is not null
        union all
        select rank, id, hash(pid, tid), true, ts + greatest(coalesce(dur, 0), 0) from events
        where kind in ('cpu_op', 'user_annotation', 'python_function') and ts is not null
    )
),
-- each thread's buckets: the first and the last point (in the rank's order)
thread_buckets as (
    select rank, thread, bucket,
           arg_min(struct_pack(id, thread, is_end, t), struct_pack(t, is_start := not is_end, id)) as first,
           arg_max(struct_pack(id, thread, is_end, t), struct_pack(t, is_start := not is_end, id)) as last
    from points
    group by rank, thread, bucket
),
-- the first point of a bucket after a gap of 1 ms or more on its thread (or its thread's first point)
waking as (
    select rank, thread, bucket, first.id, first.is_end, first.t, gap
    from (select *, first.t - lag(last.t) over (partition by rank, thread order by bucket) as gap
          from thread_buckets)
    where gap is null or gap >= 1000000
),
-- the rank's point before each point of a bucket where a thread wakes, within the bucket
in_bucket as (
    select rank, id, is_end,
           lag(struct_pack(id, thread, is_end, t)) over (partition by rank, bucket order by t, is_end desc, id) as prev
    from points
    semi join (select distinct rank, bucket from waking) w on w.rank = points.rank and w.bucket = points.bucket
),
-- the last point of each bucket: the last of its threads' last points
bucket_last as (
    select rank, bucket, arg_max(last, struct_pack(t := last.t, is_start := not last.is_end, id := last.id)) as last
    from thread_buckets
    group by rank, bucket
),
before as (
    select w.*, coalesce(b.prev, l.last) as prev
    from waking w
    join in_bucket b on b.rank = w.rank and b.id = w.id and b.is_end = w.is_end
    left join bucket_last l on l.rank = w.rank and l.bucket = w.bucket - 1
)
select rank, prev.id as src, id as dst, 'thread_wait_inferred' as kind,
       case when prev.is_end then 'end' else 'start' end || '_' || case when is_end then 'end' else 'start' end
           as subkind,
       t - prev.t as lag
from before
where prev.thread <> thread and t - prev.t <= 1000000 and (gap is null or (t - prev.t) * 10 <= gap)
order by rank, t, is_end desc, id
