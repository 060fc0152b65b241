-- question: How is GPU and CPU time split across op categories (GEMM, attention, elementwise, ...), per rank?
-- inputs: events, edges
-- includes: lib/launches
-- columns:
--   rank: rank
--   category: op category (rules in lib/categories.sql): GEMM, attention, convolution, normalization, elementwise, reduction, communication, memcpy/memset, other
--   count: calls of ops in the category
--   gpu_calls: calls that launched GPU work themselves
--   ops: distinct op names in the category
--   direct_kernel_ms: ms, direct kernel time of the category's ops (see op_summary)
--   percent_kernel: percent of the rank's direct kernel time
--   cumulative_percent: running percent_kernel, largest category first
--   total_cpu_ms: ms, summed call durations
--   self_cpu_ms: ms, summed self CPU time
-- notes: op_summary rolled up by category. Direct times add up without double counting (each GPU op has at most one
--   innermost op); subtree times would not, so they are left out. TraceLens's ops_summary_by_category counts only
--   calls that launched GPU work (our gpu_calls) and names categories slightly differently (see lib/categories.sql).
with by_category as (
    select rank, category, sum(count)::bigint as count, sum(gpu_calls)::bigint as gpu_calls, count(*) as ops,
           sum(direct_kernel_ms) as direct_kernel_ms, sum(total_cpu_ms) as total_cpu_ms,
           sum(self_cpu_ms) as self_cpu_ms
    from op_rollup(false)
    group by rank, category
)
select rank, category, count, gpu_calls, ops, direct_kernel_ms,
       100 * direct_kernel_ms / nullif(sum(direct_kernel_ms) over (partition by rank), 0) as percent_kernel,
       100 * sum(direct_kernel_ms) over (partition by rank order by direct_kernel_ms desc, category
                                         rows between unbounded preceding and current row)
           / nullif(sum(direct_kernel_ms) over (partition by rank), 0) as cumulative_percent,
       total_cpu_ms, self_cpu_ms
from by_category
order by rank, direct_kernel_ms desc, category
