-- question: What chain of work bounds each step's duration (the whole trace where a rank has no steps), where does
--   its time go, and did the CPU or the GPU carry it?
-- inputs: events, edges, graph_kernels
-- includes: lib/critical_path, lib/steps
-- columns:
--   rank: rank
--   step: N of ProfilerStep#N (null: the whole trace of a rank without steps)
--   position: 1-based order of the segment in time
--   event_id: events.id the segment's time belongs to (null: idle, or host time between top-level events)
--   name: that event's name
--   category: what the segment's time was: cpu (host work), sync_wait (a host call, or a stream, waiting after the
--     GPU op it waited for ended; a host thread resuming after the other thread's point it waited for), launch
--     (launch call end to its op's start), compute, communication, memcpy, memset (a GPU op running; GPU
--     categories by gpu_timeline_category of lib/categories), kernel_to_kernel_gap (a stream between two ops),
--     unexplained_gpu_wait (a GPU op starting more than 25 µs after the last of what the trace says it waited for
--     let it go: its launch call's return, its stream's previous op, an op it waited on; or, for an op with none of
--     these in the trace, back to the window start: what held it back is not in the trace), idle (nothing)
--   carried_by: cpu or gpu: where the event owning the segment ran (null: idle)
--   inferred: true for a sync_wait that follows an inferred edge (sync_inferred: a host call's wait;
--     stream_wait_inferred: a GPU op's wait for another stream; thread_wait_inferred: a host thread's wait for
--     another): the path before it runs through what was inferred to have been waited for
--   start_ns: ns, segment start
--   duration_us: µs, segment length
--   end_ns: ns, segment end
--   duration_ns: ns, segment length (exact: the segments of a window add up to its length)
--   kind: the event's kind
--   window_start_ns: ns, start of the step (or trace)
--   window_end_ns: ns, end of the step's last work: its CPU annotation's end or, when later, the end of the GPU
--     work it launched (or the trace's end)
-- notes: A step's window is its CPU ProfilerStep#N annotation (steps); without steps, from the first start to the
--   last end of the rank's CPU events and GPU ops. The walk (queries/lib/critical_path.sql) goes backward from the
--   event that ends last in the window, each time to the predecessor that became ready last: on a thread the
--   last child / previous sibling / parent (HTA's assumption that CPU ops depend on the previous op of their
--   thread), from a GPU op to the previous op on its stream, its launch call or a GPU op it waits on (sync
--   edges; stream_wait_inferred edges where none is recorded), from a host call that blocked to the GPU op it
--   waited for (sync edges; sync_inferred edges where the trace has no cuda_sync event for the call: inferred from
--   the call's kind and times, docs/critical_path.md, so on such traces the GPU part of the path rests on that
--   inference: column inferred). A step ends when its last work ends, GPU
--   included, so its path may end on the GPU (carried_by). Differences from HTA's critical path
--   (a longest path over a start/end-node graph): HTA counts from the launch call's start to the kernel start as
--   launch delay (here the call itself is cpu and only call end to kernel start is launch); HTA gives
--   zero weight to the time between top-level ops, to user annotations' own time and to the end of a blocking
--   call after the GPU finished (here: cpu owned by the enclosing annotation, cpu with no event, sync_wait), so
--   HTA's path is shorter than the window while these segments add up to it exactly; like HTA's window, a step
--   holds the GPU ops launched inside it even when they end after its CPU annotation (so consecutive steps'
--   windows may overlap).
with windows as materialized (
    select rank, window_id, step, start_ns, work_end_ns as end_ns from step_or_trace_windows())
select p.rank, w.step, p.position, p.event_id, p.name, p.category, p.carried_by, p.inferred,
       p.start_ns, p.duration_ns / 1e3 as duration_us, p.end_ns, p.duration_ns, p.kind,
       w.start_ns as window_start_ns, w.end_ns as window_end_ns
from critical_path_segments('windows') p
join windows w on w.rank = p.rank and w.window_id = p.window_id
order by p.rank, p.window_id, p.position
