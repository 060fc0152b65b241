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
-- Plan: a point's gap comes from one window per thread (threads as a hash of pid and tid: integer sort keys); the
--   few points that end a gap of 1 ms or more, or start a thread, then look up the point just before them in the
--   rank's time order with an ASOF join on one 128-bit key (t, ends first, id), instead of a second window sorting
--   every point of the rank (0.40 → 0.27 CPU s on a 197k-event trace, bench/RESULTS.md).
with points as (
    select rank, id, hash(pid, tid) as thread, false as is_end, ts as t from events
    where kind in ('cpu_op', 'user_annotation', 'python_function') and ts is not null
    union all
    select rank, id, hash(pid, tid), true, ts + greatest(coalesce(dur, 0), 0) from events
    where kind in ('cpu_op', 'user_annotation', 'python_function') and ts is not null
),
-- the rank's time order: t, then ends before starts, then id (ids are entry positions: 0 ≤ id < 2^63)
ordered as materialized (
    select *, (t::hugeint << 64) + ((not is_end)::hugeint << 63) + id as point_order from points
    -- in time order: the window and the ASOF join below then sort nearly sorted input (0.19 -> 0.17 s on a 53 MB
    -- trace, this sort included)
    order by rank, point_order
),
-- points whose thread had no point for at least 1 ms, and each thread's first point
resumed as (
    select * from (
        select rank, id, thread, is_end, t, point_order,
               t - lag(t) over (partition by rank, thread order by point_order) as gap
        from ordered
    )
    where gap is null or gap >= 1000000
)
-- the point just before, when it is on another thread, waited for
select r.rank, p.id as src, r.id as dst, 'thread_wait_inferred' as kind,
       case when p.is_end then 'end' else 'start' end || '_' || case when r.is_end then 'end' else 'start' end
           as subkind,
       r.t - p.t as lag
from resumed r
asof join ordered p on p.rank = r.rank and p.point_order < r.point_order
where p.thread <> r.thread
  and r.t - p.t <= 1000000 and (r.gap is null or (r.t - p.t) * 10 <= r.gap)
