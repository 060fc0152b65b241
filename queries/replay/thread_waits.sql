-- question: Where did a host thread, idle, resume right after another thread of its rank did something (inferred)?
-- inputs: events
-- columns:
--   rank: rank
--   src: events.id of the event on the other thread whose start or end released the waiting thread
--   src_end: true when src's end released it, false when its start did
--   dst: events.id of the event on the waiting thread that started or ended after the wait
--   dst_end: true when dst's end came after the wait (a call that waited, e.g. run_backward), false its start
--   lag: ns, measured dst point - src point
-- notes: Inference: a trace records no edge between host threads except fwdbwd flows (forward op -> backward op).
--   The autograd thread starts a backward pass right after the main thread enters it, and the main thread resumes
--   right after the autograd thread finishes (a run_backward that waited, or the next op after a bare gap); a
--   data-loading thread hands a batch over the same way. Rule: a point (start or end) of a cpu_op, user annotation
--   or Python function whose thread had no point for at least 1 ms (gap), that comes at most min(1 ms, gap / 10)
--   after the latest point of such an event on another thread of the rank (lag), waited for that point. A
--   thread's first point has no gap: the lag alone decides. Runtime calls are not points here: polling threads
--   (NCCL watchdogs querying events) would wake on anything. Seen on the shared traces: lags of 43-169 µs
--   (autograd hand-over and return on the V100 ResNet and MI300X ResNet traces), gaps of 5-144 ms.
with points as materialized (
    select rank, id, pid, tid, false as is_end, ts as t from events
    where kind in ('cpu_op', 'user_annotation', 'python_function') and ts is not null
    union all
    select rank, id, pid, tid, true, ts + greatest(coalesce(dur, 0), 0) from events
    where kind in ('cpu_op', 'user_annotation', 'python_function') and ts is not null
),
ordered as (
    select *,
           t - lag(t) over (partition by rank, pid, tid order by t, is_end desc, id) as gap,
           row_number() over (partition by rank order by t, is_end desc, id) as position
    from points
),
-- runs of consecutive points (in time order) on one thread: the other thread's latest point before any point of
-- a run is the point just before the run
runs as (
    select *, sum(case when pid is distinct from previous_pid or tid is distinct from previous_tid then 1 else 0 end)
                  over (partition by rank order by position) as run
    from (select *, lag(pid) over (partition by rank order by position) as previous_pid,
                 lag(tid) over (partition by rank order by position) as previous_tid
          from ordered)
),
run_starts as (
    select rank, run, min(position) as first_position from runs group by rank, run
),
waits as (
    select p.rank, q.id as src, q.is_end as src_end, p.id as dst, p.is_end as dst_end, p.t - q.t as lag, p.gap
    from runs p
    join run_starts r on r.rank = p.rank and r.run = p.run
    join ordered q on q.rank = p.rank and q.position = r.first_position - 1
)
select rank, src, src_end, dst, dst_end, lag
from waits
where lag <= 1000000 and (gap is null or (gap >= 1000000 and lag * 10 <= gap))
