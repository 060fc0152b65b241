-- question: Which kernels does each CPU op launch, on which stream, and how long do they run, per rank?
-- inputs: events, edges, graph_kernels
-- includes: lib/exact, lib/launches, lib/names
-- columns:
--   rank: rank
--   op_name: the GPU op's owner (see attribution): an op, annotation or Python frame name, or the graph launch as
--     CALL[graph N, K kernels]; null when nothing owns it
--   op_category: category of op_name (op_category in lib/categories.sql: from the name alone)
--   attribution: which rule owned it: capture (a GPU op a graph launch replayed, matched to its launch in the
--     graph's capture trace: the op, annotation or frame it was captured under; graph_kernels), op (innermost
--     cpu_op enclosing the launch call), annotation or python_frame
--     (launch call outside every op: the innermost user_annotation or Python frame enclosing it), graph_launch (a
--     CUDA/HIP graph launch enclosed by none of those: the launch itself), none (owned by no rule)
--   unowned_reason: why attribution is none: no launch call in the trace (queued before the profiling window), or
--     launch call outside every op, annotation and Python frame; null when owned
--   kernel_name: GPU op name
--   kind: kernel, memcpy or memset
--   stream: GPU stream
--   category: kernel category from its name and kind (kernel_category in lib/categories.sql)
--   count: GPU ops
--   total_us: µs, summed durations
--   mean_us: µs, mean duration
--   median_us: µs, median duration
--   min_us: µs, shortest
--   max_us: µs, longest
--   stddev_us: µs, sample standard deviation (null for a single op)
--   percent_kernel_time: percent of the rank's summed GPU op durations
--   percent_total_time: percent of the rank's GPU span (first GPU op start to last GPU op end)
-- notes: Like TraceLens's kernel_summary sheet (grouped by parent op, kernel, stream), with memcpys and memsets
--   included, so the rows of an owner sum to its direct_kernel_ms in op_summary. Every GPU op of the rank appears,
--   owned by the first rule that applies (gpu_op_owners() in lib/launches.sql): the captured owner (with
--   --graph-capture), the op, then the annotation or Python frame, then the graph launch. Step and iteration markers (ProfilerStep#N, the serving engines'
--   iteration annotations and frames, lib/iterations.sql) and built-in Python frames (`<built-in method ...>`, C
--   functions named with an object address) own nothing: they would own every GPU op of a step. Kernels replayed
--   from a graph share their launch's correlation, so without its capture all of a graph's kernels have one owner.
--   GPU ops owned by no rule are kept with a null op_name and say why in unowned_reason.
with ops as (select * from gpu_op_owners()),
per_rank as (
    select rank, sum(dur) as all_ns, max(end_ns) - min(start_ns) as span_ns from ops group by rank
),
owned as (
    select * exclude (op_name), owner_name as op_name
    from ops
),
grouped as (
    select o.rank, o.op_name, o.attribution, o.unowned_reason, o.name as kernel_name, o.kind, o.stream,
           count(*) as count, sum(o.dur) / 1e3 as total_us, avg(o.dur) / 1e3 as mean_us,
           median(o.dur::double) / 1e3 as median_us, min(o.dur) / 1e3 as min_us, max(o.dur) / 1e3 as max_us,
           stddev_ns(o.dur) / 1e3 as stddev_us,
           100 * sum(o.dur) / nullif(any_value(p.all_ns), 0) as percent_kernel_time,
           100 * sum(o.dur) / nullif(any_value(p.span_ns), 0) as percent_total_time
    from owned o join per_rank p on p.rank = o.rank
    group by o.rank, o.op_name, o.attribution, o.unowned_reason, o.name, o.kind, o.stream
)
-- the categories looked up by name (gpu_op_categories in lib/names.sql, op_name_categories in lib/launches.sql)
select g.rank, g.op_name, if(g.op_name is null, null, n.name_category) as op_category,
       g.attribution, g.unowned_reason, g.kernel_name, g.kind, g.stream, c.category,
       g.count, g.total_us, g.mean_us, g.median_us, g.min_us, g.max_us, g.stddev_us, g.percent_kernel_time,
       g.percent_total_time
from grouped g
left join gpu_op_categories() c on c.name is not distinct from g.kernel_name and c.kind = g.kind
left join op_name_categories() n on n.categorized_name = g.op_name
order by g.rank, g.total_us desc, g.op_name, g.kernel_name, g.stream
