-- question: What did each collective (NCCL/RCCL, DeepEP, custom all-reduce, ...) move, how long did it take, and at
--   what bandwidth?
-- inputs: events, edges, ranks
-- includes: lib/collectives
-- columns:
--   rank: rank
--   process_group: `Process Group Name` (unknown where the trace does not say)
--   seq: 1-based order of the collective within (rank, process_group), by kernel start: the key that matches
--     the same collective across ranks
--   collective: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, send_recv, send, recv,
--     gather, scatter, barrier, or null (unknown, e.g. ncclDevKernel_Generic with no args)
--   dtype: element type as written in the trace (Float, BFloat16, float, ...)
--   bytes: bytes, message size as nccl-tests counts it: max(In msg nelems, Out msg nelems) x element size
--     (all_reduce: the buffer; all_gather: the gathered output; reduce_scatter: the full input; all_to_all: all
--     that one rank sends)
--   group_size: ranks, ranks in the process group
--   start_ns: ns, kernel start
--   duration_us: µs, kernel duration
--   algbw_gbps: GB/s (1e9 bytes), bytes / duration
--   busbw_gbps: GB/s, algbw x nccl-tests factor: all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all
--     (n-1)/n; broadcast, reduce, send/recv 1
--   end_ns: ns, kernel end
--   event_id: the kernel's events.id
--   kernel_name: kernel name
--   collective_name: the name the type was read from (c10d name, nccl:* annotation, or the kernel name)
--   in_nelems: elements, `In msg nelems` (annotation: elements of the first input)
--   out_nelems: elements, `Out msg nelems`
--   elem_bytes: bytes, bytes per element of dtype
--   process_group_desc: `Process Group Description`
--   args_source: where type and size come from: kernel (the kernel's own args, as in newer traces), op (the
--     nearest enclosing record_param_comms / c10d op of the launch call, through launch and nest edges),
--     annotation (older traces: the enclosing nccl:* annotation's Input Dims and Input type), kernel_name (the
--     type from the kernel name only: no size, so no bandwidth)
-- notes: Every communication kernel is a row (gpu_timeline's communication category: communication_kernel in
--   lib/categories.sql). Kernels without NCCL args (DeepEP, custom all-reduce, NVSHMEM) get the type their name
--   implies (kernel_collective in lib/collectives.sql: DeepEP dispatch/combine are all_to_all, an inference from
--   the name) and no size; their process group is unknown. Group size falls
--   back to the length of `Process Group Ranks`, then to the job's world size. Bandwidth uses the kernel's
--   duration, which includes the time the rank waited in the kernel for its peers (collective_waits): the
--   last-arriving rank's duration is the closest to the transfer itself. Kernels queued before the profiling
--   window have no launch call in the trace, hence no op args: they are rows with args_source kernel_name.
select rank, process_group, seq, collective, dtype, bytes, group_size, start_ns,
       dur / 1e3 as duration_us,
       bytes / nullif(dur, 0) as algbw_gbps,
       bytes / nullif(dur, 0) * busbw_factor as busbw_gbps,
       end_ns, event_id, kernel_name, collective_name, in_nelems, out_nelems, elem_bytes, process_group_desc,
       args_source
from collective_kernels()
order by rank, start_ns, event_id
