-- question: Which windows does a replay compare, measured or re-timed: each rank's steps, or its whole trace?
-- outputs: replay_windows
-- inputs: events, edges, graph_kernels (through step_or_trace_windows(); the re-timed events for the prediction)
-- includes: lib/steps
-- columns:
--   rank: rank
--   window_id: the step, or -1 for a rank without steps (its whole trace, one window)
--   step: the step (null: the whole trace)
--   start_ns: ns, window start
--   end_ns: ns, window end
--   duration_ns: ns, end_ns - start_ns
select rank, window_id, step, start_ns, end_ns, end_ns - start_ns as duration_ns
from step_or_trace_windows()
