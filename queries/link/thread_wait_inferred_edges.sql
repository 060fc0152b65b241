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
with points as (
    select rank, id, pid, tid, false as is_end, ts as t from events
    where kind in ('cpu_op', 'user_annotation', 'python_function') and ts is not null
    union all
    select rank, id, pid, tid, true, ts + greatest(coalesce(dur, 0), 0) from events
    where kind in ('cpu_op', 'user_annotation', 'python_function') and ts is not null
),
-- The point just before each point in the rank's time order: if it is on another thread and the waiting thread
-- had no point since before it, it is the other thread's latest point before the wait ended.
ordered as (
    select rank, id, pid, tid, is_end, t,
           t - lag(t) over (partition by rank, pid, tid order by t, is_end desc, id) as gap,
           lag(id) over by_time as src, lag(is_end) over by_time as src_end, lag(t) over by_time as src_t,
           lag(pid) over by_time as src_pid, lag(tid) over by_time as src_tid
    from points
    window by_time as (partition by rank order by t, is_end desc, id)
)
select rank, src, id as dst, 'thread_wait_inferred' as kind,
       case when src_end then 'end' else 'start' end || '_' || case when is_end then 'end' else 'start' end
           as subkind,
       t - src_t as lag
from ordered
where src is not null and (src_pid is distinct from pid or src_tid is distinct from tid)
  and t - src_t <= 1000000 and (gap is null or (gap >= 1000000 and (t - src_t) * 10 <= gap))
