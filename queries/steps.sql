-- question: How long is each training step (ProfilerStep#N) on each rank, and how does the GPU spend it?
-- inputs: events, edges
-- columns:
--   rank: rank
--   step: N of ProfilerStep#N
--   name: ProfilerStep#N
--   start_ns: ns, start of the CPU step annotation (epoch ns)
--   end_ns: ns, end of the CPU step annotation
--   duration_ms: ms, end_ns - start_ns
--   busy_ms: ms, time inside the step window at least one GPU op runs
--   idle_ms: ms, duration_ms - busy_ms
--   computation_ms: ms, union of computation ops (non-NCCL/RCCL kernels, memsets) inside the window
--   communication_ms: ms, union of NCCL/RCCL kernels inside the window
--   exposed_communication_ms: ms, communication not overlapped by computation
--   memcpy_ms: ms, union of memcpy ops inside the window
--   exposed_memcpy_ms: ms, memcpy not overlapped by computation or communication
--   gpu_start_ns: ns, start of the step's GPU window (see notes)
--   gpu_end_ns: ns, end of the step's GPU window
--   gpu_duration_ms: ms, gpu_end_ns - gpu_start_ns
--   gpu_window_source: gpu_annotation (the trace's GPU-side ProfilerStep#N) or launches (span of the GPU ops
--     launched from inside the CPU step); null when the step launched nothing
--   unlaunched_gpu_ms: ms, union of GPU ops inside the window that have no launch call in the trace (queued
--     before the profiling window): left out of busy, so a step with unlaunched_gpu_ms > 0 has an incomplete
--     breakdown (step_stats leaves such steps out)
-- notes: A step is the CPU user_annotation ProfilerStep#N (a cpu_op in legacy traces); ranks without one have no
--   rows. The GPU breakdown uses
--   TraceLens's gpu_timeline definitions (GPU ops with a launch edge; unions of intervals over all streams) and is
--   clipped to the CPU step window, not to the GPU window. Why: consecutive CPU steps tile the profiled time, so
--   per-step busy + idle add up to the step durations with nothing counted twice or lost between steps; the CPU
--   window exists in every trace (GPU annotations only in some); and a host-side stall in step N (data loading, a
--   sync) shows up as GPU idle in step N, which is what a diff of two runs must see. The cost: GPU work queued in
--   step N that runs after step N ends is counted in step N+1 (in a steady state every step shifts alike, so the
--   spread across steps is unaffected). The GPU window is reported beside it, not used for clipping: GPU windows of
--   consecutive steps overlap where the GPU runs behind the CPU (by ~2 steps on the MI300X ResNet trace), and
--   the GPU-side ProfilerStep annotation can be a few µs long (same trace: 18 µs for a 16 ms step).
select rank, step, name, start_ns, end_ns,
       (end_ns - start_ns) / 1e6 as duration_ms,
       busy_ns / 1e6 as busy_ms,
       idle_ns / 1e6 as idle_ms,
       computation_ns / 1e6 as computation_ms,
       communication_ns / 1e6 as communication_ms,
       exposed_communication_ns / 1e6 as exposed_communication_ms,
       memcpy_ns / 1e6 as memcpy_ms,
       exposed_memcpy_ns / 1e6 as exposed_memcpy_ms,
       gpu_start_ns, gpu_end_ns,
       (gpu_end_ns - gpu_start_ns) / 1e6 as gpu_duration_ms,
       gpu_window_source,
       unlaunched_ns / 1e6 as unlaunched_gpu_ms
from step_breakdown()
order by rank, step
