-- question: Over all steps of a rank, how much of the critical path is CPU, launch, unexplained GPU waits, GPU
--   compute, communication, copies, memsets, gaps, sync waits and idle?
-- inputs: events, edges, graph_kernels
-- includes: lib/critical_path
-- columns:
--   rank: rank
--   category: cpu, sync_wait, launch, unexplained_gpu_wait, compute, communication, memcpy, memset,
--     kernel_to_kernel_gap, idle (see critical_path)
--   time_ms: ms, critical-path time in the category, all windows (steps) together
--   percent: percent of the windows' total length (the categories of a rank add up to 100)
--   segments: critical_path segments in the category
-- notes: The critical_path segments of every window of a rank, added up per category: one row per category,
--   whatever the trace's length. Sums are of integer ns (exact, in any order).
select rank, category::varchar as category, sum(duration_ns) / 1e6 as time_ms,
       100.0 * sum(duration_ns) / sum(sum(duration_ns)) over (partition by rank) as percent,
       sum(segments)::bigint as segments
from step_critical_paths()
group by rank, category
order by rank, sum(duration_ns) desc, category
