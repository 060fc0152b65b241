-- question: What chain of work bounds each step's duration (the whole trace where a rank has no steps), and where
--   does its time go?
-- inputs: events, edges
-- includes: lib/critical_path, lib/steps
-- columns:
--   rank: rank
--   step: N of ProfilerStep#N (null: the whole trace of a rank without steps)
--   position: 1-based order of the segment in time
--   event_id: events.id the segment's time belongs to (null: idle, or host time between top-level events)
--   name: that event's name
--   category: cpu, launch_overhead, gpu_compute, gpu_communication, gpu_memcpy, kernel_to_kernel_gap, sync_wait,
--     idle
--   start_ns: ns, segment start
--   duration_us: µs, segment length
--   end_ns: ns, segment end
--   duration_ns: ns, segment length (exact: the segments of a window add up to its length)
--   kind: the event's kind
--   window_start_ns: ns, start of the step (or trace)
--   window_end_ns: ns, end of the step (or trace)
-- notes: A step's window is its CPU ProfilerStep#N annotation (steps); without steps, from the first start to the
--   last end of the rank's CPU events and GPU ops. The walk (queries/lib/critical_path.sql) goes backward from the
--   event that ends last in the window, each time to the predecessor that became ready last: on a thread the
--   last child / previous sibling / parent (HTA's assumption that CPU ops depend on the previous op of their
--   thread), from a GPU op to the previous op on its stream, its launch call or a GPU op it waits on (sync
--   edges), from a host call that blocked to the GPU op it waited for. Differences from HTA's critical path
--   (a longest path over a start/end-node graph): HTA counts from the launch call's start to the kernel start as
--   launch delay (here the call itself is cpu and only call end to kernel start is launch_overhead); HTA gives
--   zero weight to the time between top-level ops, to user annotations' own time and to the end of a blocking
--   call after the GPU finished (here: cpu owned by the enclosing annotation, cpu with no event, sync_wait), so
--   HTA's path is shorter than the window while these segments add up to it exactly; HTA's window holds the GPU
--   ops launched inside it even when they end after it, here a step ends with its CPU annotation (GPU work still
--   running is on the next step's path if that step waits for it).
with windows as materialized (select * from step_or_trace_windows())
select p.rank, w.step, p.position, p.event_id, p.name, p.category,
       p.start_ns, p.duration_ns / 1e3 as duration_us, p.end_ns, p.duration_ns, p.kind,
       w.start_ns as window_start_ns, w.end_ns as window_end_ns
from critical_path_segments('windows') p
join windows w on w.rank = p.rank and w.window_id = p.window_id
order by p.rank, p.window_id, p.position
