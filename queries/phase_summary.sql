-- question: How do a serving engine's iterations divide into prefill, decode and mixed, and what does each phase
--   cost per iteration and per token, on each rank?
-- inputs: events, edges, graph_kernels
-- includes: lib/steps
-- columns:
--   rank: rank
--   phase: prefill, decode, mixed, or unknown (the marker does not say: vLLM's execute_model frames)
--   marker: what defined the iterations (steps.marker)
--   iterations: iterations of the phase
--   iterations_used: iterations the statistics are over (the warm-up rule, per phase: see notes)
--   median_ms: ms, median iteration time: its GPU window (first start to last end of the GPU ops it launched),
--     else its CPU window where it launched nothing
--   min_ms: ms, shortest iteration time
--   max_ms: ms, longest iteration time
--   median_cpu_ms: ms, median CPU window of the iterations (the marker's duration)
--   gpu_busy_ms: ms, summed over the used iterations: time inside each one's GPU window that at least one GPU op
--     runs
--   gpu_busy_percent: percent, gpu_busy_ms of the summed GPU windows
--   median_batch_size: median sequences per iteration (null where the markers do not say)
--   tokens: tokens of the used iterations (null where a marker does not say)
--   time_per_token_us: µs, summed iteration time per token over the used iterations (null without tokens)
-- notes: Steps whose marker is a ProfilerStep have no phase and no row here. Iteration time is the GPU window, not
--   the CPU one: serving engines queue an iteration's GPU work and return (on the shared vLLM decode trace the
--   CPU iteration is 2.4 ms, its GPU work 10.7 ms and 8 ms later). The warm-up rule is step_stats's, per phase
--   (steady_steps() in lib/steps.sql): an iteration whose window holds GPU work queued before the profiling window
--   is left out unless no iteration of its phase is complete.
with iterations as materialized (
    select *, coalesce(phase, 'unknown') as phase_name,
           coalesce(gpu_start_ns, start_ns) as window_start_ns, coalesce(gpu_end_ns, end_ns) as window_end_ns
    from steady_steps()
    where marker <> 'profiler_step'
),
gpu_windows as (
    select rank, step as window_id, window_start_ns as start_ns, window_end_ns as end_ns from iterations
),
busy as (
    select * from gpu_time_in_windows('gpu_windows')
)
select i.rank, i.phase_name as phase, any_value(i.marker) as marker, count(*) as iterations,
       count(*) filter (where i.used) as iterations_used,
       median((i.window_end_ns - i.window_start_ns) / 1e6) filter (where i.used) as median_ms,
       min((i.window_end_ns - i.window_start_ns) / 1e6) filter (where i.used) as min_ms,
       max((i.window_end_ns - i.window_start_ns) / 1e6) filter (where i.used) as max_ms,
       median(i.duration_ms) filter (where i.used) as median_cpu_ms,
       sum(b.busy_ns) filter (where i.used) / 1e6 as gpu_busy_ms,
       100 * sum(b.busy_ns) filter (where i.used)
           / nullif(sum(i.window_end_ns - i.window_start_ns) filter (where i.used), 0) as gpu_busy_percent,
       median(i.batch_size) filter (where i.used) as median_batch_size,
       if(bool_and(i.tokens is not null) filter (where i.used), sum(i.tokens) filter (where i.used), null)::bigint
           as tokens,
       if(bool_and(i.tokens is not null) filter (where i.used),
          sum(i.window_end_ns - i.window_start_ns) filter (where i.used)
              / nullif(sum(i.tokens) filter (where i.used), 0) / 1e3, null) as time_per_token_us
from iterations i
join busy b on b.rank = i.rank and b.window_id = i.step
group by i.rank, i.phase_name
order by i.rank, array_position(['prefill', 'mixed', 'decode', 'unknown'], i.phase_name)
