-- question: Per step (or whole trace), how much of the critical path is CPU, launch, unexplained GPU waits, GPU
--   compute, communication, copies, memsets, gaps, sync waits and idle?
-- inputs: events, edges, graph_kernels
-- includes: lib/critical_path
-- columns:
--   rank: rank
--   step: N of ProfilerStep#N (null: the whole trace of a rank without steps)
--   category: cpu, sync_wait, launch, unexplained_gpu_wait, compute, communication, memcpy, memset,
--     kernel_to_kernel_gap, idle (see critical_path)
--   time_ms: ms, critical-path time in the category
--   percent: percent of the window (the categories of a window add up to 100)
--   segments: critical_path segments in the category
--   window_ms: ms, the window's length
-- notes: The critical_path segments summed per category (from the step windows' walk, step_critical_paths of
--   lib/critical_path, which the other sums share: one walk, not one each); see critical_path.sql for the walk and
--   how it differs from HTA's. HTA's "CPU-bound %" is comparable to cpu here less the segments owned by user
--   annotations and by no event (HTA gives those zero weight), over HTA's path length rather than the window.
select rank, step, category::varchar as category,
       sum(duration_ns) / 1e6 as time_ms,
       100.0 * sum(duration_ns) / any_value(window_end_ns - window_start_ns) as percent,
       sum(segments)::bigint as segments,
       any_value(window_end_ns - window_start_ns) / 1e6 as window_ms
from step_critical_paths()
group by rank, step, window_start_ns, category
order by rank, window_start_ns, time_ms desc, category
