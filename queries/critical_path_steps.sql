-- question: For each step, how long was it and how did its critical path split across categories (one line
--   per step)?
-- inputs: events, edges, graph_kernels
-- includes: lib/critical_path
-- columns:
--   rank: rank
--   step: N of ProfilerStep#N (null: the whole trace of a rank without steps)
--   window_ms: ms, the step's length (= the critical path's length)
--   cpu_ms: ms, CPU time on the path
--   launch_ms: ms, launch call end to GPU op start (at most 25 µs each)
--   unexplained_gpu_wait_ms: ms, GPU ops waiting more than 25 µs after what the trace says they waited for, or
--     with nothing in the trace before them (see critical_path)
--   compute_ms: ms, GPU compute kernels
--   communication_ms: ms, communication kernels (communication_kernel in lib/categories.sql)
--   memcpy_ms: ms, copies
--   memset_ms: ms, memsets
--   kernel_to_kernel_gap_ms: ms, gaps between ops on a stream
--   sync_wait_ms: ms, host or stream waiting on the GPU
--   idle_ms: ms, nothing running
--   gpu_percent: percent of the step carried by the GPU (compute + communication + copies + memsets)
-- notes: The critical_path segments of each window summed per category (integer ns: exact), as columns; they
--   add up to window_ms.
select rank, step, any_value(window_end_ns - window_start_ns) / 1e6 as window_ms,
       coalesce(sum(duration_ns) filter (category = 'cpu'), 0) / 1e6 as cpu_ms,
       coalesce(sum(duration_ns) filter (category = 'launch'), 0) / 1e6 as launch_ms,
       coalesce(sum(duration_ns) filter (category = 'unexplained_gpu_wait'), 0) / 1e6 as unexplained_gpu_wait_ms,
       coalesce(sum(duration_ns) filter (category = 'compute'), 0) / 1e6 as compute_ms,
       coalesce(sum(duration_ns) filter (category = 'communication'), 0) / 1e6 as communication_ms,
       coalesce(sum(duration_ns) filter (category = 'memcpy'), 0) / 1e6 as memcpy_ms,
       coalesce(sum(duration_ns) filter (category = 'memset'), 0) / 1e6 as memset_ms,
       coalesce(sum(duration_ns) filter (category = 'kernel_to_kernel_gap'), 0) / 1e6 as kernel_to_kernel_gap_ms,
       coalesce(sum(duration_ns) filter (category = 'sync_wait'), 0) / 1e6 as sync_wait_ms,
       coalesce(sum(duration_ns) filter (category = 'idle'), 0) / 1e6 as idle_ms,
       100.0 * coalesce(sum(duration_ns) filter (category in ('compute', 'communication', 'memcpy', 'memset')), 0)
           / nullif(any_value(window_end_ns - window_start_ns), 0) as gpu_percent
from step_critical_paths()
group by rank, step, window_start_ns
order by rank, window_start_ns
