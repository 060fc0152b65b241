-- question: How much does each step metric vary from step to step on each rank (the noise floor a diff of two
--   runs must exceed)?
-- inputs: events, edges, graph_kernels
-- includes: lib/exact, lib/steps
-- columns:
--   rank: rank
--   metric: a steps column: duration_ms, busy_ms, idle_ms, computation_ms, communication_ms,
--     exposed_communication_ms, memcpy_ms, exposed_memcpy_ms, gpu_duration_ms
--   steps: steps the statistics are over
--   median: the metric's unit (ms), median over those steps
--   min: ms, smallest
--   max: ms, largest
--   stddev: ms, sample standard deviation (null with one step)
--   mean: ms, mean
--   steps_left_out: steps of the rank not used (see notes)
--   basis: complete_steps, or all_steps when no step of the rank is complete; mixed where serving phases differ
--     (some phase with complete iterations, some without)
-- notes: Warm-up: the first recorded steps are left out by a measured criterion, not by position. A step whose
--   window holds GPU work with no launch call in the trace (queued before the profiling window started) has an
--   incomplete GPU breakdown (that work is not counted as busy), so it is left out of every metric of the rank.
--   This is what biases the first steps: on the A100 trainer trace step 550 (the first) shows 14.9 ms busy
--   against 74-80 ms for the others, and where the GPU runs ~2 steps behind the CPU (MI300X ResNet) the first two
--   steps are affected, which a first-step rule would miss. The profiler's own warm-up steps (schedule
--   warmup=N) are never recorded, so the first recorded step needs no other exclusion: its duration is in line
--   with the rest on the shared traces. A rank with no complete step uses all of its steps (basis = all_steps).
--   The rule works per phase where the steps are a serving engine's iterations (steady_steps() in lib/steps.sql):
--   a phase whose every iteration is incomplete still counts, with all its iterations.
with judged as materialized (
    select *, count(*) over (partition by rank) as all_steps from steady_steps()
),
used as (
    select * from judged where used  -- the one steady-state rule: `steady` of lib/steps.sql step_metrics()
),
long as (
    unpivot (
        select rank, all_steps, duration_ms, busy_ms, idle_ms, computation_ms, communication_ms,
               exposed_communication_ms, memcpy_ms, exposed_memcpy_ms, gpu_duration_ms, basis
        from used
    )
    on duration_ms, busy_ms, idle_ms, computation_ms, communication_ms, exposed_communication_ms, memcpy_ms,
       exposed_memcpy_ms, gpu_duration_ms
    into name metric value value
)
select rank, metric, count(value) as steps, median(value) as median, min(value) as min, max(value) as max,
       ordered_stddev(value) as stddev, ordered_mean(value) as mean,
       any_value(all_steps) - count(*) as steps_left_out,
       case when bool_and(basis = 'complete_steps') then 'complete_steps' when bool_and(basis = 'all_steps')
            then 'all_steps' else 'mixed' end as basis
from long
group by rank, metric
order by rank, array_position(['duration_ms', 'busy_ms', 'idle_ms', 'computation_ms', 'communication_ms',
                               'exposed_communication_ms', 'memcpy_ms', 'exposed_memcpy_ms', 'gpu_duration_ms'], metric)
