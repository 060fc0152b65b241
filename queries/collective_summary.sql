-- question: Per kind and size of collective, how many calls were there, how long did they take, and at what bus
--   bandwidth?
-- inputs: collectives
-- columns:
--   rank: rank
--   process_group: `Process Group Name` (unknown where the trace does not say)
--   collective: all_reduce, all_gather, ... (null: unknown)
--   dtype: element type as written in the trace
--   bytes: bytes, message size (as in collectives)
--   group_size: ranks, ranks in the process group
--   calls: collective calls
--   total_ms: ms, kernel time of the calls
--   mean_us: µs, mean duration per call
--   median_us: µs, median duration per call
--   min_us: µs, shortest call
--   max_us: µs, longest call
--   busbw_median_gbps: GB/s, median bus bandwidth of the calls
--   kernel_name: the kernel of the longest call
-- notes: collectives grouped by what they move: one row per (process group, collective, dtype, size), however
--   many steps the trace holds. One row per call is the collectives analysis.
select rank, process_group, collective, dtype, bytes, group_size,
       count(*) as calls,
       sum(end_ns - start_ns) / 1e6 as total_ms,
       avg(end_ns - start_ns) / 1e3 as mean_us,
       median(duration_us) as median_us,
       min(duration_us) as min_us,
       max(duration_us) as max_us,
       median(busbw_gbps) as busbw_median_gbps,
       arg_max(kernel_name, struct_pack(duration_us, event_id)) as kernel_name
from collectives
group by rank, process_group, collective, dtype, bytes, group_size
order by rank, sum(end_ns - start_ns) desc, process_group, collective, bytes
