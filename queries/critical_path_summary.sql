-- question: Per step (or whole trace), how much of the critical path is CPU, launch overhead, GPU compute,
--   communication, copies, gaps, sync waits and idle?
-- inputs: events, edges
-- columns:
--   rank: rank
--   step: N of ProfilerStep#N (null: the whole trace of a rank without steps)
--   category: cpu, launch_overhead, gpu_compute, gpu_communication, gpu_memcpy, kernel_to_kernel_gap, sync_wait,
--     idle
--   time_ms: ms, critical-path time in the category
--   percent: percent of the window (the categories of a window add up to 100)
--   segments: critical_path segments in the category
--   window_ms: ms, the window's length
-- notes: The critical_path segments summed per category; see critical_path.sql for the walk and how it differs
--   from HTA's. HTA's "CPU-bound %" is comparable to cpu here less the segments owned by user annotations and
--   by no event (HTA gives those zero weight), over HTA's path length rather than the window.
with windows as materialized (select * from step_or_trace_windows())
select p.rank, w.step, p.category,
       sum(p.duration_ns) / 1e6 as time_ms,
       100.0 * sum(p.duration_ns) / any_value(w.end_ns - w.start_ns) as percent,
       count(*) as segments,
       any_value(w.end_ns - w.start_ns) / 1e6 as window_ms
from critical_path_segments('windows') p
join windows w on w.rank = p.rank and w.window_id = p.window_id
group by p.rank, p.window_id, w.step, p.category
order by p.rank, p.window_id, time_ms desc
