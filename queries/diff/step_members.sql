-- question: Which profiler step does each event belong to?
-- inputs: events, edges
-- columns:
--   rank: rank
--   id: events.id
--   step: N of the `ProfilerStep#N` range the event belongs to
-- notes: A host-side event belongs to the CPU `ProfilerStep#N` range (kind user_annotation; a cpu_op in older
--   traces) of its rank that contains its start, whatever its thread (autograd threads included). A GPU op belongs
--   to the step of the call that launched it, so work launched in step N and run after the range ends still counts
--   for step N; GPU ops with no launcher in the trace (queued before the window) belong to no step. Events outside
--   every range are left out. tracekit diff splits each side into one pseudo-rank per step with this, to rerun
--   analyses per step.
with step_ranges as (
    select rank, cast(regexp_extract(name, '#(\d+)', 1) as bigint) as step, ts as start_ns, ts + dur as end_ns
    from events
    where kind in ('user_annotation', 'cpu_op') and name like 'ProfilerStep#%' and dur is not null
),
host as (
    select e.rank, e.id, s.step
    from events e asof join step_ranges s on e.rank = s.rank and e.ts >= s.start_ns
    where e.kind not in ('kernel', 'memcpy', 'memset', 'gpu_annotation') and e.ts < s.end_ns
),
gpu as (
    select l.rank, l.dst as id, h.step
    from edges l join host h on h.rank = l.rank and h.id = l.src
    where l.kind = 'launch'
)
select rank, id, step from host
union all
select rank, id, step from gpu
