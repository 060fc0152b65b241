-- question: How is GPU and CPU time split across op categories (GEMM, attention, elementwise, ...), per rank?
-- inputs: events, edges, graph_kernels, op_by_shape
-- includes: lib/launches
-- columns:
--   rank: rank
--   category: op category (op_category in lib/categories.sql, from the op name): GEMM, attention, convolution, embedding, normalization, elementwise, reduction, MoE, communication, memcpy/memset, other
--   count: calls of ops in the category, less those nested inside a call of the same category on their thread
--     (aten::addmm inside aten::linear is one GEMM call, not two)
--   gpu_calls: calls that launched GPU work themselves
--   ops: distinct op names in the category
--   direct_kernel_ms: ms, direct kernel time of the category's ops (see op_summary)
--   percent_kernel: percent of the rank's direct kernel time
--   cumulative_percent: running percent_kernel, largest category first
--   total_cpu_ms: ms, summed call durations (calls nested in a call of the same category counted again)
--   self_cpu_ms: ms, summed self CPU time
-- notes: op_by_shape rolled up by category (each op name has one category, the same in every sheet, step and run).
--   Direct times add up without double counting (each GPU op has at most one innermost op); subtree times would
--   not, so they are left out. A call is nested in another of its category when it starts inside that call's span
--   on the same thread (what nest edges are made from), found by a running maximum of end times: no tree walk.
--   TraceLens's ops_summary_by_category counts only calls that launched GPU work (our gpu_calls) and names
--   categories slightly differently (see lib/categories.sql).
with by_category as (
    -- integer ns (each ms value is an exact ns count / 1e6): sums with the same bits in any row order
    select rank, category, sum(gpu_calls)::bigint as gpu_calls, count(distinct name) as ops,
           sum(round(direct_kernel_ms * 1e6)::bigint) / 1e6 as direct_kernel_ms,
           sum(round(total_cpu_ms * 1e6)::bigint) / 1e6 as total_cpu_ms,
           sum(round(self_cpu_ms * 1e6)::bigint) / 1e6 as self_cpu_ms
    from op_by_shape
    group by rank, category
),
-- the category of each distinct name, then joined to the calls: its regular expressions run once per name, not
-- once per call
cpu_ops as (  -- the cpu_ops from op_calls(), a table by now (scanning the events for them took 0.008 s on OWLv2)
    select rank, pid, tid, id, ts, ts + dur as end_ns, name
    from op_calls()
    where ts is not null
),
named as (  -- each distinct name's category, looked up (op_name_categories in lib/launches.sql)
    select categorized_name as name, name_category as category from op_name_categories()
),
calls as (
    select c.rank, c.pid, c.tid, c.id, c.ts, c.end_ns, n.category
    from cpu_ops c
    join named n on n.name is not distinct from c.name
),
outermost as (
    select rank, category,
           count(*) filter (where ts >= coalesce(enclosing_end_ns, ts)) as count
    from (select *, max(end_ns) over (partition by rank, pid, tid, category order by ts, end_ns desc, id
                                      rows between unbounded preceding and 1 preceding) as enclosing_end_ns
          from calls)
    group by rank, category
)
select b.rank, b.category, coalesce(o.count, 0)::bigint as count, b.gpu_calls, b.ops, b.direct_kernel_ms,
       100 * b.direct_kernel_ms / nullif(sum(b.direct_kernel_ms) over (partition by b.rank), 0) as percent_kernel,
       100 * sum(b.direct_kernel_ms) over (partition by b.rank order by b.direct_kernel_ms desc, b.category
                                           rows between unbounded preceding and current row)
           / nullif(sum(b.direct_kernel_ms) over (partition by b.rank), 0) as cumulative_percent,
       b.total_cpu_ms, b.self_cpu_ms
from by_category b
left join outermost o on o.rank = b.rank and o.category = b.category
order by b.rank, b.direct_kernel_ms desc, b.category
