-- question: What is each rank: its trace file, device, job, time span, steps, and how much tracekit could not use?
-- inputs: ranks, events, diagnostics, step_stats, analysis_notes
-- columns:
--   rank: rank
--   source_file: path of the trace file the rank was read from
--   device_name: GPU name (deviceProperties), or another accelerator's process label (MTIA 17)
--   device_type: GPU, or MTIA for Meta's accelerator (its GPU ops' trace category is mtia_*); null without device ops
--   world_size: ranks, distributedInfo.world_size
--   backend: distributed backend (nccl, gloo, ...)
--   span_ms: ms, first event start to last event end
--   steps: steady steps, the ones the step figures are over (`steady` of the steps analysis; null when the trace
--     has no steps)
--   step_median_ms: ms, median step duration
--   step_min_ms: ms, shortest step
--   step_max_ms: ms, longest step
--   events: complete events read
--   gpu_ops: kernels, memcpys and memsets
--   diagnostics: diagnostics rows that concern the rank (a file-level note counts for the ranks read from its file),
--     and the analyses' notes about it (analysis_notes)
-- notes: step figures come from step_stats (metric duration_ms).
with per_rank as (
    select rank,
           count(*) as events,
           count(*) filter (where kind in ('kernel', 'memcpy', 'memset')) as gpu_ops,
           case when bool_or(kind in ('kernel', 'memcpy', 'memset') and starts_with(lower(cat), 'mtia')) then 'MTIA'
                when bool_or(kind in ('kernel', 'memcpy', 'memset')) then 'GPU' end as device_type,
           (max(ts + coalesce(dur, 0)) - min(ts)) / 1e6 as span_ms
    from events
    group by rank
),
step_durations as (
    select rank, steps, median as step_median_ms, min as step_min_ms, max as step_max_ms
    from step_stats
    where metric = 'duration_ms'
),
notes as (
    select r.rank, count(d.reason) as diagnostics
    from ranks r
    left join diagnostics d on d.rank = r.rank
        or (d.rank is null or d.rank not in (select rank from ranks)) and d.source_file = r.source_file
    group by r.rank
),
query_notes as (
    select rank, count(*) as diagnostics from analysis_notes group by rank
)
select r.rank, r.source_file, r.device_name, e.device_type, r.world_size, r.backend, e.span_ms,
       s.steps, s.step_median_ms, s.step_min_ms, s.step_max_ms,
       coalesce(e.events, 0) as events, coalesce(e.gpu_ops, 0) as gpu_ops,
       n.diagnostics + coalesce(q.diagnostics, 0) as diagnostics
from ranks r
left join per_rank e using (rank)
left join step_durations s using (rank)
left join notes n using (rank)
left join query_notes q using (rank)
order by r.rank
