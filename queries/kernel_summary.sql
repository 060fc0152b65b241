-- question: Which GPU kernels (and memcpys, memsets) take the most GPU time, per rank (like nsys cuda_gpu_kern_sum)?
-- inputs: events, edges, graph_kernels
-- includes: lib/exact, lib/launches, lib/names
-- columns:
--   rank: rank
--   kernel_name: GPU op name (events.name)
--   kind: kernel, memcpy or memset
--   category: kernel category from the name and kind (kernel_category in lib/categories.sql)
--   count: GPU ops with this name
--   total_us: µs, summed durations
--   mean_us: µs, mean duration
--   median_us: µs, median duration
--   min_us: µs, shortest
--   max_us: µs, longest
--   stddev_us: µs, sample standard deviation (null for a single op)
--   percent_kernel_time: percent of the rank's summed GPU op durations
--   percent_total_time: percent of the rank's GPU span (first GPU op start to last GPU op end)
-- notes: Every GPU op of the rank, launched or not (as TraceLens's kernel_summary and nsys do). Unlike TraceLens
--   (kernels only, grouped by parent op too: see kernel_by_op), memcpys and memsets are rows here as well, so
--   percent_kernel_time is of all GPU op time, and percent_total_time is of the span of all GPU ops rather than
--   TraceLens's span of launched ops only.
with ops as (select * from gpu_ops()),
per_rank as (
    select rank, sum(dur) as all_ns, max(end_ns) - min(start_ns) as span_ns from ops group by rank
),
grouped as (
    select o.rank, o.name as kernel_name, o.kind,
           count(*) as count, sum(o.dur) / 1e3 as total_us, avg(o.dur) / 1e3 as mean_us,
           median(o.dur::double) / 1e3 as median_us, min(o.dur) / 1e3 as min_us, max(o.dur) / 1e3 as max_us,
           stddev_ns(o.dur) / 1e3 as stddev_us,
           100 * sum(o.dur) / nullif(any_value(p.all_ns), 0) as percent_kernel_time,
           100 * sum(o.dur) / nullif(any_value(p.span_ns), 0) as percent_total_time
    from ops o join per_rank p on p.rank = o.rank
    group by o.rank, o.name, o.kind
)
select g.rank, g.kernel_name, g.kind, c.category, g.count, g.total_us, g.mean_us, g.median_us, g.min_us, g.max_us,
       g.stddev_us, g.percent_kernel_time, g.percent_total_time
from grouped g
left join gpu_op_categories() c on c.name is not distinct from g.kernel_name and c.kind = g.kind
order by g.rank, g.total_us desc, g.kernel_name
