-- question: Per kind of collective call (group, type, algorithm, size), what bus bandwidth does it reach against the GPU's link peak?
-- inputs: collective_perf
-- includes:
-- columns:
--   rank: rank
--   process_group: as in collectives
--   collective: all_reduce, all_gather, ...
--   algorithm: from the kernel name (null: not named)
--   protocol: from the kernel name (null: not named)
--   dtype: as in collectives
--   bytes: bytes, message size as nccl-tests counts it
--   group_size: ranks
--   calls: calls
--   total_us: µs, summed kernel duration
--   busbw_median_gbps: GB/s, median bus bandwidth of the calls
--   busbw_max_gbps: GB/s, best bus bandwidth of the calls
--   link_peak_gbps: GB/s, the GPU's link bandwidth in one direction (peaks table)
--   percent_of_link_peak_median: %, 100 · busbw_median_gbps / link_peak_gbps
--   percent_of_link_peak_max: %, 100 · busbw_max_gbps / link_peak_gbps
--   peak_note: why there is no link peak (collective_perf)
-- notes: collective_perf's calls grouped by what makes them comparable; the conventions and caveats (a group across
--   nodes is held to the network, not this link; durations include waiting for peers) are collective_perf's.
select rank, process_group, collective, algorithm, protocol, dtype, bytes, group_size,
       count(*) as calls,
       sum(round(duration_us * 1e3)::bigint) / 1e3 as total_us,  -- integer ns: the same bits in any order
       median(busbw_gbps) as busbw_median_gbps,
       max(busbw_gbps) as busbw_max_gbps,
       any_value(link_peak_gbps) as link_peak_gbps,
       100 * median(busbw_gbps) / any_value(link_peak_gbps) as percent_of_link_peak_median,
       100 * max(busbw_gbps) / any_value(link_peak_gbps) as percent_of_link_peak_max,
       min(peak_note) as peak_note
from collective_perf
group by rank, process_group, collective, algorithm, protocol, dtype, bytes, group_size
order by rank, total_us desc, process_group, collective, algorithm, protocol, dtype, bytes, group_size
