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
-- Plan: two windows over the points (threads as a hash of pid and tid: integer sort keys), one per thread for a
--   point's gap and one per rank for the point just before it, each sorting on (t, ends first, id). This replaced
--   a CTE of the points in that order and an ASOF join on a 128-bit key: the same CPU with DuckDB 2.0 and 20-27 MB
--   less memory (the link's largest pass: +79 -> +60 MB on the vLLM trace, +98 -> +71 MB on MI300X resnet x4;
--   the same edges on the 40 shared traces).
with points as (
    select rank, id, hash(pid, tid) as thread, false as is_end, ts as t from events
    where kind in ('cpu_op', 'user_annotation', 'python_function') and ts is not null
    union all
    select rank, id, hash(pid, tid), true, ts + greatest(coalesce(dur, 0), 0) from events
    where kind in ('cpu_op', 'user_annotation', 'python_function') and ts is not null
),
-- each point with the point just before it on its thread (the gap since) and on the rank (any thread); the rank's
-- time order: t, then ends before starts, then id
flagged as (
    select rank, id, thread, is_end, t,
           t - lag(t) over (partition by rank, thread order by t, is_end desc, id) as gap,
           lag(id) over rank_order as prev_id, lag(thread) over rank_order as prev_thread,
           lag(is_end) over rank_order as prev_is_end, lag(t) over rank_order as prev_t
    from points
    window rank_order as (partition by rank order by t, is_end desc, id)
)
select rank, prev_id as src, id as dst, 'thread_wait_inferred' as kind,
       case when prev_is_end then 'end' else 'start' end || '_' || case when is_end then 'end' else 'start' end
           as subkind,
       t - prev_t as lag
from flagged
where (gap is null or gap >= 1000000) and prev_thread <> thread
  and t - prev_t <= 1000000 and (gap is null or (t - prev_t) * 10 <= gap)
